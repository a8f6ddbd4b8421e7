"""``study report``: the analysis report of a study, written and attached to its parent run."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
from mlflow.exceptions import MlflowException

from analysis.findings.baselines import Standing
from analysis.findings.headline import Headline
from analysis.reading.load import load_history, read_results, results_frame
from analysis.reading.store import local_folder
from analysis.report.page import write_report
from analysis.stats.best import BestPoint, target_of
from analysis.stats.units import level
from analysis.study_analysis import analyse
from search_spaces.designs import ABBREVIATIONS
from study.export import results_table
from study.finished import INPUTS_FILE, REPORT_DIR, inputs_text
from study.mlflow_views import point_to_report
from study.paths import refuse
from study.record import MAX_TAG, StudyRecord
from study.run_artifacts import EVIDENCE_ARTIFACTS, SOURCE_RETURN_PNG
from trainables.shown import in_markdown

HISTORY_METRICS = ("z/align", "z/uniform", "probe/knn_top1_h")
# where a study's storage and its embedded store's artifacts are, as study.runner lays them out
STORAGE_DEFAULT, ARTIFACTS_NAME = "studies", "mlartifacts"
STORAGE_WORDS = "a study storage"


def make_report(
    record: StudyRecord | None,
    results: str | Path | None,
    out: str | Path | None,
    *,
    tracking_uri: str,
    stored_as: str | None = None,
    figures: bool = True,
    from_record: bool | None = None,
) -> tuple[dict[str, Any], Path]:
    """Analyse a study from its record and/or a results Parquet, and write the report.

    When the tracking store holds the study, the report folder is attached to its parent run
    under ``report/``, the parent's description becomes the findings (:func:`parent_note`) and
    the experiment's description points at the report (and at ``stored_as``, where the report
    is kept once written: the study's storage; the folder itself when None). ``figures=False``
    writes it without its figures (:func:`analysis.report.page.write_report`). Returns (the JSON
    summary, the folder). ``results`` may be a path or a URI pyarrow reads. ``out`` by default:
    ``<storage>/<study>/report`` in the storage the study ran with (:func:`report_folder`).
    ``from_record`` (by default: no ``results`` given) says the table is the record's as it is
    now: the report then keeps what it rests on (:data:`study.finished.INPUTS_FILE`), so that a
    rerun of the finished study answers from it while that still holds.
    """
    # A results file, when given, is the table (the study just wrote it, or the user has it);
    # the record, when there is one, adds the histories and receives the report.
    df = read_results(results) if results is not None else results_frame(results_table(record))
    if record is None:
        record = _record_if_present(df.attrs.get("study", ""), tracking_uri)
    from_record = results is None if from_record is None else from_record
    inputs = inputs_text(record) if record is not None and from_record else None
    # the histories: the trajectories' figures, and the target's learning curves (one query)
    target = target_of(df)["metric"]
    metrics = tuple(dict.fromkeys((*HISTORY_METRICS, target)))
    history = load_history(record.study, tracking_uri, metrics) if record else None
    study = df.attrs.get("study") or "study"
    folder = Path(out) if out else report_folder(record, study)
    analysis = analyse(df, outcomes=study_outcomes(record, tracking_uri), history=history)
    parent = record.parent() if record is not None else None
    # Written into a fresh folder of its own, never into ``out`` itself: only what the report
    # wrote is attached to the run (``out`` may hold anything: a .env, the store, studies/)
    with tempfile.TemporaryDirectory(prefix="study-report-") as staging:
        written = Path(staging)
        with tempfile.TemporaryDirectory(prefix="source-return-") as tmp:
            returned = source_return(record, df, Path(tmp)) if record is not None else {}
            panels = {label: panel for label, (panel, _) in returned.items()}
            tables = {label: table for label, (_, table) in returned.items() if table is not None}
            write_report(
                analysis, written, history, panels=panels, source_return=tables, figures=figures
            )
        _write_power_bases(analysis, df, written)
        if inputs is not None:
            (written / INPUTS_FILE).write_text(inputs)
        if parent is not None:
            record.client.log_artifacts(parent.info.run_id, str(written), "report")
        copy_out(written, folder)
    if parent is not None:
        note = parent_note(analysis.headline, parent, analysis.best, analysis.standings)
        record.set_parent_note(parent.info.run_id, note)
        point_to_report(record, parent.info.run_id, stored_as or folder / "report.html")
    return analysis.to_json(), folder


def report_folder(record: StudyRecord | None, study: str) -> Path:
    """Where a study's report goes by default: ``<storage>/<study>/report`` in the storage its
    record says it ran with (``study run --storage X``), whatever folder the command runs in;
    ``studies/<study>/report`` here for a study recorded before that was kept, or whose storage
    is a bucket (the report is attached to its parent run all the same)."""
    return _storage_root(record) / study / REPORT_DIR


def _storage_root(record: StudyRecord | None) -> Path:
    """The study's local storage folder, from its record; ``studies`` here otherwise."""
    from analysis.reading.state import recorded_storage
    from trainables.remote import is_remote

    where = recorded_storage(record.parent()) if record is not None else None
    here = Path(STORAGE_DEFAULT)
    if where and not is_remote(where) and Path(where.removeprefix("file://")) != here.resolve():
        return Path(where.removeprefix("file://"))
    return here  # said as before: studies/<study>/report


