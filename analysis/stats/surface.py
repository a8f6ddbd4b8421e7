"""Second-order response surfaces in coded factors, fitted with statsmodels (Myers, Montgomery &
Anderson-Cook, Response Surface Methodology, ch. 6-7; Montgomery, Design and Analysis of
Experiments, ch. 11).

``fit_response_surface(df, response)`` codes every numeric factor to [-1, 1] on its design scale
(log for log-scale factors: log τ, log B) and every categorical factor as sum-to-zero contrasts,
then fits by OLS

    y = b0 + Σ b_i x_i + Σ b_ii x_i² + Σ_{i<j} b_ij x_i x_j (+ categorical main effects and their
        two-factor interactions)

With ``blocks="<column>"`` a block term enters additively (sum-to-zero contrasts, never crossed
with a factor); see :func:`fit_response_surface`. :func:`factor_effects` gives each factor's
effect in natural units with its evidence.

A quadratic term is only included for a numeric factor with at least three distinct levels;
every term left out is named in ``notes``. A design that cannot support the model (a singular
design matrix, or no residual degrees of freedom) raises :class:`UnsupportedDesignError` naming the
terms; nothing is fitted silently.

The result is a frozen :class:`ResponseSurface`: ANOVA table, coefficients with confidence
intervals, R², adjusted R², PRESS and predicted R², the lack-of-fit test when replicated points
give pure error, the stationary point and its kind, and the predicted optimum inside the design
region (the box spanned by the observed levels) with its confidence interval.

Nothing is computed from a variance that is zero or undefined. Differences in a response no larger
than :data:`RELATIVE_TOLERANCE` × its largest magnitude (max |y|) are float noise, and a sum of
squares over n trials no larger than n × (that tolerance)² is zero:

* a response that is constant (or missing everywhere, or present in one trial) raises
  :class:`NoVariationError` and nothing is modelled;
* replicates that agree exactly (pure error 0) leave the lack-of-fit F undefined: its p is None
  with a note; the model is still fitted and its intervals come from the residual mean square;
* a model that reproduces every trial (residual variance 0) has no standard errors, t or p-values
  (NaN) and no intervals (None); its coefficients, optimum and prediction are exact;
* a fitted surface that is flat (no factor moves the prediction) has no optimum (None), and a
  quadratic part without curvature in some direction has no stationary point.

Every such case is named in ``notes``.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pandas as pd
from scipy import stats

# the two parts used, not statsmodels.api, which imports every model (time series, graphics,
# datasets: 0.6 s more for every command and report that fits a surface)
from statsmodels.regression.linear_model import OLS
from statsmodels.stats.anova import anova_lm

from analysis.stats.surface_coding import (
    BLOCK_COLUMN,
    BLOCK_PREFIX,
    RELATIVE_TOLERANCE,
    FactorCoding,
    Goal,
    NoVariationError,
    UnsupportedDesignError,
    _coded_frame,
    _terms,
    code_factors,
)
from analysis.stats.surface_effects import Effect, factor_effects, holm
from analysis.stats.surface_model import ResponseSurface, json_number, json_value, records
from analysis.stats.surface_optimum import (
    _design_rows,
    _factor_part,
    _idle_factors,
    _optimum,
    _quadratics,
    _stationary,
)
from analysis.stats.t_power import noncentrality
from trainables.metrics import better

# the names readers import from here; the model, its coding, its canonical analysis and the
# effects live in analysis.stats.surface_{model,coding,optimum,effects}
__all__ = [
    "BLOCK_COLUMN", "BLOCK_PREFIX", "RELATIVE_TOLERANCE", "Effect", "FactorCoding", "Goal",
    "NoVariationError", "ResponseSurface", "UnsupportedDesignError", "code_factors",
    "factor_effects", "fit_response_surface", "holm", "json_number", "json_value",
    "noncentrality", "records",
]  # fmt: skip


def fit_response_surface(
    df: pd.DataFrame,
    response: str,
    factors: list[str] | None = None,
    *,
    goal: Goal | None = None,
    scales: dict[str, str] | None = None,
    quadratic: bool = True,
    interactions: bool = True,
    alpha: float = 0.05,
    blocks: str | None = None,
) -> ResponseSurface:
    """Fit the second-order model of ``response`` on the study's factors (see module docstring).

    Args:
        df: one row per trial (``analysis.load_study`` / ``read_results``); failed trials and rows
            with a missing response are dropped and counted in ``notes``.
        factors: default ``df.attrs["factors"]``; factors with one level are dropped (noted).
        goal: "max" or "min" for the optimum; default the metric's catalogued direction
            (:func:`trainables.metrics.better`).
        scales: name -> "linear" | "log"; default ``df.attrs["scales"]``, then a 4× rule.
        blocks: a column whose levels are blocks (runs that share a nuisance: a day, a batch of
            material, a seed used at every point). It enters additively with sum-to-zero
            contrasts and is never crossed with a factor; the ANOVA has one line for it (its
            sum of squares between block means, entered first, as the standard texts print it),
            pure error comes from replicates within blocks after removing block effects (as R's
            rsm does), and the stationary point, the optimum and every prediction are those of
            the factor part (the average block).
    """
    factors = list(factors or df.attrs.get("factors") or [])
    if not factors:
        raise UnsupportedDesignError("no factors: pass factors= or a frame whose attrs name them")
    if response not in df:
        raise UnsupportedDesignError(f"response {response!r} is not a column of the results")
    goal = goal or better(response)  # the catalogue's direction of the metric
    notes: list[str] = []
    if blocks is not None and blocks not in df:
        raise UnsupportedDesignError(f"blocks {blocks!r} is not a column of the results")
    if blocks is not None and blocks in factors:
        raise UnsupportedDesignError(f"{blocks!r} cannot be both a factor and the blocks")
    data = _fitted_rows(df, response, factors, blocks, notes)
    _require_variation(data, response, factors, notes)
    block_levels: tuple = ()
    if blocks is not None:
        block_levels = tuple(sorted(data[blocks].unique(), key=str))
        if len(block_levels) < 2:
            notes.append(f"one block ({blocks} = {block_levels[0]}): no block term")
            blocks, block_levels = None, ()
    constant = [f for f in factors if data[f].nunique() < 2]
    if constant:
        notes.append(f"factors with one level left out: {', '.join(constant)}")
        factors = [f for f in factors if f not in constant]
    if not factors:
        raise UnsupportedDesignError("every factor has a single level: nothing to model")
    coding = code_factors(data, factors, scales or df.attrs.get("scales"))
    terms, term_notes = _terms(coding, quadratic, interactions)
    notes += term_notes
    coded = _coded_frame(data, coding)
    block_terms = []
    for i, level in enumerate(block_levels[:-1]):  # sum-to-zero: the last level is minus the rest
        column = f"{BLOCK_PREFIX}{i}"
        coded[column] = np.where(data[blocks] == level, 1.0,
                                 np.where(data[blocks] == block_levels[-1], -1.0, 0.0))  # fmt: skip
        block_terms.append(column)
    if blocks is not None:
        coded[BLOCK_COLUMN] = data[blocks].astype(str).to_numpy()
    coded["y"] = data[response].astype(float).to_numpy()
    formula = "y ~ " + " + ".join(block_terms + terms)
    model = OLS.from_formula(formula, data=coded)
    _check_estimable(model, block_terms + terms, len(coded))
    fit = model.fit()
    return _result(df, data, response, goal, tuple(factors), coding, formula, terms, fit, coded,
                   notes, alpha, blocks, block_levels)  # fmt: skip


def _fitted_rows(
    df: pd.DataFrame, response: str, factors: list[str], blocks: str | None, notes: list[str]
) -> pd.DataFrame:
    """The trials a surface is fitted on: finished, with a finite response (and a block when
    there are blocks); each kind of trial left out is counted in ``notes``."""
    extra = ([blocks] if blocks else []) + (["status"] if "status" in df else [])
    data = df[[*factors, response, *extra]].copy()
    if "status" in data:
        dropped = int((data["status"] != "finished").sum())
        data = data[data["status"] == "finished"]
        if dropped:
            notes.append(f"{dropped} trials not finished were left out")
    missing = int(data[response].isna().sum())
    data = data.dropna(subset=[response])
    if missing:
        notes.append(f"{missing} trials without {response} were left out")
    infinite = ~np.isfinite(data[response].astype(float))
    if infinite.any():
        notes.append(f"{int(infinite.sum())} trials with a non-finite {response} were left out")
        data = data[~infinite]
    if blocks is not None:
        unblocked = int(data[blocks].isna().sum())
        if unblocked:
            notes.append(f"{unblocked} trials without a {blocks} (block) were left out")
            data = data.dropna(subset=[blocks])
    return data


def _show(value: float) -> str:
    """A response value as a reader would write it: 1.0, 0.3 (not 0.30000000000000004)."""
    return repr(float(f"{value:.10g}"))


def _require_variation(data: pd.DataFrame, response: str, factors: list[str], notes: list[str]):
    """Raise :class:`NoVariationError` (in words) unless ``response`` varies over the trials."""
    y = data[response].astype(float).to_numpy()
    dropped = f" ({'; '.join(notes)})" if notes else ""
    if len(y) == 0:
        raise NoVariationError(
            response, f"{response} has no value in any trial: nothing was modelled{dropped}"
        )
    if len(y) == 1:
        at = ", ".join(f"{f} = {data[f].iloc[0]}" for f in factors)
        raise NoVariationError(
            response,
            f"{response} has a value in only one trial ({_show(y[0])} at {at}): one value carries "
            f"no information about the factors; nothing was modelled{dropped}",
        )
    spread = float(y.max() - y.min())
    if spread <= RELATIVE_TOLERANCE * float(np.abs(y).max()):
        noise = (
            f" (to within float noise: they differ by {spread:.2g}, at most "
            f"{RELATIVE_TOLERANCE:g} × max |{response}|)"
            if spread > 0
            else ""
        )
        raise NoVariationError(
            response,
            f"{response} is {_show(float(np.median(y)))} in all {len(y)} trials{noise}: a constant "
            f"response carries no information about the factors; nothing was modelled{dropped}",
        )


def _negligible_ss(ss: float, n: int, scale: float) -> bool:
    """A sum of squares over ``n`` trials that is float noise next to a response of size
    ``scale`` (max |y|): every term at most (RELATIVE_TOLERANCE × scale)² on average."""
    return ss <= n * (RELATIVE_TOLERANCE * scale) ** 2


def _check_estimable(model, terms: list[str], n: int) -> None:
    exog = model.exog
    rank = np.linalg.matrix_rank(exog)
    if rank < exog.shape[1]:
        raise UnsupportedDesignError(
            f"the design cannot support the model: {exog.shape[1]} coefficients but the design "
            f"matrix has rank {rank} (aliased terms among {', '.join(terms)}); fit fewer terms "
            "(quadratic=False or interactions=False) or add design points"
        )
    if n - exog.shape[1] < 1:
        raise UnsupportedDesignError(
            f"the design cannot support the model: {n} trials for {exog.shape[1]} coefficients "
            "leaves no residual degrees of freedom; add replicates or fit fewer terms"
        )


def _press(fit) -> float:
    leverage = fit.get_influence().hat_matrix_diag
    if np.any(leverage >= 1 - 1e-10):
        return math.inf
    return float(np.sum((fit.resid / (1 - leverage)) ** 2))


def _lack_of_fit(
    fit, coded: pd.DataFrame, factors: tuple[str, ...], scale: float
) -> tuple[dict[str, float | None] | None, str | None]:
    """Pure error from replicated points against the residual: the classic LOF F test.

    Pure error is the residual of y on the distinct design points (and the blocks, when there are
    blocks: replicates within blocks after removing block effects, as R's rsm and the standard
    texts compute it); lack of fit is the model's residual less pure error.

    Returns the test (``f`` and ``p`` None when pure error is zero: F is then x/0 or 0/0, which
    tests nothing) and a note saying why there is no p, if there is none."""
    points = coded.groupby(list(factors), sort=False).ngroup().to_numpy()
    n_points = int(points.max()) + 1
    n = len(coded)
    design = np.zeros((n, n_points))
    design[np.arange(n), points] = 1.0
    if BLOCK_COLUMN in coded:
        blocks = pd.get_dummies(coded[BLOCK_COLUMN], drop_first=True, dtype=float).to_numpy()
        design = np.hstack([design, blocks])
    y = coded["y"].to_numpy()
    solution, *_ = np.linalg.lstsq(design, y, rcond=None)
    pure_ss = float(np.sum((y - design @ solution) ** 2))
    df_pure = n - int(np.linalg.matrix_rank(design))
    df_lof = round(float(fit.df_resid)) - df_pure
    if df_pure < 1:
        return None, "no lack-of-fit test: no replicated points (no pure error)"
    if df_lof < 1:
        return None, (
            f"no lack-of-fit test: {n_points} distinct points for {len(fit.params)} coefficients "
            "leave no degrees of freedom for lack of fit"
        )
    ssr = float(fit.ssr)
    residual_zero = _negligible_ss(ssr, n, scale)
    pure_zero = _negligible_ss(pure_ss, n, scale)
    lof_ss = 0.0 if residual_zero or _negligible_ss(ssr - pure_ss, n, scale) else ssr - pure_ss
    test = {"ss_lack_of_fit": lof_ss, "df_lack_of_fit": df_lof,
            "ss_pure_error": 0.0 if pure_zero else pure_ss, "df_pure_error": df_pure,
            "f": None, "p": None}  # fmt: skip
    if pure_zero:
        what = "0/0" if lof_ss == 0 else "a lack-of-fit mean square over 0"
        return test, (
            f"no lack-of-fit test: the replicates of every point agree exactly (pure-error sum of "
            f"squares 0 on {df_pure} df), so the F ratio is {what} and tests nothing; p is null"
            + ("" if residual_zero else "; intervals use the residual mean square instead")
        )
    f_value = (lof_ss / df_lof) / (pure_ss / df_pure)
    test["f"], test["p"] = f_value, float(stats.f.sf(f_value, df_lof, df_pure))
    return test, None


def _block_names(blocks: str | None, levels: tuple) -> dict[str, str]:
    return {f"{BLOCK_PREFIX}{i}": f"{blocks}[{level}]" for i, level in enumerate(levels[:-1])}


def _coefficients(fit, alpha: float, exact: bool, names: dict[str, str]) -> pd.DataFrame:
    if exact:  # standard errors are 0: t = b/0 and p from it are undefined, intervals empty
        nan = np.full(len(fit.params), math.nan)
        table = pd.DataFrame({"estimate": fit.params, "std_err": nan, "ci_low": nan,
                              "ci_high": nan, "p": nan})  # fmt: skip
    else:
        ci = fit.conf_int(alpha)
        table = pd.DataFrame({
            "estimate": fit.params, "std_err": fit.bse, "ci_low": ci[0], "ci_high": ci[1],
            "p": fit.pvalues,
        })  # fmt: skip
    return table.rename(index=names)


def _anova(fit, exact: bool, coded: pd.DataFrame, blocks: str | None) -> pd.DataFrame:
    """Type II sums of squares for the factor terms; the block term, when there is one, is one
    line: the sum of squares between block means (blocks entered first, as the texts print it)."""
    quiet = np.errstate(divide="ignore", invalid="ignore") if exact else contextlib.nullcontext()
    with quiet:
        try:
            anova = anova_lm(fit, typ=2)
        except (ValueError, np.linalg.LinAlgError):
            anova = anova_lm(fit, typ=1)
        if blocks is not None:
            anova = anova[[not str(i).startswith(BLOCK_PREFIX) for i in anova.index]]
            y = coded["y"]
            means = y.groupby(coded[BLOCK_COLUMN])
            ss = float((means.count() * (means.mean() - y.mean()) ** 2).sum())
            df_block = means.ngroups - 1
            mse = float(fit.ssr / fit.df_resid)
            f_value = (ss / df_block) / mse if mse > 0 else math.nan
            p = float(stats.f.sf(f_value, df_block, fit.df_resid)) if mse > 0 else math.nan
            line = pd.DataFrame({"sum_sq": [ss], "df": [float(df_block)], "F": [f_value],
                                 "PR(>F)": [p]}, index=[blocks])  # fmt: skip
            anova = pd.concat([line, anova[["sum_sq", "df", "F", "PR(>F)"]]])
    if exact:  # F = mean square / 0: undefined
        anova[["F", "PR(>F)"]] = math.nan
    return anova


def _model_test(fit, exact: bool) -> tuple[float | None, int, float | None]:
    """F test of every factor term together against the mean (and the blocks): does the model
    beat the mean? (None when the fit is exact: F = x/0.)"""
    names = list(fit.model.exog_names)
    factor = [i for i, n in enumerate(names) if n != "Intercept" and
              not n.startswith(BLOCK_PREFIX)]  # fmt: skip
    if exact or not factor:
        return None, len(factor), None
    restriction = np.zeros((len(factor), len(names)))
    restriction[np.arange(len(factor)), factor] = 1.0
    test = fit.f_test(restriction)
    return float(np.squeeze(test.fvalue)), len(factor), float(test.pvalue)


def _result(df, data, response, goal, factors, coding, formula, terms, fit, coded, notes, alpha,
            blocks=None, block_levels=()):  # fmt: skip
    n = len(coded)
    scale = float(coded["y"].abs().max())
    exact = _negligible_ss(float(fit.ssr), n, scale)
    if exact:
        notes.append(
            f"the model reproduces all {n} trials (residual variance 0 to within float noise): "
            "standard errors, t and p-values and confidence intervals are undefined (0/0) and "
            "left empty; the coefficients and the optimum are exact for these data"
        )
    coefficients = _coefficients(fit, alpha, exact, _block_names(blocks, block_levels))
    anova = _anova(fit, exact, coded, blocks)
    part = _factor_part(fit)
    press = _press(fit)
    sst = float(((coded["y"] - coded["y"].mean()) ** 2).sum())
    if not math.isfinite(press):
        notes.append("no PRESS or predicted R²: a trial has leverage 1 (the model fits it exactly "
                     "whatever its value)")  # fmt: skip
    lof, note = _lack_of_fit(fit, coded, factors, scale)
    if note:
        notes.append(note)
    fitted = part.predict(coded).to_numpy()
    flat = float(fitted.max() - fitted.min()) <= RELATIVE_TOLERANCE * scale
    optimum = coded_best = predicted = interval = stationary = kind = None
    if flat:
        notes.append(
            f"the fitted surface is flat (its predictions at the design points agree to within "
            f"float noise, {_show(float(fitted.mean()))}): no factor moves {response}, so there "
            "is no optimum and no stationary point"
        )
    else:
        quadratics = _quadratics(part, coding)
        coded_best, combo = _optimum(quadratics, coding, goal)
        for name in _idle_factors(quadratics, coding, coded_best, combo, scale):
            c = coding[name]
            coded_best[name] = 0.0
            notes.append(
                f"the optimum is not unique: {name} does not move the prediction there (to within "
                f"float noise), so any {name} in [{c.low:g}, {c.high:g}] is as good; the optimum "
                "shows the centre of that range"
            )
        optimum = _design_rows(coding, coded_best, combo)
        for name, c in coding.items():
            if c.kind == "numeric" and c.integer:
                optimum[name] = round(optimum[name])
        stationary, kind, note = _stationary(quadratics, fit, coding, combo, scale)
        if note:
            notes.append(note)
        at = _coded_frame(pd.DataFrame([optimum]), coding)
        summary = part.get_prediction(at).summary_frame(alpha)
        predicted = float(summary["mean"].iloc[0])
        if not exact:
            interval = (float(summary["mean_ci_lower"].iloc[0]),
                        float(summary["mean_ci_upper"].iloc[0]))  # fmt: skip
    model_f, model_df, model_p = _model_test(fit, exact)
    return ResponseSurface(
        response=response, goal=goal, factors=factors, coding=coding, formula=formula,
        n=int(fit.nobs), terms=tuple(terms), anova=anova, coefficients=coefficients,
        r2=float(fit.rsquared), adj_r2=float(fit.rsquared_adj), press=press,
        pred_r2=1 - press / sst if sst > 0 and math.isfinite(press) else math.nan,
        lack_of_fit_p=None if lof is None else lof["p"], lack_of_fit=lof,
        stationary_point=stationary, stationary_kind=kind, optimum=optimum,
        optimum_coded=coded_best, predicted=predicted, interval=interval,
        notes=tuple(notes), exact=exact, data=data.reset_index(drop=True), _fit=fit,
        blocks=blocks, block_levels=tuple(block_levels), error_ms=float(fit.mse_resid),
        error_df=round(float(fit.df_resid)), model_f=model_f, model_df=model_df, model_p=model_p,
    )  # fmt: skip
