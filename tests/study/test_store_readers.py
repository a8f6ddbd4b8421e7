"""Issue 58, item 2: a store that readers cannot stall.

A notebook, a DB browser or the MLflow UI reads ``mlflow.db`` while a study runs. The store is in
WAL mode on a local disk (a reader never blocks a write), stays in rollback mode on a network
filesystem and says so, and every call the driver makes waits out another process's lock;
a call that cannot land fails the study, never a trial, and no metric row is doubled.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from mlflow.entities import Metric, RunTag
from processkit import kill_processes_mentioning
from studykit import (
    STUDY,
    child_runs,
    duplicated_metric_rows,
    start_driver,
    write_spec,
)

from study.record import StudyRecord
from study.store_locks import (
    StoreHeldError,
    filesystem_type,
    on_network_filesystem,
    outlasting_locks,
    settle_journal_mode,
)

MOUNTS = textwrap.dedent(r"""
    /dev/vda / ext4 rw,relatime 0 0
    tmpfs /tmp tmpfs rw 0 0
    nfs.example:/export/home /home/lab nfs4 rw,vers=4.2 0 0
    10.0.0.1@o2ib:/scratch /scratch lustre rw,flock 0 0
    gpfs0 /gpfs/projects gpfs rw 0 0
    //files/share /mnt/team\040share cifs rw 0 0
