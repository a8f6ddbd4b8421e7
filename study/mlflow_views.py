"""What a reviewer opens in the MLflow UI on a study's record: the runs table's saved views and
their chart view, the links to them, and the experiment's description that leads to them.

The record itself (the tracking store, the experiment, the parent and child runs and their own
descriptions) is :mod:`study.record`. This module writes into it through a
:class:`study.record.StudyRecord` once the record has started the study's parent run
(:func:`start_described_parent`); it imports the record, and the record never imports it.
What the views show and why: ``docs/mlflow.md``.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

from search_spaces.spec import StudySpec
from study.record import METRIC_PREFIXES, MLFLOW_RUN_NOTE, StudyRecord
from study.run_notes import UI_MODE, replace_line, run_link
from trainables.config import TrialConfig
from trainables.remote import redacted, without_credentials
from trainables.shown import in_code, in_markdown, shown

# The runs table's saved views (MLflow >= 3.x UI): an experiment tag of this prefix + an id
# holds {name, createdAt, state}; ``#/experiments/<id>/runs?viewStateShareKey=<id>`` opens it.
VIEW_TAG_PREFIX, VIEW_URL_KEY = "mlflow.sharedViewState.", "viewStateShareKey"
TRIALS_VIEW, POINTS_VIEW = "study-trials", "study-points"
CHART_MODE = "compareRunsMode=CHART"  # the runs page's chart view, not its table
KEY_METRICS = ("probe/knn_top1_h", "z/align", "z/uniform")
REPORT_ARTIFACT = "report/report.html"
REPORT_LINE = "- **Latest report:**"
# the most characters of the file's description, escaped, that the experiment's description holds
DESCRIPTION_SHOWN = 4000


def view_link(experiment_id: str, view: str, charts: bool = False) -> str:
    """The runs table opened on one of the experiment's saved views (``runs_views``), or, with
    ``charts``, that view's chart view (:func:`chart_state`)."""
    mode = f"&{CHART_MODE}" if charts else ""
    return f"#/experiments/{experiment_id}/runs?{VIEW_URL_KEY}={view}{mode}&{UI_MODE}"


def ui_url(uri: str, port: int = 5000) -> str:
    """The address of the MLflow UI on this record: the server's own, or the one
    :func:`study.commands.ui_command` starts on this machine."""
    if uri.startswith(("http://", "https://")):  # a link: the browser asks for credentials
        return without_credentials(uri).rstrip("/") + "/"
    return f"http://127.0.0.1:{port}/"


def _column(kind: str, name: str) -> str:
    """The runs table's column id (the UI's ``makeCanonicalSortKey``): kind.`name`."""
    return f"{kind}.`{name}`"


def key_metrics(spec: StudySpec) -> list[str]:
    """The target and the alignment/uniformity pair, each once."""
    return list(dict.fromkeys([spec.target.metric, *KEY_METRICS]))


# What the runs table's columns hold, in the units MLflow shows (it shows every value as
# logged, unrounded: accuracies as fractions); the experiment's description lists them.
METRIC_UNITS = {
    "probe/": "accuracy as a fraction (0.975 = 97.5%)",
    "z/align": "alignment of z (α = 2): mean squared distance between positive pairs on the "
    "unit sphere, 0 to 4, lower is tighter",
    "z/uniform": "uniformity of z (t = 2): log of the mean Gaussian potential over pairs, ≤ 0, "
    "lower is more uniform",
}
# The runs table's column ids (ag-grid) of the attributes MLflow always shows: Run Name and
# Created are pinned to the left, Duration follows them unless it is moved.
RUN_NAME_COLUMN, CREATED_COLUMN, DURATION = (
    "attributes.`Run Name`", "runDateAndNestInfo", "duration",
)  # fmt: skip
# Widths (px) that fit the pinned columns, the factors, the target and the key probes beside
# MLflow's sidebar and its Assistant panel (open by default) in a 1280 px window.
# Created is narrowed to its status icon (finished, failed …); its time shows on hover.
COLUMN_WIDTHS = {"run_name": 140, "created": 44, "params": 84, "target": 112, "metrics": 80,
                 "tags": 80}  # fmt: skip
