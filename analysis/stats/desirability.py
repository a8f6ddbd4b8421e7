"""Several goals at once: Derringer & Suich's desirability (Journal of Quality Technology 12(4),
1980, 214–219) over fitted response surfaces, maximised inside the design region.

Each goal maps its response's prediction ŷ to a desirability d in [0, 1]:

- ``max``: 0 below ``low``, ((ŷ - low) / (high - low))^w between, 1 above ``high``;
- ``min``: 1 below ``low``, ((high - ŷ) / (high - low))^w between, 0 above ``high``;
- ``target``: ((ŷ - low) / (target - low))^w from ``low`` up to ``target``,
  ((high - ŷ) / (high - target))^w from there to ``high``, 0 outside [low, high];

with ``weight`` w the shape exponent (Derringer & Suich's s and t, Design-Expert's "weight":
w < 1 is satisfied sooner, w > 1 later). The overall desirability is the weighted geometric
mean D = (Π d_i^{r_i})^{1/Σ r_i} with ``importance`` r_i (all 1: the plain geometric mean). D is
0 wherever one goal is wholly unmet, so no goal is traded away entirely.

The region searched is the design's: each numeric factor within its observed range (coded
[-1, 1]) and within the design's radius from the centre (:attr:`ResponseSurface.design_radius`;
for a rotatable central composite, the sphere through its axial points). Every categorical
combination is tried. The search is a grid over the region, then Nelder–Mead from the best grid
points (D is flat at 0 and at 1 and has kinks, so no gradient is used), as the ``desirability``
R package's vignette does.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd
from scipy import optimize

from analysis.stats.surface import ResponseSurface, json_number, json_value
from analysis.stats.units import level

EDGE = 1e-3  # a coordinate this close (coded) to the region's boundary is on it


@dataclass(frozen=True)
class DesirabilityGoal:
    """One response's goal (see the module docstring)."""

    metric: str
    goal: Literal["max", "min", "target"]
    low: float
    high: float
    target: float | None = None
    weight: float = 1.0
    importance: float = 1.0

    def __post_init__(self):
        where = f"goal for {self.metric}"
        if self.goal not in ("max", "min", "target"):
            raise ValueError(f"{where}: goal must be max, min or target, got {self.goal!r}")
        if not self.low < self.high:
            raise ValueError(f"{where}: low ({self.low}) must be below high ({self.high})")
        if self.goal == "target":
            if self.target is None or not self.low < self.target < self.high:
                raise ValueError(f"{where}: a target goal needs low < target < high, got "
                                 f"target={self.target}")  # fmt: skip
        elif self.target is not None:
            raise ValueError(f"{where}: target is only for goal: target (this one is "
                             f"{self.goal})")  # fmt: skip
        if not (self.weight > 0 and self.importance > 0):
            raise ValueError(f"{where}: weight and importance must be above 0")

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DesirabilityGoal:
        return cls(**data)

    def to_json(self) -> dict[str, Any]:
        return {"metric": self.metric, "goal": self.goal, "low": self.low, "high": self.high,
                "target": self.target, "weight": self.weight,
                "importance": self.importance}  # fmt: skip

    def d(self, y) -> np.ndarray:
        """The desirability of predictions ``y`` (any shape)."""
        y = np.asarray(y, dtype=float)
        low, high, w = self.low, self.high, self.weight
        if self.goal == "max":
            return np.clip((y - low) / (high - low), 0.0, 1.0) ** w
        if self.goal == "min":
            return np.clip((high - y) / (high - low), 0.0, 1.0) ** w
        rising = np.clip((y - low) / (self.target - low), 0.0, 1.0) ** w
        falling = np.clip((high - y) / (high - self.target), 0.0, 1.0) ** w
        return np.where(y <= self.target, rising, falling)


def overall(ds: np.ndarray, importances: Sequence[float]) -> np.ndarray:
    """The weighted geometric mean of desirabilities ``ds`` (rows: points, columns: goals)."""
    ds = np.asarray(ds, dtype=float)
    r = np.asarray(importances, dtype=float)
    with np.errstate(divide="ignore"):
        logs = np.log(ds)
    return np.where(np.any(ds <= 0, axis=1), 0.0, np.exp(logs @ r / r.sum()))


