"""Planning replicates from a finished study's own error (``study power``, ``study plan``).

A factor's effect (:func:`analysis.surface.factor_effects`: a doubling of a log-scale factor,
the design range of a linear one, a level against the first for a categorical one) has standard
error ``se`` with the study's ``r0`` replicates of ``P`` design points. Replicated r times
instead, the same design has ``se · sqrt(N0 / (P·r))`` (N0 the runs fitted) and
``df(r) = P·r - p`` residual degrees of freedom, where p is the number of model parameters (and
one more block parameter per added replicate when the replicate is the block). The smallest
effect detected at ``power`` by a two-sided t test at level ``alpha`` is ``ncp(df) · se``, with
``ncp`` the noncentrality that statsmodels' ``TTestPower`` solves for; the replicates needed for
an effect X are the fewest r whose detectable size is at most X.

Assumptions, said once: the error mean square of the finished study is the error of the planned
one (same data, model and budget), and the planned design is the finished design replicated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from analysis.surface import Effect, ResponseSurface, factor_effects, noncentrality

MAX_REPLICATES = 1000


@dataclass(frozen=True)
class ReplicatePlan:
    """What one factor's effect on one response needs.

    ``detectable_now``: the smallest effect the finished study detects (its ``replicates_now``
    replicates per point); ``replicates_needed``: replicates per point to detect ``effect``
    (None: more than :data:`MAX_REPLICATES`); ``detectable_then``: the detectable size with
    that many. Sizes are in the response's units.
    """

    response: str
    factor: str
    change: str
    effect: float
    replicates_now: float
    detectable_now: float | None
    replicates_needed: int | None
    detectable_then: float | None


@dataclass(frozen=True)
class _Design:
    runs: int  # runs fitted (N0)
    points: int  # distinct design points (P)
    params: int  # model parameters, block terms included (p)
    replicate_blocks: bool  # the replicate is the block: one more parameter per replicate

    @property
    def replicates(self) -> float:
        return self.runs / self.points

    def df(self, replicates: int) -> int:
        extra = replicates - self.replicates if self.replicate_blocks else 0
        return math.floor(self.points * replicates - self.params - extra)


def _design(surface: ResponseSurface) -> _Design:
    fit = surface._fit
    frame = fit.model.data.frame
    factors = [f for f in surface.coding if f in frame]
    points = int(frame.groupby(factors).ngroups) if factors else 1
    runs = int(fit.nobs)
    return _Design(runs, points, runs - round(float(fit.df_resid)), surface.blocks == "replicate")


def detectable_at(
    effect: Effect, design: _Design, replicates: int, alpha: float, power: float
) -> float | None:
    """The smallest |effect| detected with ``replicates`` per point; None if not estimable."""
    df = design.df(replicates)
    if effect.std_err is None or df < 1:
        return None
    se = effect.std_err * math.sqrt(design.runs / (design.points * replicates))
    return noncentrality(df, alpha, power) * se


def _fewest(effect: Effect, design: _Design, size: float, alpha: float, power: float):
    """The fewest replicates (1 … MAX_REPLICATES) that detect ``size``; binary search, since
    the detectable size falls as replicates grow."""

    def enough(r: int) -> bool:
        found = detectable_at(effect, design, r, alpha, power)
        return found is not None and found <= size

    if not enough(MAX_REPLICATES):
        return None
    lo, hi = 1, MAX_REPLICATES
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid + 1, hi)
    return lo


def replicates_for(
    surface: ResponseSurface, effect: float, *, alpha: float = 0.05, power: float = 0.8
) -> tuple[ReplicatePlan, ...]:
    """Replicates per point needed to detect ``effect`` (response units, > 0) for each factor.

    Raises:
        ValueError: ``effect`` not a positive finite number, or a fit that reproduces every
            trial (no error to plan from).
    """
    if not (isinstance(effect, int | float) and math.isfinite(effect) and effect > 0):
        raise ValueError(f"effect must be a positive number, got {effect!r}")
    if surface.exact:
        raise ValueError(
            f"{surface.response}: the model reproduces every trial, so the study has no error "
            "to plan from; replicate its points first"
        )
    design = _design(surface)
    plans = []
    for e in factor_effects(surface, alpha, power):
        needed = _fewest(e, design, effect, alpha, power)
        then = None if needed is None else detectable_at(e, design, needed, alpha, power)
        plans.append(ReplicatePlan(surface.response, e.factor, e.change, effect,
                                   design.replicates, e.detectable, needed, then))  # fmt: skip
    return tuple(plans)


def detectable_with(
    surface: ResponseSurface, replicates: int, *, alpha: float = 0.05, power: float = 0.8
) -> tuple[tuple[str, float | None], ...]:
    """(change, the smallest effect detected with ``replicates`` per point) of every effect."""
    design = _design(surface)
    return tuple(
        (e.change, detectable_at(e, design, replicates, alpha, power))
        for e in factor_effects(surface, alpha, power)
    )