# The metric MLflow's charts put first where no chart view is saved (a user's own views).
PRIMARY_METRIC_TAG = "mlflow.experiment.primaryMetric.name"
EXAMPLES_SEEN = "train/examples_seen"  # the x axis of every curve (its step is the same count)
FACTORS_SECTION, CURVES_SECTION = "study-target-vs-factors", "study-curves"
# The chart view's first section, the target against each factor: two charts a row, each card
# this tall (MLflow's default is three a row, 360 px). Two a row keeps a scatter's axes and
# points clear of the Assistant panel at 1280 px; at this height the first row is whole on
# opening a page 800 px tall (MLflow's header, the shared-view notice and the filters take its
# first 500 px). docs/mlflow.md says what no saved view changes.
FACTOR_COLUMNS, FACTOR_CARD_HEIGHT = 2, 260


def metric_unit(metric: str) -> str | None:
    """What a value of ``metric`` in the runs table means, when it is one of the key ones."""
    for key, unit in METRIC_UNITS.items():
        if metric == key or (key.endswith("/") and metric.startswith(key)):
            return unit
    return None


def table_state(spec: StudySpec) -> dict[str, Any]:
    """The runs table's columns in a saved view: the factors, the target and the key probes
    first, beside the pinned Run Name and Created, each narrow enough that all of them are in
    the first screen; the point id and Duration after them. The Dataset column is left out
    (every trial's dataset is in its run page and in the experiment's description)."""
    params = [_column("params", f) for f in spec.factors]
    metrics = [_column("metrics", m) for m in key_metrics(spec)]
    point = _column("tags", "study.point_id")
    widths = {RUN_NAME_COLUMN: COLUMN_WIDTHS["run_name"], CREATED_COLUMN: COLUMN_WIDTHS["created"]}
    widths |= {c: COLUMN_WIDTHS[c.split(".", 1)[0]] for c in [*params, *metrics, point]}
    widths[metrics[0]] = COLUMN_WIDTHS["target"]
    return {
        "selectedColumns": [*params, *metrics, point],
        "columnOrder": [RUN_NAME_COLUMN, CREATED_COLUMN, *params, *metrics, point, DURATION],
        "columnWidths": widths,
    }


def _section(uuid: str, name: str, display: bool = True, **layout) -> dict[str, Any]:
    """A chart section; ``layout``: MLflow's ``columns`` (charts a row) and ``cardHeight`` (px)."""
    return {"uuid": uuid, "name": name, "display": display, "isReordered": True,
            "deleted": False, "isGenerated": False, **layout}  # fmt: skip


def _chart(uuid: str, section: str, kind: str, **config) -> dict[str, Any]:
    return {"uuid": uuid, "type": kind, "metricSectionId": section, "deleted": False,
            "isGenerated": False, "runsCountToCompare": 10_000, **config}  # fmt: skip


def chart_state(spec: StudySpec) -> dict[str, Any]:
    """The runs page's chart view (MLflow's ``compareRunCharts`` and ``compareRunSections``):
    first the target against each factor (a scatter each, two a row, :data:`FACTOR_COLUMNS`)
    and a parallel-coordinates chart of the factors and the target; then the target's and the
    key probes' curves against ``train/examples_seen``; then MLflow's own sections, one per
    metric prefix, collapsed (a click opens one). Every curve, MLflow's own too, is drawn
    against examples seen."""
    target, factors = spec.target.metric, list(spec.factors)
    param = {"type": "PARAM"}
    charts = [
        _chart(f"study-scatter-{f}", FACTORS_SECTION, "SCATTER",
               displayName=shown(f"{target} by {f}"), xaxis={"key": f, **param},
               yaxis={"key": target, "type": "METRIC"})
        for f in factors
    ]  # fmt: skip
    charts.append(_chart(
        "study-parallel", FACTORS_SECTION, "PARALLEL",
        displayName=shown(f"{', '.join(factors)} → {target}"), selectedParams=factors,
        selectedMetrics=[target], showAllRuns=True,
    ))  # fmt: skip
    for metric in key_metrics(spec):
        charts.append(_chart(
            f"study-curve-{metric}", CURVES_SECTION, "LINE", metricKey=metric,
            displayName=shown(metric), selectedMetricKeys=[metric], xAxisKey="metric",
            selectedXAxisMetricKey=EXAMPLES_SEEN, useGlobalXaxisKey=False, scaleType="linear",
            xAxisScaleType="linear", lineSmoothness=0, useGlobalLineSmoothing=True,
            yAxisKey="metric", yAxisExpressions=[], ignoreOutliers=False,
            range={"xMin": None, "xMax": None, "yMin": None, "yMax": None},
        ))  # fmt: skip
    sections = [
        _section(FACTORS_SECTION, shown(f"{target} against the factors"),
                 columns=FACTOR_COLUMNS, cardHeight=FACTOR_CARD_HEIGHT),
        _section(CURVES_SECTION, f"curves against examples seen ({EXAMPLES_SEEN})"),
        *(_section(f"study-{p.rstrip('/')}", p.rstrip("/"), display=False)
          for p in METRIC_PREFIXES),
    ]  # fmt: skip
    curves = {"xAxisKey": "metric", "selectedXAxisMetricKey": EXAMPLES_SEEN, "lineSmoothness": 0}
    return {
        "compareRunCharts": charts,
        "compareRunSections": sections,
        "isAccordionReordered": True,  # keep these sections first, in this order
        "runListHidden": True,  # the charts take the page's width (a click shows the runs)
        "hideEmptyCharts": True,
        "globalLineChartConfig": curves,
    }


