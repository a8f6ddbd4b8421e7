"""The embedded store while other processes read or write it: readers never stall the driver.

MLflow's UI, a notebook or a DB browser read ``mlflow.db`` while a study runs. In SQLite's
default rollback mode a reader's open transaction holds a shared lock that every write must wait
out, and MLflow waits 20 s (its ``PRAGMA busy_timeout``) before it gives up with "database is
locked". So:

- the store is switched to WAL (write-ahead log) once, when it is created or first opened by a
  driver (:func:`settle_journal_mode`); the mode is kept in the file. In WAL mode a reader never
  blocks the writer, nor the writer a reader. WAL needs memory shared between the processes
  that open the file, which network filesystems (NFS, Lustre, GPFS, CIFS…) lack: there the store
  stays in rollback mode, and the driver says so once;
- every call the driver makes on the store waits out another process's lock
  (:class:`PatientClient`): a call that failed on a lock wrote nothing (MLflow's session rolls
  back; SQLite's commit is atomic) and is made again, with a growing pause, for up to
  :func:`lock_wait_s` seconds in all, long enough to outlast a reader of a minute. A retried
  call is idempotent where it matters: a ``log_batch`` that landed its metrics but not its tags
  logs the same metrics again (same key, step, value and timestamp), which MLflow's primary key
  refuses and MLflow then skips, so no row is doubled. A call that still cannot land raises
  :class:`StoreHeldError`, which fails the study (never a trial) with one line naming the store.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from study.terminal import say

# Filesystems where SQLite's WAL cannot work: its index lives in shared memory (the -shm file,
# mapped by every process), which a network filesystem does not keep coherent between hosts
# (https://www.sqlite.org/wal.html, "WAL does not work over a network filesystem"). Names as
# /proc/mounts and ``stat -f -c %T`` give them.
NETWORK_FILESYSTEMS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "smb2", "lustre", "gpfs", "ceph", "fuse.ceph",
    "fuse.cephfs", "glusterfs", "fuse.glusterfs", "beegfs", "panfs", "afs", "9p", "fuse.sshfs",
    "ncpfs", "coda", "ocfs2", "gfs2", "orangefs", "pvfs2", "fuse.s3fs", "fuse.gcsfuse",
})  # fmt: skip
LOCK_MESSAGES = ("database is locked", "database table is locked")


def lock_wait_s() -> float:
    """Seconds a call on the store waits out another process's lock in all
    (``CONTRASTIVE_STORE_LOCK_WAIT_S``, default 120: twice a reader of a minute)."""
    return float(os.environ.get("CONTRASTIVE_STORE_LOCK_WAIT_S", "120"))


# -- where the store is ------------------------------------------------------------------------
def _unescaped(field: str) -> str:
    """A /proc/mounts field as the path it names (space, tab, newline, backslash are octal)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def filesystem_type(path: str | Path, mounts: str | None = None) -> str:
    """The type of the filesystem ``path`` lies on ("ext4", "nfs4", "lustre"…), from the mount
    table ``mounts`` (the text of /proc/mounts; read here when None), or "" when unknown. The
    path need not exist yet: its nearest existing folder is looked up."""
    if mounts is None:
        try:
            mounts = Path("/proc/mounts").read_text()
        except OSError:
            return ""
    where = Path(os.path.realpath(path))
    best, kind = -1, ""
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = Path(_unescaped(fields[1]))
        if (where == point or point in where.parents) and len(point.parts) > best:
            best, kind = len(point.parts), fields[2]  # the longest mount point that holds it
    return kind


def on_network_filesystem(path: str | Path, mounts: str | None = None) -> bool:
    """Whether ``path`` lies on a network filesystem, where SQLite's WAL cannot work."""
    return filesystem_type(path, mounts) in NETWORK_FILESYSTEMS


# -- the journal mode --------------------------------------------------------------------------
def in_wal_mode(store: Path) -> bool:
    """Whether the SQLite file ``store`` is in WAL mode, asked of SQLite, read-only. Never read
    with a file of its own: closing any descriptor of a file drops every POSIX lock this process
    holds on it, and a store whose last connection seems gone to another process has its
    write-ahead log checkpointed and deleted under this process's open connections, which then
    fail with "disk I/O error" (https://www.sqlite.org/howtocorrupt.html, section 2.2)."""
    try:
        read_only = f"{Path(store).resolve().as_uri()}?mode=ro"
        with contextlib.closing(sqlite3.connect(read_only, uri=True)) as db:
            return db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    except sqlite3.Error:
        return False


_SETTLED: set[str] = set()  # the stores this process settled (and said something about)


