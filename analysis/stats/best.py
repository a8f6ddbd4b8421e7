"""The best design point of a study and the interval of its mean: the parent run's summary.

A *point* is the set of trials (replicates) that share a ``point_id``; its value is the mean of
the target metric over its finished replicates. The best point is the one with the best mean in
the target's direction (``max`` or ``min``), *selected* among the study's points: its mean is the
largest of N and so biased upward (the winner's curse), which only confirmation runs at the
chosen setting remove (Montgomery, ch. 11; ``study next --confirm``).

Its 95 % interval counts what the record allows:

- with per-item outcomes (:mod:`analysis.reading.outcomes`) of an accuracy: the seeds and the
held-out
  items together (:func:`analysis.stats.measurement.two_source_interval`, a variance decomposition
  of the replicates × items outcomes); one replicate leaves the items alone;
- without them: Student's t interval over its replicates,
  ``mean ± t(0.975, n - 1) · s / √n``, the seeds alone. One replicate, or replicates that agree
  exactly, give no interval (``ci_low`` and ``ci_high`` are None), never one of zero width.

Pure: reads a results frame (``analysis.reading.load``), writes nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from analysis.stats.measurement import SOURCES_SEEDS, Interval, two_source_interval
from analysis.stats.units import bounds, is_accuracy

FINISHED = "finished"
MODES = ("max", "min")
DEFAULT_TARGET = {"metric": "probe/knn_top1_h", "mode": "max"}


@dataclass(frozen=True)
class BestPoint:
    """The best design point of a study.

    ``point_id``: the point's id in the record (``study.point_id``); ``factors``: its factor
    values (factor -> value, as the results table holds them); ``metric`` and ``mode``: the
    target it is best for; ``n``: its finished replicates with a value of the metric; ``mean``:
    their mean, in the metric's own units; ``ci_low`` and ``ci_high``: the 95 % t interval of
    that mean (cut to the metric's bounds, [0, 1] for an accuracy: a t interval is symmetric and
    can cross them), None when ``n`` < 2; ``finished``: finished trials in the whole table;
    ``points``: design points with at least one finished value; ``unread``: why the interval
    counts the seeds only although the record keeps per-item outcomes (a replicate's outcomes
    file is missing or spoiled: ``the per-item outcomes of p001-r1 are missing``), else None.
    """

    point_id: str
    factors: dict[str, Any]
    metric: str
    mode: str
    n: int
    mean: float
    ci_low: float | None
    ci_high: float | None
    finished: int = 0
    points: int = 0
    level: float = 0.95
    interval: Interval | None = None
    run_ids: tuple[str, ...] = ()
    seeds: tuple[int | None, ...] = ()
    unread: str | None = None

    @property
    def has_interval(self) -> bool:
        return self.ci_low is not None and self.ci_high is not None

    @property
    def items(self) -> int | None:
        """The held-out items each replicate was scored on, when the record says."""
        return self.interval.items if self.interval is not None and self.interval.items else None

    @property
    def sources(self) -> str | None:
        """The sources of error the interval counts, in words (None without an interval)."""
        if not self.has_interval:
            return None
        if self.interval is not None:
            return self.interval.sources
        return f"seeds only ({self.unread})" if self.unread else SOURCES_SEEDS

    @property
    def selected(self) -> bool:
        """Whether the point was chosen among several (its mean is then biased upward)."""
        return self.points > 1

    def to_json(self) -> dict[str, Any]:
        return {"point_id": self.point_id, "factors": self.factors, "metric": self.metric,
                "mode": self.mode, "replicates": self.n, "mean": self.mean,
                "ci_low": self.ci_low, "ci_high": self.ci_high, "level": self.level,
                "sources": self.sources, "items": self.items,
                "selected_among": self.points, "finished": self.finished,
                "interval": None if self.interval is None else self.interval.to_json(),
                "unread": self.unread}  # fmt: skip


def finished_trials(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of trials that finished (``status`` == ``finished``); every row when the table
    has no ``status`` column. Failed, killed, collapsed and diverged trials are left out."""
    return df[df["status"] == FINISHED] if "status" in df.columns else df


