"""Per-item outcomes in the record, end to end with real Ray Tune and a real MLflow store: every
finished trial keeps ``evidence/outcomes.parquet`` and the parent one table per baseline system,
``analysis.load_outcomes`` reads them all back, and each recorded probe accuracy is exactly the
mean of its stored outcomes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from studykit import child_runs, parent_runs, write_spec

from analysis.reading.load import load_outcomes, load_study
from analysis.reading.outcomes import BASELINE_FOLDER, TRIAL_ARTIFACT
from study.run_artifacts import EVIDENCE_ARTIFACTS, OUTCOMES_FILE
from study.runner import run_study

NAME = "outcomes"
PROBES = {"probe/knn_top1_h", "probe/knn_top1_z", "probe/linear_top1_h", "probe/linear_top1_z"}


def _local(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))


def _files(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_every_trial_and_baseline_keeps_its_outcomes_and_they_make_its_metrics(
    workdir, shared_ray, monkeypatch
):
    assert f"{EVIDENCE_ARTIFACTS}/{OUTCOMES_FILE}" == TRIAL_ARTIFACT
    spec = write_spec(workdir / "s.yaml", NAME, factors={"temperature": {"levels": [0.2]}},
                      replicates=2, trial={"budget_examples": 512, "eval_marks": 1},
                      baselines=["raw", "random_init"])  # fmt: skip
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    outcome = run_study(spec, tracking_uri=uri, storage=workdir / "studies", quiet=True,
                        figures=False)  # fmt: skip
    assert outcome.ok and outcome.counts == {"FINISHED": 2}

    before = _files(workdir)
    found = load_outcomes(NAME, uri)
    assert _files(workdir) == before  # a read writes nothing, in the store or beside it
    frame = load_study(NAME, uri)
    finished = frame[frame["status"] == "finished"]
    assert len(finished) == 2 and set(found.trials) == set(finished["run_id"])
    items = next(iter(found.trials.values())).items
    assert len(items) == 120  # write_spec's heldout_size
    for _, row in finished.iterrows():
        system = found.trials[row["run_id"]]
        assert set(system.predictions) == PROBES
        assert (system.items == items).all()
        for metric in PROBES:
            assert row[metric] == system.accuracy(metric), (row["run_id"], metric)
    table = found.table("probe/knn_top1_h", list(finished["run_id"]))
    assert table.shape == (2, 120)
    assert list(table.mean(axis=1)) == list(finished["probe/knn_top1_h"])

    baselines = frame.attrs["baselines"]
    assert set(found.baselines) == {("raw", None), ("random_init", 0), ("random_init", 1)}
    raw = found.baselines[("raw", None)]
    assert set(raw.predictions) == {"probe/knn_top1_h", "probe/linear_top1_h"}
    for metric in raw.predictions:
        assert baselines["raw"]["metrics"][metric] == raw.accuracy(metric)
    for seed in (0, 1):
        system = found.baselines[("random_init", seed)]
        assert set(system.predictions) == PROBES and (system.items == items).all()
        for metric in PROBES:
            assert baselines["random_init"]["per_seed"][str(seed)][metric] == system.accuracy(
                metric)  # fmt: skip

    # outcomes stay out of the evidence JSON, the baselines tag and baselines.json
    trial = child_runs(uri, NAME)[0]
    evidence = json.loads((_local(trial.info.artifact_uri) / "evidence/evidence.json").read_text())
    assert "outcomes" not in evidence and "per_class" in evidence
    parent = parent_runs(uri, NAME)[0]
    folder = _local(parent.info.artifact_uri)
    assert "outcomes" not in parent.data.tags["study.baselines"]
    assert "outcomes" not in json.loads((folder / "baselines.json").read_text())["raw"]
    assert {p.name for p in (folder / BASELINE_FOLDER).iterdir()} == {
        "raw.parquet", "random_init-seed0.parquet", "random_init-seed1.parquet"}  # fmt: skip

    # read through MLflow's artifact repository (as from S3 or a server): the same outcomes
    import analysis.reading.load

    monkeypatch.setattr(analysis.reading.load, "_local_folder", lambda uri: None)
    downloaded = load_outcomes(NAME, uri, run_ids=list(finished["run_id"])[::-1])
    assert list(downloaded.trials) == list(finished["run_id"])[::-1]
    assert _files(workdir) == before
    for run_id, system in found.trials.items():
        again = downloaded.trials[run_id]
        assert (again.items == system.items).all() and (again.labels == system.labels).all()
        for metric in PROBES:
            assert (again.predictions[metric] == system.predictions[metric]).all()
    assert set(downloaded.baselines) == set(found.baselines)
    monkeypatch.undo()

    # a resumed study whose parent lost the outcome files (a record older than them) logs them
    shutil.rmtree(folder / BASELINE_FOLDER)
    assert load_outcomes(NAME, uri).baselines == {}
    resumed = run_study(spec, tracking_uri=uri, storage=workdir / "studies", quiet=True,
                        figures=False)  # fmt: skip
    assert resumed.ok and resumed.launched == 0
    assert set(load_outcomes(NAME, uri).baselines) == set(found.baselines)
