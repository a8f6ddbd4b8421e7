"""The driver's stop signals and its watchdogs: SIGINT, SIGTERM and SIGHUP stop a study as Ctrl-C
does; a watchdog ends the open study's runs KILLED should the driver's own cleanup not (a stop
signal's grace period, a cluster whose head stopped answering); and the driver's lease, asked
before every write (:func:`still_held`). The runs ended at the moment a signal arrives, by a
thread of their own, are :mod:`study.stopping`'s.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading

from study.cluster import LOST_AFTER_S, watch_cluster
from study.internals.python import exit_now
from study.lease import DriverLease
from study.stopping import STOP_SIGNALS, first_stop_signal, watch_stop_signals
from study.terminal import say


class StudyInterruptedError(RuntimeError):
    """``study run`` was stopped by a signal (SIGINT: Ctrl-C; SIGTERM: a scheduler, a spot
    instance, ``kill``; SIGHUP: a closed terminal): its trials stopped, every run of the study
    ended KILLED, nothing partial presented as its result; the message says how to resume. The
    CLI exits 128 + the signal's number with it (130, 143, 129), as a shell reports it."""

    def __init__(self, message: str, signum: int = signal.SIGINT) -> None:
        super().__init__(message)
        self.signum = int(signum)


# The signals that stop a study the same way (STOP_SIGNALS: SIGINT, SIGTERM, SIGHUP): every one
# of them ends its runs KILLED, first of all and at once (study.stopping). A cluster scheduler
# (Slurm, Kubernetes, a spot instance) stops a job with SIGTERM, then SIGKILL after a grace
# period; Ray's ray.init sets SIGTERM to sys.exit, so the handlers are set again after it.
_stopped_by: list[int] = []  # the signal that stopped this process's study, once one has


def _stop(signum: int, frame) -> None:
    """A stop signal in the main thread: remembered, the watchdog started, then raised as the
    interrupt every stop shares (the runs are ended where KeyboardInterrupt is caught)."""
    _stopped_by.append(signum)
    _watchdog(signum)
    raise KeyboardInterrupt(signal.Signals(signum).name)


# What the watchdog ends should the driver's own cleanup not: (record, parent run id, the
# message and resume command) of the study this process runs, set once it is opened
_open_study: list[tuple] = []
_cleaned = threading.Event()  # set once the runs of a stopped study are ended
STOP_GRACE_S = float(os.environ.get("CONTRASTIVE_STOP_GRACE_S", "20"))


def _watchdog(signum: int) -> None:
    """After a stop signal, give the driver :data:`STOP_GRACE_S` seconds to end its runs
    itself; if it has not (a SIGTERM to the job's process group kills Ray's GCS too, and the
    driver's Tune loop then waits on it until Ray's core exits the process with status 1),
    end them KILLED from here, say how to resume, and exit 128 + the signal. Well inside the
    grace period of Slurm (KillWait, 30 s) and Kubernetes (30 s) before their SIGKILL."""
    if _cleaned.is_set() or any(t.name == "study-stop-watchdog" for t in threading.enumerate()):
        return

    def watch() -> None:
        if _cleaned.wait(STOP_GRACE_S) or not _open_study:
            return
        record, parent_id, message = _open_study[-1]
        still_held()  # a driver whose lease was taken over ends no run: it exits here
        with contextlib.suppress(Exception):
            record.end_unfinished(parent_id, "KILLED")
            say(f"interrupted: {message(signum)}", err=True, flush=True)
        exit_now(128 + signum)

    threading.Thread(target=watch, name="study-stop-watchdog", daemon=True).start()


# The lease of the study this process drives, while it is held: every write to the record asks
# it first (:func:`still_held`), so that a driver woken after another driver took its lease
# over writes nothing more
_driver_lease: list[DriverLease] = []


def still_held() -> None:
    """Return only while this driver holds its study's lease: a driver whose lease another
    driver took over says so and exits (:func:`lease_lost`), before any write of its own."""
    if _driver_lease:
        _driver_lease[-1].ensure_held()


def lease_lost(message: str) -> None:
    """Another driver holds the study now (this one was suspended or cut off past the lease's
    timeout): say who, and exit 1 at once, from whichever thread found it. Nothing is ended or
    written: the runs are the other driver's (the stop watchdog is told so too). Ray's
    processes end with this one (their parent-death signal)."""
    _cleaned.set()
    say(message, err=True, flush=True)
    exit_now(1)


@contextlib.contextmanager
def held(lease: DriverLease):
    """Make ``lease``, entered, the one :func:`still_held` asks for the block."""
    _driver_lease.append(lease)
    try:
        yield
    finally:
        _driver_lease.remove(lease)


def study_opened(record, parent_id: str, message) -> None:
    """The study this process runs is open: ``record``'s unfinished runs under ``parent_id`` are
    what a watchdog ends, saying ``message(signum)``."""
    _open_study.append((record, parent_id, message))


def study_cleaned() -> None:
    """The runs of a stopped study are ended: the watchdog has nothing left to do."""
    _cleaned.set()


def stopped_by() -> int:
    """The signal that stopped the study (SIGINT when none was seen: a KeyboardInterrupt)."""
    return _stopped_by[-1] if _stopped_by else int(first_stop_signal() or signal.SIGINT)


_holding: list[bool] = [False]  # between hold_sigint and release_sigint: stops are ignored


def catch_stop_signals() -> None:
    """SIGINT, SIGTERM and SIGHUP stop the study as Ctrl-C does (main thread only), the open
    study's runs ended KILLED first (:func:`study.stopping.watch_stop_signals`); while the
    cleanup after a stop holds them (:func:`hold_sigint`), they stay ignored."""
    if threading.current_thread() is threading.main_thread():
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN if _holding[0] else _stop)
        watch_stop_signals()


@contextlib.contextmanager
def sigint_ignored():
    """Every stop signal ignored for the block (cleanup that must finish: ending runs); in the
    main thread only, where Python handles signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def hold_sigint() -> bool:
    """Ignore further stop signals from now until :func:`release_sigint` (main thread only):
    the cleanup after an interrupt must finish. Returns True."""
    if threading.current_thread() is threading.main_thread():
        _holding[0] = True
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)
    return True


def release_sigint() -> None:
    if threading.current_thread() is threading.main_thread():
        _holding[0] = False
    catch_stop_signals()


@contextlib.contextmanager
def cluster_watched(address: str | None, spec, rerun: str):
    """While the trials run on a cluster joined at ``address``: should its head stop answering,
    every unfinished run of the study is ended KILLED, the driver says so with the command that
    resumes it, and exits 1, as a stop signal's watchdog does, in seconds rather than Ray's 60 s
    wait, after which Ray's core would end the process with every run left RUNNING."""
    if not address:
        yield
        return

    def lost() -> None:
        if _cleaned.is_set() or not _open_study:
            return
        record, parent_id, _ = _open_study[-1]
        with contextlib.suppress(Exception):
            record.end_unfinished(parent_id, "KILLED")
        _cleaned.set()
        say(_cluster_lost_words(spec, address, rerun), err=True, flush=True)
        exit_now(1)

    stop = watch_cluster(address, lost)
    try:
        yield
    finally:
        stop.set()


def _cluster_lost_words(spec, address: str, rerun: str) -> str:
    return (
        f"study {spec.study!r} stopped: the Ray cluster at {address} stopped answering mid-study "
        f"(its head is gone for {LOST_AFTER_S:g} s); every run of it that was not finished "
        "ended KILLED (none is left RUNNING). Resume it once the cluster is back (finished "
        f"trials are kept, the others continue from their checkpoints): {rerun}"
    )
