"""Learning curves beside the baselines (analysis.stats.learning_curve), on planted histories:
the table is each point's mean over its replicates at every mark, computed before anything is
drawn; a curve that rises as a line in log examples reaches a baseline above it at the budget
the closed form gives, said as an extrapolation; a flat curve is not rising and gets no
budget; a point level with a baseline within one held-out item is "level"."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.stats.learning_curve import (
    MIN_MARKS,
    crossing_budget,
    learning_curves,
    log_line,
    point_curves,
)

METRIC = "probe/knn_top1_h"
MARKS = (1000, 2000, 4000, 8000)


def history(curves: dict[str, object], replicates: int = 2, marks=MARKS) -> pd.DataFrame:
    """point_id -> f(step, replicate): one row per trial and mark, as load_history gives."""
    rows = []
    for point, f in curves.items():
        for r in range(replicates):
            for step in marks:
                rows.append({"trial_key": f"{point}-r{r}", "point_id": point, "replicate": r,
                             "step": step, METRIC: f(step, r)})  # fmt: skip
    return pd.DataFrame(rows)


def rising(step, r):  # 0.6 at 1,000 examples, 5 points more per e-fold of the examples
    return 0.6 + 0.05 * math.log(step / 1000) + (0.002 if r else -0.002)


def test_the_table_is_each_points_mean_over_its_replicates_at_every_mark():
    table = point_curves(history({"p000": rising}), METRIC)
    assert list(table["step"]) == list(MARKS) and set(table["n"]) == {2}
    expected = [0.6 + 0.05 * math.log(s / 1000) for s in MARKS]  # the replicates' noise cancels
    assert table["mean"].to_numpy() == pytest.approx(expected, abs=1e-12)


def test_the_log_line_and_its_crossing_are_the_closed_form():
    steps = np.array(MARKS, dtype=float)
    a, b = log_line(steps, 0.3 + 0.02 * np.log(steps))
    assert (a, b) == pytest.approx((0.3, 0.02))
    assert crossing_budget(a, b, 0.5) == pytest.approx(math.exp(10), rel=1e-9)
    assert crossing_budget(0.3, 0.0, 0.5) is None and crossing_budget(0.3, -0.01, 0.5) is None


def test_a_rising_curve_below_a_baseline_gets_its_extrapolated_crossing():
    found = learning_curves(history({"p000": rising}), METRIC, {"raw input": 0.8}, items=1000)
    (standing,) = found.standings
    assert standing.state == "below" and standing.rising
    # 0.6 + 0.05 ln(x / 1000) = 0.8  <=>  x = 1000 e^4
    assert standing.crossing == pytest.approx(1000 * math.exp(4), rel=1e-6)
    assert standing.slope_per_doubling == pytest.approx(0.05 * math.log(2), rel=1e-6)
    sentence = found.sentences()[0]
    assert sentence.startswith("p000: 70.4% after 8,000 examples, below raw input (80.0%)")
    assert "still rising" in sentence and "extrapolated" in sentence and "54,598" in sentence
    assert found.to_json()["standings"][0]["crossing_is_extrapolated"] is True


def test_a_flat_curve_is_not_rising_and_gets_no_budget():
    flat = learning_curves(history({"p000": lambda s, r: 0.7}), METRIC, {"raw input": 0.8})
    (standing,) = flat.standings
    assert standing.state == "below" and not standing.rising and standing.crossing is None
    assert flat.sentences()[0].endswith("no longer rising over its last marks.")


def test_above_and_level_are_said_against_one_held_out_item():
    baselines = {"random-init encoder": 0.60, "raw input": 0.7038}
    found = learning_curves(history({"p000": rising}), METRIC, baselines, items=1000)
    states = {s.baseline: s.state for s in found.standings}
    # the last mark is 0.6 + 0.05 ln 8 = 0.70397: 0.4 items from 0.7038, 104 items above 0.60
    assert states == {"random-init encoder": "above", "raw input": "level"}
    assert all(s.crossing is None for s in found.standings)


def test_a_rise_smaller_than_one_item_over_the_tail_is_not_rising():
    slow = learning_curves(history({"p000": lambda s, r: 0.7 + 1e-5 * math.log(s)}), METRIC,
                           {"raw input": 0.8}, items=100)  # fmt: skip
    assert not slow.standings[0].rising


def test_fewer_marks_than_a_curve_needs_give_no_curves():
    short = history({"p000": rising}, marks=MARKS[: MIN_MARKS - 1])
    assert learning_curves(short, METRIC, {"raw input": 0.8}) is None
    assert learning_curves(None, METRIC, {}) is None


def saturating(step, r):  # rises fast, then levels off: 0.8 − 0.2·(1000/x)
    return 0.8 - 0.2 * (1000 / step)


def test_the_last_mark_check_of_a_log_line_curve_misses_nothing():
    """A curve that is a line in log examples is predicted at its last mark exactly."""
    found = learning_curves(history({"p000": rising}), METRIC, {"raw input": 0.8}, items=1000)
    (check,) = found.checks
    assert check.step == MARKS[-1]
    assert check.predicted == pytest.approx(0.6 + 0.05 * math.log(8), abs=1e-12)
    assert check.miss == pytest.approx(0.0, abs=1e-12)
    assert "a miss of +0 points (0 held-out items of 1000)" in found.sentences()[-1]


def test_the_last_mark_check_gives_a_saturating_curves_miss_in_the_closed_form():
    found = learning_curves(history({"p000": saturating}), METRIC, {}, items=2000)
    (check,) = found.checks
    steps = np.array(MARKS[:-1], dtype=float)
    a, b = np.polyfit(np.log(steps), 0.8 - 0.2 * 1000 / steps, 1)[::-1]
    predicted = a + b * math.log(MARKS[-1])
    assert check.predicted == pytest.approx(predicted, abs=1e-12)
    assert check.measured == pytest.approx(0.8 - 0.2 / 8)
    assert check.miss < 0  # the line overshoots a curve that levels off
    items = abs(check.miss) * 2000
    assert f"({items:.0f} held-out items of 2000)" in check.sentence(METRIC)
    assert found.to_json()["last_mark_checks"][0]["miss_items"] == pytest.approx(check.miss * 2000)


def test_no_last_mark_check_without_more_marks_than_the_line_reads():
    found = learning_curves(history({"p000": rising}, marks=MARKS[:3]), METRIC, {"raw": 0.8})
    assert found is not None and found.checks == ()
