"""The best point and the t interval of its mean, against values worked by hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis.stats.best import best_point, t_interval

# Student's t quantiles t(0.975, df), as printed in any table (4.303 and 12.706).
T_2 = 4.302652729749462
T_1 = 12.706204736174694
M = "probe/knn_top1_h"


def frame(rows: list[tuple], factors=("temperature", "batch_size")) -> pd.DataFrame:
    """(point_id, status, temperature, batch_size, value) rows as a results table."""
    df = pd.DataFrame(rows, columns=["point_id", "status", *factors, M])
    df["z/align"] = 0.5
    df.attrs["factors"] = list(factors)
    return df


def test_best_of_max_with_its_interval_worked_by_hand():
    df = frame([
        ("p0", "finished", 0.1, 64, 0.80), ("p0", "finished", 0.1, 64, 0.84),
        ("p0", "finished", 0.1, 64, 0.82),
        ("p1", "finished", 0.5, 64, 0.70), ("p1", "finished", 0.5, 64, 0.74),
        ("p1", "finished", 0.5, 64, 0.72),
    ])  # fmt: skip
    best = best_point(df, M, "max")
    # mean 0.82, s = sqrt((0.02² + 0.02² + 0²) / 2) = 0.02, half = 4.3027 · 0.02 / √3 = 0.049683
    assert best.point_id == "p0" and best.n == 3
    assert best.mean == pytest.approx(0.82, abs=1e-12)
    half = T_2 * 0.02 / math.sqrt(3)
    assert half == pytest.approx(0.0496827, abs=1e-7)
    assert best.ci_low == pytest.approx(0.82 - half, abs=1e-12)
    assert best.ci_high == pytest.approx(0.82 + half, abs=1e-12)
    assert best.factors == {"temperature": 0.1, "batch_size": 64}
    assert type(best.factors["batch_size"]) is int and type(best.factors["temperature"]) is float
    assert best.finished == 6 and best.points == 2 and best.has_interval


def test_min_mode_picks_the_smallest_mean_and_two_replicates_give_t_with_one_df():
    df = frame([
        ("p0", "finished", 0.1, 64, 0.7), ("p0", "finished", 0.1, 64, 0.9),
        ("p1", "finished", 0.5, 64, 0.95), ("p1", "finished", 0.5, 64, 0.97),
    ])  # fmt: skip
    best = best_point(df, M, "min")
    # mean 0.8, s = √0.02 = 0.141421, half = 12.706 · 0.141421 / √2 = 1.270620
    assert best.point_id == "p0" and best.mean == pytest.approx(0.8)
    low, high = t_interval([0.7, 0.9])
    assert low == pytest.approx(0.8 - T_1 * 0.1, abs=1e-12)
    assert high == pytest.approx(0.8 + T_1 * 0.1, abs=1e-12)
    # an accuracy's interval is cut to [0, 1]: the t interval runs far past both ends here
    assert (best.ci_low, best.ci_high) == (0.0, 1.0)


def test_one_replicate_has_no_interval_never_a_zero_width_one():
    df = frame([("p0", "finished", 0.1, 64, 0.9), ("p1", "finished", 0.5, 64, 0.8)])
    best = best_point(df, M, "max")
    assert best.point_id == "p0" and best.n == 1 and best.mean == 0.9
    assert best.ci_low is None and best.ci_high is None and not best.has_interval
    assert t_interval([0.9]) == (None, None) and t_interval([]) == (None, None)


def test_ties_go_to_more_replicates_then_to_the_first_point_id():
    df = frame([
        ("p2", "finished", 0.5, 64, 0.8),
        ("p1", "finished", 0.1, 64, 0.7), ("p1", "finished", 0.1, 64, 0.9),
        ("p0", "finished", 0.1, 128, 0.6),
    ])  # fmt: skip
    assert best_point(df, M, "max").point_id == "p1"  # 0.8 twice: two replicates beat one
    same_n = frame([("p3", "finished", 0.5, 64, 0.8), ("p1", "finished", 0.1, 64, 0.8)])
    assert best_point(same_n, M, "max").point_id == "p1"
    assert best_point(same_n, M, "min").point_id == "p1"


def test_nan_values_leave_their_point_and_a_point_of_nans_is_no_candidate():
    nan = float("nan")
    df = frame([
        ("p0", "finished", 0.1, 64, 0.6), ("p0", "finished", 0.1, 64, nan),
        ("p0", "finished", 0.1, 64, 0.8),
        ("p1", "finished", 0.5, 64, nan), ("p1", "finished", 0.5, 64, nan),
    ])  # fmt: skip
    best = best_point(df, M, "max")
    assert best.point_id == "p0" and best.n == 2 and best.mean == pytest.approx(0.7)
    assert t_interval([0.6, 0.8]) == pytest.approx((0.7 - T_1 * 0.1, 0.7 + T_1 * 0.1))
    assert (best.ci_low, best.ci_high) == (0.0, 1.0)  # the two values, NaN left out, cut
    assert best.points == 1 and best.finished == 5


def test_failed_and_unfinished_trials_are_left_out():
    df = frame([
        ("p0", "finished", 0.1, 64, 0.6), ("p0", "finished", 0.1, 64, 0.62),
        ("p1", "failed", 0.5, 64, 0.99), ("p1", "diverged", 0.5, 64, 0.98),
        ("p1", "killed", 0.5, 64, 0.97), ("p1", "finished", 0.5, 64, 0.5),
    ])  # fmt: skip
    best = best_point(df, M, "max")
    assert best.point_id == "p0" and best.finished == 3 and best.points == 2
    nothing = frame([("p0", "failed", 0.1, 64, 0.9)])
    with pytest.raises(LookupError, match="no finished trial has a value of 'probe/knn_top1_h'"):
        best_point(nothing, M, "max")


def test_a_table_without_status_counts_every_row():
    df = frame([("p0", "finished", 0.1, 64, 0.6)]).drop(columns="status")
    assert best_point(df, M, "max").finished == 1


def test_unknown_metric_mode_and_level_are_refused_by_name():
    df = frame([("p0", "finished", 0.1, 64, 0.6)])
    with pytest.raises(ValueError, match=r"metric 'probe/knn_top5' is not in the results") as err:
        best_point(df, "probe/knn_top5", "max")
    assert "probe/knn_top1_h" in str(err.value) and "z/align" in str(err.value)
    with pytest.raises(ValueError, match="mode must be one of"):
        best_point(df, M, "maximise")
    with pytest.raises(ValueError, match="level"):
        best_point(df, M, "max", level=1.0)
    with pytest.raises(ValueError, match="point_id"):
        best_point(df.drop(columns="point_id"), M, "max")


def test_factors_can_be_named_and_default_to_the_table_attrs():
    df = frame([("p0", "finished", 0.1, 64, 0.6)])
    assert best_point(df, M, "max", factors=["batch_size"]).factors == {"batch_size": 64}
    df.attrs.clear()
    assert best_point(df, M, "max").factors == {}


def _outcomes_of(run_ids: list[str], unread: dict[str, str]):
    """Per-item outcomes for ``run_ids`` (10 items, all right), but those in ``unread`` (run id
    -> problem), which are named unread instead."""
    import numpy as np

    from analysis.reading.outcomes import Outcomes, SystemOutcomes, Unread

    items = np.arange(10)
    held = {r: SystemOutcomes(items, items % 3, {M: items % 3}) for r in run_ids if r not in unread}
    names = [Unread(f"trial {r}", r, f"/x/{r}/outcomes.parquet", p) for r, p in unread.items()]
    return Outcomes(trials=held, unread=tuple(names))


@pytest.mark.parametrize("problem", ["missing", "ArrowInvalid: not a parquet file"])
def test_a_replicate_without_its_outcomes_falls_back_to_the_seeds_and_says_why(problem):
    from analysis.findings.headline import best_sentence

    df = frame([("p0", "finished", 0.1, 64, 0.80), ("p0", "finished", 0.1, 64, 0.84),
                ("p1", "finished", 0.5, 64, 0.70)])  # fmt: skip
    df["run_id"] = ["a", "b", "c"]
    best = best_point(df, M, "max", outcomes=_outcomes_of(["a", "b", "c"], {"b": problem}))
    assert best.point_id == "p0" and best.interval is None  # the t interval over the seeds
    assert best.ci_low == pytest.approx(0.82 - T_1 * 0.02, abs=1e-12)
    said = "are missing" if problem == "missing" else "cannot be read"
    assert best.sources == f"seeds only (the per-item outcomes of trial b {said})"
    line = best_sentence(best, {"metric": M, "mode": "max"})
    assert f"counting seeds only (the per-item outcomes of trial b {said})" in line


def test_a_single_replicate_without_its_outcomes_keeps_its_line_and_says_why():
    from analysis.findings.headline import best_sentence

    df = frame([("p0", "finished", 0.1, 64, 0.80), ("p1", "finished", 0.5, 64, 0.70)])
    df["run_id"] = ["a", "c"]
    best = best_point(df, M, "max", outcomes=_outcomes_of(["a", "c"], {"a": "missing"}))
    assert best.point_id == "p0" and not best.has_interval
    line = best_sentence(best, {"metric": M, "mode": "max"})
    assert line.startswith("Highest probe/knn_top1_h observed at p0")
    assert "one replicate, and the per-item outcomes of trial a are missing, so no interval" in line
