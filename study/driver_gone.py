"""Runs whose driver is gone: a run RUNNING or SCHEDULED in the store is running only while the
driver that holds the study's lease (:mod:`study.lease`) is alive. A driver SIGKILLed outright
(the OOM killer, a scheduler with no grace, a lost node) leaves its runs RUNNING; what reads the
record (``study status``, ``list``, ``report``) says "driver gone (pid N on HOST)" for them,
never "running", with the command that repairs and resumes the study: the next ``study run``
ends them KILLED (:meth:`study.record.StudyRecord.end_orphans`) before it starts anything."""

from __future__ import annotations

import time
from dataclasses import dataclass

from analysis.reading.record import PARENT, TRIAL, study_runs
from study.lease import LEASE_TAG, Holder, holder_alive

# the command that resumes the study, as its last driver was started (credentials shown ***):
# an experiment tag, written when the driver opens the study's record
RUN_COMMAND_TAG = "study.run_command"
UNFINISHED = ("RUNNING", "SCHEDULED")


@dataclass(frozen=True)
class DriverState:
    """The study's unfinished runs (their ids) and the driver its lease names."""

    study: str
    unfinished: tuple[str, ...]
    holder: Holder | None
    alive: bool
    command: str

    @property
    def gone(self) -> bool:
        """Runs are left unfinished and no live driver holds the study."""
        return bool(self.unfinished) and not self.alive

    def words(self) -> str:
        """``driver gone (pid N on HOST)``, or who runs the study."""
        if self.holder is None:
            return "driver gone (no driver holds the study's lease)" if self.gone else "no driver"
        who = f"pid {self.holder.pid} on {self.holder.host}"
        return f"driver gone ({who})" if self.gone else f"driver {who}"

    def note(self) -> str:
        """The line that tells a reader the unfinished runs are not running, and how to resume."""
        n = len(self.unfinished)
        return (f"study {self.study}: {self.words()}: {n} unfinished run{'s' * (n != 1)} of a "
                "driver that was killed; nothing of the study runs now. "
                "Repair and resume it (those runs are ended KILLED first, finished trials kept, "
                f"the others continue from their checkpoints): {self.command}")  # fmt: skip


def driver_state(client, experiment_id: str, study: str, now: float | None = None) -> DriverState:
    """The state of study ``study``'s driver, from its experiment (the lease's tag, the resume
    command's tag) and its runs, through any client that reads (MLflow's or the SQLite reader)."""
    tags = client.get_experiment(experiment_id).tags
    holder = Holder.from_text(tags.get(LEASE_TAG))
    unfinished = tuple(
        run.info.run_id
        for role in (TRIAL, PARENT)
        for run in study_runs(client, experiment_id, role)
        if run.info.status in UNFINISHED
    )
    alive = holder is not None and holder_alive(holder, time.time() if now is None else now)
    command = tags.get(RUN_COMMAND_TAG) or f"study run <its study file> (study {study})"
    return DriverState(study, unfinished, holder, alive, command)


def gone_words(client, experiment_id: str, study: str) -> str | None:
    """The note of a study whose driver is gone (:meth:`DriverState.note`); None otherwise."""
    state = driver_state(client, experiment_id, study)
    return state.note() if state.gone else None
