"""Each point against its own architecture's baselines (issue 54, item 1): a digits study that
varies ``cnn_grid`` measures a random-init encoder of each architecture (the raw input once: it
depends on the data alone), records them on its parent run so that the analysis maps every point
to its own, and every standing, the report, report.json, the headline and the evidence card say
which architecture's they used; a study of one architecture is recorded and worded as before.

The baselines are measured for real (digits, 120 held-out items: seconds); the trials are planted
(their per-item outcomes too), so the test needs neither Ray nor training."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from studykit import write_spec

from analysis.findings.baselines import baselines_of, standings
from analysis.reading.load import load_history, load_outcomes, load_study
from analysis.reading.outcomes import BASELINE_FOLDER
from analysis.stats.best import best_point
from analysis.stats.units import level
from analysis.study_analysis import analyse
from search_spaces.designs import build_design
from search_spaces.spec import load_spec
from study.baselines import measure_for_study, study_architectures
from study.record import StudyRecord
from study.reporting import make_report
from study.run_artifacts import OUTCOMES_KEY
from trainables.baselines import measure_baselines

METRIC = "probe/knn_top1_h"
MARKS = 3
HELDOUT = 120  # write_spec's heldout_size


def _right(point: int, replicate: int) -> int:
    """The held-out items a planted trial gets right: each point its own, each seed a little."""
    return 84 + 6 * point + 2 * replicate


def _record(folder: Path, name: str, factors: dict) -> tuple[str, object]:
    """A digits study of ``factors`` (2 replicates: seeds 0, 1) whose baselines (raw,
    random_init) are measured for real on its parent run, and whose trials are planted with
    per-item outcomes on the baselines' own held-out items and three marks each. Returns (the
    store's URI, the design)."""
    path = write_spec(folder / f"{name}.yaml", name, factors=factors, replicates=2,
                      baselines=["raw", "random_init"])  # fmt: skip
    spec = load_spec(path)
    design = build_design(spec)
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    record = StudyRecord(uri, name, folder / "artifacts")
    parent = record.start_parent(spec, design, path.read_text())
    measure_for_study(spec, design, record, parent, quiet=True)
    raw = load_outcomes(name, uri).baselines[("raw", None)]
    items, labels = raw.items, raw.labels
    points = sorted({p.point_id for p in design.trials})
    budget = int(spec.trial["budget_examples"])
    for plan in design.trials:
        right = _right(points.index(plan.point_id), plan.replicate)
        predicted = np.where(np.arange(len(items)) < right, labels, (labels + 1) % 10)
        final = right / len(items)
        run = record.ensure_trial_run(plan, parent, spec.sha)
        record.begin_attempt(run)
        for k in range(1, MARKS + 1):
            step = budget * k // MARKS
            value = final - 0.02 * (MARKS - k)
            record.log_evaluation(run, {"train/examples_seen": step, METRIC: value}, step)
        outcomes = {"item": items.tolist(), "label": labels.tolist(),
                    "predictions": {METRIC: predicted.tolist()}}  # fmt: skip
        record.log_evidence(run, {OUTCOMES_KEY: outcomes})
        record.finish_trial(run, {"status": "finished", "examples_seen": budget, "wall_s": 1.0,
                                  "steps": 10, "heldout_items": len(items)})  # fmt: skip
    record.finish_parent(parent, True)
    return uri, design


@pytest.fixture(scope="module")
def studies(tmp_path_factory):
    """Two studies on digits, each in its own store, the baselines measured afresh into a cache
    of their own: ``grid`` varies cnn_grid (1, 2) and temperature, ``one`` temperature alone."""
    root = tmp_path_factory.mktemp("architectures")
    cache = root / "cache"
    before = os.environ.get("CONTRASTIVE_BASELINE_CACHE")
    os.environ["CONTRASTIVE_BASELINE_CACHE"] = str(cache)
    try:
        (root / "grid").mkdir()
        grid = _record(root / "grid", "grid", {"cnn_grid": {"levels": [1, 2]},
                                               "temperature": {"levels": [0.1, 0.5]}})  # fmt: skip
        measured = sorted(p.name.split("-")[0] for p in cache.glob("*.json"))
        (root / "one").mkdir()
        one = _record(root / "one", "one", {"temperature": {"levels": [0.1, 0.5]}})
    finally:
        if before is None:
            os.environ.pop("CONTRASTIVE_BASELINE_CACHE", None)
        else:
            os.environ["CONTRASTIVE_BASELINE_CACHE"] = before
    return {"grid": grid, "one": one, "measured": measured, "root": root}


