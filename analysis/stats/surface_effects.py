"""Each factor's effect in natural units with its evidence (:func:`factor_effects`), and Holm's
adjustment of their p-values (:mod:`analysis.stats.surface`)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from analysis.stats.surface_model import ResponseSurface
from analysis.stats.surface_optimum import _factor_part
from analysis.stats.t_power import noncentrality


# ---------------------------------------------------------------------------------------------
# effects
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Effect:
    """The effect of one factor on one response in natural units, at the centre of the other
    factors (categorical ones averaged over their levels) and the average block.

    ``change`` says what moves: "doubling temperature" for a log-scale factor (half a doubling
    either side of the design centre), "batch_size from 64 to 256" for a linear one (its design
    range), "objective = b instead of a" for a categorical one. ``p_adjusted`` is Holm-adjusted
    over the response's effects; ``detectable`` is the smallest |effect| of this change that the
    study's own error detects at the given power (two-sided t test on ``df`` degrees of freedom).
    Undefined values (an exact fit) are None."""

    response: str
    factor: str
    change: str
    estimate: float
    std_err: float | None
    ci_low: float | None
    ci_high: float | None
    p: float | None
    p_adjusted: float | None
    detectable: float | None
    df: int

    def to_json(self) -> dict[str, Any]:
        def plain(v):
            return None if v is None or not math.isfinite(v) else float(v)

        return {"factor": self.factor, "change": self.change, "estimate": plain(self.estimate),
                "std_err": plain(self.std_err), "ci": [plain(self.ci_low), plain(self.ci_high)],
                "p": plain(self.p), "p_adjusted": plain(self.p_adjusted),
                "detectable": plain(self.detectable), "df": self.df}  # fmt: skip


def _contrasts(
    surface: ResponseSurface, moves: list[tuple[dict, dict]], combo: dict | None = None
) -> np.ndarray:
    """One row per (high, low) move: the design matrix's row at ``high`` minus that at ``low``
    (coded values of the factor that moves), every other numeric factor at its centre,
    categorical ones averaged over their levels (or at ``combo``'s levels), blocks at their
    average. Every row of every move is built in one call: patsy's cost is per call, not per
    row."""
    from patsy import build_design_matrices

    coding = surface.coding
    data = surface._fit.model.data
    info = getattr(data, "model_spec", None) or data.design_info  # statsmodels 0.15 / 0.14
    categorical = [n for n, c in coding.items() if c.kind == "categorical"]
    combos = list(itertools.product(*[coding[n].levels for n in categorical]))
    if combo is not None:
        combos = [tuple(combo[n] for n in categorical)]
    if not moves:
        return np.zeros((0, len(surface._fit.params)))
    rows = []
    for high, low in moves:
        for combo in combos:
            base = {n: 0.0 for n, c in coding.items() if c.kind == "numeric"}
            base |= {n: str(v) for n, v in zip(categorical, combo, strict=True)}
            for column in _factor_part(surface._fit).block_columns:
                base[column] = 0.0
            rows += [{**base, **high}, {**base, **low}]
    matrix = np.asarray(build_design_matrices([info], pd.DataFrame(rows))[0])
    differences = matrix[0::2] - matrix[1::2]
    return differences.reshape(len(moves), len(combos), -1).mean(axis=1)


def factor_effects(
    surface: ResponseSurface, alpha: float = 0.05, power: float = 0.8
) -> tuple[Effect, ...]:
    """Each factor's effect with its interval, Holm-adjusted p and the smallest detectable
    effect at ``power`` (statsmodels' power module, from the fit's own residual error)."""
    fit = surface._fit
    df = round(float(fit.df_resid))
    changes = []
    for name, c in surface.coding.items():
        if c.kind == "numeric":
            if c.scale == "log":
                half = math.log(2) / math.log(c.high / c.low)  # half a doubling, coded
                changes.append((name, f"doubling {name}", {name: half}, {name: -half}))
            else:
                changes.append((name, f"{name} from {c.low:g} to {c.high:g}", {name: 1.0},
                                {name: -1.0}))  # fmt: skip
        else:
            for level in c.levels[1:]:
                changes.append((name, f"{name} = {level} instead of {c.levels[0]}",
                                {name: str(level)}, {name: str(c.levels[0])}))  # fmt: skip
    ncp = None
    if not surface.exact and df >= 1:
        ncp = noncentrality(df, alpha, power)
    effects = []
    contrasts = _contrasts(surface, [(high, low) for _, _, high, low in changes])
    cov = fit.cov_params().to_numpy()
    for (name, change, _, _), c in zip(changes, contrasts, strict=True):
        estimate = float(c @ fit.params.to_numpy())
        if surface.exact:
            effects.append(Effect(surface.response, name, change, estimate, None, None, None,
                                  None, None, None, df))  # fmt: skip
            continue
        se = float(math.sqrt(c @ cov @ c))
        t_crit = float(stats.t.ppf(1 - alpha / 2, df))
        p = float(2 * stats.t.sf(abs(estimate) / se, df)) if se > 0 else None
        effects.append(Effect(surface.response, name, change, estimate, se,
                              estimate - t_crit * se, estimate + t_crit * se, p, None,
                              None if ncp is None else ncp * se, df))  # fmt: skip
    ps = [e.p for e in effects if e.p is not None]
    if ps:
        adjusted = iter(holm(ps))
        effects = [e if e.p is None else _replace(e, p_adjusted=float(next(adjusted)))
                   for e in effects]  # fmt: skip
    return tuple(effects)


def holm(p_values) -> np.ndarray:
    """Holm's step-down adjusted p-values (Holm 1979), in the input's order: the i-th smallest
    p becomes max over j <= i of min(1, (m - j + 1) p_(j)). The same numbers as statsmodels'
    ``multipletests(p, method="holm")[1]``, which also runs a full garbage collection on every
    call (0.3 s in a process that holds a report's figures)."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p, kind="stable")
    m = len(p)
    stepped = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = stepped
    return out


def _replace(effect: Effect, **changes) -> Effect:
    import dataclasses

    return dataclasses.replace(effect, **changes)
