"""Studies end to end with real Ray Tune and a real MLflow store (embedded SQLite or a server)."""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from browserkit import start_mlflow_server, stop_mlflow_server
from mlflow.tracking import MlflowClient
from studykit import (
    child_runs,
    duplicated_metric_rows,
    metric_steps,
    parent_runs,
    write_spec,
)

from search_spaces.spec import StudyError
from study.progress import StudyProgress
from study.runner import run_study

ROOT = Path(__file__).resolve().parents[2]


def sqlite_uri(folder: Path) -> str:
    return f"sqlite:///{folder / 'mlflow.db'}"


@pytest.mark.slow
def test_default_smoke_study_records_everything_once(workdir, shared_ray):
    uri = sqlite_uri(workdir)
    outcome = run_study(
        None, smoke=True, tracking_uri=uri, storage=workdir / "studies", quiet=True, figures=False,
        max_concurrent=1,
    )  # fmt: skip
    name = "default-digits-smoke"
    assert outcome.ok and outcome.counts == {"FINISHED": 4} and outcome.launched == 4
    parents = parent_runs(uri, name)
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    children = child_runs(uri, name)
    assert len(children) == 4
    for run in children:
        assert run.info.status == "FINISHED"
        tags = run.data.tags
        assert tags["mlflow.parentRunId"] == parents[0].info.run_id
        assert (
            tags["study.name"] == name
            and tags["study.spec_sha"] == parents[0].data.tags["study.spec_sha"]
        )
        assert {"study.point_id", "study.replicate", "study.code_version"} <= set(tags)
        assert run.data.params["derived/steps"] == str(
            int(run.data.params["budget_examples"]) // int(run.data.params["batch_size"])
        )
        assert run.info.run_name.startswith("τ=")
        assert "probe/knn_top1_h" in run.data.metrics and "z/align" in run.data.metrics
    assert duplicated_metric_rows(workdir / "mlflow.db") == []
    _assert_made_for_review(uri, name, parents[0], children)
    table = pq.read_table(outcome.results)
    assert table.num_rows == 4
    assert table.schema.metadata[b"schema_version"] == b"1"
    frame = table.to_pandas()
    assert frame["examples_seen"].nunique() == 1
    assert set(frame["status"]) == {"finished"}
    assert {"temperature", "batch_size", "derived.steps", "z/uniform", "wall_s"} <= set(frame)
    _assert_baselines_on_the_parent(uri, name, parents[0], outcome.results)
    # the session's own time and its fixed cost (study next's cost reads them: session_time)
    session, fixed = (parents[0].data.metrics[k] for k in ("study/session_s",
                                                           "study/session_fixed_s"))  # fmt: skip
    assert 0 < fixed < session <= outcome.wall_s
    # the record holds every report: of Tune's own per-trial logs only the JSON its results read
    # is written beside it (its TensorBoard logger would also import torch into the driver)
    tune_folder = workdir / "studies" / name / "ray"
    logs = {p.name for p in tune_folder.rglob("*")
            if p.name in {"result.json", "progress.csv"} or "tfevents" in p.name}  # fmt: skip
    assert logs == {"result.json"}

    # running it again resumes: nothing is missing, so nothing runs and nothing is duplicated
    again = run_study(
        None, smoke=True, tracking_uri=uri, storage=workdir / "studies", quiet=True, figures=False,
        max_concurrent=1,
    )  # fmt: skip
    assert again.launched == 0 and len(child_runs(uri, name)) == 4
    assert duplicated_metric_rows(workdir / "mlflow.db") == []


def _assert_baselines_on_the_parent(uri: str, name: str, parent, results) -> None:
    """The default baselines, measured once: metrics on the parent named after the trials'
    (the raw input under the _h names only), the same values in the results table's metadata."""
    from analysis.reading.load import read_results

    metrics = parent.data.metrics
    for name_ in ("probe/knn_top1_h", "probe/linear_top1_h"):
        assert 0 < metrics[f"baseline/raw/{name_}"] <= 1
        assert 0 < metrics[f"baseline/random_init/{name_}"] <= 1
    assert "baseline/raw/probe/knn_top1_z" not in metrics and "baseline/raw/z/align" not in metrics
    assert "baseline/random_init/z/align" in metrics and "baseline/supervised/" not in str(metrics)
    recorded = read_results(results).attrs["baselines"]
    assert set(recorded) == {"raw", "random_init"} and recorded["random_init"]["seeds"] == [0]
    for kind, entry in recorded.items():
        for metric, value in entry["metrics"].items():
            assert metrics[f"baseline/{kind}/{metric}"] == pytest.approx(value, abs=1e-12)
    artifacts = {a.path for a in MlflowClient(uri).list_artifacts(parent.info.run_id)}
    assert "baselines.json" in artifacts


