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
goes the ordinary way, which resumes, refuses or re-reports as it always has.
"""

from __future__ import annotations

import json
from pathlib import Path

RESULTS_FILE = "results.parquet"  # as study.runner names them (it imports this module's names)
REPORT_DIR = "report"


def stored_report(name: str, uri: str, record=None) -> str | None:
    """The JSON summary the study's last report left on its parent run, when that report was
    made from exactly the trials the record holds now (the planning basis beside it names them)
    and its artifacts are on this machine; None otherwise (the report is made afresh). Reads
    only: nothing is fitted, drawn or written."""
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
    if not (basis.is_file() and report.is_file()):
        return None
    trials = [(key, run.info.run_id, trial_status(run))
              for key, run in sorted(record.trial_runs().items())]  # fmt: skip
    try:
        data = json.loads(basis.read_text())
    except ValueError:
        return None
    if data.get("version") != BASIS_VERSION or data.get("trials") != trials_fingerprint(trials):
        return None
    try:
        return json.dumps(json.loads(report.read_text()), default=str)  # as a fresh one prints
    except ValueError:
        return None


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
    stored = stored_report(spec.study, uri, record)
    report_json = report_html.with_suffix(".json")
    whole = results.is_file() and report_html.is_file() and report_json.is_file()
    if stored is None or not whole:
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
