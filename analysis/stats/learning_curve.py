"""Learning curves beside the baselines: each design point's probe accuracy against the examples
seen, at every evaluation mark, and where the curve stands against each baseline at the last
mark.

Computed first into a frozen :class:`LearningCurves` (the table a figure draws and the sentences
the report says), from a study's history (:func:`analysis.reading.load.load_history`: one row
per trial and evaluation, ``step`` = examples seen) and its baselines' values of the same
metric. A point's curve is the mean over its replicates at each mark.

Whether a curve is still rising, and when it would reach a baseline it is below, is read from a
line in log examples fitted to its last :data:`TAIL` marks (y = a + b·ln x): rising when b > 0
and the fit's last rise over the tail is at least one held-out item (or any rise when the record
does not say how many items); the crossing budget is exp((level − a) / b). It is an
extrapolation past the budget the study ran, and says so: a curve in log examples keeps rising
forever, where a real one saturates, so the budget is a lower bound at best.

Where a point has more than :data:`TAIL` marks, the extrapolation is checked on the curve's own
data (:class:`LastMarkCheck`): the same line through the :data:`TAIL` marks before the last,
asked for the last, and the miss said in points and held-out items. A line that already misses
one mark ahead says how far to trust it sixteen times further.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from analysis.stats.units import amount
from analysis.stats.units import level as said

# evaluation marks a study needs before its curves are read (the report draws none with fewer)
MIN_MARKS = 3
TAIL = 3  # the last marks the log-linear fit reads: the curve's current slope, not its start
# below one held-out item, or below this where the items are not known: a least-squares fit's
# rounding on a constant curve, not a rise or a gap
FLAT = 1e-9


@dataclass(frozen=True)
class Standing:
    """One point's curve against one baseline at the last mark. ``state``: "above", "below" or
    "level" (within one held-out item); ``rising``: the curve still rises over its last marks;
    ``crossing``: for a rising curve below the baseline, the examples at which the fitted line
    in log examples reaches it (an extrapolation), else None."""

    point_id: str
    baseline: str
    baseline_value: float
    last_value: float
    last_step: int
    state: str
    rising: bool
    slope_per_doubling: float
    crossing: float | None = None

    def sentence(self, metric: str) -> str:
        where = {"above": "above", "below": "below", "level": "level with"}[self.state]
        text = (f"{self.point_id}: {said(metric, self.last_value)} after {self.last_step:,} "
                f"examples, {where} {self.baseline} "
                f"({said(metric, self.baseline_value)})")  # fmt: skip
        if not self.rising:
            return text + "; no longer rising over its last marks."
        rise = amount(metric, abs(self.slope_per_doubling))
        text += f"; still rising, by about {rise} per doubling of the examples"
        if self.crossing is None:
            return text + "."
        return (text + f"; extrapolated (a line in log examples, not measured), it would reach "
                f"{self.baseline} after about {self.crossing:,.0f} examples.")  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {"point_id": self.point_id, "baseline": self.baseline,
                "baseline_value": self.baseline_value, "last_value": self.last_value,
                "last_step": self.last_step, "state": self.state, "rising": self.rising,
                "slope_per_doubling": self.slope_per_doubling, "crossing": self.crossing,
                "crossing_is_extrapolated": self.crossing is not None}  # fmt: skip


@dataclass(frozen=True)
class LastMarkCheck:
    """The extrapolation checked on the curve's own data: the line in log examples through the
    :data:`TAIL` marks before the last, asked for the last mark it did not see. ``miss`` is
    measured − predicted (positive: the curve rose more than the line said)."""

    point_id: str
    step: int
    predicted: float
    measured: float
    items: int | None = None

    @property
    def miss(self) -> float:
        return self.measured - self.predicted

    def sentence(self, metric: str) -> str:
        text = (f"{self.point_id}: checked on its own last mark, the line through the "
                f"{TAIL} marks before it predicted {said(metric, self.predicted)} at "
                f"{self.step:,} examples; measured {said(metric, self.measured)}, a miss of "
                f"{'+' if self.miss >= 0 else '−'}{amount(metric, self.miss)}")  # fmt: skip
        if self.items:
            count = abs(self.miss) * self.items
            text += f" ({count:.0f} held-out item{'s' * (round(count) != 1)} of {self.items})"
        return text + "."

    def to_json(self) -> dict[str, Any]:
        return {"point_id": self.point_id, "step": self.step, "predicted": self.predicted,
                "measured": self.measured, "miss": self.miss,
                "miss_items": None if not self.items else self.miss * self.items}  # fmt: skip


@dataclass(frozen=True)
class LearningCurves:
    """``table``: columns ``point_id``, ``step``, ``mean``, ``n`` (replicates at that mark), one
    row per point and mark; ``baselines``: name -> the baseline's value of ``metric``;
    ``standings``: one per point and baseline."""

    metric: str
    table: pd.DataFrame = field(repr=False)
    baselines: dict[str, float]
    standings: tuple[Standing, ...]
    checks: tuple[LastMarkCheck, ...] = ()  # points with more than TAIL marks

    def sentences(self) -> list[str]:
        return [s.sentence(self.metric) for s in self.standings] + [
            c.sentence(self.metric) for c in self.checks
        ]

    def to_json(self) -> dict[str, Any]:
        return {"metric": self.metric, "baselines": self.baselines,
                "marks": sorted(int(s) for s in self.table["step"].unique()),
                "standings": [s.to_json() for s in self.standings],
                "last_mark_checks": [c.to_json() for c in self.checks]}  # fmt: skip


def log_line(steps: np.ndarray, values: np.ndarray) -> tuple[float, float]:
    """(a, b) of the least-squares line y = a + b·ln x through the points."""
    b, a = np.polyfit(np.log(steps.astype(float)), values.astype(float), 1)
    return float(a), float(b)


def crossing_budget(a: float, b: float, target: float) -> float | None:
    """The examples x at which a + b·ln x = target; None unless b > 0."""
    if b <= 0:
        return None
    exponent = (target - a) / b
    return math.exp(exponent) if exponent < 700 else math.inf


def point_curves(history: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Each point's mean of ``metric`` over its replicates at every mark (see
    :class:`LearningCurves`)."""
    rows = history.dropna(subset=[metric])
    grouped = rows.groupby(["point_id", "step"])[metric]
    table = grouped.agg(["mean", "size"]).reset_index().rename(columns={"size": "n"})
    return table.sort_values(["point_id", "step"], ignore_index=True)


