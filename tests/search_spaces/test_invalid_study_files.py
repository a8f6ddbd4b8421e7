"""Invalid study files are refused before Ray starts, naming the offending field and value.

Each case starts from the embedded default study (``search_spaces/default.yaml``), breaks one
thing, and runs it through :func:`study.runner.run_study`. The study must be refused with a
:class:`StudyError` whose message names the field and the bad value, Ray must not have started,
and nothing may have been recorded (no storage folder, no MLflow database).
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import ray
import torch
import yaml

from search_spaces.spec import DEFAULT_SPEC, StudyError
from study.runner import run_study

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = yaml.safe_load(DEFAULT_SPEC.read_text())
# One GPU more than this machine has (1 here: there is no GPU), so the ask can never fit.
GPUS_BEYOND = torch.cuda.device_count() + 1
CPUS_BEYOND = 10000
DEAD_URI = "http://127.0.0.1:9"  # the discard port: nothing listens there


def default_study() -> dict[str, Any]:
    data = copy.deepcopy(DEFAULT)
    assert data["factors"] and data["trial"], "default.yaml changed shape"
    return data


def sqlite_uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def write_study(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# ---------------------------------------------------------------------------------------------
# the cases: (data, tmp_path) -> None mutates the default study in place
# ---------------------------------------------------------------------------------------------
Mutate = Callable[[dict[str, Any], Path], None]


@dataclass(frozen=True)
class Bad:
    id: str
    mutate: Mutate
    field: str  # a substring naming the offending field
    value: str  # a substring naming the offending value
    tracking_uri: str | None = None  # None: an SQLite store inside tmp_path


def _set(*keys: str, value: Any) -> Mutate:
    def mutate(data: dict[str, Any], tmp_path: Path) -> None:
        node = data
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value

    return mutate


def _all(*steps: Mutate) -> Mutate:
    def mutate(data: dict[str, Any], tmp_path: Path) -> None:
        for step in steps:
            step(data, tmp_path)

    return mutate


def _drop(*keys: str) -> Mutate:
    def mutate(data: dict[str, Any], tmp_path: Path) -> None:
        node = data
        for key in keys[:-1]:
            node = node[key]
        del node[keys[-1]]

    return mutate


def _only_categorical_factors(data: dict[str, Any], tmp_path: Path) -> None:
    del data["trial"]["augmentation"]  # it becomes a factor
    data["factors"] = {
        "augmentation": {"levels": ["crop", "crop+noise"]},
        "group_policy": {"levels": ["negative", "mask"]},
    }
    data["design"] = {"kind": "central_composite", "replicates": 1}


def _missing_data_root(data: dict[str, Any], tmp_path: Path) -> None:
    data["trial"]["dataset"] = "cifar10"
    data["trial"]["data_root"] = str(tmp_path / "no-such-cifar10")


def _budget_as_factor(data: dict[str, Any], tmp_path: Path) -> None:
    del data["trial"]["budget_examples"]
    data["factors"]["budget_examples"] = {"levels": [30720, 61440]}


CASES = [
    Bad("unknown-top-level-key", _set("replicate", value=3), "replicate:", "(got 3)"),
    Bad(
        "unknown-factor",
        _all(
            _drop("factors", "temperature"),
            _set("factors", "temprature", value={"levels": [0.1, 0.5]}),
        ),
        "factors: unknown factor",
        "'temprature'",
    ),
    Bad(
        "temperature-level-not-positive",
        _set("factors", "temperature", value={"levels": [-0.1, 0.5], "scale": "linear"}),
        "factors.temperature",
        "-0.1",
    ),
    Bad(
        "temperature-fixed-zero",
        _all(_drop("factors", "temperature"), _set("trial", "temperature", value=0)),
        "trial.temperature",
        "(got 0.0)",
    ),
    Bad(
        "batch-size-below-2",
        _set("factors", "batch_size", value={"levels": [1, 64]}),
        "factors.batch_size",
        "level 1:",
    ),
    Bad(
        "budget-unmatchable",
        _all(
            _set("trial", "budget_examples", value=30720),
            _set("factors", "batch_size", value={"levels": [64, 100]}),
        ),
        "budget_examples",
        "batch_size=100",
    ),
    Bad(
        "unknown-augmentation",
        _set("trial", "augmentation", value="crop+sparkle"),
        "augmentation",
        "sparkle",
    ),
    Bad("unknown-dataset", _set("trial", "dataset", value="imagenet"), "dataset", "'imagenet'"),
    Bad("replicates-zero", _set("design", "replicates", value=0), "design.replicates", "(got 0)"),
    Bad(
        "levels-empty",
        _set("factors", "temperature", value={"levels": []}),
        "factors.temperature",
        "levels is empty",
    ),
    Bad(
        "levels-duplicate",
        _set("factors", "temperature", value={"levels": [0.1, 0.1]}),
        "factors.temperature",
        "repeat 0.1",
    ),
    Bad(
        "central-composite-without-numeric-factor",
        _only_categorical_factors,
        "design.kind",
        "central_composite",
    ),
    Bad(
        "fractional-factorial-two-factors",
        _set("design", "kind", value="fractional_factorial"),
        "design.kind",
        "fractional_factorial",
    ),
    Bad("lam-t-with-info-nce", _set("trial", "lam_t", value=1.0), "lam_t", "lam_t=1.0"),
    Bad(
        "gpu-beyond-machine",
        _set("resources", "gpu", value=GPUS_BEYOND),
        "resources.gpu",
        f"asks for {GPUS_BEYOND} GPU",
    ),
    Bad(
        "cpu-beyond-machine",
        _set("resources", "cpu", value=CPUS_BEYOND),
        "resources.cpu",
        str(CPUS_BEYOND),
    ),
    Bad("data-root-missing-folder", _missing_data_root, "data_root", "no-such-cifar10"),
    Bad("data-root-absent", _set("trial", "dataset", value="cifar10"), "data_root", "got None"),
    Bad("tracking-uri-dead", lambda data, tmp_path: None, "--tracking-uri", DEAD_URI, DEAD_URI),
    Bad(
        "budget-as-factor",
        _budget_as_factor,
        "factors.budget_examples",
        "cannot be a factor",
    ),
    Bad(
        "range-low-not-below-high",
        _set("factors", "temperature", value={"range": [0.5, 0.5], "scale": "log"}),
        "factors.temperature",
        "[0.5, 0.5]",
    ),
    Bad(
        "log-scale-non-positive-level",
        _set("factors", "batch_size", value={"levels": [0, 64], "scale": "log"}),
        "factors.batch_size",
        "[0, 64]",
    ),
    Bad("study-name-with-spaces", _set("study", value="my study"), "study", "'my study'"),
    Bad(
        "goal-low-not-below-high",
        _set(
            "goals",
            value=[{"metric": "probe/knn_top1_h", "goal": "max", "low": 0.9, "high": "1e-3"}],
        ),
        "goals.0",
        "low (0.9) must be below high (0.001)",
    ),
    Bad(
        "goal-target-outside-its-range",
        _set(
            "goals",
            value=[{"metric": "z/uniform", "goal": "target", "low": -3, "high": -2, "target": -1}],
        ),
        "goals.0",
        "target = -1.0",
    ),
    Bad(
        "goal-metric-not-reported",
        _set("goals", value=[{"metric": "z/uniformity", "goal": "min", "low": -3, "high": -2}]),
        "goals.0.metric",
        "'z/uniformity'",
    ),
    Bad(
        "points-missing-a-factor",
        _set("design", value={"kind": "points", "points": [{"temperature": 0.2}]}),
        "design.points.0",
        "no value of batch_size",
    ),
    Bad(
        "point-outside-its-factors-bounds",
        _set(
            "design", value={"kind": "points", "points": [{"temperature": 0.9, "batch_size": 64}]}
        ),
        "design.points.0.temperature",
        "0.9 lies outside the factor's bounds [0.1, 0.5]",
    ),
    Bad(
        "goal-twice-for-one-metric",
        _set("goals", value=[{"metric": "z/uniform", "goal": "min", "low": -3, "high": -2}] * 2),
        "goals",
        "'z/uniform' has two goals",
    ),
]


# Extra checks on a few messages, beyond the field and the value.
EXPLAINS = {
    "unknown-top-level-key": "unknown key",
    "temperature-level-not-positive": "greater than 0",
    "budget-unmatchable": "budget_examples=30720",
    "data-root-missing-folder": "does not exist",
    "data-root-absent": "cifar10",
    "lam-t-with-info-nce": "info_nce",
    "tracking-uri-dead": "does not answer",
    "fractional-factorial-two-factors": "got 2",
    "gpu-beyond-machine": f"has {torch.cuda.device_count()}",
    "goal-metric-not-reported": "did you mean 'z/uniform'",
}


def assert_nothing_ran(tmp_path: Path) -> None:
    assert not ray.is_initialized(), "Ray started for a study that should have been refused"
    assert not (tmp_path / "studies").exists(), "storage was written before the refusal"
    assert not (tmp_path / "mlflow.db").exists(), "the tracking store was created"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.yaml"]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_study_is_refused_before_ray(
    case: Bad, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_ray
) -> None:
    assert not ray.is_initialized()
    monkeypatch.chdir(tmp_path)  # anything written to the working directory would show up here
    data = default_study()
    case.mutate(data, tmp_path)
    assert data != DEFAULT or case.tracking_uri, "the case breaks nothing"
    path = write_study(tmp_path, data)
    uri = case.tracking_uri or sqlite_uri(tmp_path)

    t0 = time.perf_counter()
    with pytest.raises(StudyError) as caught:
        run_study(path, tracking_uri=uri, storage=tmp_path / "studies", quiet=True)
    elapsed = time.perf_counter() - t0

    message = str(caught.value)
    assert case.field in message, f"field {case.field!r} not named in: {message}"
    assert case.value in message, f"value {case.value!r} not named in: {message}"
    if case.id in EXPLAINS:
        assert EXPLAINS[case.id] in message, message
    parts = message.split("; ")  # each problem said once: in one part, never again
    assert len(parts) == len(set(parts)), message
    assert sum(case.value in part for part in parts) == 1, message
    assert elapsed < 10, f"refusal took {elapsed:.1f} s"
    assert_nothing_ran(tmp_path)


def test_default_study_passes_the_same_checks(tmp_path: Path, no_ray) -> None:
    """Control: the unmodified default study is not refused by the checks the cases trip."""
    from search_spaces.designs import build_design
    from search_spaces.spec import load_spec
    from study.preflight import preflight

    spec = load_spec(write_study(tmp_path, default_study()))
    preflight(spec, build_design(spec), sqlite_uri(tmp_path), address=None)
    assert not ray.is_initialized()


# ---------------------------------------------------------------------------------------------
# the real command line
# ---------------------------------------------------------------------------------------------
def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    }
    return subprocess.run(
        [sys.executable, "-m", "study.cli", *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip


def test_cli_plan_refuses_bad_level(tmp_path: Path) -> None:
    data = default_study()
    _set("factors", "temperature", value={"levels": [-0.1, 0.5], "scale": "linear"})(data, tmp_path)
    path = write_study(tmp_path, data)
    done = cli(tmp_path, "plan", str(path))
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert done.stderr.startswith("error:"), done.stderr
    assert "factors.temperature" in done.stderr and "-0.1" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.yaml"]


def test_cli_run_refuses_resources_beyond_machine(tmp_path: Path) -> None:
    data = default_study()
    data["resources"]["cpu"] = CPUS_BEYOND
    path = write_study(tmp_path, data)
    done = cli(
        tmp_path, "run", str(path),
        "--tracking-uri", sqlite_uri(tmp_path), "--storage", str(tmp_path / "studies"),
    )  # fmt: skip
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert done.stderr.startswith("error:"), done.stderr
    assert "resources.cpu" in done.stderr and str(CPUS_BEYOND) in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.yaml"]
