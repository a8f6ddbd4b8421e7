"""Where a study's best point stands against its baselines: the words say "beat", "did not
beat" or "cannot be told apart" exactly when the baseline lies below, above or inside the
point's interval, give the numbers in points and percent, and the report's JSON keeps each
baseline with its standing."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.findings.baselines import baselines_json, standing_line, standings, verdict
from analysis.stats.best import BestPoint


def best(mean: float, low: float | None, high: float | None, mode: str = "max") -> BestPoint:
    n = 1 if low is None else 3
    return BestPoint("p001", {"temperature": 0.1}, "probe/knn_top1_h", mode, n, mean, low, high)


RECORDED = {
    "raw": {"metrics": {"probe/knn_top1_h": 0.98}, "seeds": []},
    "random_init": {"metrics": {"probe/knn_top1_h": 0.947, "z/align": 0.4}, "seeds": [0, 1]},
}


@pytest.mark.parametrize(
    ("mean", "low", "high", "raw", "random_init"),
    [
        (0.975, 0.965, 0.985, "cannot be told apart", "beat"),
        (0.960, 0.955, 0.965, "did not beat", "beat"),
        (0.990, 0.985, 0.995, "beat", "beat"),
        (0.950, 0.940, 0.960, "did not beat", "cannot be told apart"),
        (0.975, None, None, "untested", "untested"),
    ],
)
def test_the_verdict_follows_where_the_baseline_lies_against_the_interval(
    mean, low, high, raw, random_init
):
    found = {s.kind: s for s in standings(best(mean, low, high), RECORDED)}
    assert found["raw"].verdict == raw and found["random_init"].verdict == random_init
    assert found["raw"].difference == pytest.approx(mean - 0.98)


def test_a_target_to_minimise_is_beaten_from_below():
    point = BestPoint("p0", {}, "z/align", "min", 3, 0.2, 0.15, 0.25)
    assert verdict(point, 0.4) == "beat" and verdict(point, 0.1) == "did not beat"
    assert verdict(point, 0.2) == "cannot be told apart"
    found = standings(point, RECORDED)
    assert [s.kind for s in found] == ["random_init"]  # the raw input has no geometry


def test_the_words_give_the_numbers_in_points_and_percent():
    line = standing_line(standings(best(0.960, 0.955, 0.965), RECORDED))
    assert line == (
        "Against the baselines, it did not beat the raw input (98.0%): 2 points short, outside "
        "its 95% interval; it beat a random-init encoder (94.7%, mean of seeds 0, 1) by 1.3 "
        "points."
    )
    within = standing_line(standings(best(0.975, 0.965, 0.985), RECORDED))
    told = "cannot be told apart from the raw input (98.0%), which lies within its 95% interval"
    assert told in within
    once = standing_line(standings(best(0.975, None, None), RECORDED))
    assert "scored 0.5 points below the raw input (98.0%; one replicate, so not tested)" in once
    assert standing_line(()) is None


def test_a_z_probe_is_compared_with_the_raw_inputs_h_score():
    point = BestPoint("p0", {}, "probe/knn_top1_z", "max", 3, 0.9, 0.88, 0.92)
    (raw,) = [s for s in standings(point, RECORDED) if s.kind == "raw"]
    assert raw.baseline_metric == "probe/knn_top1_h" and raw.value == 0.98
    assert "its probe/knn_top1_h" in raw.sentence()


def test_the_report_json_keeps_each_baseline_with_its_standing():
    df = pd.DataFrame({"point_id": ["p0"], "probe/knn_top1_h": [0.97]})
    df.attrs["baselines"] = RECORDED
    out = baselines_json(df, best(0.975, 0.965, 0.985))
    assert list(out) == ["raw", "random_init"]
    assert out["raw"]["standing"]["verdict"] == "cannot be told apart"
    assert out["random_init"]["metrics"]["z/align"] == 0.4
    assert baselines_json(pd.DataFrame(), None) == {}