def learning_curves(
    history: pd.DataFrame | None,
    metric: str,
    baselines: dict[str, float],
    items: int | None = None,
) -> LearningCurves | None:
    """The curves of ``metric`` and where each point stands against each of ``baselines`` at its
    last mark (see the module docstring); None without a history of at least :data:`MIN_MARKS`
    marks. ``items``: the held-out items an accuracy counts over (a difference under one item is
    "level", a rise under one item over the tail is not rising)."""
    if history is None or history.empty or metric not in history:
        return None
    table = point_curves(history, metric)
    if table.empty or table.groupby("point_id")["step"].nunique().max() < MIN_MARKS:
        return None
    tolerance = max(1 / items if items else 0.0, FLAT)
    standings, checks = [], []
    for point, curve in table.groupby("point_id", sort=True):
        if curve["step"].nunique() < MIN_MARKS:
            continue
        if len(curve) > TAIL:
            checks.append(last_mark_check(str(point), curve, items))
        tail = curve.tail(TAIL)
        a, b = log_line(tail["step"].to_numpy(), tail["mean"].to_numpy())
        steps = tail["step"].to_numpy(dtype=float)
        rise = b * math.log(steps[-1] / steps[0])
        rising = b > 0 and rise >= tolerance
        last = curve.iloc[-1]
        for name, value in baselines.items():
            gap = float(last["mean"]) - value
            state = "level" if abs(gap) < tolerance else ("above" if gap > 0 else "below")
            crossing = crossing_budget(a, b, value) if rising and state == "below" else None
            standings.append(Standing(str(point), name, float(value), float(last["mean"]),
                                      int(last["step"]), state, bool(rising),
                                      b * math.log(2), crossing))  # fmt: skip
    return LearningCurves(metric, table, dict(baselines), tuple(standings), tuple(checks))


def last_mark_check(point: str, curve: pd.DataFrame, items: int | None) -> LastMarkCheck:
    """The extrapolation's own error on ``curve`` (one point's means by mark, in order): the
    line through the :data:`TAIL` marks before the last, evaluated at the last."""
    seen, last = curve.iloc[-TAIL - 1 : -1], curve.iloc[-1]
    a, b = log_line(seen["step"].to_numpy(), seen["mean"].to_numpy())
    step = int(last["step"])
    return LastMarkCheck(point, step, a + b * math.log(step), float(last["mean"]), items)