def runs_views(spec: StudySpec) -> dict[str, tuple[str, dict[str, Any]]]:
    """The runs table's saved views of a study: view id -> (name, state). The state holds the
    UI's search facets (filter, sort) and UI state (columns, their order and widths, grouping,
    the chart view's charts) that the UI reads from a shared view (:func:`table_state`,
    :func:`chart_state`); every other setting keeps the UI's default."""
    trials = {
        "searchFilter": "tags.`study.role` = 'trial'",
        "orderByKey": _column("metrics", spec.target.metric),
        "orderByAsc": spec.target.mode == "min",
        "runsHiddenMode": "SHOW_ALL",
        **table_state(spec),
        **chart_state(spec),
    }
    points = trials | {
        "groupBy": {
            "aggregateFunction": "average",
            "groupByKeys": [{"mode": "param", "groupByData": f} for f in spec.factors],
        },
    }
    target = spec.target.metric
    return {
        TRIALS_VIEW: (shown(f"{spec.study}: trials by {target}"), trials),
        POINTS_VIEW: (f"{spec.study}: design points, mean over replicates", points),
    }


def _shown_factor(name: str, factor) -> str:
    values = (
        in_markdown(", ".join(str(v) for v in factor.levels))
        if factor.levels is not None
        else f"{factor.range[0]:g} to {factor.range[1]:g}"
    )
    scale = f", {factor.scale} scale" if factor.is_numeric else ""
    return f"`{name}` ({values}{scale})"


def _report_line(experiment_id: str, parent_id: str | None, local: str | Path | None) -> str:
    if parent_id is None or local is None:
        return (
            f"{REPORT_LINE} not written yet; when the study finishes it is attached to the "
            f"parent run as `{REPORT_ARTIFACT}`"
        )
    link = run_link(experiment_id, parent_id, f"artifacts/{REPORT_ARTIFACT}")
    stamp = time.strftime("%Y-%m-%d %H:%M")
    return (
        f"{REPORT_LINE} [{REPORT_ARTIFACT}]({link}) in the parent run's artifacts "
        f"(written {stamp}); stored copy {in_code(redacted(local))}"
    )