def replicates_per_point(df: pd.DataFrame) -> int:
    """The most finished replicates any design point has (1 without a point_id)."""
    done = finished_trials(df)
    if "point_id" not in done or done.empty:
        return 1
    return int(done.groupby("point_id").size().max())


def t_interval(values: list[float], level: float = 0.95) -> tuple[float | None, float | None]:
    """Student's t interval of the mean of ``values`` at ``level``; (None, None) for fewer than
    two values."""
    n = len(values)
    if n < 2:
        return None, None
    mean = math.fsum(values) / n
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
    return mean - half, mean + half


def best_point(
    df: pd.DataFrame,
    metric: str,
    mode: str,
    factors: list[str] | None = None,
    level: float = 0.95,
    outcomes=None,
) -> BestPoint:
    """The point with the best mean of ``metric`` among finished trials, with its t interval.

    Args:
        df: one row per trial (the results table: ``analysis.reading.load.read_results`` or
            ``load_study``), with columns ``point_id``, ``metric`` and, optionally, ``status``
            (only ``finished`` rows count; all rows when absent) and the factor columns.
        metric: the target metric's column, e.g. ``probe/knn_top1_h``.
        mode: ``max`` (higher is better) or ``min``.
        factors: the factor columns to report; default ``df.attrs["factors"]``.
        level: the interval's coverage, 0 < level < 1.
        outcomes: the study's per-item outcomes (:class:`analysis.reading.outcomes.Outcomes`), or
        None;
            with every replicate's outcomes of an accuracy, the interval counts the items too.

    NaN values of the metric (a finished trial that logged none) are left out of their point;
    a point with no value left is not a candidate. Ties of the mean go to the point with more
    replicates, then to the point whose ``point_id`` sorts first.

    Raises:
        ValueError: ``metric`` is not a column of ``df`` (the message names it and the metric
            columns there are), ``mode`` is not max or min, ``level`` is outside (0, 1), or
            ``df`` has no ``point_id`` column.
        LookupError: no finished trial has a value of ``metric``.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if not 0 < level < 1:
        raise ValueError(f"level must lie strictly between 0 and 1, got {level!r}")
    if metric not in df.columns:
        known = sorted(c for c in df.columns if "/" in str(c))
        raise ValueError(
            f"metric {metric!r} is not in the results table; its metrics are: "
            f"{', '.join(known) or 'none'}"
        )
    if "point_id" not in df.columns:
        raise ValueError("the results table has no point_id column")
    factors = list(df.attrs.get("factors", []) if factors is None else factors)
    done = finished_trials(df)
    values = pd.to_numeric(done[metric], errors="coerce").astype(float)
    finite = values.apply(math.isfinite)  # NaN and ±inf: no value (the headline names them)
    valued = done[finite].assign(_value=values[finite])
    if valued.empty:
        raise LookupError(f"no finished trial has a value of {metric!r}")
    candidates = []
    for point_id, rows in valued.groupby("point_id", sort=True):
        v = rows["_value"].tolist()
        candidates.append((math.fsum(v) / len(v), len(v), str(point_id), rows))
    sign = -1.0 if mode == "max" else 1.0
    mean, n, point_id, rows = min(candidates, key=lambda c: (sign * c[0], -c[1], c[2]))
    run_ids = tuple(str(r) for r in rows["run_id"]) if "run_id" in rows else ()
    seeds = tuple(_seed(s) for s in rows["seed"]) if "seed" in rows else ()
    interval = item_interval(outcomes, run_ids, metric, level)
    if interval is not None:
        low, high = interval.low, interval.high
    else:
        low, high = t_interval(rows["_value"].tolist(), level)
        if low is not None and high - low <= 0:  # replicates that agree: no zero-width interval
            low = high = None
    limits = bounds(metric)
    if limits is not None and low is not None:  # an accuracy's interval stays within [0, 1]
        low, high = max(low, limits[0]), min(high, limits[1])
    first = rows.iloc[0]
    chosen = {name: _plain(first[name]) for name in factors if name in rows.columns}
    return BestPoint(
        point_id, chosen, metric, mode, n, mean, low, high,
        finished=len(done), points=len(candidates), level=level, interval=interval,
        run_ids=run_ids, seeds=seeds,
        unread=None if interval is not None else unread_words(outcomes, run_ids, metric),
    )  # fmt: skip


def unread_words(outcomes, run_ids: tuple[str, ...], metric: str) -> str | None:
    """Why these replicates' interval cannot count the held-out items although the record keeps
    per-item outcomes: 'the per-item outcomes of p001-r1 are missing' (or 'cannot be read');
    None when nothing of theirs is unread (or ``metric`` is no accuracy)."""
    if outcomes is None or not is_accuracy(metric):
        return None
    unread = outcomes.unread_of(run_ids) if hasattr(outcomes, "unread_of") else ()
    if not unread:
        return None
    names = ", ".join(u.system for u in unread)
    gone = all(u.problem == "missing" for u in unread)
    return f"the per-item outcomes of {names} {'are missing' if gone else 'cannot be read'}"


def replicate_outcomes(outcomes, run_ids: tuple[str, ...], metric: str) -> np.ndarray | None:
    """The replicates × items 0/1 outcomes of ``metric`` for ``run_ids``; None unless the
    record holds every one of them (an interval over some replicates would claim less error
    than there is)."""
    if not outcomes or not run_ids or not is_accuracy(metric):
        return None
    table = outcomes.table(metric, list(run_ids))
    if len(table) != len(run_ids):
        return None
    return table.to_numpy()


def item_interval(outcomes, run_ids: tuple[str, ...], metric: str, level: float) -> Interval | None:
    """The two-source interval of ``metric`` over ``run_ids``' outcomes, or None without them."""
    matrix = replicate_outcomes(outcomes, run_ids, metric)
    return None if matrix is None else two_source_interval(matrix, level)


