"""The record ends first: on a stop signal the runs of the open study are ended KILLED at once,
by a thread of their own, before anything waits on Ray, on Tune or on another thread.

Why: Python runs a signal's handler in the main thread, between two bytecodes. A driver's main
thread spends its time inside C calls (Ray's core waiting on its GCS, Tune's event loop): the
handler, and the KeyboardInterrupt that ends the runs, wait for the call to return, which after
a SIGTERM to the job's process group (Ray's GCS dead with it) takes seconds or never happens.
A scheduler's SIGKILL comes a grace period later (Slurm's KillWait: 30 s by default, often a few
seconds), and the runs were left RUNNING. Python's C-level handler also writes the signal's
number to the wakeup file descriptor (:func:`signal.set_wakeup_fd`) the moment the signal
arrives, whatever the main thread does: a thread blocked reading that pipe ends the runs
directly, through its own connection to the store, in one transaction for an embedded store.

After a stop, the driver's own writes that set a run's status (:func:`status_write`) do nothing,
and no new run is created (:class:`StopRequested`): a trial that reports after the stop cannot
turn a KILLED run back to RUNNING or FINISHED. A trial whose end was recorded before the stop
stays FINISHED: only runs RUNNING or SCHEDULED are ended.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sqlite3
import threading
import time

# the signals that stop a study; each is also handled in the main thread (study.stop_signals)
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)
LOCK_WAIT_S = 0.5  # how long the stop waits for a status write in flight to land

_stopped = threading.Event()  # set the moment a stop signal arrives
_writing = threading.RLock()  # held by a status write; the stop waits LOCK_WAIT_S at most for it
_open: list = []  # the records (study.record.StudyRecord) whose unfinished runs a stop ends
_pipe: list[int] = []  # the wakeup pipe's (read, write) ends, made once per process
_received: list[int] = []  # the stop signals the wakeup pipe carried, in order


class StopRequested(KeyboardInterrupt):
    """A write that would create a run after the study was stopped: raised as the interrupt every
    stop shares (the signal's own handler raises it in the main thread too)."""


def stopped() -> bool:
    """Whether a stop signal has arrived in this process."""
    return _stopped.is_set()


def first_stop_signal() -> int | None:
    """The stop signal the wakeup pipe carried first (None when none has)."""
    return _received[0] if _received else None


def watch_stop_signals() -> None:
    """Have every stop signal this process handles in Python end the open study's runs at once
    (see the module docstring). Called from the main thread, after each change of the signal
    handlers (Ray's ``init`` and ``shutdown`` set their own): the wakeup fd is set again, the
    listening thread started once."""
    if threading.current_thread() is not threading.main_thread():
        return
    if not _pipe:
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)  # Python's C handler must never block on it
        _pipe.extend((read_end, write_end))
        threading.Thread(target=_listen, args=(read_end,), name="study-stop-record",
                         daemon=True).start()  # fmt: skip
    signal.set_wakeup_fd(_pipe[1], warn_on_full_buffer=False)


def new_study() -> None:
    """A study begins in this process: a stop of an earlier one (a test's, in one process) is
    forgotten, and no record is open."""
    _stopped.clear()
    _open.clear()
    _received.clear()


def record_opened(record) -> None:
    """``record``'s unfinished runs are ended by a stop from now on; a stop that came before it
    was opened ends them at once."""
    _open.append(record)
    if stopped():
        end_open_runs()


def record_closed(record) -> None:
    with contextlib.suppress(ValueError):
        _open.remove(record)


def _listen(read_end: int) -> None:
    while True:
        try:
            received = os.read(read_end, 64)
        except InterruptedError:
            continue
        if not received:
            return
        stops = [signum for signum in received if signum in STOP_SIGNALS]
        if stops:
            _received.extend(stops)
            stop_now()


def stop_now() -> None:
    """The stop itself: no status write from now on; each open study's unfinished runs ended
    KILLED, after the status write in flight (if any) has landed or LOCK_WAIT_S has passed."""
    _stopped.set()
    got = _writing.acquire(timeout=LOCK_WAIT_S)
    try:
        end_open_runs()
    finally:
        if got:
            _writing.release()


def end_open_runs() -> None:
    """End KILLED every run RUNNING or SCHEDULED of each open study (trials and parents: this
    driver holds the study's lease, so each such run is its own). Never raises: the driver's
    ordinary stop path ends them again."""
    for record in list(_open):
        with contextlib.suppress(Exception):
            end_unfinished_runs(record.uri, record.experiment_id)


def end_unfinished_runs(uri: str, experiment_id: str) -> list[str]:
    """End KILLED the runs of experiment ``experiment_id`` left RUNNING or SCHEDULED: in one
    transaction of its own connection for an embedded store (atomic: a SIGKILL a moment later
    leaves all of them ended or none), through MLflow's client otherwise. Returns their ids."""
    if uri.startswith("sqlite:///"):
        with contextlib.suppress(sqlite3.Error):
            return _end_in_sqlite(uri.removeprefix("sqlite:///").split("?", 1)[0], experiment_id)
    from mlflow.tracking import MlflowClient

    from analysis.reading.record import PARENT, TRIAL, study_runs

    client = MlflowClient(uri)
    ended = []
    for role in (TRIAL, PARENT):
        for run in study_runs(client, experiment_id, role):
            if run.info.status in ("RUNNING", "SCHEDULED"):
                client.set_terminated(run.info.run_id, "KILLED")
                ended.append(run.info.run_id)
    return ended


def _end_in_sqlite(path: str, experiment_id: str) -> list[str]:
    # the same change as MLflow's set_terminated (status and end time), for all runs at once
    unfinished = ("SELECT run_uuid FROM runs WHERE experiment_id = ? AND lifecycle_stage = "
                  "'active' AND status IN ('RUNNING', 'SCHEDULED')")  # fmt: skip
    connection = sqlite3.connect(path, timeout=5, isolation_level=None)
    try:
        connection.execute("BEGIN IMMEDIATE")
        ids = [row[0] for row in connection.execute(unfinished, (int(experiment_id),))]
        connection.execute(
            f"UPDATE runs SET status = 'KILLED', end_time = ? WHERE run_uuid IN ({unfinished})",
            (int(time.time() * 1000), int(experiment_id)),
        )
        connection.execute("COMMIT")
        return ids
    finally:
        connection.close()


def status_write(method):
    """A record's write that sets a run's status (or creates a run): done under the lock the
    stop waits on, and not at all after a stop (one that creates a run raises
    :class:`StopRequested`, as it cannot return one). A stop that came while it was blocked
    past LOCK_WAIT_S is made good as it ends: the runs are ended again."""

    @functools.wraps(method)
    def guarded(*args, **kwargs):
        with _writing:
            try:
                if stopped():
                    if getattr(method, "creates_run", False):
                        raise StopRequested("stopped")
                    return None
                return method(*args, **kwargs)
            finally:
                if stopped():
                    end_open_runs()

    return guarded


def creates_run(method):
    """Marks a write that creates a run (see :func:`status_write`)."""
    method.creates_run = True
    return method