@dataclass(frozen=True)
class Region:
    """Coded points with every |x_i| ≤ ``box`` (None: no box) and |x| ≤ ``radius`` (None: no
    sphere)."""

    dimensions: int
    box: float | None = 1.0
    radius: float | None = None

    def grid(self, points: int = 6000) -> np.ndarray:
        reach = self.box if self.box is not None else self.radius
        axis = np.linspace(-reach, reach, max(3, min(61, round(points ** (1 / self.dimensions)))))
        grid = np.array(list(itertools.product(*[axis] * self.dimensions)))
        return grid[self.holds(grid)]

    def holds(self, x: np.ndarray) -> np.ndarray:
        x = np.atleast_2d(x)
        inside = np.ones(len(x), dtype=bool)
        if self.box is not None:
            inside &= np.all(np.abs(x) <= self.box + 1e-12, axis=1)
        if self.radius is not None:
            inside &= np.linalg.norm(x, axis=1) <= self.radius + 1e-12
        return inside

    def project(self, x: np.ndarray) -> np.ndarray:
        """A point of the region near ``x``: clipped to the box, then pulled onto the sphere."""
        if self.box is not None:
            x = np.clip(x, -self.box, self.box)
        if self.radius is not None and np.linalg.norm(x) > self.radius:
            x = x * self.radius / np.linalg.norm(x)
        return x

    def edges(self, x: np.ndarray, names: Sequence[str]) -> tuple[str, ...]:
        """What bounds ``x``: factors at an end of their range, and "radius" on the sphere."""
        out = []
        if self.box is not None:
            out += [n for n, v in zip(names, x, strict=True) if abs(v) >= self.box - EDGE]
        if self.radius is not None and np.linalg.norm(x) >= self.radius - EDGE:
            out.append("radius")
        return tuple(out)


def maximise(
    predict: Callable[[np.ndarray], np.ndarray],
    goals: Sequence[DesirabilityGoal],
    region: Region,
    starts: int = 5,
) -> tuple[np.ndarray, float]:
    """(coded point, D) of the largest overall desirability in ``region``; ``predict`` maps
    coded points (rows) to predictions (one column per goal, in order)."""
    importances = [g.importance for g in goals]

    def desirability(x: np.ndarray) -> np.ndarray:
        y = predict(np.atleast_2d(x))
        return overall(np.column_stack([g.d(y[:, i]) for i, g in enumerate(goals)]),
                       importances)  # fmt: skip

    grid = region.grid()
    values = desirability(grid)
    best_x, best = grid[int(np.argmax(values))], float(values.max())
    for start in grid[np.argsort(values)[::-1][:starts]]:
        res = optimize.minimize(
            lambda p: -float(desirability(region.project(p))[0]), start, method="Nelder-Mead",
            options={"xatol": 1e-7, "fatol": 1e-10, "maxiter": 4000},
        )  # fmt: skip
        x = region.project(res.x)
        value = float(desirability(x)[0])
        if value > best + 1e-12:
            best_x, best = x, value
    return best_x, best


@dataclass(frozen=True)
class DesirabilityOptimum:
    """The point of largest overall desirability ``overall`` in the design region: ``point`` in
    natural units (``coded``: in the first goal's surface coding), each goal's ``predicted``
    value with its ``interval`` and ``d``, and ``edges``: the factors at an end of their range
    (and "radius") there, which a next study should move past."""

    goals: tuple[DesirabilityGoal, ...]
    point: dict[str, Any]
    coded: dict[str, float]
    overall: float
    responses: dict[str, dict[str, Any]]
    edges: tuple[str, ...]
    radius: float
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "goals": [g.to_json() for g in self.goals],
            "point": {k: json_value(v) for k, v in self.point.items()},
            "coded": {k: json_number(v) for k, v in self.coded.items()},
            "overall": json_number(self.overall),
            "responses": self.responses,
            "edges": list(self.edges),
            "radius": json_number(self.radius),
            "notes": list(self.notes),
        }  # fmt: skip

    def sentences(self) -> list[str]:
        where = ", ".join(f"{k} = {v:.4g}" if isinstance(v, float) else f"{k} = {v}"
                          for k, v in self.point.items())  # fmt: skip
        parts = "; ".join(
            f"{m} {level(m, r['predicted'])} (d = {r['d']:.2f})" for m, r in self.responses.items()
        )
        lead = (f"Most desirable point in the design region: {where}, overall desirability "
                f"D = {self.overall:.3f} ({parts}).")  # fmt: skip
        edge = ("" if not self.edges else
                f"It lies on the region's edge ({', '.join(self.edges)}): the best balance may "
                "lie beyond the design.")  # fmt: skip
        return [s for s in (lead, edge, *self.notes) if s]


