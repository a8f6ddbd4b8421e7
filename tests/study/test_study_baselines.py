"""The study's baselines on its parent run: measured and logged once, and a new measurement
never overwrites a step."""

from __future__ import annotations

from search_spaces.spec import load_spec
from trainables import baselines as bl


def test_the_parent_gets_them_once_and_a_new_measurement_never_overwrites_a_step(
    tmp_path, cache, monkeypatch
):
    """On a real SQLite store: measured and logged once; the same again logs nothing (a resumed
    study); a different measurement (the cache cleared, another machine) goes one step further,
    never a second value at step 0 (ludwig-ai/ludwig#3670: duplicate metrics per step)."""
    from studykit import duplicated_metric_rows

    from search_spaces.designs import build_design
    from search_spaces.spec import smoke_spec
    from study.baselines import measure_for_study
    from study.record import StudyRecord

    spec = smoke_spec(load_spec(None))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    record = StudyRecord(uri, spec.study, tmp_path / "artifacts")
    design = build_design(spec)
    parent = record.start_parent(spec, design, "")
    fake = {"raw": 0.5}
    measured = lambda c, s: bl.Baseline("raw", {"probe/knn_top1_h": fake["raw"]})  # noqa: E731
    monkeypatch.setitem(bl.MEASURES, "raw", measured)
    spec = spec.model_copy(update={"baselines": ("raw",)})
    for _ in range(2):
        measure_for_study(spec, design, record, parent, quiet=True)
    key = "baseline/raw/probe/knn_top1_h"
    history = record.client.get_metric_history(parent, key)
    assert [(m.step, m.value) for m in history] == [(0, 0.5)]
    fake["raw"] = 0.6
    for path in cache.iterdir():
        path.unlink()
    measure_for_study(spec, design, record, parent, quiet=True)
    history = record.client.get_metric_history(parent, key)
    assert sorted((m.step, m.value) for m in history) == [(0, 0.5), (1, 0.6)]
    assert duplicated_metric_rows(tmp_path / "mlflow.db") == []
    assert '"probe/knn_top1_h": 0.6' in record.client.get_run(parent).data.tags["study.baselines"]


def test_a_design_that_proposes_its_architectures_as_it_runs_says_whose_baselines():
    """An Optuna design shows one sampled trial before it runs: its baselines are that trial's
    architecture's, and the tag's about says so; a laid-out design of one architecture adds
    nothing (its words stay as they were)."""
    from types import SimpleNamespace

    from study.baselines import Architecture, Measured, unseen_note
    from trainables.config import TrialConfig

    config = TrialConfig(dataset="digits", cnn_grid=2)
    found = Measured((Architecture(1, {}, config),))
    spec = SimpleNamespace(factors={"cnn_grid": None, "temperature": None})
    proposing = SimpleNamespace(representatives=lambda: (None,), totals=lambda: {"trials": 8})
    assert unseen_note(spec, proposing, found) == (
        "the study varies cnn_grid; measured for the first trial's (cnn_grid = 2)"
    )
    laid_out = SimpleNamespace(representatives=lambda: (None,) * 8, totals=lambda: {"trials": 8})
    assert unseen_note(spec, laid_out, found) == ""
