"""Canonical and ridge analysis of a second-order surface: what shape it has, and the best
point at each distance from the design centre (Myers, Montgomery & Anderson-Cook, Response
Surface Methodology, ch. 6; Box & Draper, Empirical Model-Building and Response Surfaces, 1987;
Hoerl 1959 and Draper 1963 for ridge analysis).

In coded units (the surface's own: each numeric factor's observed range is [-1, 1]) the factor
part of a fitted surface is

    ŷ(x) = b0 + xᵀb + xᵀBx,    B = H / 2 (B_ii the quadratic coefficients, B_ij half of the
                                  interaction's),

as R's rsm writes it. **Canonical analysis** rotates to the eigenvectors of B: with
B = M Λ Mᵀ and w = Mᵀ(x - x_s), ŷ = ŷ_s + Σ λ_i w_i², where x_s = -½ B⁻¹ b is the stationary
point. All λ < 0: a maximum; all > 0: a minimum; mixed signs: a saddle; a λ near zero (under
:data:`FLAT_SHARE` of the largest |λ|): a ridge along its eigenvector, where the surface
hardly changes; the stationary point is then taken on the ridge, nearest the design centre, as
rsm does.

**Ridge analysis** maximises (or minimises) ŷ on each sphere |x| = R. A stationary point of
the Lagrangian has (B - μI) x = -½ b; the maximum on the sphere is the solution with μ above
every eigenvalue of B (the minimum: μ below every one), found here by bisection on μ (|x|
falls monotonically as μ moves away from the eigenvalues). When b has no component along the
extreme eigenvector (the "hard case"), μ sits at that eigenvalue and the rest of the radius is
taken along its eigenvector.

Eigenvalues and distances depend on the coding; the stationary point, the path in natural
units and its predictions do not. Both analyses hold the categorical factors at the levels of
the surface's optimum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize

from analysis.stats.surface import ResponseSurface, json_number, json_value, records

FLAT_SHARE = 0.1
"""An eigenvalue smaller in size than this share of the largest is "near zero": the surface is
a ridge along its eigenvector (rsm's ``canonical``, whose default threshold this is)."""


@dataclass(frozen=True)
class CanonicalAnalysis:
    """The eigen-analysis of a second-order surface's quadratic part (see the module docstring).

    ``eigenvalues`` are those of B in the surface's coded units, largest first;
    ``eigenvectors`` one column per eigenvalue (rows in ``factors`` order), each with its
    largest entry positive. ``stationary_coded`` / ``stationary`` is x_s in coded and natural
    units (None when B is singular), ``predicted`` / ``interval`` the fitted value there and its
    confidence interval, ``distance`` |x_s| in coded units against the design's radius
    ``design_radius``."""

    response: str
    factors: tuple[str, ...]
    eigenvalues: tuple[float, ...]
    eigenvectors: tuple[tuple[float, ...], ...]
    kind: str  # maximum | minimum | saddle | ridge
    stationary_coded: dict[str, float] | None
    stationary: dict[str, Any] | None
    predicted: float | None
    interval: tuple[float, float] | None
    distance: float | None
    design_radius: float
    flat_directions: tuple[int, ...]
    notes: tuple[str, ...]

    @property
    def inside(self) -> bool | None:
        """Whether the stationary point lies inside the design region."""
        return None if self.distance is None else self.distance <= self.design_radius + 1e-9

    def to_json(self) -> dict[str, Any]:
        return {
            "factors": list(self.factors),
            "eigenvalues": [json_number(v) for v in self.eigenvalues],
            "eigenvectors": [[json_number(v) for v in row] for row in self.eigenvectors],
            "kind": self.kind,
            "stationary_coded": self.stationary_coded,
            "stationary": None if self.stationary is None else {
                k: json_value(v) for k, v in self.stationary.items()},
            "predicted": json_number(self.predicted),
            "interval": None if self.interval is None else [json_number(v) for v in self.interval],
            "distance": json_number(self.distance),
            "design_radius": json_number(self.design_radius),
            "inside": self.inside,
            "flat_directions": list(self.flat_directions),
            "notes": list(self.notes),
        }  # fmt: skip


@dataclass(frozen=True)
class RidgePath:
    """The constrained optimum of ŷ at each radius (coded units) from the design centre.

    ``table`` has one row per radius: ``radius``, the coded coordinates ``x.<factor>``, the
    factors in natural units, ``mean``, ``lower``, ``upper`` (the fitted value and its
    confidence interval) and ``mu``, the Lagrange multiplier (above every eigenvalue of B for a
    maximum, below every one for a minimum)."""

    response: str
    goal: str
    factors: tuple[str, ...]
    table: pd.DataFrame
    design_radius: float

    def to_json(self) -> dict[str, Any]:
        return {"goal": self.goal, "design_radius": json_number(self.design_radius),
                "path": records(self.table)}  # fmt: skip


def canonical_analysis(
    surface: ResponseSurface, alpha: float = 0.05, threshold: float | None = None
) -> CanonicalAnalysis:
    """Canonical analysis of ``surface`` (it must have a quadratic term for every numeric
    factor; see the module docstring). Eigenvalues smaller in size than ``threshold`` (default
    :data:`FLAT_SHARE` × the largest, as rsm's ``canonical``; 0 for none) count as zero: the
    surface is a ridge along their eigenvectors, and the stationary point is the nearest one on
    the ridge to the design centre, from the other eigenvectors alone (x_s = -½ Σ v vᵀ b / λ
    over them), instead of a point far along a direction the data hardly curve in."""
    factors = surface.numeric
    _require_second_order(surface)
    _, b, hessian = surface.quadratic()
    values, vectors = np.linalg.eigh(hessian / 2)
    order = np.argsort(values)[::-1]
    values, vectors = values[order], vectors[:, order]
    vectors = vectors * np.where(vectors[np.abs(vectors).argmax(axis=0), range(len(values))] < 0,
                                 -1.0, 1.0)  # fmt: skip
    largest = float(np.abs(values).max())
    cut = FLAT_SHARE * largest if threshold is None else threshold
    flat = tuple(int(i) for i in np.flatnonzero(np.abs(values) < cut))
    active = [i for i in range(len(values)) if i not in flat and values[i] != 0]
    radius = surface.design_radius
    notes = []
    if not active:
        notes.append("the quadratic part is flat in every direction: no stationary point")
        return CanonicalAnalysis(
            surface.response, factors, tuple(map(float, values)),
            tuple(tuple(map(float, row)) for row in vectors), "ridge", None, None, None, None,
            None, radius, flat, tuple(notes),
        )  # fmt: skip
    x_s = -0.5 * sum(np.outer(vectors[:, i], vectors[:, i]) @ b / values[i] for i in active)
    signs = np.sign(values[active])
    kind = ("ridge" if flat else "maximum" if np.all(signs < 0) else
            "minimum" if np.all(signs > 0) else "saddle")  # fmt: skip
    natural = surface.natural(x_s)
    prediction = surface.predict(natural, alpha).iloc[0]
    distance = float(np.linalg.norm(x_s))
    if flat:
        shape = ("maximum" if np.all(signs < 0) else "minimum" if np.all(signs > 0)
                 else "saddle")  # fmt: skip
        notes.append(
            f"{len(flat)} eigenvalue(s) near zero (under {cut / largest:.0%} of the largest): a "
            f"ridge, along which the response hardly changes, and a {shape} across it; the "
            "stationary point is the ridge's point nearest the design centre"
        )
    if distance > radius + 1e-9:
        notes.append(
            f"the stationary point lies outside the design region ({distance:.2f} coded "
            f"units from the centre, the design reaches {radius:.2f}): an extrapolation"
        )
    return CanonicalAnalysis(
        response=surface.response, factors=factors,
        eigenvalues=tuple(float(v) for v in values),
        eigenvectors=tuple(tuple(float(v) for v in row) for row in vectors),
        kind=kind, stationary_coded={n: float(v) for n, v in zip(factors, x_s, strict=True)},
        stationary=natural.iloc[0].to_dict(), predicted=float(prediction["mean"]),
        interval=None if surface.exact else (float(prediction["lower"]),
                                             float(prediction["upper"])),
        distance=distance, design_radius=radius, flat_directions=flat, notes=tuple(notes),
    )  # fmt: skip


def ridge_analysis(
    surface: ResponseSurface, radii=None, goal: str | None = None, alpha: float = 0.05
) -> RidgePath:
    """The optimum of ``surface`` on each sphere of ``radii`` (coded units; default 0 to the
    largest sphere inside the design's ranges in ten steps: the design's radius, or 1 where
    that would leave a factor's observed range, as along an axis of a 3^k grid), for ``goal``
    (default the surface's)."""
    _require_second_order(surface)
    goal = goal or surface.goal
    design_radius = surface.design_radius
    reach = min(design_radius, 1.0)
    radii = np.linspace(0, reach, 11) if radii is None else np.asarray(radii, float)
    if np.any(radii < 0):
        raise ValueError(f"radii must be 0 or more, got {radii.tolist()}")
    _, b, hessian = surface.quadratic()
    sign = 1.0 if goal == "max" else -1.0
    points, mus = [], []
    for radius in radii:
        x, mu = sphere_optimum(sign * b, sign * hessian / 2, float(radius))
        points.append(x)
        mus.append(sign * mu)
    coded = np.array(points)
    natural = surface.natural(coded)
    prediction = surface.predict(natural, alpha)
    table = pd.DataFrame({"radius": radii})
    for i, name in enumerate(surface.numeric):
        table[f"x.{name}"] = coded[:, i]
    table = pd.concat([table, natural[list(surface.numeric)], prediction], axis=1)
    table["mu"] = mus
    return RidgePath(surface.response, goal, surface.numeric, table, design_radius)


def canonical_path(
    surface: ResponseSurface, which: int = 0, distances=None, alpha: float = 0.05
) -> pd.DataFrame:
    """The line through the stationary point along eigenvector ``which`` (0: of the largest
    eigenvalue), at ``distances`` (coded units; default -5 to 5 by 0.5, as rsm's
    ``canonical.path``): along a near-zero eigenvalue, a ridge of almost equal responses; along
    the largest one of a saddle, the way up on both sides. Columns as :class:`RidgePath`'s
    table, with ``distance`` for ``radius`` and no ``mu``."""
    analysis = canonical_analysis(surface, alpha)
    if analysis.stationary_coded is None:
        raise ValueError(f"{surface.response}: no stationary point, so no canonical path")
    distances = np.arange(-5, 5.25, 0.5) if distances is None else np.asarray(distances, float)
    start = np.array([analysis.stationary_coded[n] for n in surface.numeric])
    vector = np.array([row[which] for row in analysis.eigenvectors])
    coded = start[None, :] + distances[:, None] * vector[None, :]
    natural = surface.natural(coded)
    table = pd.DataFrame({"distance": distances})
    for i, name in enumerate(surface.numeric):
        table[f"x.{name}"] = coded[:, i]
    return pd.concat([table, natural[list(surface.numeric)], surface.predict(natural, alpha)],
                     axis=1)  # fmt: skip


def sphere_optimum(b: np.ndarray, quadratic: np.ndarray, radius: float):
    """(x, μ): the maximum of xᵀb + xᵀBx (B = ``quadratic``, symmetric) on |x| = ``radius``,
    with its Lagrange multiplier μ ≥ λ_max(B) (the trust-region subproblem; the module
    docstring)."""
    if radius == 0:
        return np.zeros(len(b)), math.inf
    values, vectors = np.linalg.eigh(quadratic)
    c = vectors.T @ b
    top = values[-1]
    scale = max(1.0, float(np.abs(values).max()), float(np.linalg.norm(b)))

    def norm(mu: float) -> float:  # |x(μ)| with x = ½ (μI - B)⁻¹ b, falling for μ > λ_max
        with np.errstate(divide="ignore", invalid="ignore"):  # c_i = 0 adds 0, even at λ_i = μ
            return float(np.linalg.norm(np.where(c == 0, 0.0, c / (2 * (mu - values)))))

    along_top = np.abs(values - top) <= 1e-12 * scale
    rest = np.where(along_top, 0.0, c / (2 * np.where(along_top, 1.0, top - values)))
    low = top + 1e-15 * scale
    for _ in range(20):  # b with (almost) no component along the top eigenvector: creep in
        if norm(low) >= radius:
            break
        low = top + (low - top) / 1e3
    else:  # the hard case: μ = λ_max, and the rest of the radius along its eigenvector
        z = rest.copy()
        z[np.flatnonzero(along_top)[0]] = math.sqrt(max(0.0, radius**2 - float(rest @ rest)))
        return vectors @ z, float(top)
    high = top + float(np.linalg.norm(c)) / (2 * radius) + 1e-12 * scale  # |x(high)| ≤ radius
    mu = optimize.brentq(lambda m: norm(m) - radius, low, high, xtol=1e-14 * scale, rtol=1e-15,
                         maxiter=500)  # fmt: skip
    return vectors @ (c / (2 * (mu - values))), float(mu)


def _require_second_order(surface: ResponseSurface) -> None:
    flat = [n for n in surface.numeric if f"I({n} ** 2)" not in surface.terms]
    if flat or not surface.numeric:
        why = f"no quadratic term for {', '.join(flat)}" if flat else "no numeric factor"
        raise ValueError(f"{surface.response}: not a second-order surface ({why})")