def copy_out(written: Path, folder: Path) -> None:
    """Copy the report's files from ``written`` into ``folder``, each put in place by a rename
    beside it: a file or link already at that name is replaced, never written through."""
    for source in sorted(p for p in written.rglob("*") if p.is_file()):
        target = folder / source.relative_to(written)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
        shutil.copyfile(source, partial)
        os.replace(partial, target)


def refuse_own_folders(record: StudyRecord | None, out: Path) -> None:
    """Refuse (:func:`study.paths.refuse`: ``--out`` and the path named) an ``out`` inside the
    record's artifact root or inside a study storage, except a study's own ``report`` folder
    there: the report would be written among the trials' checkpoints, results or another
    run's artifacts."""
    place = out.expanduser().resolve()
    for folder, what in own_folders(record):
        inside = place == folder or folder in place.parents
        if inside and not _a_report_folder(place, folder, what):
            refuse("--out", out, f"lies inside {what} ({str(folder)!r}), which the study "
                   "writes itself", "give a folder outside it, or leave --out out (the "
                   "study's own report folder, studies/<study>/report)")  # fmt: skip


def own_folders(record: StudyRecord | None) -> list[tuple[Path, str]]:
    """(folder, what it is) for the places a report is never written into: the default
    storage ``studies/`` here, and the experiment's artifact root on this machine with the
    storage that holds it (the product puts it at ``<storage>/mlartifacts``)."""
    found = [(Path(STORAGE_DEFAULT).resolve(), STORAGE_WORDS)]
    if _storage_root(record).resolve() != found[0][0]:  # the storage the study ran with
        found.append((_storage_root(record).resolve(), STORAGE_WORDS))
    if record is not None:
        location = record.client.get_experiment(record.experiment_id).artifact_location
        root = local_folder(location)
        if root is not None:
            found.append((root.resolve(), "the MLflow artifact root"))
            if root.name == ARTIFACTS_NAME:
                found.append((root.resolve().parent, STORAGE_WORDS))
    return found


def _a_report_folder(place: Path, folder: Path, what: str) -> bool:
    """Whether ``place`` is (inside) ``<storage>/<study>/report``: a report's own folder."""
    if what != STORAGE_WORDS:
        return False
    parts = place.relative_to(folder).parts
    return len(parts) >= 2 and parts[1] == REPORT_DIR and parts[0] != ARTIFACTS_NAME


def study_outcomes(record: StudyRecord | None, tracking_uri: str):
    """The study's per-item outcomes from its record
    (:func:`analysis.reading.load.load_outcomes`), or None without a record; a record older than
    the outcomes gives an empty set (the analysis then counts the seeds alone, and says so)."""
    if record is None:
        return None
    from analysis.reading.load import load_outcomes

    try:
        return load_outcomes(record.study, tracking_uri)
    except (LookupError, OSError, ValueError, MlflowException):
        return None


def _write_power_bases(analysis, df: pd.DataFrame, folder: Path) -> None:
    """Every fitted response's planning basis beside the report, tied to the trials it was
    fitted on, so that ``study power`` answers without fitting again (analysis.stats.power)."""
    from analysis.stats.power import trials_fingerprint, write_bases

    if not {"trial_key", "run_id", "status"} <= set(df.columns):
        return  # a results file from before run ids were exported: power fits afresh
    from analysis.reading.outcomes import heldout_items

    rows = list(zip(df["trial_key"], df["run_id"], df["status"], strict=True))
    surfaces = {r: f.surface for r, f in analysis.fits.items()}
    from analysis.stats.aliases import alias_map

    write_bases(surfaces, trials_fingerprint(rows), folder, heldout_items(df, analysis.outcomes),
                alias_map(df))  # fmt: skip


