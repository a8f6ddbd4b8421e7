"""Learning curves in the report of a recorded study (planted by tests/kits/recordkit.py, four
evaluation marks per trial, a raw-input baseline on the parent): report.html says where each
point's curve stands against the baseline at its last mark, report.json carries the same, the
figure draws the table the analysis computed, and a study with two marks gets none of it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from recordkit import record_study

from analysis.reading.load import load_history, load_study
from analysis.reading.record import BASELINES_TAG
from analysis.report.page import figure_inputs
from analysis.study_analysis import analyse
from study.record import StudyRecord
from study.reporting import make_report

NAME = "curves"
METRIC = "probe/knn_top1_h"
RAW = 0.97  # above every planted final of the default truth


def recorded(folder, marks: int) -> str:
    uri = record_study(folder, NAME, marks=marks)
    record = StudyRecord.existing(uri, NAME)
    raw = {"raw": {"metrics": {METRIC: RAW}, "per_seed": {}, "seeds": [], "name": "raw input",
                   "about": "the pixels"}}  # fmt: skip
    record.client.set_tag(record.parent().info.run_id, BASELINES_TAG, json.dumps(raw))
    return uri


def test_the_report_says_where_each_curve_stands_against_the_baselines(tmp_path):
    uri = recorded(tmp_path, marks=4)
    summary, folder = make_report(StudyRecord.existing(uri, NAME), None, tmp_path / "report",
                                  tracking_uri=uri, figures=False)  # fmt: skip
    curves = summary["learning_curves"]
    assert curves["metric"] == METRIC and len(curves["marks"]) == 4
    points = load_study(NAME, uri)["point_id"].nunique()
    assert len(curves["standings"]) == points  # one baseline, one standing per point
    # the planted metrics rise linearly in the examples: still rising at the last mark, below
    # the raw input, with an extrapolated budget past the one the study ran
    for standing in curves["standings"]:
        assert standing["baseline"] == "the raw input" and standing["state"] == "below"
        assert standing["rising"] and standing["crossing"] > standing["last_step"]
        assert standing["crossing_is_extrapolated"]
    # four marks: the line through the three before the last is checked on the last; planted
    # curves linear in the examples rise faster than a line in log examples says: it undershoots
    checks = curves["last_mark_checks"]
    assert {c["point_id"] for c in checks} == set(load_study(NAME, uri)["point_id"])
    assert all(c["miss"] > 0 and c["step"] == curves["marks"][-1] for c in checks)
    page = (folder / "report.html").read_text()
    assert '<h2 id="learning-curves">Learning curves</h2>' in page
    assert "an extrapolation of a line in log examples" in page and "below the raw input" in page
    assert "checked on its own last mark, the line through the 3 marks before it" in page


def test_the_figure_draws_the_table_the_analysis_computed(tmp_path):
    from analysis.report.plots import all_figures

    uri = recorded(tmp_path, marks=4)
    df = load_study(NAME, uri)
    history = load_history(NAME, uri, (METRIC,))
    analysis = analyse(df, history=history)
    figure = all_figures(df, history, **figure_inputs(analysis))["learning_curves"]
    table = analysis.learning.table
    lines = [line for line in figure.axes[0].get_lines() if line.get_label() in
             set(table["point_id"])]  # fmt: skip
    assert len(lines) == table["point_id"].nunique()
    for line in lines:
        curve = table[table["point_id"] == line.get_label()]
        assert np.asarray(line.get_xdata()) == pytest.approx(curve["step"].to_numpy())
        assert np.asarray(line.get_ydata()) == pytest.approx(curve["mean"].to_numpy() * 100)
    levels = [line.get_ydata()[0] for line in figure.axes[0].get_lines()
              if line.get_label() not in set(table["point_id"])]  # fmt: skip
    assert RAW * 100 in levels  # the baseline, as a horizontal line


def test_two_marks_are_no_curve(tmp_path):
    uri = recorded(tmp_path, marks=2)
    summary, folder = make_report(StudyRecord.existing(uri, NAME), None, tmp_path / "report",
                                  tracking_uri=uri, figures=False)  # fmt: skip
    assert summary["learning_curves"] is None
    assert "Learning curves" not in (folder / "report.html").read_text()
