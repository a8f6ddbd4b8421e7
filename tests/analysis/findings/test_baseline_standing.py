"""Where a study's best point stands against its baselines: the words say "beat", "did not
beat" or "cannot be told apart" exactly when the baseline lies below, above or inside the
point's interval, give the numbers in points and percent, and the report's JSON keeps each
baseline with its standing."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.findings.baselines import (
    baseline_values,
    baselines_json,
    baselines_of,
    point_architectures,
    standing_line,
    standings,
    verdict,
)
from analysis.reading.outcomes import baseline_file, parse_baseline_file
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


def _per_architecture() -> pd.DataFrame:
    """A recorded study of two architectures (cnn_grid 1 and 3), as the record reads back: the
    raw input once, a random-init encoder of each; p0 is cnn_grid 1, p1 cnn_grid 3, p2 a
    cnn_grid the record holds no baseline of."""
    raw = {"metrics": {"probe/knn_top1_h": 0.797}, "seeds": []}

    def random_init(grid: int, value: float) -> dict:
        arch = 1 if grid == 1 else 2
        return {"metrics": {"probe/knn_top1_h": value}, "seeds": [0, 1, 2],
                "of": {"cnn_grid": grid}, "arch": arch}  # fmt: skip

    df = pd.DataFrame({"point_id": ["p0", "p1", "p2"], "cnn_grid": [1, 3, 2],
                       "probe/knn_top1_h": [0.70, 0.80, 0.75]})  # fmt: skip
    df.attrs["baselines"] = {"raw": raw, "random_init": random_init(1, 0.723)}
    df.attrs["baselines_by_architecture"] = [
        {"arch": 1, "fields": {"cnn_grid": 1},
         "baselines": {"raw": raw, "random_init": random_init(1, 0.723)}},
        {"arch": 2, "fields": {"cnn_grid": 3},
         "baselines": {"raw": raw, "random_init": random_init(3, 0.761)}},
    ]  # fmt: skip
    return df


def test_each_point_is_read_against_its_own_architectures_baseline_and_says_which():
    df = _per_architecture()
    point = BestPoint("p1", {"cnn_grid": 3}, "probe/knn_top1_h", "max", 3, 0.80, 0.79, 0.81)
    found = {s.kind: s for s in standings(point, baselines_of(df, "p1"))}
    assert found["random_init"].value == 0.761
    assert found["random_init"].reference() == (
        "a random-init encoder of its own architecture (cnn_grid 3; 76.1%, mean of seeds 0, 1, 2)"
    )
    assert found["raw"].reference() == "the raw input (79.7%)"  # one data: as before
    assert found["random_init"].to_json()["architecture"] == {"cnn_grid": 3}
    out = baselines_json(df, point, tuple(found.values()))
    assert out["random_init"]["architecture"] == {"cnn_grid": 3}
    assert [a["architecture"] for a in out["random_init"]["by_architecture"]] == [
        {"cnn_grid": 1}, {"cnn_grid": 3}]  # fmt: skip
    assert "architecture" not in out["raw"]
    # p0: its own, cnn_grid 1
    (mine,) = [s for s in standings(point, baselines_of(df, "p0")) if s.kind == "random_init"]
    assert mine.value == 0.723 and mine.of == (("cnn_grid", 1),)
    # p2: no baseline of its architecture in the record: the first trial's, and said so
    (first,) = [s for s in standings(point, baselines_of(df, "p2")) if s.kind == "random_init"]
    assert first.reference().startswith(
        "a random-init encoder of the first trial's architecture (cnn_grid 1; 72.3%")
    # without a point (a figure's reference line): the architecture in the name
    assert baseline_values(df, "probe/knn_top1_h") == {
        "the raw input": 0.797, "a random-init encoder at cnn_grid 1": 0.723}  # fmt: skip
    assert point_architectures(df) == {"p0": 1, "p1": 2, "p2": None}


def test_a_study_of_one_architecture_is_worded_as_before():
    df = pd.DataFrame({"point_id": ["p0"], "probe/knn_top1_h": [0.97]})
    df.attrs["baselines"] = RECORDED
    found = standings(best(0.975, 0.965, 0.985), baselines_of(df, "p0"))
    assert [s.name for s in found] == ["the raw input", "a random-init encoder"]
    assert [s.label for s in found] == ["the raw input", "a random-init encoder"]
    assert all("architecture" not in s.to_json() for s in found)
    assert baseline_values(df, "probe/knn_top1_h", "p0") == {
        "the raw input": 0.98, "a random-init encoder": 0.947}  # fmt: skip
    assert point_architectures(df) == {}


@pytest.mark.parametrize(
    ("kind", "seed", "arch", "name"),
    [("raw", None, None, "raw.parquet"), ("random_init", 0, None, "random_init-seed0.parquet"),
     ("random_init", 1, 2, "random_init-seed1-arch2.parquet"),
     ("raw", None, 3, "raw-arch3.parquet")],
)  # fmt: skip
def test_an_architectures_outcome_files_carry_its_number(kind, seed, arch, name):
    assert baseline_file(kind, seed, arch) == name
    assert parse_baseline_file(name) == ((kind, seed) if arch is None else (kind, seed, arch))