def desirability_optimum(
    surfaces: dict[str, ResponseSurface], goals: Sequence[DesirabilityGoal], alpha: float = 0.05
) -> DesirabilityOptimum:
    """The most desirable point of the fitted ``surfaces`` (metric -> surface, one per goal)
    inside the design region."""
    goals = tuple(goals)
    missing = [g.metric for g in goals if g.metric not in surfaces]
    if missing:
        raise ValueError(f"no fitted surface for {', '.join(missing)}")
    first = surfaces[goals[0].metric]
    numeric = list(first.numeric)
    categorical = {n: c.levels for s in surfaces.values() for n, c in s.coding.items()
                   if c.kind == "categorical"}  # fmt: skip
    radius = min(s.design_radius for s in surfaces.values())
    region = Region(len(numeric), box=1.0, radius=radius)
    best = None
    for combo_values in itertools.product(*categorical.values()):
        combo = dict(zip(categorical, combo_values, strict=True))
        predict = _predictor(first, [surfaces[g.metric] for g in goals], numeric, combo)
        x, value = maximise(predict, goals, region)
        if best is None or value > best[1] + 1e-12:
            best = (x, value, combo)
    x, value, combo = best
    natural = first.natural(x, combo)
    responses = {}
    for g in goals:
        surface = surfaces[g.metric]
        row = surface.predict(natural[list(surface.coding)], alpha).iloc[0]
        responses[g.metric] = {
            "goal": g.goal, "predicted": float(row["mean"]),
            "interval": None if surface.exact else [float(row["lower"]), float(row["upper"])],
            "d": float(g.d(row["mean"])),
        }  # fmt: skip
    notes = []
    if value == 0:
        notes.append("no point of the region meets every goal at all (D = 0 everywhere): some "
                     "goal's low (or high) lies beyond what the fitted surfaces reach")  # fmt: skip
    return DesirabilityOptimum(
        goals=goals, point=natural.iloc[0].to_dict(),
        coded={n: float(v) for n, v in zip(numeric, x, strict=True)}, overall=value,
        responses=responses, edges=region.edges(x, numeric), radius=radius, notes=tuple(notes),
    )  # fmt: skip


def _predictor(first: ResponseSurface, surfaces: list[ResponseSurface], numeric: list[str],
               combo: dict) -> Callable[[np.ndarray], np.ndarray]:  # fmt: skip
    """Coded points of ``first``'s coding -> each surface's prediction (its own quadratic in its
    own coding, at ``combo``): fast enough for a grid and a simplex search."""
    parts = []
    for surface in surfaces:
        f0, b, hessian = surface.quadratic({n: combo[n] for n, c in surface.coding.items()
                                            if c.kind == "categorical"})  # fmt: skip
        parts.append((surface, f0, b, hessian))

    def predict(x: np.ndarray) -> np.ndarray:
        natural = {n: first.coding[n].decode(x[:, i]) for i, n in enumerate(numeric)}
        out = []
        for surface, f0, b, hessian in parts:
            own = np.column_stack([surface.coding[n].code(natural[n]) for n in surface.numeric])
            out.append(f0 + own @ b + 0.5 * np.einsum("ni,ij,nj->n", own, hessian, own))
        return np.column_stack(out)

    return predict


def goals_from_attrs(df: pd.DataFrame) -> tuple[DesirabilityGoal, ...]:
    """The study file's ``goals`` as the results carry them (``df.attrs["goals"]``)."""
    return tuple(DesirabilityGoal.from_json(g) for g in df.attrs.get("goals") or ())


def study_desirability(results: pd.DataFrame, fits: dict) -> DesirabilityOptimum | str | None:
    """The most desirable point under the study file's ``goals`` (the results' attrs), from
    each goal's fit (:class:`analysis.stats.fits.ResponseFit`), or why there is none (a sentence),
    or
    None when the study has no goals."""
    goals = goals_from_attrs(results)
    if not goals:
        return None
    for goal in goals:
        fit = fits.get(goal.metric)
        if fit is None or fit.surface is None:
            return f"no overall desirability: {goal.metric} has no model"
        if fit.findings is not None and not fit.findings.beats_mean:
            return (f"no overall desirability: the model of {goal.metric} does not beat the "
                    "mean, so its predictions carry no information to balance")  # fmt: skip
    return desirability_optimum({g.metric: fits[g.metric].surface for g in goals}, goals)
