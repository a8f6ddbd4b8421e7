""":class:`ResponseSurface`, a fitted surface and what it predicts, and the JSON helpers its
readers share (:mod:`analysis.stats.surface` fits it)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from analysis.stats.surface_coding import FactorCoding, Goal, _coded_frame
from analysis.stats.surface_optimum import Quadratic, _combo_key, _factor_part, _quadratics


@dataclass(frozen=True)
class ResponseSurface:
    """A fitted second-order model of one response. Build with :func:`fit_response_surface`.

    What is undefined is None (NaN in the coefficient and ANOVA tables) and ``notes`` says why:
    ``lack_of_fit_p`` without pure error; ``optimum``, ``optimum_coded``, ``predicted`` and
    ``interval`` for a flat surface; ``interval`` (and every standard error, t and p) when
    ``exact`` (the model reproduces every trial: residual variance 0)."""

    response: str
    goal: Goal
    factors: tuple[str, ...]
    coding: dict[str, FactorCoding]
    formula: str
    n: int
    terms: tuple[str, ...]
    anova: pd.DataFrame
    coefficients: pd.DataFrame
    r2: float
    adj_r2: float
    press: float
    pred_r2: float
    lack_of_fit_p: float | None
    lack_of_fit: dict[str, float | None] | None
    stationary_point: dict[str, float] | None
    stationary_kind: str | None
    optimum: dict[str, Any] | None
    optimum_coded: dict[str, float] | None
    predicted: float | None
    interval: tuple[float, float] | None
    notes: tuple[str, ...]
    exact: bool
    data: pd.DataFrame = field(repr=False)
    _fit: Any = field(repr=False, compare=False)
    blocks: str | None = None
    block_levels: tuple = ()
    error_ms: float = math.nan
    error_df: int = 0
    model_f: float | None = None
    model_df: int = 0
    model_p: float | None = None

    def predict(self, frame: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
        """Mean response and its confidence interval at natural-unit factor values.

        Args:
            frame: one column per factor (natural units: τ, not log τ).

        Returns:
            DataFrame with columns ``mean``, ``lower``, ``upper`` (one row per input row);
            ``lower`` and ``upper`` are NaN when the fit is exact (residual variance 0).
        """
        coded = _coded_frame(frame, self.coding)
        summary = _factor_part(self._fit).get_prediction(coded).summary_frame(alpha)
        out = summary[["mean", "mean_ci_lower", "mean_ci_upper"]].copy()
        out.columns = ["mean", "lower", "upper"]
        if self.exact:
            out[["lower", "upper"]] = math.nan
        return out.reset_index(drop=True)

    @property
    def numeric(self) -> tuple[str, ...]:
        """The numeric factors, in model order: the axes of the coded space."""
        return tuple(n for n, c in self.coding.items() if c.kind == "numeric")

    def levels_at_optimum(self) -> dict[str, Any]:
        """The categorical factors' levels at the optimum (the first levels for a flat
        surface): where a path or a canonical analysis over the numeric factors is taken."""
        chosen = self.optimum or {}
        return {n: chosen.get(n, c.levels[0]) for n, c in self.coding.items()
                if c.kind == "categorical"}  # fmt: skip

    def quadratic(self, combo: dict | None = None) -> Quadratic:
        """(f0, b, H) of the factor part in coded numeric units at ``combo``'s categorical
        levels (default :meth:`levels_at_optimum`): the prediction at coded x is
        f0 + b·x + ½ xᵀHx, so b is the gradient at the design centre and H the Hessian."""
        combo = self.levels_at_optimum() if combo is None else combo
        return _quadratics(_factor_part(self._fit), self.coding)[_combo_key(self.coding, combo)]

    def natural(self, coded: np.ndarray, combo: dict | None = None) -> pd.DataFrame:
        """Coded numeric points (rows, in :attr:`numeric` order) in natural units, with the
        categorical levels of ``combo`` (default :meth:`levels_at_optimum`)."""
        coded = np.atleast_2d(np.asarray(coded, dtype=float))
        frame = pd.DataFrame({n: self.coding[n].decode(coded[:, i])
                              for i, n in enumerate(self.numeric)})  # fmt: skip
        for name, value in (self.levels_at_optimum() if combo is None else combo).items():
            frame[name] = value
        return frame[list(self.coding)]

    @property
    def design_radius(self) -> float:
        """The largest distance of a trial from the design centre in coded units (numeric
        factors): the radius of the design region (√k for a 2^k factorial, α for a central
        composite's axial points)."""
        coded = _coded_frame(self.data, self.coding)[list(self.numeric)].to_numpy(float)
        return float(np.sqrt((coded**2).sum(axis=1)).max()) if coded.size else 0.0

    def to_json(self) -> dict[str, Any]:
        def plain(v):
            if isinstance(v, np.generic):
                v = v.item()
            return None if isinstance(v, float) and not math.isfinite(v) else v

        return {
            "response": self.response,
            "goal": self.goal,
            "n": self.n,
            "terms": list(self.terms),
            "r2": plain(self.r2),
            "adj_r2": plain(self.adj_r2),
            "press": plain(self.press),
            "pred_r2": plain(self.pred_r2),
            "lack_of_fit_p": plain(self.lack_of_fit_p),
            "blocks": self.blocks,
            "error_ms": plain(self.error_ms),
            "error_df": self.error_df,
            "model_f": plain(self.model_f),
            "model_p": plain(self.model_p),
            "stationary_kind": self.stationary_kind,
            "stationary_point": None
            if self.stationary_point is None
            else {k: plain(v) for k, v in self.stationary_point.items()},
            "optimum": None
            if self.optimum is None
            else {k: plain(v) for k, v in self.optimum.items()},
            "predicted": plain(self.predicted),
            "interval": None
            if self.interval is None
            else [plain(self.interval[0]), plain(self.interval[1])],
            "notes": list(self.notes),
        }


def json_number(value) -> float | None:
    """A number for JSON: a float, or None for None, NaN and infinities (JSON has neither)."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def json_value(value) -> Any:
    """A factor's value for JSON: a number through :func:`json_number`, a category (text, a
    boolean) as it is."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | float | np.number):
        return json_number(value)
    return value


def records(table: pd.DataFrame) -> list[dict[str, Any]]:
    """A table's rows for JSON, each value through :func:`json_value`."""
    return [{k: json_value(v) for k, v in row.items()} for row in table.to_dict("records")]