def _parent(uri: str, name: str):
    from studykit import parent_runs

    return parent_runs(uri, name)[0]


def _analysed(uri: str, name: str):
    df = load_study(name, uri)
    outcomes = load_outcomes(name, uri)
    history = load_history(name, uri, (METRIC,))
    return df, outcomes, analyse(df, outcomes=outcomes, history=history)


def test_one_random_init_is_measured_per_architecture_and_the_raw_input_once(studies):
    uri, design = studies["grid"]
    architectures, seeds = study_architectures(design)
    assert [a.fields for a in architectures] == [{"cnn_grid": 1}, {"cnn_grid": 2}]
    assert seeds == (0, 1)
    # measured: the raw input once (the data is the same), a random-init encoder per cnn_grid
    assert studies["measured"] == ["random_init", "random_init", "raw"]

    tags = _parent(uri, "grid").data.tags
    first = json.loads(tags["study.baselines.architecture.1"])
    second = json.loads(tags["study.baselines.architecture.2"])
    assert first["fields"] == {"cnn_grid": 1} and second["fields"] == {"cnn_grid": 2}
    for arch, entry in ((1, first), (2, second)):
        random_init = entry["baselines"]["random_init"]
        assert random_init["of"] == {"cnn_grid": arch} and random_init["arch"] == arch
        assert "of" not in entry["baselines"]["raw"]  # one raw input for both
        # the recorded value is that architecture's own random init, measured afresh
        config = architectures[arch - 1].config
        assert config.cnn_grid == arch
        again = measure_baselines(config, ("random_init",), seeds, use_cache=False)
        assert random_init["metrics"][METRIC] == pytest.approx(again["random_init"].metrics[METRIC])
    values = {a: e["baselines"]["random_init"]["metrics"][METRIC]
              for a, e in ((1, first), (2, second))}  # fmt: skip
    assert values[1] != values[2]
    # older readers: study.baselines is the first architecture's, and says so
    older = json.loads(tags["study.baselines"])
    assert older["random_init"]["metrics"] == first["baselines"]["random_init"]["metrics"]
    assert "the first architecture's, cnn_grid 1" in older["random_init"]["about"]
    assert all(len(text) <= 8000 for text in tags.values())  # MLflow's limit for a tag

    folder = Path(_parent(uri, "grid").info.artifact_uri.removeprefix("file://"))
    files = sorted(p.name for p in (folder / BASELINE_FOLDER).iterdir())
    assert files == ["random_init-seed0-arch1.parquet", "random_init-seed0-arch2.parquet",
                     "random_init-seed1-arch1.parquet", "random_init-seed1-arch2.parquet",
                     "raw.parquet"]  # fmt: skip
    every = json.loads((folder / "baselines-by-architecture.json").read_text())
    assert [a["fields"] for a in every] == [{"cnn_grid": 1}, {"cnn_grid": 2}]
    assert set(every[1]["baselines"]["random_init"]["per_seed"]) == {"0", "1"}