def source_return(record: StudyRecord, df, folder: Path) -> dict[str, tuple[Path, object]]:
    """The source return of the best and the worst design point by the study's target, from the
    first finished replicate of each (``evidence/source_return.png`` and ``.csv``), downloaded
    under ``folder``: label -> (the panel, its table as a DataFrame or None). Empty when the
    record holds none (vector data have no panel; studies recorded before it have neither)."""
    from analysis.stats.best import best_point

    target = target_of(df)
    flipped = "min" if target["mode"] == "max" else "max"
    runs = record.trial_runs()
    found: dict[str, tuple[Path, object]] = {}
    seen: set[str] = set()
    for which, mode in (("best", target["mode"]), ("worst", flipped)):
        try:
            point = best_point(df, target["metric"], mode)
        except (LookupError, ValueError):
            return {}
        done = df[(df["point_id"] == point.point_id) & (df["status"] == "finished")]
        keys = sorted(done["trial_key"]) if "trial_key" in done else []
        run = runs.get(keys[0]) if keys else None
        if run is None or point.point_id in seen:  # one point only: it is best and worst
            continue
        seen.add(point.point_id)
        panel = _artifact(record, run.info.run_id, SOURCE_RETURN_PNG, folder / point.point_id)
        if panel is None:
            continue
        table = _artifact(record, run.info.run_id, "source_return.csv", folder / point.point_id)
        factors = ", ".join(f"{k} = {v}" for k, v in point.factors.items())
        label = f"{which} point {point.point_id} ({factors}; {target['metric']} {point.mean:.4g})"
        found[label] = (panel, None if table is None else pd.read_csv(table))
    return found


def _artifact(record: StudyRecord, run_id: str, name: str, where: Path) -> Path | None:
    """One file of a run's ``evidence/`` artifacts, downloaded into ``where``; None if absent."""
    where.mkdir(parents=True, exist_ok=True)
    try:
        path = f"{EVIDENCE_ARTIFACTS}/{name}"
        return Path(record.client.download_artifacts(run_id, path, str(where)))
    except (MlflowException, OSError):
        return None


def findings_lead(top: Headline) -> str:
    """The findings as one paragraph, on the target first (``on_target``, then ``found``): the
    second paragraph of the parent run's description, after its lead (:func:`parent_lead`)."""
    found = [*([top.on_target] if top.on_target else []), *top.found]
    return "**Findings.** " + (in_markdown(" ".join(found)) or "No effect was detected.")


def _gist(sentence: str) -> str:
    """A sentence without its closing parenthesis (the evidence behind it, said in full in the
    findings below): 'No factor has a detectable effect on X (smallest detectable …).' -> 'No
    factor has a detectable effect on X.'"""
    text = sentence.rstrip()
    if not text.endswith(")."):
        return text
    depth = 0
    for i in range(len(text) - 2, -1, -1):
        depth += {")": 1, "(": -1}.get(text[i], 0)
        if depth == 0:
            return text[:i].rstrip(" ,;:") + "."
    return text


def _verdict(top: Headline) -> str:
    """What the study says of its target, each sentence without its evidence: that no factor
    moved it (``on_target``), or the effects found on it (the first two, the rest counted);
    the findings on other responses when nothing is said of the target."""
    said = [top.on_target] if top.on_target else [s for s in top.found if f" {top.target} by " in s]
    if not said:
        return " ".join(_gist(s) for s in top.found[:2]) or "No effect was detected."
    more = f" ({len(said) - 2} more effects on it below.)" if len(said) > 2 else ""
    return " ".join(_gist(s) for s in said[:2]) + more


def _best_words(best: BestPoint) -> str:
    """'p000 (τ=0.1, B=64) at 84.5%, 95% interval 79.4% to 89.6% (1 replicate; selected among
    4 points)': the best point as its run names and the headline give it."""
    where = ", ".join(f"{ABBREVIATIONS.get(k, k)}={f'{v:g}' if isinstance(v, float) else v}"
                      for k, v in best.factors.items())  # fmt: skip
    mean = level(best.metric, best.mean)
    sure = (
        f", {best.level:.0%} interval {level(best.metric, best.ci_low)} to "
        f"{level(best.metric, best.ci_high)}"
        if best.has_interval
        else ", no interval"
    )
    reps = f"{best.n} replicate{'s' * (best.n != 1)}"
    among = f"; selected among {best.points} points" if best.selected else ""
    return f"{best.point_id} ({where}) at {mean}{sure} ({reps}{among})"