def settle_journal_mode(store: Path, shown: str | None = None, mounts: str | None = None) -> str:
    """Put the SQLite store ``store`` in WAL mode unless it is on a network filesystem, once per
    process; returns its journal mode ("wal", or "delete" where it stays in rollback mode, which
    is said once, in one line). ``shown`` is how the store is named in what is said, and what
    "once" counts by (a new store is settled under its private name, then under its own);
    ``mounts``: the mount table, as for :func:`filesystem_type`."""
    key = shown or os.path.realpath(store)
    if in_wal_mode(store):
        return "wal"
    network = on_network_filesystem(store, mounts)
    first = key not in _SETTLED
    _SETTLED.add(key)
    if network:
        if first:
            say(f"tracking store {shown or str(store)!r} is on a network filesystem "
                f"({filesystem_type(store, mounts)}), where SQLite's WAL cannot work: it stays in "
                "rollback mode, and a reader holding a transaction (a notebook, the MLflow UI) "
                "delays the study's writes (each waits up to "
                f"{lock_wait_s():g} s)", err=True)  # fmt: skip
        return "delete"
    return _switch_to_wal(store, shown, first)


def _switch_to_wal(store: Path, shown: str | None, first: bool) -> str:
    """Switch ``store`` to WAL; it needs the file to itself for a moment, so a reader holding
    it (in rollback mode) is waited for a few seconds, then the switch is left to the next
    opening (said once)."""
    try:
        with sqlite3.connect(store, timeout=10) as db:
            mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        db.close()
    except sqlite3.Error as err:
        mode = f"unchanged ({err})"
    if mode != "wal" and first:
        say(f"tracking store {shown or str(store)!r} stays in rollback mode for now: "
            f"switching it to WAL failed: {mode}", err=True)  # fmt: skip
    return mode


# -- calls that outlast a lock -----------------------------------------------------------------
class StoreHeldError(RuntimeError):
    """A call on the store could not land in :func:`lock_wait_s` seconds: another process holds
    the store. The study fails with this one line; no trial is failed for it."""


def is_lock_error(err: BaseException | None) -> bool:
    """Whether ``err`` (or what it was raised from) is SQLite's "database is locked"."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if any(text in str(err) for text in LOCK_MESSAGES):
            return True
        err = err.__cause__ or err.__context__
    return False


def held_words(shown: str, waited: float) -> str:
    return (f"tracking store {shown!r} is held by another process: a write to it could not "
            f"land in {waited:g} s (a reader or writer holding a transaction: close it, then "
            "resume the study)")  # fmt: skip


def outlasting_locks(call: Callable[[], Any], shown: str, wait_s: float | None = None) -> Any:
    """``call()``, made again while it fails on another process's lock of the store, with a
    pause that doubles up to 2 s, for ``wait_s`` seconds in all (:func:`lock_wait_s` by
    default); then :class:`StoreHeldError`. Each try itself waits up to MLflow's busy timeout
    (20 s) inside SQLite before it fails."""
    wait_s = lock_wait_s() if wait_s is None else wait_s
    start = time.monotonic()
    pause = 0.05
    while True:
        try:
            return call()
        except Exception as err:
            if not is_lock_error(err):
                raise
            waited = time.monotonic() - start
            if waited + pause > wait_s:
                raise StoreHeldError(held_words(shown, round(waited))) from err
            time.sleep(pause)
            pause = min(pause * 2, 2.0)


class PatientClient:
    """An ``MlflowClient`` of an embedded store whose every public call outlasts another
    process's lock (:func:`outlasting_locks`). Once a call gave up, the store is held: later
    calls (ending the runs) try once, without waiting again (as inside :func:`impatient`)."""

    def __init__(self, client: Any, shown: str) -> None:
        self.__dict__.update(_client=client, _shown=shown, _held=None, _impatient=0)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name.startswith("_") or not callable(attr):
            return attr

        @functools.wraps(attr)
        def patient(*args, **kwargs):
            try:
                once = self._held or self._impatient
                return outlasting_locks(lambda: attr(*args, **kwargs), self._shown,
                                        0.0 if once else None)  # fmt: skip
            except StoreHeldError as err:
                self.__dict__["_held"] = self._held or err
                raise

        return patient


@contextlib.contextmanager
def impatient(client: Any):
    """Calls of ``client`` that try once (SQLite's own wait, MLflow's 20 s), as a driver that
    is being stopped makes them: it ends its runs now, or leaves them to the next run."""
    if not isinstance(client, PatientClient):
        yield
        return
    client.__dict__["_impatient"] += 1
    try:
        yield
    finally:
        client.__dict__["_impatient"] -= 1


def store_held(client: Any) -> StoreHeldError | None:
    """The error with which a call of ``client`` (a :class:`PatientClient`) gave up waiting
    for the store, or None: what failed a study when Ray Tune wraps it in its own error."""
    return client.__dict__.get("_held") if isinstance(client, PatientClient) else None


class _LocksRetried(logging.Filter):
    """MLflow logs every SQLite error with its traceback before raising it; a lock is waited
    out here (or said in one line when it is not), so its traceback is not shown."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and is_lock_error(record.exc_info[1]))


logging.getLogger("mlflow.store.db.utils").addFilter(_LocksRetried())
