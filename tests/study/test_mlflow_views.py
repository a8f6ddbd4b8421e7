"""MLflow's UI as the study's review surface, checked without a browser: the
saved views' columns, their order and widths, the chart view's charts, the experiment's
description of the columns, the parent run's findings first. The browser tests
(test_browser_review.py) check what a person sees of them at 1280 and 1400 px."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from types import SimpleNamespace

from search_spaces.designs import build_design
from search_spaces.spec import parse_spec
from study.mlflow_views import (
    CREATED_COLUMN,
    CURVES_SECTION,
    DURATION,
    EXAMPLES_SEEN,
    FACTORS_SECTION,
    PRIMARY_METRIC_TAG,
    RUN_NAME_COLUMN,
    chart_state,
    runs_views,
    start_described_parent,
    table_state,
    view_link,
)
from study.record import StudyRecord
from study.reporting import findings_lead, parent_note

TARGET = "probe/knn_top1_h"


def _spec():
    return parse_spec({
        "study": "review", "description": "Does a lower temperature help digits?",
        "trial": {"dataset": "digits", "budget_examples": 1536},
        "factors": {"temperature": {"levels": [0.1, 0.5], "scale": "log"},
                    "batch_size": {"levels": [64, 256], "scale": "log"}},
        "design": {"kind": "full_factorial", "replicates": 1},
    })  # fmt: skip


def test_the_views_show_the_factors_then_the_target_and_probes_beside_the_pinned_columns():
    state = table_state(_spec())
    factors = ["params.`temperature`", "params.`batch_size`"]
    metrics = [f"metrics.`{TARGET}`", "metrics.`z/align`", "metrics.`z/uniform`"]
    assert state["selectedColumns"] == [*factors, *metrics, "tags.`study.point_id`"]
    assert "attributes.`Dataset`" not in state["selectedColumns"]
    assert state["columnOrder"] == [RUN_NAME_COLUMN, CREATED_COLUMN, *factors, *metrics,
                                    "tags.`study.point_id`", DURATION]  # fmt: skip
    widths = state["columnWidths"]
    # the pinned columns, the factors, the target and both probes fit beside MLflow's sidebar
    # and its Assistant panel in a 1280 px window: a table about 700 px wide, its checkbox
    # column 73 px
    first_screen = [RUN_NAME_COLUMN, CREATED_COLUMN, *factors, *metrics]
    assert 73 + sum(widths[c] for c in first_screen) <= 700
    assert widths[metrics[0]] >= max(widths[c] for c in metrics[1:])  # the target widest


def test_the_chart_view_opens_on_the_target_against_each_factor_then_the_curves():
    state = chart_state(_spec())
    sections = state["compareRunSections"]
    assert [s["uuid"] for s in sections[:2]] == [FACTORS_SECTION, CURVES_SECTION]
    assert all(s["display"] for s in sections[:2]) and not any(s["display"] for s in sections[2:])
    assert state["isAccordionReordered"] is True  # MLflow keeps this order
    first = [c for c in state["compareRunCharts"] if c["metricSectionId"] == FACTORS_SECTION]
    assert [(c["type"], c.get("xaxis"), c.get("yaxis")) for c in first[:2]] == [
        ("SCATTER", {"key": f, "type": "PARAM"}, {"key": TARGET, "type": "METRIC"})
        for f in ("temperature", "batch_size")
    ]
    (parallel,) = first[2:]
    assert parallel["type"] == "PARALLEL"
    assert parallel["selectedParams"] == ["temperature", "batch_size"]
    assert parallel["selectedMetrics"] == [TARGET]
    curves = [c for c in state["compareRunCharts"] if c["metricSectionId"] == CURVES_SECTION]
    assert [c["metricKey"] for c in curves] == [TARGET, "z/align", "z/uniform"]
    assert {(c["type"], c["xAxisKey"], c["selectedXAxisMetricKey"]) for c in curves} == {
        ("LINE", "metric", EXAMPLES_SEEN)
    }
    assert state["globalLineChartConfig"]["selectedXAxisMetricKey"] == EXAMPLES_SEEN
    # both saved views carry the charts; the points view averages them over replicates
    views = runs_views(_spec())
    assert all(v[1]["compareRunCharts"] == state["compareRunCharts"] for v in views.values())


def test_the_description_links_the_chart_view_and_says_what_the_columns_hold(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec = _spec()
    record = StudyRecord(uri, spec.study, tmp_path / "artifacts")
    start_described_parent(record, spec, build_design(spec), "text")
    experiment = record.client.get_experiment(record.experiment_id)
    note = experiment.tags["mlflow.note.content"]
    link = view_link(record.experiment_id, "study-trials", charts=True)
    assert "compareRunsMode=CHART" in link and f"]({link})" in note
    columns = next(line for line in note.splitlines() if line.startswith("- **Columns:**"))
    assert "`probe/knn_top1_h` accuracy as a fraction (0.975 = 97.5%)" in columns
    assert "`z/align`" in columns and "`z/uniform`" in columns and "unrounded" in columns
    assert experiment.tags[PRIMARY_METRIC_TAG] == TARGET
    state = json.loads(json.loads(experiment.tags["mlflow.sharedViewState.study-trials"])["state"])
    assert state["compareRunCharts"] and state["columnOrder"][0] == RUN_NAME_COLUMN


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports (``from x import y`` counts as x and x.y), anywhere in it."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return names


def test_the_views_build_on_the_record_and_the_record_never_imports_them():
    study = Path(__file__).resolve().parents[2] / "study"
    assert "study.record" in _imports(study / "mlflow_views.py")
    assert "study.mlflow_views" not in _imports(study / "record.py")


class _Headline:
    sentence = "The study varied temperature."
    target = "probe/knn_top1_h"
    on_target = None
    found = ("Doubling temperature lowers probe/knn_top1_h by 2.8 points.",)
    not_detected = ("No factor has a detectable effect on z/align.",)
    best = "Highest probe/knn_top1_h at p000."
    against = None
    confirmation = None
    next_step = "run 2 replicates"
    notes = ()
    unfitted = ()
    unfinished = None


_Parent = SimpleNamespace(data=SimpleNamespace(  # an mlflow Run's shape
    params={"design": "full_factorial", "factors": "temperature", "trials": "4"},
    tags={"study.spec_sha": "abc"},
))  # fmt: skip


def test_the_parent_description_opens_with_the_findings():
    note = parent_note(_Headline, _Parent)
    lead = findings_lead(_Headline)
    assert lead == "**Findings.** Doubling temperature lowers probe/knn_top1_h by 2.8 points."
    first = ("**In short.** Doubling temperature lowers probe/knn_top1_h by 2.8 points. "
             "**Best:** Highest probe/knn_top1_h at p000. **Next:** run 2 replicates")  # fmt: skip
    assert note.startswith(f"{first}\n\n{lead}\n\nThe study varied temperature.\n\n**Not "
                           "detectable**")  # fmt: skip
    assert "**Next study.** Run 2 replicates" in note and "\n---\n\n**Design.**" in note
    quiet = type("Quiet", (_Headline,), {"found": (), "on_target": None})
    assert findings_lead(quiet) == "**Findings.** No effect was detected."