def _seed(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value (for JSON and for messages)."""
    return value.item() if hasattr(value, "item") else value


__all__ = [
    "BestPoint",
    "best_point",
    "finished_trials",
    "item_interval",
    "replicate_outcomes",
    "t_interval",
]


def target_of(df: pd.DataFrame) -> dict[str, str]:
    """The study's target ``{"metric", "mode"}`` from the frame's attrs, else the default."""
    target = df.attrs.get("target")
    if isinstance(target, dict) and target.get("metric"):
        return {"metric": target["metric"], "mode": target.get("mode", "max")}
    return dict(DEFAULT_TARGET)


def best_of_target(df: pd.DataFrame, target: dict[str, str], outcomes=None) -> BestPoint | None:
    """The best point of ``target``; None when no finished trial has a value of it."""
    try:
        return best_point(df, target["metric"], target["mode"], outcomes=outcomes)
    except (LookupError, ValueError):  # no finished trial, or the metric is not recorded
        return None


@dataclass(frozen=True)
class StudySummary:
    """What the parent run's summary says: how many trials, how many finished, and the best
    point of the target among the finished (None when none has a value of it)."""

    trials: int
    finished: int
    metric: str
    mode: str
    best: BestPoint | None


def study_summary(df: pd.DataFrame, metric: str, mode: str, outcomes=None) -> StudySummary:
    """The summary of the results frame ``df`` for the target ``metric`` (``mode``)."""
    best = None
    if metric in df.columns:  # else no trial logged it (every one failed early)
        best = best_of_target(df, {"metric": metric, "mode": mode}, outcomes)
    return StudySummary(len(df), len(finished_trials(df)), metric, mode, best)