""")


# -- where the store is ------------------------------------------------------------------------
def test_a_path_on_this_machines_disk_is_local(tmp_path):
    assert filesystem_type(tmp_path / "mlflow.db") != ""  # found in the real /proc/mounts
    assert not on_network_filesystem(tmp_path / "mlflow.db")


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/home/lab/me/study/mlflow.db", "nfs4"),
        ("/scratch/me/mlflow.db", "lustre"),
        ("/gpfs/projects/p1/mlflow.db", "gpfs"),
        ("/mnt/team share/mlflow.db", "cifs"),  # /proc/mounts writes the space as \040
    ],
)
def test_a_path_under_a_network_mount_is_on_a_network_filesystem(path, kind):
    assert filesystem_type(path, MOUNTS) == kind
    assert on_network_filesystem(path, MOUNTS)


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/home/labmate/mlflow.db", "ext4"),  # beside the mount, not under it
        ("/gpfs/other/mlflow.db", "ext4"),  # under the mount's parent only
        ("/tmp/mlflow.db", "tmpfs"),
        ("/home/lab", "nfs4"),  # the mount point itself
    ],
)
def test_the_longest_mount_point_holding_a_path_names_its_filesystem(path, kind):
    assert filesystem_type(path, MOUNTS) == kind
    assert on_network_filesystem(path, MOUNTS) is (kind == "nfs4")


def test_an_unreadable_mount_table_makes_nothing_network():
    assert filesystem_type("/anywhere/mlflow.db", "") == ""
    assert not on_network_filesystem("/anywhere/mlflow.db", "")


# -- the journal mode --------------------------------------------------------------------------
def journal_mode(db: Path) -> str:
    with sqlite3.connect(db) as con:
        return con.execute("PRAGMA journal_mode").fetchone()[0]


def test_a_new_store_is_born_in_wal_mode(tmp_path):
    StudyRecord(f"sqlite:///{tmp_path / 'mlflow.db'}", "born")
    assert journal_mode(tmp_path / "mlflow.db") == "wal"


def back_to_rollback_mode(record: StudyRecord, db: Path) -> None:
    """``db`` as a store made before WAL (or on NFS) is: in rollback mode."""
    record.client._tracking_client.store.engine.dispose()  # WAL is left only by a lone holder
    with sqlite3.connect(db) as con:
        assert con.execute("PRAGMA journal_mode=DELETE").fetchone()[0] == "delete"


def test_a_store_made_before_turns_wal_when_a_driver_opens_it(tmp_path):
    db = tmp_path / "mlflow.db"
    back_to_rollback_mode(StudyRecord(f"sqlite:///{db}", "old"), db)
    assert settle_journal_mode(db, "sqlite:///elsewhere/mlflow.db") == "wal"
    assert journal_mode(db) == "wal"


def test_asking_a_store_s_journal_mode_keeps_this_process_s_locks(tmp_path):
    """The driver asks the mode of a store it already has open: a read through a descriptor
    of its own would drop the process's POSIX locks on the file when closed, and another
    process closing its connection would then delete the write-ahead log under the driver's
    open one (its next write: "disk I/O error")."""
    db = tmp_path / "mlflow.db"
    StudyRecord(f"sqlite:///{db}", "open")
    mine = sqlite3.connect(db)
    mine.execute("SELECT count(*) FROM experiments").fetchone()
    assert settle_journal_mode(db, "sqlite:///open/mlflow.db") == "wal"
    other = ("import sqlite3, sys; db = sqlite3.connect(sys.argv[1]); "
             "db.execute('SELECT count(*) FROM runs').fetchone(); db.close()")  # fmt: skip
    subprocess.run([sys.executable, "-c", other, str(db)], check=True)
    assert Path(f"{db}-wal").exists()  # this process still holds the store: the log stays
    mine.close()


def test_on_a_network_filesystem_the_store_stays_in_rollback_mode_and_says_so_once(
    tmp_path, capsys
):
    db = tmp_path / "mlflow.db"
    sqlite3.connect(db).close()
    mounts = f"/dev/vda / ext4 rw 0 0\nnas:/vol {tmp_path} nfs rw 0 0\n"
    assert settle_journal_mode(db, f"sqlite:///{db}", mounts) == "delete"
    assert settle_journal_mode(db, f"sqlite:///{db}", mounts) == "delete"
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1, said
    assert str(db) in said[0] and "network filesystem (nfs)" in said[0]
    assert "rollback mode" in said[0]
    assert journal_mode(db) == "delete"


# -- calls that outlast a lock -----------------------------------------------------------------
def hold_store(db: Path, how: str, seconds: float) -> subprocess.Popen:
    """Another process holding ``db``: ``read`` a read transaction (BEGIN; SELECT), ``write``
    the write lock (BEGIN IMMEDIATE), for ``seconds``; returns once it holds it."""
    begin = "BEGIN IMMEDIATE" if how == "write" else "BEGIN"
    code = textwrap.dedent(f"""
        import sqlite3, time
        con = sqlite3.connect({str(db)!r}, isolation_level=None, timeout=60)
        con.execute({begin!r})
        con.execute("SELECT COUNT(*) FROM runs").fetchone()
        print("holding", flush=True)
        time.sleep({seconds})
        con.execute("ROLLBACK")
    """)
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "holding"
    return holder


def rollback_record(tmp_path: Path) -> tuple[StudyRecord, str, Path]:
    """A study's record in a store put back in rollback mode (as on NFS), with one run."""
    db = tmp_path / "mlflow.db"
    record = StudyRecord(f"sqlite:///{db}", "rollback")
    run_id = record.client.create_run(record.experiment_id).info.run_id
    back_to_rollback_mode(record, db)
    return record, run_id, db


@pytest.mark.slow
def test_a_write_outlasts_a_reader_longer_than_mlflows_own_wait(tmp_path):
    """MLflow gives up on a lock after 20 s; the driver's call waits it out (rollback mode,
    where a reader does block a write)."""
    record, run_id, db = rollback_record(tmp_path)
    holder = hold_store(db, "read", 26)
    started = time.monotonic()
    record.client.log_batch(run_id, metrics=[Metric("z/align", 0.5, 1, 0)],
                            tags=[RunTag("note", "landed")])  # fmt: skip
    assert time.monotonic() - started > 20  # it did wait for the reader
    assert holder.wait(timeout=30) == 0
    assert record.client.get_run(run_id).data.tags["note"] == "landed"
    assert duplicated_metric_rows(db) == []


@pytest.mark.slow
def test_a_write_that_cannot_land_names_the_store_held(tmp_path, monkeypatch):
    monkeypatch.setenv("CONTRASTIVE_STORE_LOCK_WAIT_S", "1")
    record, run_id, db = rollback_record(tmp_path)
    holder = hold_store(db, "write", 60)
    try:
        with pytest.raises(StoreHeldError) as caught:
            record.client.set_tag(run_id, "note", "never")
    finally:
        holder.kill()
        holder.wait()
    message = str(caught.value)
    assert f"sqlite:///{db}" in message and "held by another process" in message
    assert "\n" not in message


