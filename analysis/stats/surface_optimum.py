"""The canonical analysis of a fitted response surface: its factor part's quadratic in the coded
numeric factors at each categorical combination, the optimum inside the design region and the
stationary point with its kind (:mod:`analysis.stats.surface`)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
from scipy import optimize

from analysis.stats.surface_coding import BLOCK_PREFIX, RELATIVE_TOLERANCE, FactorCoding, Goal


class _FactorPart:
    """The fit seen through its factor part: predictions at the average block (every block
    contrast 0), so the block term shifts no optimum, stationary point or prediction."""

    def __init__(self, fit):
        self.fit = fit
        self.params = fit.params
        self.block_columns = [n for n in fit.model.exog_names if n.startswith(BLOCK_PREFIX)]

    def _frame(self, frame: pd.DataFrame) -> pd.DataFrame:
        if not self.block_columns:
            return frame
        frame = frame.copy()
        for column in self.block_columns:
            frame[column] = 0.0
        return frame

    def predict(self, frame: pd.DataFrame) -> pd.Series:
        return self.fit.predict(self._frame(frame))

    def get_prediction(self, frame: pd.DataFrame):
        return self.fit.get_prediction(self._frame(frame))


def _factor_part(fit) -> _FactorPart:
    return _FactorPart(fit)


def _design_rows(coding: dict[str, FactorCoding], coded_numeric: dict[str, float], combo: dict):
    row = {}
    for name, c in coding.items():
        row[name] = c.decode(coded_numeric[name]).item() if c.kind == "numeric" else combo[name]
    return row


Quadratic = tuple[float, np.ndarray, np.ndarray]  # (f0, b, B): f0 + b·x + ½ xᵀBx


def _quadratics(fit, coding: dict[str, FactorCoding]) -> dict[tuple, Quadratic]:
    """Combination of categorical levels -> (f0, b, B) with the prediction at coded numeric x
    equal to f0 + b·x + ½ xᵀBx. The model is at most quadratic in the numeric factors, so
    central differences over unit steps (0, ±e_i, ±e_i ± e_j for i < j) give b and B exactly, to
    float rounding; every point of every combination is predicted in one call (patsy's cost is
    per call, not per row)."""
    numeric = [n for n, c in coding.items() if c.kind == "numeric"]
    categorical = [n for n, c in coding.items() if c.kind == "categorical"]
    combos = list(itertools.product(*[coding[n].levels for n in categorical]))
    k = len(numeric)
    eye = np.eye(k)
    pairs = list(itertools.combinations(range(k), 2))
    steps = [np.zeros(k), *eye, *(-eye)]
    for i, j in pairs:
        steps += [eye[i] + eye[j], eye[i] - eye[j], -eye[i] + eye[j], -eye[i] - eye[j]]
    frame = pd.DataFrame(np.tile(np.array(steps).reshape(len(steps), k), (len(combos), 1)),
                         columns=numeric)  # fmt: skip
    for n, name in enumerate(categorical):
        frame[name] = np.repeat([str(combo[n]) for combo in combos], len(steps))
    values = fit.predict(frame).to_numpy().reshape(len(combos), len(steps))
    out = {}
    for combo, f in zip(combos, values, strict=True):
        f0, plus, minus = f[0], f[1 : k + 1], f[k + 1 : 2 * k + 1]
        hessian = np.diag(plus + minus - 2 * f0)
        for n, (i, j) in enumerate(pairs):
            pp, pm, mp, mm = f[2 * k + 1 + 4 * n : 2 * k + 5 + 4 * n]
            hessian[i, j] = hessian[j, i] = (pp - pm - mp + mm) / 4
        out[combo] = (float(f0), (plus - minus) / 2, hessian)
    return out


def _value(quadratic: Quadratic, x: np.ndarray) -> np.ndarray:
    """The prediction at coded points ``x`` (rows) of one quadratic."""
    f0, b, hessian = quadratic
    return f0 + x @ b + 0.5 * np.einsum("ni,ij,nj->n", x, hessian, x)


def _optimum(quadratics: dict[tuple, Quadratic], coding, goal: Goal):
    """Best predicted point in the box of observed levels, over every categorical combination:
    a grid over the coded box, then L-BFGS-B from the best grid point with the exact gradient."""
    numeric = [n for n, c in coding.items() if c.kind == "numeric"]
    categorical = [n for n, c in coding.items() if c.kind == "categorical"]
    sign = -1.0 if goal == "max" else 1.0
    per_axis = max(3, round(4000 ** (1 / max(1, len(numeric)))))
    axis = np.linspace(-1, 1, min(41, per_axis))
    grid = (
        np.array(list(itertools.product(*[axis] * len(numeric)))) if numeric else np.zeros((1, 0))
    )
    best = None
    for combo_values, quadratic in quadratics.items():
        values = sign * _value(quadratic, grid)
        start = grid[int(np.argmin(values))]
        x, value = start, float(values.min())
        if numeric:
            _, b, hessian = quadratic
            res = optimize.minimize(
                lambda p, q=quadratic: sign * float(_value(q, p[None, :])[0]), start,
                jac=lambda p, b=b, h=hessian: sign * (b + h @ p),
                bounds=[(-1, 1)] * len(numeric), method="L-BFGS-B",
            )  # fmt: skip
            if res.fun < value:
                x, value = res.x, float(res.fun)
        if best is None or value < best[0] - 1e-12:
            raw = dict(zip(categorical, combo_values, strict=True))
            best = (value, dict(zip(numeric, map(float, x), strict=True)), raw)
    return best[1], best[2]


def _combo_key(coding, combo: dict) -> tuple:
    return tuple(combo[n] for n, c in coding.items() if c.kind == "categorical")


def _idle_factors(quadratics, coding, coded_best: dict[str, float], combo, scale: float):
    """Numeric factors along which the prediction at the optimum does not change (to within
    float noise next to ``scale``): any level of them is as good, so their place in the optimum
    would be float noise."""
    numeric = [n for n, c in coding.items() if c.kind == "numeric"]
    quadratic = quadratics[_combo_key(coding, combo)]
    best = np.array([coded_best[n] for n in numeric])
    idle = []
    for i, name in enumerate(numeric):
        line = np.repeat(best[None, :], 5, axis=0)
        line[:, i] = np.linspace(-1, 1, 5)
        values = _value(quadratic, line)
        if float(values.max() - values.min()) <= RELATIVE_TOLERANCE * scale:
            idle.append(name)
    return idle


def _stationary(
    quadratics, fit, coding, combo, scale: float
) -> tuple[dict[str, float] | None, str | None, str | None]:
    """x_s = -½ B⁻¹ b of the numeric part at the optimum's categorical levels (rsm's B; here
    the Hessian, 2B, so x_s = -H⁻¹ b), and its kind; none when the curvature along some
    direction is float noise next to ``scale`` (max |y|)."""
    numeric = [n for n, c in coding.items() if c.kind == "numeric"]
    if not numeric:
        return None, None, "no stationary point: no numeric factor"
    flat = [n for n in numeric if f"I({n} ** 2)" not in fit.params.index]
    if flat:
        return None, None, f"no stationary point: no curvature estimated for {', '.join(flat)}"
    _, b, hessian = quadratics[_combo_key(coding, combo)]
    eig = np.linalg.eigvalsh(hessian)
    if np.min(np.abs(eig)) <= RELATIVE_TOLERANCE * scale:
        note = (
            "no stationary point: the quadratic part is singular (no curvature along some "
            "direction, to within float noise), so the surface is a ridge or a plane there"
        )
        return None, None, note
    x_s = np.linalg.solve(hessian, -b)
    kind = "maximum" if np.all(eig < 0) else "minimum" if np.all(eig > 0) else "saddle"
    point = {n: float(coding[n].decode(x_s[i])) for i, n in enumerate(numeric)}
    note = None
    if np.any(np.abs(x_s) > 1):
        note = "the stationary point lies outside the design region"
    return point, kind, note
