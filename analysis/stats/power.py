"""Planning replicates from a finished study's own error (``study power``, ``study plan``).

A factor's effect (:func:`analysis.stats.surface.factor_effects`: a doubling of a log-scale factor,
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

An accuracy is a count over n held-out items (``PowerBasis.items``, when the record says): no
detectable size is smaller than one item (1 / n), however many replicates, and an effect smaller
than one item needs more held-out items, not more replicates (:attr:`ReplicatePlan.items_needed`).

What planning needs of a fit is small: each effect's standard error, the design's runs, points
and parameters, and the error. That is a response's :class:`PowerBasis`. A study's report writes
the basis of every response it fits (:data:`BASIS_FILE`, beside ``report.json``), tied to the
trials it was fitted on (:func:`trials_fingerprint`), so ``study power`` answers from it without
fitting again (or importing statsmodels and pandas); a record whose trials changed since is
fitted afresh. The numbers are the same either way: a fit's plans are made from its basis.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analysis.stats.t_power import noncentrality
from analysis.stats.units import is_accuracy

if TYPE_CHECKING:
    from analysis.stats.surface import ResponseSurface

MAX_REPLICATES = 1000
BASIS_FILE = "power_basis.json"
BASIS_VERSION = 2  # 2: the held-out items


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
    std_err: float | None = None
    items: int | None = None  # the held-out items an accuracy counts over, when known
    items_needed: int | None = None  # set when ``effect`` is less than one held-out item

    @property
    def resolution_limited(self) -> bool:
        """Whether the held-out set, not the replicates, limits detecting ``effect``."""
        return self.items_needed is not None


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


@dataclass(frozen=True)
class BasisEffect:
    """One factor's effect as planning needs it: which change, and its standard error (None
    when the model reproduces every trial)."""

    factor: str
    change: str
    std_err: float | None


@dataclass(frozen=True)
class PowerBasis:
    """What planning replicates needs of one response's fit (:func:`power_basis`): the design,
    the fit's residual df, its error and block term, and each factor's effect."""

    response: str
    design: _Design
    resid_df: int
    error_ms: float
    error_df: int
    blocks: str | None
    exact: bool
    effects: tuple[BasisEffect, ...]
    items: int | None = None  # the held-out items an accuracy counts over, when recorded

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def floor(self, size: float | None) -> float | None:
        """``size`` floored at one held-out item, for an accuracy whose items are known."""
        if size is None or not self.items or not is_accuracy(self.response):
            return size
        return max(size, 1.0 / self.items)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PowerBasis:
        return cls(
            **{k: v for k, v in data.items() if k not in ("design", "effects")},
            design=_Design(**data["design"]),
            effects=tuple(BasisEffect(**e) for e in data["effects"]),
        )


def power_basis(
    surface: ResponseSurface, items: int | None = None, aliases: dict | None = None
) -> PowerBasis:
    """The planning basis of a fitted response surface; ``items``: the held-out items its
    accuracy counts over, when known; ``aliases``: each factor's aliases in a fraction
    (:func:`analysis.stats.aliases.alias_map`), named with its change as every table names them."""
    from analysis.stats.aliases import alias_words
    from analysis.stats.surface import factor_effects

    aliases = aliases or {}
    effects = tuple(
        BasisEffect(e.factor, e.change + alias_words(aliases.get(e.factor, ())), e.std_err)
        for e in factor_effects(surface)
    )
    return PowerBasis(
        surface.response, _design(surface), round(float(surface._fit.df_resid)),
        float(surface.error_ms), int(surface.error_df), surface.blocks, bool(surface.exact),
        effects, items,
    )  # fmt: skip


def _basis(fit: ResponseSurface | PowerBasis) -> PowerBasis:
    return fit if isinstance(fit, PowerBasis) else power_basis(fit)


def trials_fingerprint(rows: list[tuple[Any, Any, Any]]) -> str:
    """What a study's fits were made on: its results rows as (trial_key, run_id, status), in
    any order. A finished run's values never change, so a changed fingerprint means trials were
    added, replaced or ended since."""
    lines = sorted("\t".join("" if v is None else str(v) for v in row) for row in rows)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def write_bases(
    fits: dict[str, ResponseSurface | None],
    fingerprint: str,
    folder: str | Path,
    items: int | None = None,
    aliases: dict | None = None,
) -> Path:
    """Write :data:`BASIS_FILE` under ``folder``: the basis of every fitted response, tied to
    the trials' ``fingerprint``; ``items``: the held-out items the accuracies count over;
    ``aliases``: each factor's aliases in a fraction."""
    bases = {r: power_basis(s, items, aliases).to_json() for r, s in fits.items()
             if s is not None}  # fmt: skip
    path = Path(folder) / BASIS_FILE
    path.write_text(json.dumps({"version": BASIS_VERSION, "trials": fingerprint,
                                "responses": bases}, indent=1))  # fmt: skip
    return path


