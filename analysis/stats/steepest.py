"""The path of steepest ascent (or descent) of a first-order surface, and how sure its direction
is (Box & Wilson 1951; Myers, Montgomery & Anderson-Cook, Response Surface Methodology, ch. 5;
Box & Draper, Empirical Model-Building and Response Surfaces, 1987, ch. 6, the confidence region
for the direction of steepest ascent).

The path starts at the design centre and moves, in coded units, along the gradient of the
fitted surface there, b (the first-order coefficients): x(d) = ±d b/|b|, + to raise the response,
- to lower it. Coding matters: the path is steepest in the coded space (each factor's observed
range is [-1, 1]), and it is given in coded and in natural units (log-scale factors move
geometrically).

**The confidence cone.** A unit direction u is inside the 100(1-α)% cone when the hypothesis
"the true gradient points along u" is not rejected:

    min over t > 0 of (b - t u)ᵀ V⁻¹ (b - t u) ≤ (k - 1) F(α; k - 1, ν)

with V the estimated covariance of b and ν the error degrees of freedom. For an orthogonal
first-order design (V = s_b² I) this is Box & Draper's |b|² - (bᵀu)² ≤ (k-1) s_b² F: the cone's
half-angle θ has sin²θ = (k-1) s_b² F / |b|², and the share of all directions it leaves out is
1 - ½ I_{sin²θ}((k-1)/2, ½) (the area of a spherical cap). When (k-1) s_b² F ≥ |b|² no
direction is excluded: the data do not say which way is up. For a V that is not a multiple of
the identity, the share is counted over evenly spread directions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import special, stats

from analysis.stats.surface import ResponseSurface, json_number, records
from analysis.stats.surface_effects import _contrasts

DIRECTION_SAMPLES = 200_000  # directions counted for a cone whose V is not isotropic


@dataclass(frozen=True)
class SteepestPath:
    """The path from the design centre along the fitted gradient (see the module docstring).

    ``direction`` is the unit vector of the path in coded units (``factors`` order);
    ``table`` one row per step: ``distance`` (coded), ``x.<factor>``, the factors in natural
    units, ``mean``, ``lower`` and ``upper`` (the fitted value and its confidence interval: past
    the design's radius, an extrapolation of a first-order model). ``cone_half_angle`` (degrees)
    and ``excluded_share`` describe the 100(1-``alpha``)% confidence cone of the direction;
    ``excluded_share`` is 0 when the data do not fix the direction."""

    response: str
    goal: str
    factors: tuple[str, ...]
    gradient: tuple[float, ...]
    direction: tuple[float, ...]
    table: pd.DataFrame
    alpha: float
    cone_half_angle: float | None
    excluded_share: float
    design_radius: float
    notes: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "goal": self.goal,
            "factors": list(self.factors),
            "gradient": list(self.gradient),
            "direction": list(self.direction),
            "cone": {"alpha": self.alpha, "half_angle_degrees": json_number(self.cone_half_angle),
                     "excluded_share": json_number(self.excluded_share)},
            "design_radius": json_number(self.design_radius),
            "path": records(self.table),
            "notes": list(self.notes),
        }  # fmt: skip


def steepest_path(
    surface: ResponseSurface,
    step: float = 1.0,
    steps: int = 5,
    goal: str | None = None,
    alpha: float = 0.05,
) -> SteepestPath:
    """The path of steepest ascent (``goal`` max) or descent (min; default the surface's goal)
    of ``surface`` from the design centre, at ``steps`` steps of ``step`` coded units."""
    if not step > 0 or steps < 1:
        raise ValueError(f"step must be above 0 and steps at least 1, got {step} and {steps}")
    goal = goal or surface.goal
    factors = surface.numeric
    if not factors:
        raise ValueError(f"{surface.response}: no numeric factor to move along")
    combo = surface.levels_at_optimum()
    contrasts = _contrasts(surface, [({n: 0.5}, {n: -0.5}) for n in factors], combo)
    fit = surface._fit
    gradient = contrasts @ fit.params.to_numpy()
    notes = []
    if not np.linalg.norm(gradient) > 0:
        raise ValueError(f"{surface.response}: the fitted gradient at the centre is 0: no path")
    sign = 1.0 if goal == "max" else -1.0
    direction = sign * gradient / np.linalg.norm(gradient)
    if any(" ** 2)" in t for t in surface.terms) or any(":" in t for t in surface.terms):
        notes.append("the model also has interaction or (undetected) curvature terms: the path "
                     "follows the gradient at the centre, and the surface may bend away from it "
                     "further out")  # fmt: skip
    distances = step * np.arange(steps + 1)
    coded = distances[:, None] * direction[None, :]
    natural = surface.natural(coded, combo)
    prediction = surface.predict(natural, alpha)
    table = pd.DataFrame({"distance": distances})
    for i, name in enumerate(factors):
        table[f"x.{name}"] = coded[:, i]
    table = pd.concat([table, natural[list(factors)], prediction], axis=1)
    radius = surface.design_radius
    if distances[-1] > radius:
        notes.append(f"past {radius:.2f} coded units the path leaves the design region: its "
                     "predictions extrapolate a first-order model")  # fmt: skip
    half_angle, excluded = _cone(gradient, sign, _covariance(contrasts, fit, surface), fit,
                                 surface, alpha)  # fmt: skip
    if excluded == 0:
        notes.append(f"the {1 - alpha:.0%} confidence cone holds every direction: the data do "
                     "not say which way the response improves")  # fmt: skip
    return SteepestPath(
        response=surface.response, goal=goal, factors=factors,
        gradient=tuple(float(v) for v in gradient), direction=tuple(float(v) for v in direction),
        table=table, alpha=alpha, cone_half_angle=half_angle, excluded_share=excluded,
        design_radius=radius, notes=tuple(notes),
    )  # fmt: skip


def _covariance(contrasts: np.ndarray, fit, surface: ResponseSurface) -> np.ndarray | None:
    if surface.exact or not fit.df_resid > 0:
        return None
    return contrasts @ fit.cov_params().to_numpy() @ contrasts.T


def _cone(gradient, sign, covariance, fit, surface, alpha) -> tuple[float | None, float]:
    """(half-angle in degrees when the cone is circular, else None; share of directions it
    excludes)."""
    k = len(gradient)
    if covariance is None:  # an exact fit: no error to build a cone from
        return None, math.nan
    if k == 1:  # one factor: the direction is the sign of b, fixed when its t test rejects 0
        t = abs(gradient[0]) / math.sqrt(covariance[0, 0])
        return None, 0.5 if t > stats.t.isf(alpha / 2, fit.df_resid) else 0.0
    bound = (k - 1) * stats.f.isf(alpha, k - 1, fit.df_resid)
    b = sign * gradient
    diagonal = np.diag(covariance)
    isotropic = np.allclose(covariance, np.eye(k) * diagonal.mean(), rtol=1e-6,
                            atol=1e-9 * diagonal.mean())  # fmt: skip
    if isotropic:
        sin2 = bound * diagonal.mean() / float(b @ b)
        if sin2 >= 1:
            return 90.0, 0.0
        kept = 0.5 * special.betainc((k - 1) / 2, 0.5, sin2)
        return math.degrees(math.asin(math.sqrt(sin2))), 1.0 - kept
    return None, 1.0 - in_cone_share(b, covariance, bound)


def in_cone(directions: np.ndarray, b: np.ndarray, covariance: np.ndarray, bound: float):
    """Which unit ``directions`` (rows) lie in the cone min_{t>0} (b - tu)ᵀV⁻¹(b - tu) ≤ bound."""
    inverse = np.linalg.inv(covariance)
    vb = directions @ inverse @ b  # uᵀV⁻¹b
    vu = np.einsum("ni,ij,nj->n", directions, inverse, directions)  # uᵀV⁻¹u
    t = vb / vu
    distance = float(b @ inverse @ b) - vb**2 / vu
    return (t > 0) & (distance <= bound)


def in_cone_share(b: np.ndarray, covariance: np.ndarray, bound: float) -> float:
    """The share of all unit directions inside the cone: over evenly spaced angles in two
    dimensions, over a fixed spread of random directions (seeded) in more."""
    k = len(b)
    if k == 2:
        angles = (np.arange(DIRECTION_SAMPLES) + 0.5) * 2 * math.pi / DIRECTION_SAMPLES
        directions = np.column_stack([np.cos(angles), np.sin(angles)])
    else:
        directions = np.random.default_rng(0).standard_normal((DIRECTION_SAMPLES, k))
        directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    return float(in_cone(directions, b, covariance, bound).mean())