def _standing_words(top: Headline, standings: tuple[Standing, ...]) -> str | None:
    """The best point against the raw input (else the first baseline measured), as the
    headline words it up to its evidence: 'did not beat the raw input (93.0%)'."""
    if standings:
        chosen = next((s for s in standings if s.kind == "raw"), standings[0])
        return chosen.sentence().split(": ", 1)[0]
    if not top.against:  # the headline's words alone: 'Against the baselines, it …; it …'
        return None
    said = top.against.removeprefix("Against the baselines, it ").split("; it ")
    chosen = next((s for s in said if "the raw input" in s), said[0])
    return chosen.split(": ", 1)[0].rstrip(".")


def parent_lead(
    top: Headline, best: BestPoint | None = None, standings: tuple[Standing, ...] = ()
) -> str:
    """The parent run's first paragraph, all that MLflow's run page shows of a description
    before *Show more* (its first 100 px: about five lines of 120 characters at 1280 px with the
    Assistant open, the lower ones fading): what the study says of its target, its best point
    with its interval (``best``, else the headline's sentence) and its standing against the raw
    input (``standings``, else the headline's words), and the next step. Every word is the
    analysis' own, each without its evidence, which the sections below give in full. Their
    words name the file's levels, so each is escaped for Markdown (:func:`in_markdown`)."""
    parts = [f"**In short.** {in_markdown(_verdict(top))}"]
    if best is not None:
        standing = _standing_words(top, standings)
        said = _best_words(best) + (f"; it {standing}." if standing else ".")
        parts.append(f"**Best:** {in_markdown(said)}")
    elif top.best:
        standing = _standing_words(top, standings)
        said = top.best + (f" It {standing}." if standing else "")
        parts.append(f"**Best:** {in_markdown(said)}")
    if top.next_step:
        parts.append(f"**Next:** {in_markdown(top.next_step)}")
    return " ".join(parts)


def parent_note(
    top: Headline, parent, best: BestPoint | None = None, standings: tuple[Standing, ...] = ()
) -> str:
    """The parent run's description: its lead (:func:`parent_lead`: the target's verdict, the
    best point with its interval, its standing against the raw input and the next step, all
    within the lines MLflow shows before *Show more*), then the findings
    (:func:`findings_lead`), the study in one sentence, what was not detectable, the best point,
    the baselines and the next study in full (the report's headline), then the design, read
    from the parent's own params; within MLflow's limit for a tag."""
    params, tags = parent.data.params, parent.data.tags
    design = (
        f"**Design.** {params.get('design', '?').replace('_', ' ')} design over "
        f"{params.get('factors', '?')}: {params.get('trials', '?')} trials, "
        f"{params.get('replicates', '?')} replicates per point; resources per trial "
        f"{params.get('resources', '?')}; study file sha {tags.get('study.spec_sha', '?')} "
        "(artifacts `study_file.yaml`, `design.json`). The full report, with the model "
        "statistics, is the artifact `report/report.html`."
    )
    parts = [parent_lead(top, best, standings), "", findings_lead(top), "",
             in_markdown(top.sentence)]  # fmt: skip
    if top.confirmation:
        parts += ["", f"**Confirmation.** {in_markdown(top.confirmation)}"]
    if top.not_detected:
        parts += ["", "**Not detectable**", "", *[f"- {in_markdown(s)}" for s in top.not_detected]]
    for title, text in (("Best point", top.best), ("Against the baselines", top.against),
                        ("Next study", top.next_step)):  # fmt: skip
        if text:
            parts += ["", f"**{title}.** {in_markdown(text[:1].upper() + text[1:])}"]
    if top.notes:  # a file of the record that could not be read, and what was done instead
        parts += ["", "**Notes**", "", *[f"- {in_markdown(s)}" for s in top.notes]]
    body = "\n".join(parts)
    note = f"{body}\n\n---\n\n{design}"
    if len(note) > MAX_TAG:
        cut = "\n\n… (more in `report/report.html`)\n\n---\n\n"
        note = body[: MAX_TAG - len(cut) - len(design)] + cut + design
    return note


def _record_if_present(study: str, uri: str) -> StudyRecord | None:
    """The study's record when the store holds it, opened without creating anything (a results
    file reported where no store is must not leave an empty one behind)."""
    if not study:
        return None
    try:
        return StudyRecord.existing(uri, study)
    except Exception:  # no such study, or no reachable store: the results file is enough
        return None
