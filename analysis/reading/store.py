"""Where a study's record is and whether it can be read: the default store, whether an embedded
store exists, what is wrong with a file named as one (without writing to it or importing
MLflow), the studies a store holds, and what to say when a name is not among them. Light on
purpose: the commands that only read import this, not pandas or MLflow.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shlex
import sqlite3
import sys
import time
from pathlib import Path

from analysis.internals import mlflow_schema_revision
from analysis.reading.sqlite_reader import SQLiteReader

STORE_FILE = "mlflow.db"


# What ends the upward search for a store: the root of the project the folder lies in.
PROJECT_ROOT_MARKERS = ("pyproject.toml", ".git")


def default_store(workdir: str | Path | None = None) -> str:
    """The MLflow store used when none is named, by the CLI and by every reader here:
    ``MLFLOW_TRACKING_URI`` when it is set; else the ``mlflow.db`` of ``workdir`` (the working
    folder) or of the nearest folder above it that has one, up to the enclosing project's root
    (a folder with ``pyproject.toml`` or ``.git``), so a notebook opened in ``analysis/notebooks``
    reads the repository's store and a stray ``mlflow.db`` above the project is never picked up;
    else ``workdir/mlflow.db``, which need not exist (reading it raises LookupError naming it;
    ``study run`` creates it)."""
    named = os.environ.get("MLFLOW_TRACKING_URI", "").strip()
    if named:
        return named
    here = Path(workdir or os.getcwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / STORE_FILE).is_file():
            return f"sqlite:///{folder / STORE_FILE}"
        if any((folder / marker).exists() for marker in PROJECT_ROOT_MARKERS):
            break
    return f"sqlite:///{here / STORE_FILE}"


def store_exists(uri: str) -> bool:
    """False for an embedded store whose file is not there yet, or is empty (an empty SQLite file
    holds nothing, and MLflow would write its tables into it on opening); servers always exist."""
    if uri.startswith("sqlite:///"):
        path = Path(uri.removeprefix("sqlite:///"))
        return path.is_file() and path.stat().st_size > 0
    return True


SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file


def store_problem(uri: str) -> str | None:
    """Why an embedded store's file cannot be opened as this MLflow's store, in words; None when
    it can, when it is absent or empty (a new store), and for a server. Read without writing:
    MLflow would write its tables into an SQLite file of something else (an Optuna storage, say)
    even to read it, and stops with a traceback on another MLflow version's schema."""
    if not uri.startswith("sqlite:///"):
        return None
    path = Path(uri.removeprefix("sqlite:///"))
    if path.is_dir():
        inside = f"sqlite:///{path / 'mlflow.db'}"
        return f"{str(path)!r} is a folder; name the store's file in it, e.g. {inside}"
    if not store_exists(uri) and not _born_elsewhere(path):
        return None
    return _schema_problem(path)


