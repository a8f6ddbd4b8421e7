"""Is a study still running? One answer, read from its record, for every reader: the ``study``
commands (report, export, next, augment, power, status) and the notebook's ``analyse``.

A report of a study whose trials are still running read as a finished one: with 1 of 4 trials
done it said "Next: … did not vary over this design: widen the factor ranges", and showed a
running trial's partial metrics as its result. So every reader first asks :func:`study_state`:

- ``finished``: no run of the study is unfinished: every trial's run has ended (FINISHED, FAILED
  or KILLED) and, while the parent run is open, every trial of its design has a run;
- ``running``: some are unfinished, and the driver holding the study's lease is alive;
- ``driver gone``: some are unfinished (left RUNNING or SCHEDULED), and no live driver holds the
  lease: it was killed (SIGKILL, a lost node) before it could end them.

The lease is the experiment's tag ``study.driver`` (``study.lease`` writes it: the holder's host,
pid and last heartbeat, JSON; "" once let go). This module cannot import ``study`` (imports run
study -> analysis), so it reads the tag itself, and judges the holder as the lease does: alive
when its process is on this host and alive, or, on another host, when it beat within the
lease's timeout.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass
from typing import Any

LEASE_TAG = "study.driver"  # study.lease.LEASE_TAG: the experiment's tag holding the lease
# the storage a study ran with (its ``--storage``, a folder's absolute path or a URI), on its
# parent run: where its results and report are, whatever folder a later command runs in
STORAGE_TAG = "study.storage"
UNFINISHED = ("RUNNING", "SCHEDULED")  # a run's status while its trial has not ended
FINISHED, RUNNING, DRIVER_GONE = "finished", "running", "driver gone"


@dataclass(frozen=True)
class StudyState:
    """Where a study stands (see the module docstring). ``not_finished``: its trials not ended
    (unfinished runs, and trials of an open parent's design with no run yet) of ``total``;
    ``pid`` and ``host``: the driver named by the lease (None when the lease names none)."""

    kind: str
    total: int
    not_finished: int
    pid: int | None = None
    host: str | None = None

    @property
    def settled(self) -> bool:
        """Whether no trial is left to finish: what the study's findings rest on is final."""
        return self.kind == FINISHED

    def driver(self) -> str:
        """``pid N on HOST``, or "" when the lease names no driver."""
        return f"pid {self.pid} on {self.host}" if self.pid is not None else ""

    def words(self) -> str:
        """``3 of 4 trials not finished; driver pid N on HOST`` (or ``driver gone (pid N on
        HOST)``); "" for a finished study."""
        if self.settled:
            return ""
        trials = f"{self.not_finished} of {self.total} trials not finished"
        if self.kind == RUNNING:
            return f"{trials}; driver {self.driver() or 'alive'}"
        return f"{trials}; driver gone" + (f" ({self.driver()})" if self.pid is not None else "")

    def not_final(self) -> str:
        """What a report of a study not finished says first (its headline's line); "" for a
        finished study."""
        if self.settled:
            return ""
        rest = ("the findings below rest on the trials finished so far and are not final; no "
                "next step is given until every trial has finished")  # fmt: skip
        if self.kind == RUNNING:
            return f"Still running: {self.words()}: {rest}."
        return (f"Not finished: {self.words()}: {rest}; run the study again to end its "
                "unfinished runs and resume them.")  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> StudyState | None:
        if not data:
            return None
        try:
            return cls(str(data["kind"]), int(data["total"]), int(data["not_finished"]),
                       data.get("pid"), data.get("host"))  # fmt: skip
        except (KeyError, TypeError, ValueError):
            return None


def study_state(record) -> StudyState:
    """Where the study of ``record`` (a ``study.record.StudyRecord``, or anything with its
    ``client``, ``experiment_id``, ``parent()`` and ``trial_runs()``) stands."""
    tags = record.client.get_experiment(record.experiment_id).tags or {}
    return state_of(tags, record.parent(), record.trial_runs())


def state_of(experiment_tags: dict[str, str], parent, trials: dict, now: float | None = None
             ) -> StudyState:  # fmt: skip
    """Where a study stands, from its experiment's tags, its (newest) parent run and its trial
    runs (trial key -> run)."""
    params = parent.data.params if parent is not None else {}
    planned = int(params.get("trials") or 0)
    open_parent = parent is not None and parent.info.status in UNFINISHED
    ended = sum(1 for run in trials.values() if run.info.status not in UNFINISHED)
    total = max(planned, len(trials))
    not_finished = (total if open_parent else len(trials)) - ended
    if not_finished <= 0:
        return StudyState(FINISHED, total, 0)
    holder = _holder(experiment_tags.get(LEASE_TAG))
    pid, host = (holder["pid"], holder["host"]) if holder else (None, None)
    alive = holder is not None and holder_alive(holder, time.time() if now is None else now)
    return StudyState(RUNNING if alive else DRIVER_GONE, total, not_finished, pid, host)


def _holder(text: str | None) -> dict[str, Any] | None:
    """The lease's holder (host, pid, beat), or None when the tag names none."""
    if not text:
        return None
    try:
        data = json.loads(text)
        return {"host": str(data["host"]), "pid": int(data["pid"]), "beat": float(data["beat"]),
                "start": data.get("start")}  # fmt: skip
    except (ValueError, KeyError, TypeError):
        return None


def holder_alive(holder: dict[str, Any], now: float) -> bool:
    """The one rule of whether a lease's driver still runs (``study.lease`` reads it too): a
    holder on this host while its process lives (its pid alive and, where the lease records
    when that process started, started then: a reused pid is another process); on another host,
    while it beats within the lease's timeout (``CONTRASTIVE_LEASE_TIMEOUT_S``, default 60)."""
    if holder["host"] == socket.gethostname():
        start, now_start = holder.get("start"), process_start(int(holder["pid"]))
        same = start is None or now_start is None or now_start == start
        return pid_alive(holder["pid"]) and same
    timeout = float(os.environ.get("CONTRASTIVE_LEASE_TIMEOUT_S", "60"))
    return now - holder["beat"] < timeout


def pid_alive(pid: int) -> bool:
    """Whether a process of this host is alive (another user's counts)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def recorded_storage(parent) -> str | None:
    """The storage the study ran with (its parent run's ``study.storage``), or None for a study
    recorded before it was kept."""
    if parent is None:
        return None
    return parent.data.tags.get(STORAGE_TAG) or None


def process_start(pid: int) -> int | None:
    """When process ``pid`` of this host started (``/proc/<pid>/stat``'s 22nd field, clock ticks
    since boot), or None when there is no such process (or no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            data = stat.read(4096)
    except OSError:
        return None
    fields = data.rpartition(b")")[2].split()  # the name, in parentheses, may hold ')'
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None
