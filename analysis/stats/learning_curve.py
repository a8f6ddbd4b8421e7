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
class LearningCurves:
    """``table``: columns ``point_id``, ``step``, ``mean``, ``n`` (replicates at that mark), one
    row per point and mark; ``baselines``: name -> the baseline's value of ``metric``;
    ``standings``: one per point and baseline."""

    metric: str
    table: pd.DataFrame = field(repr=False)
    baselines: dict[str, float]
    standings: tuple[Standing, ...]

    def sentences(self) -> list[str]:
        return [s.sentence(self.metric) for s in self.standings]

    def to_json(self) -> dict[str, Any]:
        return {"metric": self.metric, "baselines": self.baselines,
                "marks": sorted(int(s) for s in self.table["step"].unique()),
                "standings": [s.to_json() for s in self.standings]}  # fmt: skip


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
    standings = []
    for point, curve in table.groupby("point_id", sort=True):
        if curve["step"].nunique() < MIN_MARKS:
            continue
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
    return LearningCurves(metric, table, dict(baselines), tuple(standings))
