"""Designs against hand-built tables; compute plans; snapping; the shipped study files."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from search_spaces.designs import build_design
from search_spaces.spec import SPEC_DIR, StudyError, load_spec, parse_spec

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = [
    "default",
    "digits_tau_batch",
    "cifar10_tau_batch_aug",
    "align_uniform_lam_t",
    "toy_phase_diagram",
    "fashion_mnist_recipe",
    "fashion_mnist_long",
]


def spec(factors: dict, design: dict | None = None, trial: dict | None = None):
    base_trial = {"budget_examples": 30720, "eval_marks": 2}
    return parse_spec(
        {
            "study": "t",
            "trial": base_trial | (trial or {}),
            "factors": factors,
            "design": design or {"kind": "full_factorial"},
        }
    )


def table_of(s, *columns):
    return [tuple(t.factors[c] for c in columns) for t in build_design(s).trials]


@pytest.mark.parametrize("sizes", [(2, 3), (3, 2, 2), (4,), (2, 2, 2, 3)])
def test_full_factorial_points_are_pydoes_fullfact_rows_first_factor_slowest(sizes):
    """The full factorial is built without pyDOE (it loads scipy.stats); pyDOE's fullfact, its
    rows sorted so the first factor varies slowest, is the reference."""
    from pydoe import fullfact

    names = ["temperature", "batch_size", "aug_strength", "projection_dim"][: len(sizes)]
    levels = {"temperature": [0.1, 0.2, 0.4, 0.8], "batch_size": [64, 128, 256],
              "aug_strength": [0.2, 0.6], "projection_dim": [16, 32, 64]}  # fmt: skip
    factors = {n: {"levels": levels[n][:k]} for n, k in zip(names, sizes, strict=True)}
    reference = sorted(tuple(int(i) for i in row) for row in fullfact(list(sizes)))
    expected = [tuple(levels[n][row[i]] for i, n in enumerate(names)) for row in reference]
    assert table_of(spec(factors), *names) == expected


def test_full_factorial_order_and_replicates():
    s = spec(
        {"temperature": {"levels": [0.1, 0.5]}, "batch_size": {"levels": [64, 128, 256]}},
        {"kind": "full_factorial", "replicates": 2, "seed": 10},
    )
    table = build_design(s)
    expected_points = [(0.1, 64), (0.1, 128), (0.1, 256), (0.5, 64), (0.5, 128), (0.5, 256)]
    rows = [
        (t.point_id, t.replicate, t.seed, t.factors["temperature"], t.factors["batch_size"])
        for t in table.trials
    ]
    assert rows == [
        (f"p{i:03d}", r, 10 + r, tau, b)
        for i, (tau, b) in enumerate(expected_points)
        for r in (0, 1)
    ]
    assert {t.config.examples_seen for t in table.trials} == {30720}
    assert [t.config.steps for t in table.trials[::2]] == [480, 240, 120, 480, 240, 120]
    assert table.totals() == {
        "trials": 12,
        "points": 6,
        "replicates": 2,
        "examples_per_trial": 30720,
        "examples": 12 * 30720,
        "steps": 2 * (480 + 240 + 120) * 2,
    }


def test_run_names_read_like_the_design_doc():
    factors = {
        "temperature": {"levels": [0.1]},
        "batch_size": {"levels": [128]},
        "augmentation": {"levels": ["crop"]},
    }
    s = spec(factors, {"kind": "full_factorial", "seed": 1})

    assert build_design(s).trials[0].run_name == "τ=0.1 B=128 aug=crop seed=1"


def test_fractional_factorial_by_generators_is_the_half_fraction():
    s = spec(
        {
            "temperature": {"levels": [0.1, 0.5]},
            "batch_size": {"levels": [64, 256]},
            "aug_strength": {"levels": [0.5, 1.0]},
        },
        {"kind": "fractional_factorial", "generators": "a b ab"},
    )
    # 2^(3-1) with c = ab: (-,-,+), (-,+,-), (+,-,-), (+,+,+)
    assert table_of(s, "temperature", "batch_size", "aug_strength") == [
        (0.1, 64, 1.0),
        (0.1, 256, 0.5),
        (0.5, 64, 0.5),
        (0.5, 256, 1.0),
    ]


def test_fractional_factorial_by_resolution():
    factors = {
        f: {"levels": [lo, hi]}
        for f, lo, hi in [
            ("temperature", 0.1, 0.5),
            ("aug_strength", 0.5, 1.0),
            ("uniform_t", 1.0, 2.0),
            ("base_lr", 0.001, 0.01),
            ("weight_decay", 0.0, 0.0001),
        ]
    }
    s = spec(factors, {"kind": "fractional_factorial", "resolution": 3})
    rows = table_of(s, *factors)
    assert len(rows) == 8  # 2^(5-2), resolution III
    for i, name in enumerate(factors):  # every column balanced
        assert sorted(r[i] for r in rows).count(factors[name]["levels"][0]) == 4


def test_central_composite_face_centred_on_log_scale_with_categorical_crossed():
    s = spec(
        {
            "temperature": {"range": [0.05, 0.8], "scale": "log"},
            "aug_strength": {"range": [0.2, 1.0]},
            "augmentation": {"levels": ["crop", "crop+noise"]},
        },
        {"kind": "central_composite", "face": "ccf", "center": 1},
    )
    rows = table_of(s, "temperature", "aug_strength", "augmentation")
    mid_tau = math.sqrt(0.05 * 0.8)  # the centre on a log scale is the geometric mean
    expected = []
    for aug in ("crop", "crop+noise"):
        for tau, strength in [
            (0.05, 0.2),
            (0.05, 1.0),
            (0.8, 0.2),
            (0.8, 1.0),
            (0.05, 0.6),
            (0.8, 0.6),
            (mid_tau, 0.2),
            (mid_tau, 1.0),
            (mid_tau, 0.6),
        ]:
            expected.append((tau, strength, aug))
    assert len(rows) == len(expected)
    for got, want in zip(rows, expected, strict=True):
        assert got[0] == pytest.approx(want[0]) and got[1] == pytest.approx(want[1])
        assert got[2] == want[2]


def test_latin_hypercube_snaps_batch_sizes_so_the_budget_still_matches():
    s = spec(
        {
            "temperature": {"range": [0.02, 1.0], "scale": "log"},
            "batch_size": {"range": [16, 512], "scale": "log"},
        },
        {"kind": "latin_hypercube", "samples": 12, "seed": 3},
        trial={"budget_examples": 76800},
    )
    table = build_design(s)
    assert len(table.trials) == 12
    for t in table.trials:
        b = t.factors["batch_size"]
        assert 76800 % b == 0 and 16 <= b <= 512
        assert t.config.examples_seen == 76800
        if "batch_size" in t.snapped:
            raw = t.snapped["batch_size"]
            # nearest divisor on the log scale
            divisors = [d for d in range(16, 513) if 76800 % d == 0]
            assert b == min(divisors, key=lambda d: abs(math.log(d / raw)))
            assert f"batch_size {raw:g}→{b}" in t.row()["snapped"]
    # LHS: each of the 12 strata of log τ holds exactly one point
    logs = sorted(math.log(t.factors["temperature"]) for t in table.trials)
    width = (math.log(1.0) - math.log(0.02)) / 12
    assert [int((v - math.log(0.02)) // width) for v in logs] == list(range(12))


def test_no_divisor_in_range_is_an_error():
    s = spec(
        {"batch_size": {"range": [97, 99]}},
        {"kind": "latin_hypercube", "samples": 2},
        trial={"budget_examples": 30720},
    )
    with pytest.raises(StudyError, match=r"no batch size in \[97, 99\] divides budget_examples"):
        build_design(s)


def test_optuna_design_has_no_fixed_rows_and_checks_its_space():
    s = spec(
        {"temperature": {"range": [0.05, 1.0], "scale": "log"}},
        {"kind": "optuna", "samples": 6, "metric": "probe/knn_top1_h"},
    )
    table = build_design(s)
    assert table.adaptive and table.trials == ()
    with pytest.raises(StudyError, match="optuna needs samples"):
        build_design(spec({"temperature": {"range": [0.05, 1.0]}}, {"kind": "optuna"}))


def test_spec_sha_ignores_the_description_only():
    a = parse_spec({"study": "x", "factors": {"temperature": {"levels": [0.1]}}})
    b = parse_spec(
        {"study": "x", "description": "new words", "factors": {"temperature": {"levels": [0.1]}}}
    )
    c = parse_spec({"study": "x", "factors": {"temperature": {"levels": [0.2]}}})
    assert a.sha == b.sha != c.sha


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_study_files_plan(name):
    table = build_design(load_spec(SPEC_DIR / f"{name}.yaml"))
    if not table.adaptive:
        assert len({t.config.examples_seen for t in table.trials}) == 1
        assert len(table.trials) >= 4


def test_default_study_is_small_and_replicated():
    table = build_design(load_spec(None))
    assert table.spec.design.replicates == 2 and table.spec.trial["dataset"] == "digits"
    assert len(table.trials) == 8


def test_cli_plan_json():
    done = subprocess.run(
        [sys.executable, "-m", "study.cli", "plan", "default", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["study"] == "default-digits" and data["totals"]["trials"] == 8
    first = data["trials"][0]
    for key in (
        "point_id",
        "replicate",
        "seed",
        "temperature",
        "batch_size",
        "steps",
        "examples_seen",
        "lr_effective",
    ):
        assert key in first
    assert first["lr_effective"] == pytest.approx(0.002 * math.sqrt(64 / 256))


@pytest.mark.parametrize(("metric", "mode"), [
    ("probe/knn_top1_h", "max"), ("probe/linear_top1_z", "max"), ("z/align", "min"),
    ("h/uniform", "min"), ("train/loss", "min"), ("z/align_worst_class", "min"),
])  # fmt: skip
def test_a_target_or_optuna_metric_without_a_mode_is_sought_in_its_usual_direction(metric, mode):
    """A loss, alignment or uniformity is lower-is-better (Wang & Isola 2020): a target, an
    Optuna metric or objective naming one without a mode is minimised, never maximised silently
    (ray-project/ray PR #12159); a mode the file gives is kept."""
    targeted = spec({"temperature": {"levels": [0.1, 0.5]}}).canonical()
    targeted["target"] = {"metric": metric}
    assert parse_spec(targeted).target.mode == mode
    targeted["target"] = {"metric": metric, "mode": "max"}
    assert parse_spec(targeted).target.mode == "max"
    optuna = targeted | {"factors": {"temperature": {"range": [0.1, 0.5]}},
                         "design": {"kind": "optuna", "samples": 4, "metric": metric}}  # fmt: skip
    assert parse_spec(optuna).design.mode == mode