def test_each_point_is_read_against_its_own_architectures_random_init(studies):
    uri, _ = studies["grid"]
    df, outcomes, analysis = _analysed(uri, "grid")
    own = {entry["fields"]["cnn_grid"]: entry["baselines"]["random_init"]
           for entry in df.attrs["baselines_by_architecture"]}  # fmt: skip
    done = df[df["status"] == "finished"]
    assert done["point_id"].nunique() == 4
    for point, rows in done.groupby("point_id"):
        grid = int(rows["cnn_grid"].iloc[0])
        best = best_point(rows, METRIC, "max", outcomes=outcomes)
        found = {s.kind: s for s in standings(best, baselines_of(df, point), outcomes)}
        against = found["random_init"]
        # the baseline value each point is compared with is its own architecture's random init
        assert against.value == own[grid]["metrics"][METRIC]
        assert against.of == (("cnn_grid", grid),) and against.whose == "own"
        # paired item by item with that architecture's own seeds (their mean is the value)
        assert against.paired is not None
        assert against.paired.difference.mean == pytest.approx(best.mean - against.value)
        assert against.reference().startswith(
            f"a random-init encoder of its own architecture (cnn_grid {grid}; "
            f"{level(METRIC, own[grid]['metrics'][METRIC])}, mean of seeds 0, 1)"
        )
        assert found["raw"].reference().startswith("the raw input (")  # one data: as before

    # the best point's standing, in the analysis, the headline and report.json
    grid = int(done.loc[done["point_id"] == analysis.best.point_id, "cnn_grid"].iloc[0])
    theirs = own[grid]["metrics"][METRIC]
    words = (f"a random-init encoder of its own architecture (cnn_grid {grid}; "
             f"{level(METRIC, theirs)}")  # fmt: skip
    random_init = next(s for s in analysis.standings if s.kind == "random_init")
    assert random_init.value == theirs
    assert words in analysis.headline.against
    summary = analysis.to_json()
    entry = summary["baselines"]["random_init"]
    assert entry["architecture"] == {"cnn_grid": grid} and entry["whose"] == "own"
    assert entry["metrics"][METRIC] == theirs
    assert entry["standing"]["value"] == theirs
    assert entry["standing"]["architecture"] == {"cnn_grid": grid}
    assert words in entry["standing"]["sentence"]
    grids = [a["architecture"] for a in entry["by_architecture"]]
    assert grids == [{"cnn_grid": 1}, {"cnn_grid": 2}]
    assert "architecture" not in summary["baselines"]["raw"]

    # the learning curves: each point against its own architecture's random init
    for s in analysis.learning.standings:
        if s.baseline.startswith("a random-init encoder"):
            grid_of = int(done.loc[done["point_id"] == s.point_id, "cnn_grid"].iloc[0])
            assert s.baseline == f"a random-init encoder at cnn_grid {grid_of}"
            assert s.baseline_value == own[grid_of]["metrics"][METRIC]


def test_the_report_and_the_evidence_card_say_which_architectures_baseline(studies, tmp_path):
    uri, _ = studies["grid"]
    record = StudyRecord(uri, "grid", studies["root"] / "grid" / "artifacts")
    summary, folder = make_report(record, None, tmp_path / "report", tracking_uri=uri,
                                  figures=False)  # fmt: skip
    entry = summary["baselines"]["random_init"]
    grid = entry["architecture"]["cnn_grid"]
    other = 3 - grid
    page = (folder / "report.html").read_text()
    assert f"a random-init encoder of its own architecture (cnn_grid {grid}" in page
    assert f"a random-init encoder at cnn_grid {other}" in page  # the other, listed, not used
    assert json.loads((folder / "report.json").read_text())["baselines"] == json.loads(
        json.dumps(summary["baselines"], default=str))  # fmt: skip
    card = (folder / "evidence.md").read_text()
    assert "a random-init encoder of its own architecture" in card
    assert f"(cnn_grid {grid})" in card
    description = _parent(uri, "grid").data.tags["mlflow.note.content"]
    assert f"of its own architecture (cnn_grid {grid};" in description


def test_a_study_of_one_architecture_is_recorded_and_worded_as_before(studies):
    uri, design = studies["one"]
    architectures, _ = study_architectures(design)
    assert [a.fields for a in architectures] == [{}]
    parent = _parent(uri, "one")
    assert not [k for k in parent.data.tags if k.startswith("study.baselines.architecture")]
    recorded = json.loads(parent.data.tags["study.baselines"])
    assert "of" not in recorded["random_init"] and "arch" not in recorded["random_init"]
    folder = Path(parent.info.artifact_uri.removeprefix("file://"))
    assert sorted(p.name for p in (folder / BASELINE_FOLDER).iterdir()) == [
        "random_init-seed0.parquet", "random_init-seed1.parquet", "raw.parquet"]  # fmt: skip
    assert not (folder / "baselines-by-architecture.json").exists()

    df, _, analysis = _analysed(uri, "one")
    assert df.attrs["baselines_by_architecture"] == []
    value = recorded["random_init"]["metrics"][METRIC]
    random_init = next(s for s in analysis.standings if s.kind == "random_init")
    assert random_init.reference() == (
        f"a random-init encoder ({level(METRIC, value)}, mean of seeds 0, 1)"
    )
    assert "architecture" not in analysis.headline.against
    entry = analysis.to_json()["baselines"]["random_init"]
    assert entry["name"] == "a random-init encoder"
    assert "architecture" not in entry and "architecture" not in entry["standing"]
    names = {s.baseline for s in analysis.learning.standings}
    assert names == {"the raw input", "a random-init encoder"}
