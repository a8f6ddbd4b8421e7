"""Cheap answers about a finished study, read from what its last run left: nothing re-analysed.

``study run`` on a study whose every trial is FINISHED used to start the whole driver (Ray's and
MLflow's imports, the lease, the record opened for writing) and then fit, draw and write the
report again, 9 s to say "nothing to run". :func:`finished_run_lines` answers it from the record,
read through the cheapest client, and the report the last run stored, in about the time Python
takes to import torch. It answers only when that is exactly what ``study run`` would say:

- the study is recorded, its parent run FINISHED, from the same study file (its ``spec_sha``);
- its design has nothing left to run (the design's own schedule decides, as on a resume);
- its results and report lie in a local storage folder, and the stored report was made from
  exactly what the record holds now (:func:`stored_report`): the same trials with the same
  metrics, goals, baselines and confirmation (:func:`analysis.reading.record.results_fingerprint`),
  none of them still running;
- the parts of the study file outside its fingerprint that the report or MLflow's description
  read (the description, baselines, goals, confirms: :func:`aims_fingerprint`) are those the
  last run that wrote a report recorded (the parent's tag ``study.aims_sha``).

Anything else (a new or unfinished study, a changed file, a metric changed in MLflow, a bucket, a
stale or missing report) goes the ordinary way, which resumes, refuses or re-reports as it always
has: with nothing left to run it runs no trial, and records and reports what changed. A file of
the last run that is there but spoiled (a truncated or garbage ``report.json``, planning basis
or ``results.parquet``; one of them deleted while the others are there) is named on stderr with
what is done instead: the ordinary way writes the results and the report again from the record.
"""

from __future__ import annotations

import json
from pathlib import Path

RESULTS_FILE = "results.parquet"  # as study.ending names them (it imports this module's names)
REPORT_DIR = "report"
# beside a report: the fingerprint of what it was made from (analysis.reading.record)
INPUTS_FILE, INPUTS_VERSION = "inputs.json", 1
# the parent run's tag: the aims (aims_fingerprint) of the study file its last report was run with
AIMS_TAG = "study.aims_sha"
AIMS = ("description", "baselines", "goals", "confirms")  # outside spec_sha: no trial changes


