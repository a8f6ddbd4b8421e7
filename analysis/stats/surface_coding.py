"""A response surface's factors in coded units: numeric factors to [-1, 1] on their design
scale, categorical ones as sum-to-zero contrasts, the model's terms; the errors a design that
cannot support the model raises (:mod:`analysis.stats.surface`)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

Goal = Literal["max", "min"]

BLOCK_PREFIX = "_block"
"""Model columns of the block term: ``_block0`` … (sum-to-zero contrasts of the block levels)."""
BLOCK_COLUMN = "__block_level"


RELATIVE_TOLERANCE = 1e-9
"""Two values of a response that differ by at most this × max |y| over the fitted trials are
equal (float noise, e.g. 0.1 + 0.2 against 0.3); see the module docstring."""


class UnsupportedDesignError(ValueError):
    """The design cannot estimate the requested model."""


class NoVariationError(UnsupportedDesignError):
    """The response has no variation to model: constant (to within :data:`RELATIVE_TOLERANCE`),
    missing in every trial, or present in only one. No simpler model can help, so callers walking
    a ladder of models should stop at this error (a subclass of :class:`UnsupportedDesignError`
    so that callers catching that still handle it)."""

    def __init__(self, response: str, message: str):
        super().__init__(message)
        self.response = response


@dataclass(frozen=True)
class FactorCoding:
    """How one factor enters the model: numeric (coded to [-1, 1] on its scale) or categorical."""

    name: str
    kind: Literal["numeric", "categorical"]
    scale: Literal["linear", "log"] = "linear"
    low: float | None = None
    high: float | None = None
    levels: tuple = ()
    integer: bool = False

    def _t(self, values):
        values = np.asarray(values, dtype=float)
        return np.log(values) if self.scale == "log" else values

    def code(self, values) -> np.ndarray:
        lo, hi = self._t(self.low), self._t(self.high)
        if hi == lo:
            return np.zeros_like(self._t(values))
        return (self._t(values) - (hi + lo) / 2) / ((hi - lo) / 2)

    def decode(self, coded) -> np.ndarray:
        lo, hi = self._t(self.low), self._t(self.high)
        natural = (hi + lo) / 2 + np.asarray(coded, dtype=float) * (hi - lo) / 2
        return np.exp(natural) if self.scale == "log" else natural


def _is_numeric(series: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)


def code_factors(
    df: pd.DataFrame, factors: list[str], scales: dict[str, str] | None = None
) -> dict[str, FactorCoding]:
    """Codings of the factors from the observed levels; ``scales`` (name -> linear | log) from
    the study file, else log for positive numeric factors spanning at least 4×."""
    scales = scales or {}
    codings = {}
    for name in factors:
        values = df[name].dropna()
        if _is_numeric(values):
            lo, hi = float(values.min()), float(values.max())
            scale = scales.get(name) or ("log" if lo > 0 and hi / lo >= 4 else "linear")
            integer = bool(np.all(np.equal(np.mod(values, 1), 0)))
            levels = tuple(sorted(values.unique()))
            codings[name] = FactorCoding(name, "numeric", scale, lo, hi, levels, integer)
        else:
            codings[name] = FactorCoding(name, "categorical", levels=tuple(sorted(values.unique())))
    return codings


def _coded_frame(df: pd.DataFrame, coding: dict[str, FactorCoding]) -> pd.DataFrame:
    out = pd.DataFrame(index=df.index)
    for name, c in coding.items():
        out[name] = c.code(df[name]) if c.kind == "numeric" else df[name].astype(str)
    return out


def _terms(coding: dict[str, FactorCoding], quadratic: bool, interactions: bool):
    """(formula terms, notes) of the second-order model these factors support."""
    notes = []

    def linear(name: str) -> str:
        return name if coding[name].kind == "numeric" else f"C({name}, Sum)"

    terms = [linear(n) for n in coding]
    for name, c in coding.items():
        if c.kind != "numeric" or not quadratic:
            continue
        if len(c.levels) >= 3:
            terms.append(f"I({name} ** 2)")
        else:
            notes.append(f"no quadratic term for {name}: it has {len(c.levels)} levels")
    if interactions:
        for a, b in itertools.combinations(coding, 2):
            terms.append(f"{linear(a)}:{linear(b)}")
    return terms, notes
