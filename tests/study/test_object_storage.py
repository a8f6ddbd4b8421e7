"""Studies whose storage is a bucket: ``study run SPEC --storage s3://bucket/prefix``
against a real S3-compatible server (moto's, on 127.0.0.1), with real Ray Tune and MLflow.

Everything every node must see is an object in the bucket: Ray's experiment storage, each
trial's checkpoints, results.parquet, the report and MLflow's artifacts. A study whose driver was
killed resumes from the bucket alone. A storage that cannot be reached or written is refused
before anything is recorded, naming ``--storage``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from processkit import kill_processes_mentioning
from s3kit import make_bucket, object_keys, s3_client
from studykit import (
    child_runs,
    duplicated_metric_rows,
    metric_steps,
    parent_runs,
    wait_for,
    write_spec,
)

from search_spaces.spec import StudyError
from study.preflight import checked_storage
from study.runner import run_study
from study.storage import StoredCheckpoints, open_storage

STUDY = str(Path(sys.executable).with_name("study"))
BATCH = 128
BUDGET = BATCH * 40


def experiments(db: Path) -> list[str]:
    """Names of the experiments in an MLflow SQLite store (none when there is no file)."""
    if not db.exists():
        return []
    with sqlite3.connect(db) as con:
        return [r[0] for r in con.execute("SELECT name FROM experiments")]


# ---- the storage layer, on a real bucket
def test_checkpoints_round_trip_through_the_bucket(s3_server, tmp_path):
    make_bucket("ckpt")
    trial = open_storage("s3://ckpt/runs/s/trials/p000-r0")
    assert trial.uri == "s3://ckpt/runs/s/trials/p000-r0" and not trial.is_local
    stored = StoredCheckpoints(trial, keep=2)
    for step in (128, 256, 384):
        local = tmp_path / f"c{step}"
        local.mkdir()
        (local / "state.pt").write_bytes(str(step).encode())
        stored.save(local, step)
    # the two newest are kept, each with its DONE marker written last
    assert object_keys("ckpt") == [
        f"runs/s/trials/p000-r0/checkpoint_{s:012d}/{f}"
        for s in (256, 384) for f in ("DONE", "state.pt")
    ]  # fmt: skip
    # an upload a killed writer left without its marker never counts
    s3_client().put_object(
        Bucket="ckpt", Key="runs/s/trials/p000-r0/checkpoint_000000000512/state.pt", Body=b"x"
    )
    copy = Path(stored.latest())
    assert (copy / "state.pt").read_bytes() == b"384"
    stored.release()
    assert not copy.exists()


def test_a_plain_path_stays_a_local_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    storage = open_storage("studies")
    assert storage.is_local and storage.uri == str(tmp_path / "studies")
    assert open_storage(None).uri == str(tmp_path / "studies")
    assert open_storage(f"file://{tmp_path}/x").uri == str(tmp_path / "x")


def _write_rows(storage, rows: int, name: str) -> None:
    table = pa.table({"x": list(range(rows))})
    storage.write_whole(lambda path: pq.write_table(table, path, filesystem=storage.fs), name)


@pytest.mark.parametrize(
    ("name", "write"),
    [
        ("driver.lock", lambda storage, n, name: storage.write_text("a" * n, name)),
        ("results.parquet", _write_rows),
    ],
)
def test_a_file_rewritten_while_another_process_reads_it_is_never_seen_in_part(
    tmp_path, name, write
):
    """The driver's lease is rewritten at every heartbeat while other drivers read it (a reader
    that found it empty took the study for free: seen in CI as a None lease); results.parquet is
    rewritten as a resumed study ends while a notebook may be reading it."""
    storage = open_storage(tmp_path / "studies")
    sizes = [50_000, 70_000]
    write(storage, sizes[0], name)
    reader = subprocess.Popen(
        [sys.executable, "-c", _READER, str(tmp_path / "studies"), name],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    wait_for(lambda: (tmp_path / "studies" / "reading").exists(), 60, "the reader", reader)
    for i in range(300):
        write(storage, sizes[i % 2], name)
    (tmp_path / "studies" / "stop").touch()
    seen = reader.communicate(timeout=60)[0].split()
    assert len(seen) > 10 and set(seen) <= {"50000", "70000"}, sorted(set(seen))[:5]
    left = sorted(p.name for p in (tmp_path / "studies").iterdir())
    assert left == sorted([name, "reading", "stop"])  # no part left beside it


# what the reader saw, one word a read: the size, or why it could not read it
_READER = """
import sys
from pathlib import Path
from analysis.reading.load import read_table
from study.storage import open_storage
storage, name = open_storage(sys.argv[1]), sys.argv[2]
stop = Path(sys.argv[1]) / "stop"
(Path(sys.argv[1]) / "reading").touch()
while not stop.exists():
    try:
        if name.endswith(".parquet"):
            print(read_table(storage.uri_of(name)).num_rows)
        else:
            print(len(storage.read_text(name)))
    except Exception as err:
        print(type(err).__name__)