def read_basis(text: str, fingerprint: str, response: str) -> PowerBasis | None:
    """``response``'s basis from a :data:`BASIS_FILE`'s text when it was written for these
    trials (``fingerprint``) by this version; None otherwise (fit afresh)."""
    try:
        data = json.loads(text)
        if data.get("version") != BASIS_VERSION or data.get("trials") != fingerprint:
            return None
        found = data["responses"].get(response)
        return None if found is None else PowerBasis.from_json(found)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def detectable_at(
    effect: BasisEffect, design: _Design, replicates: int, alpha: float, power: float
) -> float | None:
    """The smallest |effect| detected with ``replicates`` per point; None if not estimable."""
    df = design.df(replicates)
    if effect.std_err is None or df < 1:
        return None
    se = effect.std_err * math.sqrt(design.runs / (design.points * replicates))
    return noncentrality(df, alpha, power) * se


def _detectable_now(basis: PowerBasis, effect: BasisEffect, alpha: float, power: float):
    """The finished study's own detectable size: its fit's residual df and standard error."""
    if basis.exact or basis.resid_df < 1 or effect.std_err is None:
        return None
    return noncentrality(basis.resid_df, alpha, power) * effect.std_err


def _fewest(effect: BasisEffect, design: _Design, size: float, alpha: float, power: float):
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
    surface: ResponseSurface | PowerBasis, effect: float, *, alpha: float = 0.05,
    power: float = 0.8,
) -> tuple[ReplicatePlan, ...]:  # fmt: skip
    """Replicates per point needed to detect ``effect`` (response units, > 0) for each factor,
    from a fitted surface or its :class:`PowerBasis`.

    Raises:
        ValueError: ``effect`` not a positive finite number, or a fit that reproduces every
            trial (no error to plan from).
    """
    if not (isinstance(effect, int | float) and math.isfinite(effect) and effect > 0):
        raise ValueError(f"effect must be a positive number, got {effect!r}")
    basis = _basis(surface)
    if basis.exact:
        raise ValueError(
            f"{basis.response}: the model reproduces every trial, so the study has no error "
            "to plan from; replicate its points first"
        )
    design = basis.design
    below = basis.floor(effect) > effect  # smaller than one held-out item: unobservable
    items_needed = math.ceil(1.0 / effect - 1e-9) if below else None
    plans = []
    for e in basis.effects:
        needed = None if below else _fewest(e, design, effect, alpha, power)
        then = None if needed is None else detectable_at(e, design, needed, alpha, power)
        now = _detectable_now(basis, e, alpha, power)
        plans.append(ReplicatePlan(basis.response, e.factor, e.change, effect,
                                   design.replicates, basis.floor(now), needed,
                                   basis.floor(then), e.std_err, basis.items,
                                   items_needed))  # fmt: skip
    return tuple(plans)


def detectable_with(
    surface: ResponseSurface | PowerBasis, replicates: int, *, alpha: float = 0.05,
    power: float = 0.8,
) -> tuple[tuple[str, float | None], ...]:  # fmt: skip
    """(change, the smallest effect detected with ``replicates`` per point) of every effect."""
    basis = _basis(surface)
    return tuple(
        (e.change, basis.floor(detectable_at(e, basis.design, replicates, alpha, power)))
        for e in basis.effects
    )
