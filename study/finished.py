"""Cheap answers about a finished study, read from what its last run left: nothing re-analysed.

``study run`` on a study whose every trial is FINISHED used to start the whole driver (Ray's and
MLflow's imports, the lease, the record opened for writing) and then fit, draw and write the
report again, 9 s to say "nothing to run". :func:`finished_run_lines` answers it from the record,
read through the cheapest client, and the report the last run stored, in about the time Python
takes to import torch. It answers only when that is exactly what ``study run`` would say:

- the study is recorded, its parent run FINISHED, from the same study file (its ``spec_sha``);
- its design has nothing left to run (the design's own schedule decides, as on a resume);
- its results and report lie in a local storage folder, and the stored report was made from
  exactly the trials the record holds now (:func:`stored_report`).

Anything else (a new or unfinished study, a changed file, a bucket, a stale or missing report)
goes the ordinary way, which resumes, refuses or re-reports as it always has. A file of the last
run that is there but spoiled (a truncated or garbage ``report.json``, planning basis or
``results.parquet``; one of them deleted while the others are there) is named on stderr with
what is done instead: the ordinary way writes the results and the report again from the record.
"""

from __future__ import annotations

import json
from pathlib import Path

RESULTS_FILE = "results.parquet"  # as study.runner names them (it imports this module's names)
REPORT_DIR = "report"


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
    """The JSON summary the study's last report left on its parent run, when that report was
    made from exactly the trials the record holds now (the planning basis beside it names them)
    and its artifacts are on this machine; None otherwise (the report is made afresh). Reads
    only: nothing is fitted, drawn or written. A stored report or basis that is there but
    spoiled (or one of the two gone) is named through ``tell``, with ``instead``: what the
    caller does instead."""
    from analysis.reading.record import trial_status
    from analysis.reading.store import local_folder
    from analysis.stats.power import BASIS_FILE, BASIS_VERSION, trials_fingerprint
    from study.record import StudyRecord

    if record is None:
        try:
            record = StudyRecord.existing(uri, name, read_only=True)
        except LookupError:
            return None
    parent = record.parent()
    folder = local_folder(parent.info.artifact_uri) if parent is not None else None
    if folder is None:
        return None
    basis, report = folder / REPORT_DIR / BASIS_FILE, folder / REPORT_DIR / "report.json"
    if not (basis.exists() or report.exists()):
        return None  # never reported: nothing is spoiled
    for path in (basis, report):
        problem = json_problem(path)
        if problem is not None:
            tell(f"the stored report's {path} {problem}: {instead}")
            return None
    trials = [(key, run.info.run_id, trial_status(run))
              for key, run in sorted(record.trial_runs().items())]  # fmt: skip
    data = json.loads(basis.read_text())
    if not isinstance(data, dict) or data.get("version") != BASIS_VERSION or (
            data.get("trials") != trials_fingerprint(trials)):  # fmt: skip
        return None  # made from other trials, or by another version: stale, not spoiled
    found = json.loads(report.read_text())
    if not isinstance(found, dict):
        tell(f"the stored report's {report} cannot be read (not a report's JSON object): "
             f"{instead}")  # fmt: skip
        return None
    return json.dumps(found, default=str)  # as a fresh one prints


def study_name(spec_path: str | None, smoke: bool) -> str | None:
    """The name of the study ``study run`` is about to run, or None when the file does not
    load (the run refuses it, saying why)."""
    from search_spaces.spec import load_spec, smoke_spec

    try:
        spec = load_spec(spec_path)
        return (smoke_spec(spec) if smoke else spec).study
    except Exception:
        return None


def finished_run_lines(
    spec_path: str | None, *, smoke: bool, tracking_uri: str | None, storage: str | None
) -> list[str] | None:
    """What ``study run`` prints for a study with nothing left to run ("nothing to run", the
    stored headline, where the report, the results and the record are), or None when the
    ordinary run must answer (see the module docstring). Never writes; any doubt is None."""
    try:
        return _lines(spec_path, smoke, tracking_uri, storage)
    except Exception:  # the ordinary run says what is wrong, with its own words
        return None


def _lines(spec_path, smoke, tracking_uri, storage) -> list[str] | None:
    from search_spaces.designs import build_design
    from search_spaces.spec import load_spec, smoke_spec
    from study.record import StudyRecord, default_tracking_uri
    from trainables.remote import is_remote

    if storage is not None and is_remote(str(storage)):
        return None
    spec = load_spec(spec_path)
    spec = smoke_spec(spec) if smoke else spec
    uri = tracking_uri or default_tracking_uri()
    if not uri.startswith("sqlite:///"):
        return None
    try:
        record = StudyRecord.existing(uri, spec.study, read_only=True)
    except LookupError:
        return None
    parent = record.parent()
    if parent is None or parent.info.status != "FINISHED":
        return None
    if parent.data.tags.get("study.spec_sha") != spec.sha:
        return None
    design = build_design(spec)
    schedule = design.schedule(record.past_trials())
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
        f"MLflow UI: {ui_command(uri)}",
        f"its trials, factors and key metrics, sorted by {spec.target.metric}: {table}",
    ]
