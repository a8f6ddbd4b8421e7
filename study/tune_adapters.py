"""Ray Tune's view of a study: :class:`ScheduleSearcher` hands Tune the design's schedule, trial by
trial, and :class:`MlflowRecorder` writes what each trial reports into its child run. Both are
Tune's own base classes, so this module imports Ray Tune as it is imported: only the launch
imports it (:func:`study.runner.launch`), never a command that runs no trial.
"""

from __future__ import annotations

from pathlib import Path

from ray.tune import Callback
from ray.tune.search import Searcher

from search_spaces.designs import Schedule
from search_spaces.spec import Resources
from study.record import StudyRecord
from study.stop_signals import still_held
from study.storage import Storage, check_writable
from study.terminal import say
from trainables.checkpoints import RESUME_NOTE
from trainables.remote import redacted


def trial_key(trial) -> str:
    return trial.config["plan"]["key"]


class MlflowRecorder(Callback):
    """Writes each trial's evaluations into its one child run, skipping replayed steps."""

    def __init__(
        self, record: StudyRecord, parent_id: str, run_ids: dict[str, str], new_run,
        study: Storage,
    ) -> None:  # fmt: skip
        self.record, self.parent_id, self.run_ids, self.new_run = (
            record, parent_id, run_ids, new_run,
        )  # fmt: skip
        self.study = study
        self.checks: dict[str, str] = {}  # the self-checks recorded on the parent so far
        self.logged: dict[str, int] = {}
        self.finished: set[str] = set()
        self.resume_notes: dict[str, str] = {}  # what each trial said of its checkpoints

    def _run_id(self, trial) -> str:
        still_held()  # every callback writes to the record next: only while the lease holds
        key = trial_key(trial)
        if key not in self.run_ids:  # adaptive proposals exist only from now on
            self.run_ids[key] = self.new_run(trial.config["plan"])
        return self.run_ids[key]

    def on_trial_start(self, iteration, trials, trial, **info):
        # also called when Ray restarts a trial after a failure: one more attempt, same run
        run_id = self._run_id(trial)
        self.record.begin_attempt(run_id)
        self.logged[trial_key(trial)] = self.record.last_logged_step(run_id)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        key, run_id = trial_key(trial), self._run_id(trial)
        self._resume_noted(key, run_id, result.get(RESUME_NOTE))
        if result.get("final"):
            summary = {**result, "status": result.get("trial_status", "finished")}
            self.record.finish_trial(run_id, summary)
            self.record.record_checks(self.parent_id, summary, self.checks)
            self.finished.add(key)
            return
        step = int(result["examples_seen"])
        if step <= self.logged.get(key, -1):
            return  # replayed after a resume: this step is already in the run
        self.record.log_evaluation(run_id, result, step)
        self.logged[key] = step

    def _resume_noted(self, key: str, run_id: str, note: str | None) -> None:
        """A checkpoint the trial could not load and set aside, and where it resumed
        instead: said once on the terminal, and kept on its run."""
        if not note or self.resume_notes.get(key) == note:
            return
        self.resume_notes[key] = note
        say(f"trial {key}: {note}", err=True, flush=True)
        self.record.note_resume(run_id, note)

    def on_trial_recover(self, iteration, trials, trial, **info):
        storage_lost(self.study)  # retrying against storage that is gone helps nobody

    def on_trial_error(self, iteration, trials, trial, **info):
        still_held()
        storage_lost(self.study)
        message = ""
        error_file = getattr(trial, "error_file", None)
        if error_file and Path(error_file).exists():
            message = Path(error_file).read_text()[-4000:]
        self.record.fail_trial(self._run_id(trial), message or "trial failed")


class StorageLostError(RuntimeError):
    """The study's storage cannot be written any more (a deleted bucket, lost credentials)."""


def lost_words(study: Storage) -> str:
    return (f"--storage {redacted(study.uri)}: the study's storage cannot be written any more "
            "(was the bucket or folder deleted, or its credentials lost?); the trials keep their "
            "checkpoints and results there, so the study stopped instead of retrying against "
            "it. Restore the storage and run the study again to resume it")  # fmt: skip


def storage_lost(study: Storage) -> None:
    """Raise StorageLostError, naming ``--storage``, when a write-read-delete there fails."""
    try:
        check_writable(study)
    except OSError as err:
        raise StorageLostError(f"{lost_words(study)} ({err})") from None


class ScheduleSearcher(Searcher):
    """Ray Tune's view of a design's schedule: each suggestion is the schedule's next trial,
    each completed trial's last result goes back to it (adaptive designs learn from it)."""

    def __init__(self, schedule: Schedule, trials: Storage, resources: Resources) -> None:
        super().__init__()
        self.schedule, self.trials, self.resources = schedule, trials, resources
        self.keys: dict[str, str] = {}

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        return True

    def suggest(self, trial_id: str):
        plan = self.schedule.next(trial_id)
        if plan is None:
            return Searcher.FINISHED
        self.keys[trial_id] = plan.key
        # what the trial holds itself to (claim_share), and each Ray Train worker asks for
        resources = self.resources
        share = {"cpu": resources.cpu, "gpu": resources.gpu}
        if resources.memory:
            share["memory"] = resources.memory
        payload = plan.payload() | {"trial_uri": self.trials.uri_of(plan.key), **share}
        return {"plan": payload}

    def on_trial_complete(self, trial_id: str, result=None, error: bool = False) -> None:
        key = self.keys.pop(trial_id, None)
        if key is not None:
            self.schedule.observe(key, None if error else result)

    def save(self, checkpoint_path: str) -> None:
        return None  # the study resumes from its MLflow record, not from Tune's state

    def restore(self, checkpoint_path: str) -> None:
        return None