def aims_fingerprint(spec) -> str:
    """A fingerprint of the study file's parts that change no trial (so lie outside its
    ``spec_sha``) but that its report or its MLflow description read: a study run again with a
    new description, new goals, baselines or confirmation is recorded and reported again."""
    import hashlib

    data = spec.model_dump(mode="json")
    text = json.dumps({name: data.get(name) for name in AIMS}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def inputs_text(record) -> str:
    """What a report made now from ``record`` rests on, as :data:`INPUTS_FILE` keeps it."""
    from analysis.reading.record import results_fingerprint

    fingerprint = results_fingerprint(record.client, record.study)
    return json.dumps({"version": INPUTS_VERSION, "record": fingerprint})


def fresh_report(record) -> Path | None:
    """The local folder of the study's last report (``report/`` of its parent run's artifacts)
    when that report still holds: the study is not running (:mod:`analysis.reading.state`) and
    the record gives exactly what the report was made from (:data:`INPUTS_FILE`); None
    otherwise. Reads only."""
    from analysis.reading.state import study_state
    from analysis.reading.store import local_folder

    parent = record.parent()
    folder = local_folder(parent.info.artifact_uri) if parent is not None else None
    inputs = folder / REPORT_DIR / INPUTS_FILE if folder is not None else None
    if inputs is None or not inputs.is_file() or not study_state(record).settled:
        return None
    try:
        if json.loads(inputs.read_text()) != json.loads(inputs_text(record)):
            return None
    except (ValueError, OSError):
        return None
    return folder / REPORT_DIR


RUN_INSTEAD = "the results and the report are written again from the record"
REPORT_INSTEAD = "the report is made afresh from the record"


def json_problem(path: Path) -> str | None:
    """Why the JSON file ``path`` cannot be used ('is missing', 'cannot be read (…)'); None
    when it reads as JSON."""
    try:
        json.loads(path.read_text())
    except FileNotFoundError:
        return "is missing"
    except (OSError, ValueError) as err:  # a truncated or garbage file: UnicodeDecodeError too
        return f"cannot be read ({type(err).__name__}: {_first_line(err)})"
    return None


def parquet_problem(path: Path) -> str | None:
    """Why ``path`` is no whole Parquet file, read from its first and last four bytes (the
    format's ``PAR1`` marks; a truncated or garbage file lacks one), without importing pyarrow;
    None when both are there."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(4)
            size = handle.seek(0, 2)
            handle.seek(max(0, size - 4))
            tail = handle.read(4)
    except FileNotFoundError:
        return "is missing"
    except OSError as err:
        return f"cannot be read ({type(err).__name__}: {_first_line(err)})"
    if size < 12 or head != b"PAR1" or tail != b"PAR1":
        return f"cannot be read (not a whole Parquet file: {size} bytes, truncated or overwritten)"
    return None


def _first_line(err: Exception) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0][:200]


def _tell(line: str) -> None:
    from study.terminal import say

    say(line, err=True, flush=True)


def stored_report(
    name: str, uri: str, record=None, instead: str = REPORT_INSTEAD, tell=_tell
) -> str | None:
    """The JSON summary the study's last report left on its parent run, when that report still
    holds (:func:`fresh_report`) and its artifacts are on this machine; None otherwise (the
    report is made afresh). Reads only: nothing is fitted, drawn or written. A stored report
    that is there but spoiled is named through ``tell``, with ``instead``: what the caller does
    instead."""
    from study.record import StudyRecord

    if record is None:
        try:
            record = StudyRecord.existing(uri, name, read_only=True)
        except LookupError:
            return None
    folder = fresh_report(record)
    report = folder / "report.json" if folder is not None else None
    if report is None or not report.exists():
        return None
    problem = json_problem(report)
    found = json.loads(report.read_text()) if problem is None else None
    if not isinstance(found, dict):
        problem = problem or "cannot be read (not a report's JSON object)"
        tell(f"the stored report's {report} {problem}: {instead}")
        return None
    return json.dumps(found, default=str)  # as a fresh one prints


def finished_run_lines(
    opened, *, tracking_uri: str | None, storage: str | None, found: list | None = None
) -> list[str] | None:
    """What ``study run`` prints for a study with nothing left to run ("nothing to run", the
    stored headline, where the report, the results and the record are), or None when the
    ordinary run must answer (see the module docstring). ``opened``: the study as ``study
    run`` read it (:class:`study.opened_study.OpenedStudy`). Never writes; any doubt is None.
    ``found``: the study's experiment, when it looks one up and finds it, is put there (the
    ordinary run's checks take it instead of looking again)."""
    try:
        return _lines(opened, tracking_uri, storage, [] if found is None else found)
    except Exception:  # the ordinary run says what is wrong, with its own words
        return None


def _lines(opened, tracking_uri, storage, found: list) -> list[str] | None:
    from analysis.reading.record import find_experiment
    from analysis.reading.store import read_client, store_exists
    from study.record import StudyRecord
    from study.tracking_store import default_tracking_uri
    from trainables.remote import is_remote

    if storage is not None and is_remote(str(storage)):
        return None
    spec = opened.spec
    uri = tracking_uri or default_tracking_uri()
    if not uri.startswith("sqlite:///") or not store_exists(uri):
        return None
    client = read_client(uri)
    experiment = find_experiment(client, spec.study)
    if experiment is None:
        return None
    found.append(experiment)
    if experiment.lifecycle_stage != "active":
        return None
    record = StudyRecord.reading(uri, spec.study, client, experiment.experiment_id)
    parent = record.parent()
    if parent is None or parent.info.status != "FINISHED":
        return None
    if parent.data.tags.get("study.spec_sha") != spec.sha:
        return None
    if parent.data.tags.get(AIMS_TAG) != aims_fingerprint(spec):
        return None  # a new description, goals, baselines or confirmation: recorded, reported
    schedule = opened.design.schedule(record.past_trials())
    if schedule.remaining:
        return None
    folder = Path(storage or "studies").resolve() / spec.study
    results, report_html = folder / RESULTS_FILE, folder / REPORT_DIR / "report.html"
    stored = stored_report(spec.study, uri, record, RUN_INSTEAD)
    if stored is None or not _whole(results, report_html):
        return None
    headline = json.loads(stored).get("headline", {}).get("lines")
    if not headline:
        return None
    return [
        f"study {spec.study}: all {schedule.total} trials FINISHED; nothing to run "
        "(the findings below are the stored report's; `study report` makes it afresh)",
        *headline,
        *_where(record, spec, uri, report_html, results),
    ]


def _whole(results: Path, report_html: Path) -> bool:
    """Whether the last run's results and report in the study's storage are there and whole;
    each that is not is named, with what is done instead (the ordinary run writes them again)."""
    problems = [(results, parquet_problem(results)),
                (report_html.with_suffix(".json"), json_problem(report_html.with_suffix(".json"))),
                (report_html, None if report_html.is_file() else "is missing")]  # fmt: skip
    for path, problem in problems:
        if problem is not None:
            _tell(f"{path} {problem}: {RUN_INSTEAD}")
    return all(problem is None for _, problem in problems)


def _where(record, spec, uri: str, report: Path, results: Path) -> list[str]:
    """The closing lines of ``study run``: the report, the results, the MLflow UI."""
    from study.commands import ui_command
    from study.mlflow_views import TRIALS_VIEW, ui_url, view_link

    table = ui_url(uri) + view_link(record.experiment_id, TRIALS_VIEW)
    return [
        f"report: {report}",
        f"results: {results}",
        *places_lines(uri, str(results.parent.parent)),
        f"MLflow UI: {ui_command(uri)}",
        f"its trials, factors and key metrics, sorted by {spec.target.metric}: {table}",
    ]


def places_lines(uri: str, storage: str) -> list[str]:
    """``store: URI; storage: FOLDER`` when the store (an embedded one's file) or the storage
    (``studies`` by default) is not in the current folder: a study run from a folder of its
    own says where the record and the results went; [] when both are here."""
    from trainables.remote import is_remote, redacted

    here = Path.cwd().resolve()
    embedded = uri.startswith("sqlite:///")
    store_here = embedded and Path(uri.removeprefix("sqlite:///")).resolve().parent == here
    storage_here = not is_remote(storage) and Path(storage).resolve() == here / "studies"
    if store_here and storage_here:
        return []
    return [f"store: {redacted(uri)}; storage: {redacted(storage)}"]
