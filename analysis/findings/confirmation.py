"""Whether a chosen point held: the analysis of a confirmation study.

A study's best point is the largest of N point means, so its mean, and its standing against the
baselines, are biased upward (the winner's curse). Response-surface practice ends a study with
confirmation runs at the chosen setting (Montgomery, *Design and Analysis of Experiments*,
ch. 1 and 11). ``study next --confirm`` writes that study: the chosen point and its closest
rival, on fresh seeds (the study file's ``confirms``, ``frame.attrs["confirms"]``). Its
analysis asks one question, with the chosen point no longer selected among anything:

- against its rival, paired seed with seed on the shared held-out items
  (:func:`analysis.stats.measurement.paired_comparison`): ``held`` when the chosen point beat it,
  ``did not hold`` when the rival beat it, ``cannot be told apart`` otherwise;
- against the baselines, as every best point is (:func:`analysis.findings.baselines.standings`).

Computed first (:func:`confirmation`, frozen :class:`Confirmation`), said second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis.findings.baselines import Standing, baselines_of, standing_line, standings
from analysis.stats.best import BestPoint, best_point, finished_trials, replicate_outcomes
from analysis.stats.measurement import (
    PairedComparison,
    paired_comparison,
    seeds_only_interval,
    signed_points,
)
from analysis.stats.units import level

WORDS = {"beat": "held", "did not beat": "did not hold", "cannot be told apart":
         "cannot be told apart"}  # fmt: skip


@dataclass(frozen=True)
class Confirmation:
    """The chosen point of ``study`` and its ``rival`` on fresh seeds: each one's mean and
    interval (:class:`analysis.stats.best.BestPoint`, chosen among nothing now), the ``paired``
    comparison of the two (None without per-item outcomes: then ``low`` and ``high`` bound the
    seed-by-seed difference alone), the chosen point's ``standings`` against the baselines,
    and the ``verdict``: held, did not hold, or cannot be told apart."""

    study: str
    chosen: BestPoint
    rival: BestPoint
    paired: PairedComparison | None
    difference: float
    low: float | None
    high: float | None
    verdict: str
    standings: tuple[Standing, ...] = ()

    def sentence(self) -> str:
        """The verdict in words, the chosen point first."""
        metric = self.chosen.metric
        where = ", ".join(f"{k} = {v}" for k, v in self.chosen.factors.items())
        rival = ", ".join(f"{k} = {v}" for k, v in self.rival.factors.items())
        seeds = f"{self.chosen.n} fresh seed{'s' * (self.chosen.n != 1)}"
        signed = signed_points
        if self.low is None or self.high is None:
            sure = ("one seed each, so no interval" if self.chosen.n < 2 else "no per-item "
                    "outcomes, and the seeds' differences agree exactly: no interval")  # fmt: skip
        else:
            counts = ""
            if self.paired is not None:
                counts = (f"; items only the chosen point got right: {self.paired.only_trained}, "
                          f"only its rival: {self.paired.only_baseline}")  # fmt: skip
            sure = f"paired 95% interval {signed(self.low)} to {signed(self.high)}{counts}"
        head = (f"Confirmation of {self.study}'s selected point ({where}) on {seeds}: "
                f"{level(metric, self.chosen.mean)} against its closest rival's "
                f"{level(metric, self.rival.mean)} ({rival}), {signed(self.difference)} "
                f"({sure}): it {self.verdict}.")  # fmt: skip
        against = standing_line(self.standings)
        return head if against is None else f"{head} {against}"

    def to_json(self) -> dict[str, Any]:
        return {"study": self.study, "verdict": self.verdict, "difference": self.difference,
                "low": self.low, "high": self.high, "chosen": self.chosen.to_json(),
                "rival": self.rival.to_json(),
                "paired": None if self.paired is None else self.paired.to_json(),
                "standings": [s.to_json() for s in self.standings],
                "sentence": self.sentence()}  # fmt: skip


def _matches(row: pd.Series, values: dict[str, Any]) -> bool:
    for name, want in values.items():
        got = row.get(name)
        if isinstance(want, int | float) and isinstance(got, int | float | np.number):
            if not math.isclose(float(got), float(want), rel_tol=1e-9, abs_tol=1e-12):
                return False
        elif str(got) != str(want):
            return False
    return True


def point_of(df: pd.DataFrame, values: dict[str, Any]) -> str | None:
    """The ``point_id`` whose factor values are ``values``; None when no trial has them."""
    for _, row in df.iterrows():
        if _matches(row, values):
            return str(row["point_id"])
    return None


def confirmation(df: pd.DataFrame, target: dict[str, str], outcomes=None) -> Confirmation | None:
    """The confirmation of the study file's ``confirms`` (``df.attrs``), or None when the study
    confirms nothing or either point has no finished trial with a value of the target."""
    confirms = df.attrs.get("confirms")
    if not isinstance(confirms, dict):
        return None
    metric, mode = target["metric"], target["mode"]
    done = finished_trials(df)
    ids = point_of(done, confirms["point"]), point_of(done, confirms["rival"])
    if None in ids or ids[0] == ids[1]:
        return None
    try:
        chosen, rival = (best_point(done[done["point_id"] == i], metric, mode, outcomes=outcomes)
                         for i in ids)  # fmt: skip
    except (LookupError, ValueError):
        return None
    paired, low, high, difference = _compared(chosen, rival, outcomes, done)
    found = "cannot be told apart" if paired is None else paired.verdict
    if paired is None and low is not None:
        better = difference if mode == "max" else -difference
        low_b, high_b = (low, high) if mode == "max" else (-high, -low)
        if low_b > 0 and better > 0:
            found = "beat"
        elif high_b < 0:
            found = "did not beat"
    against = standings(chosen, baselines_of(df, chosen.point_id), outcomes)
    return Confirmation(confirms["study"], chosen, rival, paired, difference, low, high,
                        WORDS[found], against)  # fmt: skip


def _seeds(point: BestPoint) -> tuple:
    """The point's replicates' seeds, one per run (a missing seed stands for its own run)."""
    seeds = point.seeds or (None,) * len(point.run_ids)
    return tuple(s if s is not None else f"run {r}" for s, r in zip(seeds, point.run_ids,
                                                                    strict=True))  # fmt: skip


def _compared(chosen: BestPoint, rival: BestPoint, outcomes, done: pd.DataFrame):
    """(paired comparison or None, low, high, mean difference) of chosen minus rival, seed with
    seed: on the shared items when the record keeps them, else over the seeds' accuracies alone
    (no interval when fewer than two seeds pair, or when they agree exactly)."""
    mine = replicate_outcomes(outcomes, chosen.run_ids, chosen.metric)
    theirs = replicate_outcomes(outcomes, rival.run_ids, rival.metric)
    if mine is not None and theirs is not None:
        # item by item in the chosen point's item order, seed with seed
        items = outcomes.trials[chosen.run_ids[0]].items
        a = [(s, outcomes.trials[r].aligned(items).correct(chosen.metric))
             for s, r in zip(_seeds(chosen), chosen.run_ids, strict=True)]  # fmt: skip
        b = {s: outcomes.trials[r].aligned(items).correct(rival.metric)
             for s, r in zip(_seeds(rival), rival.run_ids, strict=True)}  # fmt: skip
        if len(b) == len(rival.run_ids):
            paired = paired_comparison(a, b, chosen.mode, chosen.level)
            d = paired.difference
            return paired, d.low, d.high, d.mean
    values = {}
    for point, sign in ((chosen, 1.0), (rival, -1.0)):
        rows = done[done["point_id"] == point.point_id]
        for seed, value in zip(rows.get("seed", []), rows[point.metric], strict=False):
            values.setdefault(seed, []).append(sign * float(value))
    differences = [sum(v) for v in values.values() if len(v) == 2]
    difference = chosen.mean - rival.mean
    only = seeds_only_interval(differences, chosen.level)
    if only is None or only.width <= 0:
        return None, None, None, difference
    return None, only.low, only.high, difference


__all__ = ["Confirmation", "confirmation", "point_of"]