def _born_elsewhere(path: Path, wait_s: float = 30.0, within_s: float = 3.0) -> bool:
    """Whether the empty file at ``path`` became a store another process was creating (MLflow
    opens the file, then writes its tables into it): waited for while the file stays empty and
    was made in the last ``within_s`` seconds."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            found = path.stat()
        except OSError:
            return False
        if found.st_size > 0:
            return True
        if time.time() - found.st_mtime >= within_s:
            return False
        time.sleep(0.1)
    return False


def _not_a_database(path: Path) -> str:
    """Why ``path``, which SQLite says is no database, is refused, naming its first bytes. Read
    with a file of its own only now: closing any descriptor of a file drops every POSIX lock this
    process holds on it, so a store that an open SQLite connection of this process uses is read
    only through SQLite (https://www.sqlite.org/howtocorrupt.html, section 2.2)."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_HEADER))
    except OSError as err:
        return f"cannot read {str(path)!r} ({err})"
    return (f"{str(path)!r} is not an SQLite database (it starts {head!r}); name an MLflow "
            "store's file, or a new file's, which the study will create")  # fmt: skip


def _read_schema(path: Path) -> tuple[set[str], str | None]:
    """The store's tables and its schema revision (None without one), read through SQLite alone
    and without writing."""
    read_only = f"{path.resolve().as_uri()}?mode=ro"
    with contextlib.closing(sqlite3.connect(read_only, uri=True)) as db:
        listed = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        tables = {row[0] for row in listed if not row[0].startswith("sqlite_")}
        found = None
        if "alembic_version" in tables:
            found = db.execute("SELECT version_num FROM alembic_version").fetchone()
    return tables, found[0] if found else None


def _being_created(path: Path, tables: set[str], version: str | None,
                   within_s: float = 3.0) -> bool:  # fmt: skip
    """Whether the store is being created this moment by another process (a second driver
    started beside the first on a new store): MLflow makes its first tables, then migrates them
    through its chain of revisions. So: MLflow's first tables without a revision yet, or an
    older revision of this MLflow's own chain, in a file (or write-ahead log) written in the
    last ``within_s`` seconds."""
    if version is None and "experiments" not in tables:
        return False
    if version is not None and version not in mlflow_schema_chain():
        return False
    now = time.time()
    for part in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-journal")):
        with contextlib.suppress(OSError):
            if now - part.stat().st_mtime < within_s:
                return True
    return False


def _schema_problem(path: Path, wait_s: float = 60.0) -> str | None:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            tables, version = _read_schema(path)
        except sqlite3.DatabaseError as err:
            if "not a database" in str(err):
                return _not_a_database(path)
            return f"cannot read {str(path)!r} ({err})"
        except sqlite3.Error as err:
            return f"cannot read {str(path)!r} ({err})"
        if version == mlflow_schema_head() or time.monotonic() > deadline:
            break
        if not _being_created(path, tables, version):
            break
        time.sleep(0.3)  # another driver is writing the new store's tables: wait them out
    if not {"experiments", "runs", "alembic_version"} <= tables:
        some = ", ".join(sorted(tables)[:6]) or "none"
        return (f"{str(path)!r} is an SQLite database but not an MLflow store (its tables: "
                f"{some}); name an MLflow store's file, or a new file's, which the study will "
                "create")  # fmt: skip
    expected = mlflow_schema_head()
    if version == expected:
        return None
    from importlib.metadata import version as installed

    here = Path(sys.executable).with_name("mlflow")  # this environment's, as the CLI names it
    tool = str(here) if here.is_file() else "mlflow"
    upgrade = f"{shlex.quote(tool)} db upgrade {shlex.quote(f'sqlite:///{path}')}"
    return (f"the store's schema is version {version}, and MLflow {installed('mlflow')} here "
            f"reads {expected}: it was written by another MLflow. Back it up, then upgrade it "
            f"({upgrade}), or use the MLflow that wrote it")  # fmt: skip


@functools.cache
def _migration_revisions() -> tuple[frozenset[str], frozenset[str]]:
    """The revisions MLflow's migration scripts name, and those another revises, read from the
    scripts without importing MLflow (2–4 s)."""
    import importlib.util

    spec = importlib.util.find_spec("mlflow")
    versions = Path(spec.origin).parent / "store" / "db_migrations" / "versions"
    revisions, revised = set(), set()
    pattern = re.compile(r'^(down_revision|revision)\s*=\s*"([0-9a-f]+)"', re.M)
    for script in versions.glob("*.py"):
        for kind, revision in pattern.findall(script.read_text()):
            (revisions if kind == "revision" else revised).add(revision)
    return frozenset(revisions), frozenset(revised)


def mlflow_schema_chain() -> frozenset[str]:
    """Every schema revision the installed MLflow's migrations pass through."""
    return _migration_revisions()[0]


@functools.cache
def mlflow_schema_head() -> str:
    """The schema revision the installed MLflow reads and writes: the one revision no other
    revises. MLflow's own answer when the scripts do not name exactly one."""
    revisions, revised = _migration_revisions()
    heads = revisions - revised
    if len(heads) == 1:
        return next(iter(heads))
    return mlflow_schema_revision()


def local_folder(uri: str | None) -> Path | None:
    """The folder an artifact URI names on this machine (a path, or ``file:`` on this host),
    else None (a bucket, a tracking server's proxy, another host, a relative path)."""
    from urllib.parse import unquote, urlparse

    if not uri:
        return None
    parsed = urlparse(uri)
    if parsed.scheme == "file" and parsed.netloc in ("", "localhost"):
        return Path(unquote(parsed.path))
    return Path(uri) if not parsed.scheme and Path(uri).is_absolute() else None


def read_client(uri: str):
    """The cheapest client that reads ``uri``: :class:`SQLiteReader` for an embedded store this
    MLflow reads (no MLflow import), else ``MlflowClient``. A file that is no store this MLflow
    reads is a ValueError saying why (:func:`store_problem`): MLflow's client
    would write its tables into it, or stop with a traceback."""
    if problem := store_problem(uri):
        raise ValueError(f"tracking store {uri}: {problem}")
    if uri.startswith("sqlite:///") and store_exists(uri):
        with contextlib.suppress(sqlite3.Error):
            return SQLiteReader(uri)
    from mlflow.tracking import MlflowClient

    return MlflowClient(uri)
