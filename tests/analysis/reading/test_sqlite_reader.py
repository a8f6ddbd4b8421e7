"""The MLflow-free reader of an embedded store answers as MLflow's own client does, on a real
store written through MLflow: experiments (active, deleted, tagged), runs (every status, a
deleted one, names), params, tags and latest metrics (several steps, NaN), in MLflow's order."""

from __future__ import annotations

import math
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.entities import Metric, ViewType
from mlflow.tracking import MlflowClient

from analysis.reading.record import results_table
from analysis.reading.sqlite_reader import SQLiteReader
from analysis.reading.store import read_client

ROOT = Path(__file__).resolve().parents[3]
ROLE = "tags.`study.role` = 'trial'"


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("reader")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    client = MlflowClient(uri)
    # its artifacts in its own folder: MLflow's default is ./mlruns of the working folder
    eid = client.create_experiment("kept", artifact_location=str(folder / "artifacts"),
                                   tags={"mlflow.experimentKind": "custom"})  # fmt: skip
    gone = client.create_experiment("gone")
    client.create_experiment("empty")
    for i, status in enumerate(["FINISHED", "FAILED", "KILLED", "RUNNING", "FINISHED"]):
        tags = {"study.role": "trial", "study.trial_key": f"k{i}"}
        rid = client.create_run(eid, run_name=f"run {i}", tags=tags).info.run_id
        client.log_param(rid, "temperature", str(0.1 * (i + 1)))
        now = int(time.time() * 1000)
        steps = [Metric("z/align", 1.0 / (s + 1), now + s, s * 100) for s in range(3)]
        client.log_batch(rid, metrics=[*steps, Metric("z/uniform", math.nan, now, 0)])
        if status != "RUNNING":
            client.set_terminated(rid, status)
        time.sleep(0.002)  # distinct start times: the order is by start time
    parent = client.create_run(eid, run_name="parent", tags={"study.role": "parent"})
    client.log_param(parent.info.run_id, "target_metric", "probe/knn_top1_h")
    client.delete_run(client.search_runs([eid], ROLE)[-1].info.run_id)
    client.create_run(gone, tags={"study.role": "parent"})
    client.delete_experiment(gone)
    return uri


def _run(r) -> tuple:
    i, d = r.info, r.data
    metrics = {k: "nan" if math.isnan(v) else v for k, v in d.metrics.items()}
    return (i.run_id, i.run_name, str(i.experiment_id), i.status, i.start_time, i.end_time,
            i.lifecycle_stage, i.artifact_uri, metrics, d.params, d.tags)  # fmt: skip


def _experiment(e) -> tuple:
    return (str(e.experiment_id), e.name, e.artifact_location, e.lifecycle_stage, dict(e.tags))


@pytest.mark.parametrize("view", [ViewType.ACTIVE_ONLY, ViewType.DELETED_ONLY, ViewType.ALL])
def test_experiments_and_runs_read_as_mlflow_reads_them(store, view):
    mlflow_client, reader = MlflowClient(store), SQLiteReader(store)
    theirs = mlflow_client.search_experiments(view_type=view)
    assert [_experiment(e) for e in reader.search_experiments(view_type=view)] == [
        _experiment(e) for e in theirs]  # fmt: skip
    ids = [e.experiment_id for e in theirs]
    for filter_string in ("", ROLE, "tags.`study.role` = 'parent'"):
        expected = mlflow_client.search_runs(ids, filter_string, run_view_type=view)
        found = reader.search_runs(ids, filter_string, run_view_type=view)
        assert [_run(r) for r in found] == [_run(r) for r in expected]
    for e in theirs:
        assert _experiment(reader.get_experiment(e.experiment_id)) == _experiment(e)
        assert _experiment(reader.get_experiment_by_name(e.name)) == _experiment(
            mlflow_client.get_experiment_by_name(e.name))  # fmt: skip
    assert reader.get_experiment_by_name("nope") is None


def test_a_runs_metrics_are_its_latest_values_and_nan_stays_nan(store):
    reader = SQLiteReader(store)
    eid = reader.get_experiment_by_name("kept").experiment_id
    run = reader.search_runs([eid], ROLE)[0]
    assert run.data.metrics["z/align"] == pytest.approx(1 / 3)  # step 200 of 0, 100, 200
    assert math.isnan(run.data.metrics["z/uniform"])
    assert _run(reader.get_run(run.info.run_id)) == _run(MlflowClient(store).get_run(
        run.info.run_id))  # fmt: skip


def test_the_reader_neither_writes_nor_imports_mlflow(store):
    path = Path(store.removeprefix("sqlite:///"))
    before = path.read_bytes()
    code = ("import sys; from analysis.reading.store import read_client; "
            f"c = read_client({store!r}); e = c.get_experiment_by_name('kept'); "
            "runs = c.search_runs([e.experiment_id], \"tags.`study.role` = 'trial'\"); "
            "print(type(c).__name__, len(runs), 'mlflow' in sys.modules)")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, check=True)  # fmt: skip
    assert done.stdout.split() == ["SQLiteReader", "4", "False"]
    assert path.read_bytes() == before


def test_a_server_gets_mlflows_client_and_a_file_of_another_program_none(tmp_path):
    """A server, or an embedded store not there yet, is read by MLflow's client; an SQLite file
    of another program is refused, unread and unchanged (MLflow's client would write its
    tables into it)."""
    assert isinstance(read_client("http://127.0.0.1:5000"), MlflowClient)
    assert isinstance(read_client(f"sqlite:///{tmp_path / 'none.db'}"), MlflowClient)
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE trials (id INTEGER)")
    before = other.read_bytes()
    with pytest.raises(ValueError, match="is an SQLite database but not an MLflow store"):
        read_client(f"sqlite:///{other}")
    assert other.read_bytes() == before


def test_a_studys_results_table_is_the_same_through_either_client(tmp_path):
    """A study recorded as a study records it (benchmarks/analysis.py's writer: parent, child
    runs with the whole TrialConfig, four evaluations, the summary) reads into the same
    results table through MLflow's client and through the reader."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench", ROOT / "benchmarks/analysis.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    uri = bench.build_store(tmp_path, bench.synthetic_plans(6))
    theirs = results_table(MlflowClient(uri), "bench")
    ours = results_table(SQLiteReader(uri), "bench")
    assert ours.equals(theirs)
    assert ours.schema.metadata == theirs.schema.metadata


def test_the_reader_reads_artifacts_through_mlflow_and_cannot_write(store, tmp_path):
    client = MlflowClient(store)
    eid = client.get_experiment_by_name("kept").experiment_id
    run = client.search_runs([eid], "tags.`study.role` = 'parent'")[0]
    (tmp_path / "note.txt").write_text("kept")
    client.log_artifact(run.info.run_id, str(tmp_path / "note.txt"))
    reader = SQLiteReader(store)
    assert [a.path for a in reader.list_artifacts(run.info.run_id)] == ["note.txt"]
    got = reader.download_artifacts(run.info.run_id, "note.txt", str(tmp_path / "got"))
    assert Path(got).read_text() == "kept"
    with pytest.raises(AttributeError, match="reads only"):
        reader.set_tag(run.info.run_id, "k", "v")
