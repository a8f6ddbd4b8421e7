"""How a study run ends: its outcome, or the error that says what to run next; the Parquet export,
the parent run's summary and the report, copied to the study's storage; every unfinished run
ended (:func:`end_runs`); and what ``study run`` says last (:func:`print_ending`), or when it
was stopped (:func:`interrupted_words`).
"""

from __future__ import annotations

import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path

from analysis.stats.best import study_summary
from search_spaces.spec import StudySpec
from study.commands import shell_command, tool, ui_command
from study.export import export_parquet
from study.finished import REPORT_DIR, RESULTS_FILE, places_lines
from study.internals.mlflow import store_engine
from study.mlflow_views import TRIALS_VIEW, ui_url, view_link
from study.record import StudyRecord
from study.stop_signals import sigint_ignored, still_held
from study.storage import Storage
from study.store_locks import StoreHeldError, impatient
from study.terminal import say
from trainables.remote import redacted


class StudyFailedError(RuntimeError):
    """The study could not be completed after its trials began; nothing is left RUNNING, what
    was recorded stays, and the message says what to run next."""


@dataclass(frozen=True)
class StudyOutcome:
    name: str
    tracking_uri: str
    parent_run_id: str
    results: str  # results.parquet in the study's storage: an absolute path or a URI
    counts: dict[str, int]
    launched: int
    wall_s: float
    logging_s: float
    trial_s: float
    tail_s: float  # from the last trial's end to the study's: export, report, summary

    @property
    def ok(self) -> bool:
        return set(self.counts) <= {"FINISHED"}


def end_runs(record: StudyRecord, parent_id: str, status: str, tries: int = 3) -> bool:
    """End every unfinished run of the study ``status``, with SIGINT ignored (a second Ctrl-C
    must not leave one RUNNING); False when the store stays locked (another process holds it,
    :class:`study.store_locks.StoreHeldError`): the next ``study run`` ends them. An interrupt
    can land inside one of this process's own SQLite writes: the garbage of the interrupted
    frames is collected first, and a store still locked is disposed of and tried again, each
    try without the driver's long wait for a lock (:func:`study.store_locks.impatient`): a
    driver being stopped does not wait minutes for a lock that may be its own."""
    import gc

    from mlflow.exceptions import MlflowException

    still_held()  # a driver whose lease was taken over ends nothing: the runs are not its own
    with sigint_ignored():
        for attempt in range(tries):
            gc.collect()  # an interrupted session's connection goes back to the pool, rolled back
            try:
                with impatient(record.client):
                    record.end_unfinished(parent_id, status)
                return True
            except (MlflowException, StoreHeldError) as err:
                if attempt == tries - 1:
                    if isinstance(err, StoreHeldError):
                        return False
                    raise
                engine = store_engine(record.client)
                if engine is not None:
                    engine.dispose()


def load_report_modules(figures: bool = True) -> None:
    """The report's modules (the analysis, and matplotlib when the figures will be drawn: a
    second or two of CPU), loaded while the driver's lease settles, a second the driver would
    otherwise sleep, rather than later beside Ray's start, where they would take CPU from Ray
    and from the first trial's worker. Should this fail, the report's own import fails the same
    way, and :func:`report` says so."""
    import study.reporting  # noqa: F401

    if figures:
        import analysis.report.plots  # noqa: F401


def export_and_report(
    record: StudyRecord, parent_id: str, study: Storage, spec: StudySpec, tracking_uri: str,
    rerun: str, figures: bool = True,
) -> tuple[str, list[str] | None]:  # fmt: skip
    """Export the results and write the report in a local staging folder (the parent run gets
    both from there), then copy them to the study's storage; returns the results' URI there
    and the headline's lines (None when the report failed)."""
    with tempfile.TemporaryDirectory(prefix="study-out-") as staging:
        local = Path(staging) / RESULTS_FILE
        _export(record, parent_id, local, study, spec, tracking_uri, rerun)
        _summarise(record, parent_id, local, spec)
        findings = report(record, local, tracking_uri, Path(staging) / REPORT_DIR, study, figures)
        if findings is not None:
            _store(study, Path(staging) / REPORT_DIR, REPORT_DIR)
    return study.uri_of(RESULTS_FILE), findings


def _store(study: Storage, local: Path, name: str) -> None:
    """Copy the local file or folder to ``name`` in the study's storage: a file overwrites the
    file there (and fails where a folder stands: nothing of the user's is deleted), a folder
    replaces the folder there (the previous report)."""
    if local.is_dir():
        study.delete(name)
    study.upload(local, name)


def _summarise(record: StudyRecord, parent_id: str, results: Path, spec: StudySpec) -> None:
    """The parent run's summary metrics (trials finished, the best point's mean and interval)
    from the results table just exported; a failure here never loses the record."""
    from analysis.reading.load import read_results
    from study.reporting import study_outcomes

    try:
        outcomes = study_outcomes(record, record.uri)
        summary = study_summary(read_results(results), spec.target.metric, spec.target.mode,
                                outcomes)  # fmt: skip
        record.log_summary(parent_id, summary)
    except Exception as err:  # the study itself is complete and recorded
        say(f"the parent run's summary was not logged: {type(err).__name__}: {err}")