def _assert_made_for_review(uri: str, name: str, parent, children: list) -> None:
    """The record a reviewer opens in the MLflow UI: parent, trials, their params and metrics."""
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(name)
    eid, pid = experiment.experiment_id, parent.info.run_id
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    note = experiment.tags["mlflow.note.content"]
    assert f"#/experiments/{eid}/runs/{pid}/artifacts/report/report.html" in note
    assert str(Path("studies") / name / "report" / "report.html") in note
    assert "viewStateShareKey=study-trials" in note
    assert "mlflow.sharedViewState.study-trials" in experiment.tags
    # 4 finished trials, one replicate each: an interval over the held-out items alone
    summary = parent.data.metrics
    assert summary["study/trials"] == 4 and summary["study/trials_finished"] == 4
    assert summary["study/best_n"] == 1 and math.isfinite(summary["study/best_mean"])
    low, high = summary["study/best_ci_low"], summary["study/best_ci_high"]
    assert low < summary["study/best_mean"] <= high
    assert "counting held-out items only (one replicate" in parent.data.tags["mlflow.note.content"]
    best = [c for c in children if c.data.tags["study.point_id"] == parent.data.tags[
        "study.best_point_id"]]  # fmt: skip
    assert best[0].data.metrics["probe/knn_top1_h"] == summary["study/best_mean"]
    assert max(c.data.metrics["probe/knn_top1_h"] for c in children) == summary["study/best_mean"]
    for run in (parent, *children):
        assert run.data.tags["mlflow.source.type"] == "LOCAL" and run.data.tags["mlflow.user"]
    for run in children:
        note = run.data.tags["mlflow.note.content"]
        examples = int(run.data.params["budget_examples"])
        assert f"- **Status:** finished · **examples seen:** {examples:,} of {examples:,}" in note
        assert f"#/experiments/{eid}/runs/{pid}" in note
        inputs = client.get_run(run.info.run_id).inputs.dataset_inputs
        assert [i.dataset.name for i in inputs] == ["digits"]  # once, however many attempts


def test_changed_study_file_is_refused_with_the_difference(workdir, shared_ray):
    uri = sqlite_uri(workdir)
    spec = write_spec(workdir / "s.yaml", "changes", factors={"temperature": {"levels": [0.2]}},
                      baselines=[])  # fmt: skip
    run_study(spec, tracking_uri=uri, storage=workdir / "studies", quiet=True, figures=False)
    # baselines: [] measures none: no baseline metric on the parent, none in the results
    (parent,) = parent_runs(uri, "changes")
    assert not [m for m in parent.data.metrics if m.startswith("baseline/")]
    assert "study.baselines" not in parent.data.tags
    data = yaml.safe_load(spec.read_text())
    data["factors"]["temperature"]["levels"] = [0.3]
    data["description"] = "a new description alone would not count"
    spec.write_text(yaml.safe_dump(data))
    with pytest.raises(StudyError) as err:
        run_study(spec, tracking_uri=uri, storage=workdir / "studies", quiet=True, figures=False)
    message = str(err.value)
    assert "study 'changes' exists with a different study file" in message
    assert "-    - 0.2" in message and "+    - 0.3" in message
    assert len(child_runs(uri, "changes")) == 1  # the record is untouched


def test_more_replicates_of_a_finished_study_run_as_a_new_block_on_fresh_seeds(workdir, shared_ray):
    """The same study file with ``replicates`` raised from 1 to 2, and nothing else changed: the
    recorded trials are kept, the new replicates run on fresh seeds under a parent of their own
    (block 2), no (point, seed) pair runs twice, and the analysis uses every replicate. Raising
    it with another change is still refused."""
    from analysis.reading.load import load_study

    uri = sqlite_uri(workdir)
    spec = write_spec(workdir / "s.yaml", "grows",
                      factors={"temperature": {"levels": [0.2, 0.5]}}, baselines=[])  # fmt: skip
    run_study(spec, tracking_uri=uri, storage=workdir / "studies", quiet=True, figures=False)
    first = {r.info.run_id for r in child_runs(uri, "grows")}
    data = yaml.safe_load(spec.read_text())
    data["design"]["replicates"] = 2
    spec.write_text(yaml.safe_dump(data))
    outcome = run_study(spec, tracking_uri=uri, storage=workdir / "studies", quiet=True,
                        figures=False)  # fmt: skip
    assert outcome.ok and outcome.launched == 2
    parents = parent_runs(uri, "grows")
    assert len(parents) == 2
    assert sorted(p.data.tags.get("study.block", "1") for p in parents) == ["1", "2"]
    children = child_runs(uri, "grows")
    assert len(children) == 4 and first < {r.info.run_id for r in children}
    df = load_study("grows", uri)
    pairs = list(zip(df["temperature"], df["seed"], strict=True))
    assert len(set(pairs)) == 4 and sorted(set(df["seed"])) == [0, 1]
    assert sorted(df["block"]) == [1, 1, 2, 2]
    assert set(df.groupby("point_id").size()) == {2}  # every replicate counts
    again = run_study(spec, tracking_uri=uri, storage=workdir / "studies", quiet=True,
                      figures=False)  # fmt: skip
    assert again.launched == 0 and len(parent_runs(uri, "grows")) == 2
    data["design"]["replicates"] = 3
    data["trial"]["aug_strength"] = 0.5
    spec.write_text(yaml.safe_dump(data))
    with pytest.raises(StudyError, match="exists with a different study file"):
        run_study(spec, tracking_uri=uri, storage=workdir / "studies", quiet=True, figures=False)


