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
import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd
from scipy import optimize, stats

# the two parts used, not statsmodels.api, which imports every model (time series, graphics,
# datasets: 0.6 s more for every command and report that fits a surface)
from statsmodels.regression.linear_model import OLS
from statsmodels.stats.anova import anova_lm

from analysis.stats.t_power import noncentrality

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


# ---------------------------------------------------------------------------------------------
# coding
# ---------------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------------
# fitting
# ---------------------------------------------------------------------------------------------
def default_goal(response: str) -> Goal:
    """Alignment, uniformity and losses are minimised; accuracies and ranks maximised."""
    return "min" if response.rsplit("/", 1)[-1] in ("align", "uniform", "loss") else "max"


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
        goal: "max" or "min" for the optimum; default by metric name (:func:`default_goal`).
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
    goal = goal or default_goal(response)
    notes: list[str] = []
    if blocks is not None and blocks not in df:
        raise UnsupportedDesignError(f"blocks {blocks!r} is not a column of the results")
    if blocks is not None and blocks in factors:
        raise UnsupportedDesignError(f"{blocks!r} cannot be both a factor and the blocks")
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