def interrupted_words(
    spec: StudySpec, rerun: str, recorded: bool, signum: int = signal.SIGINT
) -> str:
    """What ``study run`` says when stopped by a signal."""
    by = "" if signum == signal.SIGINT else f" by {signal.Signals(signum).name}"
    if not recorded:
        return (f"study {spec.study!r} interrupted{by} before anything was recorded. Run it: "
                f"{rerun}")  # fmt: skip
    return (
        f"study {spec.study!r} interrupted{by}: its trials were stopped and every run of it that "
        "was not finished ended KILLED (none is left RUNNING); no result or report was written "
        "for this run. Resume it (finished trials are kept, the others continue from their "
        f"checkpoints): {rerun}"
    )


def rerun_command(
    spec_path: str | Path | None, smoke: bool, tracking_uri: str, storage: Storage,
    figures: bool = True, address: str | None = None,
) -> str:  # fmt: skip
    argv = [tool("study"), "run"]
    if spec_path is not None:
        argv.append(str(Path(spec_path).resolve()) if Path(spec_path).exists() else str(spec_path))
    if address:  # as typed: `auto` finds the cluster again wherever its head now is
        argv += ["--address", address]
    if smoke:
        argv.append("--smoke")
    if not figures:
        argv.append("--no-figures")
    argv += ["--tracking-uri", tracking_uri, "--storage", storage.uri]
    return shell_command(*argv)


def next_steps(spec: StudySpec, tracking_uri: str, rerun: str, ended: bool = True) -> str:
    status = shell_command(tool("study"), "status", spec.study, "--tracking-uri", tracking_uri)
    runs = f"Every run of study {spec.study!r} was ended (none is left RUNNING)"
    if not ended:  # the store was held past every wait
        runs = f"The unfinished runs of study {spec.study!r} are ended when it is resumed"
    return (
        f"{runs} and everything logged is kept in {redacted(tracking_uri)}.\n"
        f"See its trials: {status}\n"
        f"Resume it (finished trials are kept, the others continue from their checkpoints): "
        f"{rerun}"
    )


def _export(
    record: StudyRecord, parent_id: str, out: Path, study: Storage, spec: StudySpec,
    tracking_uri: str, rerun: str,
) -> None:  # fmt: skip
    """Write the Parquet file to ``out``, attach it and copy it to the study's storage; on
    failure the parent is ended FAILED, never left RUNNING, the trials stay recorded, and the
    error says how to export again."""
    try:
        export_parquet(record, out, spec.sha)
        record.log_parent_artifact(parent_id, out)
        _store(study, out, RESULTS_FILE)
    except Exception as err:
        record.end_unfinished(parent_id, "FAILED")
        target = study.uri_of(RESULTS_FILE)
        export = shell_command(
            tool("study"), "export", spec.study, "--out", target, "--tracking-uri", tracking_uri
        )
        raise StudyFailedError(
            f"the trials of study {spec.study!r} are recorded, but writing {target} failed: "
            f"{type(err).__name__}: {err}\nNothing logged was lost. Export again with: {export}\n"
            f"or run the study again (it exports and reports without rerunning finished "
            f"trials): {rerun}"
        ) from err


def report(
    record: StudyRecord,
    results: Path,
    tracking_uri: str,
    folder: Path,
    study: Storage,
    figures: bool = True,
) -> list[str] | None:
    """The analysis report of a finished study, written to ``folder``; returns its headline's
    terminal lines, or None when it failed (said, with the command that writes it again): that
    never loses the record."""
    from study.reporting import make_report

    try:
        stored_as = study.uri_of(REPORT_DIR, "report.html")
        summary, _ = make_report(
            record,
            results,
            folder,
            tracking_uri=tracking_uri,
            stored_as=stored_as,
            figures=figures,
            from_record=True,  # the results were exported from the record a moment ago
        )
        return list(summary["headline"]["lines"])
    except Exception as err:  # the study itself is complete and recorded
        again = shell_command(
            tool("study"), "report", "--results", study.uri_of(RESULTS_FILE), "--out",
            study.uri_of(REPORT_DIR) if study.is_local else REPORT_DIR, "--tracking-uri",
            tracking_uri,
        )  # fmt: skip
        say(
            f"report not written: {type(err).__name__}: {err}\n"
            f"The study and its results are recorded; write the report again with: {again}"
        )
        return None


def print_ending(
    outcome: StudyOutcome, findings: list[str] | None, report: str, record: StudyRecord,
    spec: StudySpec, storage: str = "studies",
) -> None:  # fmt: skip
    """What ``study run`` says last: the findings (at most six lines: the headline of the
    report, ``analysis.findings.headline``), then where everything is (the store and the
    storage too when either is not in the current folder)."""
    for line in findings or [f"study {spec.study}: {outcome.counts}"]:
        say(line)
    if findings is not None:
        say(f"report: {report}")
    say(f"results: {outcome.results}")
    for line in places_lines(outcome.tracking_uri, storage):
        say(line)
    say(f"MLflow UI: {ui_command(outcome.tracking_uri)}")
    table = ui_url(outcome.tracking_uri) + view_link(record.experiment_id, TRIALS_VIEW)
    say(f"its trials, factors and key metrics, sorted by {spec.target.metric}: {table}")
