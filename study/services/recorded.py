"""A recorded study as the commands that read it open it: its record (never created: no store,
no experiment is made), its finished trials, whether its driver is gone or it is still running,
and where its storage is.

Every refusal is a :class:`~search_spaces.spec.StudyError` saying why; the typer command prints
it and exits 2. Deferred: the record (:mod:`study.record`, which may import MLflow for a server)
and the analysis's readers are imported inside each function, so that ``import study.cli``
stays light and a command pays only for what it reads.
"""

from __future__ import annotations

from pathlib import Path

from search_spaces.spec import StudyError


def existing(name: str, uri: str, writable: bool = False):
    """The record of a study that exists and can be read; otherwise StudyError saying why (and
    which studies the store holds). Nothing is written: no store, no experiment is created."""
    from study.record import StudyRecord, check_store
    from study.tracking_store import check_tracking_uri
    from trainables.remote import redacted

    try:
        check_tracking_uri(uri, writing=writable)
        check_store(uri, name)  # reads only; an embedded store that is not there stays absent
        record = StudyRecord.existing(uri, name, read_only=not writable)
        if record.parent() is None:
            raise StudyError(f"no study named {name!r} in {redacted(uri)}: its experiment has "
                             "no runs")  # fmt: skip
    except LookupError as err:
        raise StudyError(str(err)) from None
    return record


def finished_trials(name: str, uri: str):
    """(the record, its trials as (trial_key, run_id, status)) of study ``name`` in ``uri``
    (StudyError saying why when none of its trials finished). Read from the runs alone: a
    results table would import pandas (pyarrow's ``pa.array`` does), a third of a second."""
    from analysis.reading.record import trial_status

    record = existing(name, uri)
    trials = [(key, run.info.run_id, trial_status(run))
              for key, run in sorted(record.trial_runs().items())]  # fmt: skip
    if trials and all(status != "finished" for _, _, status in trials):
        raise StudyError(f"study {name!r} has no finished trial in {uri} to plan from")
    return record, trials


def driver_state(record):
    """The study's driver (:func:`study.driver_gone.driver_state`); None where the store cannot
    say (an experiment that cannot be read back)."""
    from study.driver_gone import driver_state as state

    try:
        return state(record.client, record.experiment_id, record.study)
    except Exception:  # what the record says is still shown
        return None


def driver_gone_note(record) -> str | None:
    """The note of a study whose driver is gone; None while it lives or once it has ended."""
    driver = driver_state(record)
    return driver.note() if driver is not None and driver.gone else None


def not_finished(record) -> str:
    """``study NAME: 3 of 4 trials not finished; driver pid N on HOST`` (or ``driver gone
    (pid N on HOST)``) while the study is not finished (:mod:`analysis.reading.state`); ""
    once it is."""
    from analysis.reading.state import study_state

    words = study_state(record).words()
    return f"study {record.study}: {words}" if words else ""


def storage_options(name: str, uri: str) -> list[str]:
    """``["--storage", X]`` when study ``name`` ran with a storage other than ``studies`` here
    (its record says which: :func:`analysis.reading.state.recorded_storage`), so that the
    command printed for its follow-up keeps its results beside it; [] otherwise."""
    from analysis.reading.state import recorded_storage
    from study.record import StudyRecord

    try:
        where = recorded_storage(StudyRecord.existing(uri, name, read_only=True).parent())
    except Exception:  # a record that cannot be read: the default storage
        return []
    if not where or where == str(Path("studies").resolve()):
        return []
    return ["--storage", where]


def follow_up_run(path: Path | str, uri: str, finished: str) -> str:
    """The ``study run`` command, ready to paste, for the follow-up study file ``path`` of
    study ``finished``: on the same store, with the finished study's storage when it ran
    elsewhere (:func:`storage_options`)."""
    from study.commands import shell_command, tool

    where = storage_options(finished, uri)
    return shell_command(tool("study"), "run", str(path), "--tracking-uri", uri, *where)