def test_a_call_is_made_again_while_it_fails_on_a_lock_and_only_then():
    tries = []

    def locked_twice():
        tries.append(1)
        if len(tries) < 3:
            raise sqlite3.OperationalError("database is locked")
        return "landed"

    assert outlasting_locks(locked_twice, "sqlite:///s.db", 30) == "landed"
    assert len(tries) == 3

    def broken():
        tries.append(1)
        raise sqlite3.OperationalError("no such table: runs")

    tries.clear()
    with pytest.raises(sqlite3.OperationalError):
        outlasting_locks(broken, "sqlite:///s.db", 30)
    assert len(tries) == 1  # only a lock is waited out


def test_a_batch_logged_again_after_its_metrics_landed_doubles_no_row(tmp_path):
    """What a retry does after a lock failed a log_batch between its parts (MLflow commits
    params, metrics and tags separately): the same metrics, logged again, add no row."""
    db = tmp_path / "mlflow.db"
    record = StudyRecord(f"sqlite:///{db}", "again")
    run_id = record.client.create_run(record.experiment_id).info.run_id
    metrics = [Metric("z/align", 0.25, 1000, 0), Metric("z/align", 0.5, 1000, 128),
               Metric("loss/total", float("nan"), 1000, 128)]  # fmt: skip
    record.client.log_batch(run_id, metrics=metrics)
    record.client.log_batch(run_id, metrics=metrics, tags=[RunTag("note", "second")])
    assert duplicated_metric_rows(db) == []
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT COUNT(*) FROM metrics").fetchone()[0] == 3


# -- a study while another process holds its store ---------------------------------------------
def run_study_while_held(workdir: Path, ray_tmp: str, how: str, seconds: float) -> None:
    """A 4-trial study (2 at a time); once its first metric row lands, another process holds
    its store (``how``, ``seconds``): the study finishes, every trial FINISHED, exit 0."""
    db = workdir / "mlflow.db"
    spec = write_spec(
        workdir / "held.yaml", "held",
        factors={"temperature": {"levels": [0.1, 0.5]}, "batch_size": {"levels": [64, 128]}},
        trial={"budget_examples": 128 * 24, "eval_marks": 6}, max_concurrent=2,
    )  # fmt: skip
    uri = f"sqlite:///{db}"
    _, driver = start_driver(spec, workdir, uri, STUDY)
    try:
        deadline = time.monotonic() + 600
        while not metric_rows(db):
            assert driver.poll() is None, driver.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no metric was logged"
            time.sleep(0.2)
        holder = hold_store(db, how, seconds)
        assert driver.poll() is None  # it holds the store mid-study
        out, err = driver.communicate(timeout=900)
        assert holder.wait(timeout=seconds + 30) == 0
    finally:
        if driver.poll() is None:
            driver.kill()
        kill_processes_mentioning(ray_tmp)
    assert driver.returncode == 0, err[-4000:]
    assert "database is locked" not in out + err
    statuses = sorted(run.info.status for run in child_runs(uri, "held"))
    assert statuses == ["FINISHED"] * 4
    assert duplicated_metric_rows(db) == []
    assert journal_mode(db) == "wal"


def metric_rows(db: Path) -> int:
    try:
        with sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True, timeout=0.1) as con:
            return con.execute("SELECT COUNT(*) FROM metrics").fetchone()[0]
    except sqlite3.Error:  # not made yet, or between its creation and its tables
        return 0


@pytest.mark.slow
@pytest.mark.parametrize(("how", "seconds"), [("read", 30), ("write", 10)])
def test_a_study_finishes_while_another_process_holds_its_store(workdir, ray_tmp, how, seconds):
    run_study_while_held(workdir, ray_tmp, how, seconds)


@pytest.mark.long
def test_a_study_finishes_while_a_reader_holds_its_store_for_90_s(workdir, ray_tmp):
    """Marked long: the reader alone holds the store for 90 s, and the test waits for it."""
    run_study_while_held(workdir, ray_tmp, "read", 90)