def study_note(spec: StudySpec, design, experiment_id: str, parent_id: str) -> str:
    """The experiment's description (Markdown): what the study is for, its factors, design and
    compute per trial, links to the runs table's views, and a line for the latest report."""
    totals = design.totals()
    per_trial = totals.get("examples_per_trial")
    if "budget_examples" in spec.factors or per_trial is None:
        compute = "each trial's own `budget_examples` (a factor of the study)"
    else:
        compute = f"{per_trial:,} examples (`budget_examples`)"
    dataset = spec.trial.get("dataset") or TrialConfig.model_fields["dataset"].default
    data = "the datasets it varies" if "dataset" in spec.factors else f"`{dataset}`"
    augments = spec.design.augments
    block = f", augmenting the finished factorial `{augments.spec_sha}`" if augments else ""
    direction = "higher" if spec.target.mode == "max" else "lower"
    views = runs_views(spec)
    described = in_markdown(spec.description.strip(), DESCRIPTION_SHOWN) or "(no description)"
    lines = [
        f"**Study `{spec.study}`**: {described}",
        "",
        "- **Factors:** " + "; ".join(_shown_factor(n, f) for n, f in spec.factors.items()),
        f"- **Design:** {spec.design.kind}{block}, {totals['replicates']} replicate(s): "
        f"{totals['trials']} trials at {totals['points']} points "
        f"([parent run]({run_link(experiment_id, parent_id)}))",
        f"- **Compute per trial:** {compute} of {data}",
        f"- **Target:** {in_code(spec.target.metric)}, {direction} is better",
        "- **Runs table:** "
        + " · ".join(f"[{in_markdown(name)}]({view_link(experiment_id, key)})"
                     for key, (name, _) in views.items())
        + " (also under *Saved views*)",
        f"- **Charts:** [{in_markdown(spec.target.metric)} against the factors, and the curves "
        f"against examples seen]({view_link(experiment_id, TRIALS_VIEW, charts=True)})",
        "- **Columns:** " + "; ".join(
            f"{in_code(m)} {metric_unit(m)}" for m in key_metrics(spec) if metric_unit(m)
        ) + ". MLflow shows every value unrounded: a narrow column cuts it short, its tooltip "
        "holds all its digits",
        _report_line(experiment_id, None, None),
    ]  # fmt: skip
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# writing them into a study's record
# ---------------------------------------------------------------------------------------------
def describe_study(record: StudyRecord, spec: StudySpec, design, parent_id: str) -> None:
    """Write the experiment's description (``study_note``, keeping the pointer to a report
    already written), its primary metric (the target) and the runs table's saved views
    (``runs_views``)."""
    client, eid = record.client, record.experiment_id
    tags = client.get_experiment(eid).tags
    note = study_note(spec, design, eid, parent_id)
    old = tags.get(MLFLOW_RUN_NOTE, "").splitlines()
    report = next((line for line in old if line.startswith(REPORT_LINE)), None)
    if report is not None and "not written yet" not in report:
        note = replace_line(note, REPORT_LINE, report)
    client.set_experiment_tag(eid, MLFLOW_RUN_NOTE, note)
    client.set_experiment_tag(eid, PRIMARY_METRIC_TAG, spec.target.metric)
    now = int(time.time() * 1000)
    for key, (name, state) in runs_views(spec).items():
        created = now
        with contextlib.suppress(KeyError, ValueError, TypeError):
            created = int(json.loads(tags[VIEW_TAG_PREFIX + key])["createdAt"])
        envelope = {"name": name, "createdAt": created, "updatedAt": now,
                    "state": json.dumps(state)}  # fmt: skip
        client.set_experiment_tag(eid, VIEW_TAG_PREFIX + key, json.dumps(envelope))


def start_described_parent(record: StudyRecord, spec: StudySpec, design, source_text: str) -> str:
    """The study's parent run as a study run opens it: started or reopened by
    :meth:`StudyRecord.start_parent`, then the experiment described for review
    (:func:`describe_study`). Returns its run id."""
    parent_id = record.start_parent(spec, design, source_text)
    describe_study(record, spec, design, parent_id)
    return parent_id


def point_to_report(record: StudyRecord, parent_id: str, local: str | Path | None = None) -> None:
    """Point the experiment's description at the report just attached to ``parent_id``
    (``report/report.html``), and at its stored copy when there is one (a local path, or
    a URI in the study's bucket)."""
    client, eid = record.client, record.experiment_id
    note = client.get_experiment(eid).tags.get(MLFLOW_RUN_NOTE, "")
    if local is None:
        local = "not kept"
    elif "://" not in str(local):
        local = Path(local).resolve()
    line = _report_line(eid, parent_id, local)
    client.set_experiment_tag(eid, MLFLOW_RUN_NOTE, replace_line(note, REPORT_LINE, line))


__all__ = [
    "describe_study", "point_to_report", "runs_views", "start_described_parent", "study_note",
    "ui_url", "view_link",
]  # fmt: skip