"""


# ---- refused before anything is recorded
@pytest.mark.parametrize(
    ("storage", "why"),
    [
        ("s3://ro-bucket/runs", "read-only"),  # a bucket policy denies every write
        ("s3://no-such-bucket/runs", "missing"),
        ("nosuchfs://x/y", "unknown"),  # a filesystem pyarrow does not know
    ],
)
def test_unwritable_storage_is_refused_naming_storage(s3_server, tmp_path, storage, why):
    make_bucket("ro-bucket")
    deny = {"Version": "2012-10-17", "Statement": [{
        "Effect": "Deny", "Principal": "*", "Action": ["s3:PutObject", "s3:DeleteObject"],
        "Resource": "arn:aws:s3:::ro-bucket/*"}]}  # fmt: skip
    s3_client().put_bucket_policy(Bucket="ro-bucket", Policy=json.dumps(deny))
    db = tmp_path / "mlflow.db"
    spec = write_spec(tmp_path / "s.yaml", "refused", factors={"temperature": {"levels": [0.1]}})
    with pytest.raises(StudyError) as err:
        run_study(spec, tracking_uri=f"sqlite:///{db}", storage=storage, quiet=True, figures=False)
    assert str(err.value).startswith(f"--storage {storage}: "), err.value
    assert experiments(db) == []  # nothing recorded
    assert object_keys("ro-bucket") == []


def test_an_unreachable_endpoint_is_refused_naming_storage(s3_server, monkeypatch, tmp_path):
    from distkit import free_port

    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # nothing there
    with pytest.raises(StudyError, match=r"^--storage s3://somewhere/runs: cannot write there"):
        checked_storage("s3://somewhere/runs")


def test_the_cli_keeps_a_uri_whole(s3_server, tmp_path):
    """Typer's Path type made s3://bucket into a local folder 's3:/bucket'; the URI now stays."""
    db = tmp_path / "mlflow.db"
    out = subprocess.run(
        [STUDY, "run", "--smoke", "--storage", "s3://not-made/runs", "--tracking-uri",
         f"sqlite:///{db}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert "--storage s3://not-made/runs: cannot write there" in out.stderr
    assert not (tmp_path / "s3:").exists() and experiments(db) == []


@pytest.mark.long
# ---- a whole study in the bucket, killed and resumed from the bucket alone
@pytest.mark.slow
def test_study_in_a_bucket_resumes_from_it_after_the_driver_dies(
    s3_server, workdir, tmp_path_factory, ray_tmp
):
    make_bucket("studies")
    storage = "s3://studies/runs"
    spec = write_spec(
        tmp_path_factory.mktemp("spec") / "s.yaml", "bucket-study",
        factors={"temperature": {"levels": [0.1, 0.5]}},
        trial={"budget_examples": BUDGET, "batch_size": BATCH, "eval_marks": 4},
        max_concurrent=1,
    )  # fmt: skip
    record_dir = tmp_path_factory.mktemp("record")  # the record is MLflow's, kept apart
    uri = f"sqlite:///{record_dir / 'mlflow.db'}"
    command = [STUDY, "run", str(spec), "--no-figures", "--tracking-uri", uri, "--storage", storage]
    driver = subprocess.Popen(
        command, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    trials = "runs/bucket-study/trials/"

    def checkpointed_unfinished():
        keys = object_keys("studies", trials)
        done = [k for k in keys if k.endswith("/DONE")]
        if not done:
            return False
        try:
            finished = {r.data.tags["study.trial_key"] for r in child_runs(uri, "bucket-study")
                        if r.info.status == "FINISHED"}  # fmt: skip
        except Exception:  # the driver is still creating the store
            return False
        started = {k.split("/")[3] for k in done} - finished
        return started or False

    interrupted = wait_for(checkpointed_unfinished, 240, "a checkpoint in the bucket", driver)
    os.killpg(driver.pid, signal.SIGKILL)  # the driver and everything in its session
    driver.wait(timeout=30)
    kill_processes_mentioning(ray_tmp)  # Ray daemons that outlive their driver
    finished_before = {r.data.tags["study.trial_key"] for r in child_runs(uri, "bucket-study")
                       if r.info.status == "FINISHED"}  # fmt: skip
    # every local folder the study used goes: the working folder and Ray's own
    for path in [*workdir.iterdir(), *Path(ray_tmp).iterdir()]:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    for leftover in Path("/tmp").glob("trial-resume-*"):
        shutil.rmtree(leftover, ignore_errors=True)

    rerun = subprocess.run(command, cwd=workdir, capture_output=True, text=True, timeout=400)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"results: {storage}/bucket-study/results.parquet" in rerun.stdout

    runs = {r.data.tags["study.trial_key"]: r for r in child_runs(uri, "bucket-study")}
    assert sorted(runs) == ["p000-r0", "p001-r0"]  # exactly one child run per trial
    assert {r.info.status for r in runs.values()} == {"FINISHED"}
    assert len(parent_runs(uri, "bucket-study")) == 1
    for key, run in runs.items():
        assert metric_steps(uri, run.info.run_id) == [BUDGET // 4 * k for k in range(1, 5)]
        if key in interrupted:  # resumed from its checkpoint in the bucket, not from zero
            assert run.data.tags["study.attempts"] == "2"
            assert run.data.metrics["trial/resumed_from"] >= BUDGET // 4, key
        else:  # finished before the kill and never run again, or first run after it
            assert run.data.tags["study.attempts"] == "1"
            assert run.data.metrics["trial/resumed_from"] == 0
    assert interrupted and not interrupted & finished_before
    assert duplicated_metric_rows(record_dir / "mlflow.db") == []

    keys = object_keys("studies", "runs/")
    assert "runs/bucket-study/results.parquet" in keys
    assert "runs/bucket-study/report/report.html" in keys
    assert any(k.startswith("runs/bucket-study/ray/") for k in keys)  # Tune's storage
    assert any(k.startswith("runs/mlartifacts/") and k.endswith("report/report.html")
               for k in keys)  # MLflow's artifacts, in the bucket too  # fmt: skip
    assert "runs/bucket-study/driver.lock" not in keys  # released
    table = pq.read_table(f"{storage}/bucket-study/results.parquet")  # pyarrow reads the URI
    assert table.num_rows == 2 and set(table.column("examples_seen").to_pylist()) == {BUDGET}
    assert list(workdir.iterdir()) == []  # no study data under the working folder


# ---- data in a bucket: downloaded once per node, whatever the trials
@pytest.mark.slow
def test_a_studys_bucket_data_root_is_downloaded_once_per_node(
    s3_server, workdir, tmp_path_factory, ray_tmp, monkeypatch
):
    from datakit import write_images
    from mlflow.tracking import MlflowClient
    from s3kit import upload

    make_bucket("data")  # class folders of real PNG files, uploaded once
    upload(write_images(tmp_path_factory.mktemp("png") / "imgs", per_class=30), "data", "imgs")
    cache = tmp_path_factory.mktemp("node-cache")
    monkeypatch.setenv("CONTRASTIVE_DATA_CACHE", str(cache))  # the node's cache; Ray inherits it
    spec = write_spec(
        workdir / "s.yaml", "bucket-data",
        factors={"temperature": {"levels": [0.1, 0.5]}},
        trial={"dataset": "imagefolder", "data_root": "s3://data/imgs", "image_size": 12,
               "budget_examples": 16 * 4, "batch_size": 16, "eval_marks": 1, "knn_k": 5,
               "heldout_size": 12, "probe_train_size": 40},
        max_concurrent=2,  # two trial processes at once on this node: one downloads, one waits
    )  # fmt: skip
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    outcome = run_study(
        spec, tracking_uri=uri, storage=workdir / "studies", quiet=True, figures=False
    )
    assert outcome.ok and outcome.counts == {"FINISHED": 2}
    records = [json.loads(p.read_text()) for p in cache.glob("*.json")]
    assert len(records) == 1, records  # two trials in two processes, one download
    assert records[0]["uri"] == "s3://data/imgs"
    runs = child_runs(uri, "bucket-data")
    for run in runs:  # the training data's source in the record is the bucket
        inputs = MlflowClient(uri).get_run(run.info.run_id).inputs.dataset_inputs
        assert [i.dataset.source_type for i in inputs] == ["s3"]


@pytest.mark.slow
def test_a_bucket_deleted_mid_study_stops_it_naming_storage(s3_server, workdir, ray_tmp):
    """The field report: every trial retried against the missing bucket and the last error
    blamed Ray ('No experiment snapshot file'). The study stops, names --storage, and leaves
    no run RUNNING."""
    make_bucket("gone")
    spec = write_spec(workdir / "s.yaml", "lost-bucket",
                      factors={"temperature": {"levels": [0.1, 0.3, 0.5]}},
                      trial={"budget_examples": BUDGET, "batch_size": BATCH, "eval_marks": 4},
                      max_concurrent=1)  # fmt: skip
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    driver = subprocess.Popen(
        [STUDY, "run", str(spec), "--tracking-uri", uri, "--storage", "s3://gone/runs"],
        cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    wait_for(lambda: any(k.endswith("/DONE") for k in object_keys("gone", "runs/")), 240,
             "a checkpoint in the bucket", driver)  # fmt: skip
    from botocore.exceptions import ClientError

    client = s3_client()
    for _ in range(50):  # empty it and delete it, whatever the driver writes meanwhile
        keys = [k["Key"] for k in client.list_objects_v2(Bucket="gone").get("Contents", [])]
        if keys:
            client.delete_objects(Bucket="gone", Delete={"Objects": [{"Key": k} for k in keys]})
        try:
            client.delete_bucket(Bucket="gone")
            break
        except ClientError:
            continue
    else:
        pytest.fail("the bucket could not be deleted")
    _, err = driver.communicate(timeout=400)
    assert driver.returncode == 1, err[-3000:]
    assert "--storage s3://gone/runs/lost-bucket: the study's storage cannot be written" in err
    assert "No experiment snapshot" not in err.split("error:")[-1]
    assert {r.info.status for r in child_runs(uri, "lost-bucket")} <= {"FINISHED", "FAILED"}
