"""Where to go next on one response's surface: the path of steepest ascent of a first-order fit,
the canonical and ridge analysis of a second-order one (:mod:`analysis.stats.steepest`,
:mod:`analysis.stats.canonical`), or why the fit says nothing about a direction.

Which one follows from the fitted model, as the texts prescribe (Myers, Montgomery &
Anderson-Cook, ch. 5 and 6): a quadratic term for every numeric factor, one of them detected
(Holm-adjusted p ≤ 0.05), makes a second-order surface, whose shape canonical analysis gives
and whose best point at each distance ridge analysis traces; a model without curvature terms (a
two-level factorial), or whose curvature is not detected, is read as a plane: its gradient at
the design centre gives the path of steepest ascent with its confidence cone.
A fit that does not beat the mean, or reproduces every trial (no error), gets neither: a
direction read from noise is not a finding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from analysis.stats.canonical import (
    CanonicalAnalysis,
    RidgePath,
    canonical_analysis,
    ridge_analysis,
)
from analysis.stats.steepest import SteepestPath, steepest_path
from analysis.stats.units import level

if TYPE_CHECKING:
    from analysis.stats.fits import ResponseFit


@dataclass(frozen=True)
class Direction:
    """What one fit says about where to go next (see the module docstring). ``order`` is
    "first" (``steepest`` is set), "second" (``canonical`` and ``ridge``) or None (``why_none``
    says why)."""

    response: str
    order: Literal["first", "second"] | None
    steepest: SteepestPath | None = None
    canonical: CanonicalAnalysis | None = None
    ridge: RidgePath | None = None
    why_none: str = ""

    @property
    def path(self) -> SteepestPath | RidgePath | None:
        """The path to draw and tabulate: the steepest-ascent path, or the ridge."""
        return self.steepest or self.ridge

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"order": self.order}
        if self.order is None:
            data["why_none"] = self.why_none
        if self.steepest is not None:
            data["steepest"] = self.steepest.to_json()
        if self.canonical is not None:
            data["canonical"] = self.canonical.to_json()
        if self.ridge is not None:
            data["ridge"] = self.ridge.to_json()
        return data

    def sentences(self) -> list[str]:
        """The direction in words, for the report beside the surface's contours."""
        if self.order is None:
            return [f"No direction is named: {self.why_none}."]
        if self.steepest is not None:
            return _steepest_words(self.steepest)
        return _second_order_words(self.canonical, self.ridge)


def where_next(fit: ResponseFit, step: float = 1.0, steps: int = 5) -> Direction:
    """The :class:`Direction` of ``fit``; ``step`` and ``steps`` set the steepest-ascent path
    (coded units from the design centre)."""
    s = fit.surface
    if s is None:
        return Direction(fit.response, None, why_none="nothing was modelled")
    if s.exact:
        return Direction(fit.response, None, why_none="the model reproduces every trial, so "
                         "there is no error to judge a direction against")  # fmt: skip
    if fit.findings is not None and not fit.findings.beats_mean:
        return Direction(fit.response, None, why_none="the model does not beat the mean")
    if not s.numeric:
        return Direction(fit.response, None, why_none="no numeric factor to move along")
    if all(f"I({n} ** 2)" in s.terms for n in s.numeric) and curvature_detected(s):
        return Direction(fit.response, "second", canonical=canonical_analysis(s),
                         ridge=ridge_analysis(s))  # fmt: skip
    try:
        path = steepest_path(s, step=step, steps=steps)
    except ValueError as err:  # a gradient of 0 at the centre
        return Direction(fit.response, None, why_none=str(err).split(": ", 1)[-1])
    return Direction(fit.response, "first", steepest=path)


def curvature_detected(surface, alpha: float = 0.05) -> bool:
    """Whether any quadratic term's coefficient differs from 0 at level ``alpha`` (Holm over the
    quadratic terms): without it, the quadratic part is noise, its stationary point is wherever
    that noise puts it, and the surface is read as a plane."""
    from analysis.stats.surface import holm

    table = surface.coefficients
    p = [table.loc[t, "p"] for t in table.index if str(t).startswith("I(")]
    return bool(p) and bool((holm(p) <= alpha).any())


def _point(factors: dict[str, Any]) -> str:
    return ", ".join(f"{k} = {v:.4g}" if isinstance(v, float) else f"{k} = {v}"
                     for k, v in factors.items())  # fmt: skip


def _steepest_words(path: SteepestPath) -> list[str]:
    verb = "ascent" if path.goal == "max" else "descent"
    moves = ", ".join(f"{name} {value:+.2f}" for name, value in
                      zip(path.factors, path.direction, strict=True))  # fmt: skip
    last = path.table.iloc[-1]
    where = _point({n: float(last[n]) for n in path.factors})
    sure = (
        f"its {1 - path.alpha:.0%} confidence cone leaves out {path.excluded_share:.0%} of all "
        "directions" if path.excluded_share > 0 else
        f"its {1 - path.alpha:.0%} confidence cone holds every direction: the data do not fix it"
    )  # fmt: skip
    interval = ("" if last["lower"] != last["lower"] else
                f" (95% CI {level(path.response, last['lower'])} to "
                f"{level(path.response, last['upper'])})")  # fmt: skip
    return [
        f"Path of steepest {verb} (the surface read as a plane): per coded unit {moves}; {sure}.",
        f"At {last['distance']:.3g} coded units ({where}) the model predicts "
        f"{level(path.response, last['mean'])}{interval}, an extrapolation past the design's "
        f"radius of {path.design_radius:.2f}." if last["distance"] > path.design_radius else
        f"At {last['distance']:.3g} coded units ({where}) the model predicts "
        f"{level(path.response, last['mean'])}{interval}.",
        *path.notes,
    ]  # fmt: skip


def _second_order_words(canonical: CanonicalAnalysis, ridge: RidgePath) -> list[str]:
    values = ", ".join(f"{v:.3g}" for v in canonical.eigenvalues)
    if canonical.stationary is None:
        shape = f"Canonical analysis: eigenvalues {values}; no stationary point."
    else:
        where = "inside" if canonical.inside else "outside"
        what = (
            "the surface is a ridge; its point nearest the design centre is"
            if canonical.kind == "ridge"
            else f"the stationary point is a {canonical.kind},"
        )
        shape = (
            f"Canonical analysis: eigenvalues {values}, so {what} at "
            f"{_point(canonical.stationary)} ({where} the design region, "
            f"{canonical.distance:.2f} coded units from the centre), predicted "
            f"{level(canonical.response, canonical.predicted)}."
        )
    edge = ridge.table.iloc[-1]
    best = "highest" if ridge.goal == "max" else "lowest"
    along = (
        f"Ridge analysis: the {best} prediction {edge['radius']:.2f} coded units from the "
        f"centre (the largest sphere inside the design's ranges) is "
        f"{level(ridge.response, edge['mean'])} at "
        f"{_point({n: float(edge[n]) for n in ridge.factors})}."
    )
    return [shape, along, *canonical.notes]