@pytest.mark.slow
def test_server_mode_with_a_real_mlflow_server(workdir, shared_ray):
    server, uri = start_mlflow_server(
        f"sqlite:///{workdir / 'server.db'}", cwd=workdir,
        default_artifact_root=workdir / "server-artifacts",
    )  # fmt: skip
    try:
        spec = write_spec(
            workdir / "s.yaml", "served", factors={"temperature": {"levels": [0.1, 0.5]}}
        )
        outcome = run_study(
            spec, tracking_uri=uri, storage=workdir / "studies", quiet=True, figures=False
        )
        assert outcome.ok and outcome.counts == {"FINISHED": 2}
        runs = child_runs(uri, "served")
        assert len(runs) == 2
        assert all(metric_steps(uri, r.info.run_id) == [512, 1024, 1536] for r in runs)
        assert not (workdir / "mlflow.db").exists()  # nothing went to the embedded store
    finally:
        stop_mlflow_server(server)


@pytest.mark.slow
def test_optuna_proposes_points_through_ray_tune_and_nsga2_reports_the_pareto_front(
    workdir, shared_ray
):
    """Optuna's proposals launched through a Ray Tune searcher, with two objectives (NSGA-II;
    one launch serves both: a single objective is the same schedule with one direction, and
    it is run end to end by the killed-driver test)."""
    objectives = [{"metric": "probe/knn_top1_h", "mode": "max"},
                  {"metric": "z/uniform", "mode": "min"}]  # fmt: skip
    spec = write_spec(
        workdir / "mo.yaml",
        "adaptive",
        factors={"temperature": {"range": [0.05, 1.0], "scale": "log"}},
        design={"kind": "optuna", "samples": 3, "objectives": objectives, "seed": 0},
        max_concurrent=2,
    )
    uri = sqlite_uri(workdir)
    outcome = run_study(spec, tracking_uri=uri, storage=workdir / "studies", quiet=True)
    runs = child_runs(uri, "adaptive")
    assert outcome.ok and len(runs) == 3
    temperatures = {float(r.data.params["temperature"]) for r in runs}
    assert len(temperatures) == 3 and all(0.05 <= t <= 1.0 for t in temperatures)
    assert all(r.data.tags["study.trial_key"].startswith("o-") for r in runs)
    assert yaml.safe_load(parent_runs(uri, "adaptive")[0].data.tags["study.objectives"]) == (
        objectives)  # fmt: skip
    report = workdir / "studies" / "adaptive" / "report"
    summary = yaml.safe_load((report / "report.json").read_text())["pareto"]
    assert summary["objectives"] == objectives and summary["n_trials"] == 3
    front = {row["point_id"] for row in summary["front"]}
    assert 1 <= len(front) <= 3 and front <= {r.data.tags["study.point_id"] for r in runs}
    assert list(report.glob("figures/pareto_front.*"))
    assert "Pareto front" in (report / "report.html").read_text()


def test_progress_counts_and_eta():
    p = StudyProgress("s", total=6, already_done=1, concurrency=2, metric="m", mode="max")
    assert p.pending == 5 and p.eta_s() is None
    p.start("a")
    p.start("b")
    p.result("a", 0.5)
    p.result("b", 0.7)
    p.result("a", float("nan"))
    assert (p.pending, len(p.running), p.best, p.best_trial) == (3, 2, 0.7, "b")
    p.started["a"] -= 10.0  # a ran for 10 s
    p.end("a", ok=True)
    p.end("b", ok=False)
    assert (p.done, p.failed, p.pending) == (1, 1, 3)
    # 3 left × mean duration / 2 slots
    mean = sum(p.durations) / 2
    assert p.eta_s() == pytest.approx(3 * mean / 2)
    assert "3 pending · 0 running · 2 done · 1 failed" in p.line()
