"""Whether a file is this MLflow's store (``analysis.reading.store.store_problem``), read as a
reader of a store other processes use must read it: through SQLite alone, and patient with a
store another driver is creating this moment."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from analysis.reading.store import mlflow_schema_chain, mlflow_schema_head, store_problem
from study.tracking_store import create_store


@pytest.fixture
def store(tmp_path) -> Path:
    """A new store of this MLflow's schema (in WAL mode, as the product makes them)."""
    path = tmp_path / "mlflow.db"
    create_store(f"sqlite:///{path}")
    return path


def set_revision(store: Path, revision: str) -> None:
    with sqlite3.connect(store) as db:
        db.execute("UPDATE alembic_version SET version_num = ?", (revision,))


def an_older_revision() -> str:
    return sorted(mlflow_schema_chain() - {mlflow_schema_head()})[0]


def test_reading_a_store_leaves_this_process_s_sqlite_locks_in_place(store):
    """An open connection of this process keeps the store's write-ahead log alive: another
    process closing its own connection must not find itself the last one and delete the log.
    A read of the file with a descriptor of its own would drop this process's POSIX locks on it
    when closed (SQLite's "How to corrupt", section 2.2), and the open connection then fails
    with "disk I/O error"."""
    uri = f"sqlite:///{store}"
    mine = sqlite3.connect(store)
    mine.execute("SELECT count(*) FROM experiments").fetchone()
    assert Path(f"{store}-wal").exists()
    assert store_problem(uri) is None
    other = ("import sqlite3, sys; db = sqlite3.connect(sys.argv[1]); "
             "db.execute('SELECT count(*) FROM experiments').fetchone(); db.close()")  # fmt: skip
    subprocess.run([sys.executable, "-c", other, str(store)], check=True)
    assert Path(f"{store}-wal").exists()  # the other process was not the last connection
    assert mine.execute("SELECT count(*) FROM experiments").fetchone() == (1,)
    mine.close()


def test_a_store_another_process_is_migrating_is_waited_for(store):
    """A store at an older revision of this MLflow's chain, just written (MLflow is migrating
    a new store this moment): read again until it reaches this MLflow's revision."""
    set_revision(store, an_older_revision())
    done = threading.Timer(1.0, set_revision, (store, mlflow_schema_head()))
    started = time.monotonic()
    done.start()
    try:
        assert store_problem(f"sqlite:///{store}") is None
    finally:
        done.join()
    assert time.monotonic() - started >= 0.9


def test_an_older_store_left_alone_is_refused_at_once(store):
    """The same older revision in a file nothing has written for a minute: another MLflow's
    store, refused without waiting."""
    older = an_older_revision()
    set_revision(store, older)
    for part in store.parent.glob(f"{store.name}*"):
        os.utime(part, (time.time() - 60, time.time() - 60))
    started = time.monotonic()
    problem = store_problem(f"sqlite:///{store}")
    assert problem is not None and f"the store's schema is version {older}" in problem
    assert time.monotonic() - started < 1.0


def test_a_file_that_is_no_database_is_named_by_its_first_bytes(tmp_path):
    path = tmp_path / "notes.db"
    path.write_text("lab notes, not a store")
    problem = store_problem(f"sqlite:///{path}")
    assert problem is not None and "is not an SQLite database (it starts b'lab notes, not " in (
        problem
    )


def test_a_study_opened_while_plain_mlflow_builds_the_store_waits_and_records(tmp_path):
    """A notebook's MlflowClient creates a new store in place (MLflow's migrations, seconds)
    while a study opens it: the study waits until the store is whole, then records into it.
    Replays daizutabi/hydraflow#245 (processes starting at once on a new SQLite store)."""
    from study.record import StudyRecord

    path = tmp_path / "mlflow.db"
    notebook = ("import sys; from mlflow.tracking import MlflowClient; "
                "MlflowClient(sys.argv[1]).search_experiments()")  # fmt: skip
    building = subprocess.Popen([sys.executable, "-c", notebook, f"sqlite:///{path}"])
    try:
        deadline = time.monotonic() + 60
        while not (path.is_file() and path.stat().st_size > 0):
            assert building.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        record = StudyRecord(f"sqlite:///{path}", "opened-meanwhile")
        assert record.client.get_experiment_by_name("opened-meanwhile") is not None
    finally:
        assert building.wait(timeout=60) == 0
