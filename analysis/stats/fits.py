"""The fits of one study, whoever asks: :func:`analysis.study_analysis.analyse` assembles them
(with the findings read from them) once, and the report, the notebook and the README's snippet
print :meth:`ResponseFit.summary`, so they say the same model, the same block term, the same R²
and the same optimum (or the same reason none is named).

:func:`fit_study` picks one block term for every response (:func:`run_blocks`, else
:func:`common_seed_blocks`), fits each response with the richest model of :data:`MODEL_LADDER`
the design supports (:func:`fit_best_supported`) and puts the fit into words
(:func:`findings`). A bare :func:`analysis.stats.surface.fit_response_surface` call is one rung of
that ladder without the block term: its R² and optimum can differ, and only this module decides
whether an optimum is named.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
import pandas as pd

from analysis.reading.outcomes import heldout_items
from analysis.stats.aliases import alias_map, alias_words
from analysis.stats.best import replicates_per_point
from analysis.stats.frontier import pareto_frontier
from analysis.stats.measurement import at_least_one_item, resolution
from analysis.stats.surface import (
    Effect,
    NoVariationError,
    ResponseSurface,
    UnsupportedDesignError,
    factor_effects,
    fit_response_surface,
)
from analysis.stats.units import amount, bounds, is_accuracy, level

DEFAULT_RESPONSES = (
    "probe/knn_top1_h", "probe/linear_top1_h", "probe/knn_top1_z", "z/align", "z/uniform",
)  # fmt: skip
# Fall back step by step when the design cannot carry the full second-order model; the report
# says which model each response got and why.
MODEL_LADDER = (
    ("second order with two-factor interactions", {"quadratic": True, "interactions": True}),
    ("main effects and curvature, no interactions", {"quadratic": True, "interactions": False}),
    ("main effects only", {"quadratic": False, "interactions": False}),
)


ALPHA = 0.05
POWER = 0.8
# why a block term is modelled: the one analyse picks (run_blocks, else common_seed_blocks)
BLOCK_WHY = {
    "block": "the trials ran in blocks: the factorial first, the axial and centre points added "
    "later",
    "replicate": "the seeds are common across points, so a seed's luck is shared by every point",
}
GOAL_WORDS = {"max": "maximised", "min": "minimised"}


@dataclass(frozen=True)
class Findings:
    """What a fit says, in words, before any statistic: computed by :func:`findings`.

    ``beats_mean`` is False when the model does not beat the mean (its F test of every factor
    term has p > :data:`ALPHA`, or predicted R² ≤ 0, or the surface is flat); then ``headline``
    says that no factor has a detectable effect and gives the smallest effect of each factor this
    study could have detected at :data:`POWER` power, and ``optimum`` is None (none is named).
    Otherwise ``found`` holds one sentence per effect with Holm-adjusted p ≤ :data:`ALPHA` and
    ``not_detected`` one per other effect (with its detectable size). ``block`` says how much the
    block term changed the error mean square, when there is one. ``no_optimum`` is the sentence
    said instead of an optimum ("No optimum is named: <why>."), when none is named."""

    response: str
    beats_mean: bool
    headline: str
    found: tuple[str, ...]
    not_detected: tuple[str, ...]
    optimum: str | None
    block: str | None
    effects: tuple[Effect, ...]
    detected: tuple[str, ...] = ()  # the factors of the effects in ``found``
    no_optimum: str | None = None

    def sentences(self) -> list[str]:
        return [s for s in (self.headline, *self.found, *self.not_detected,
                            self.optimum or self.no_optimum, self.block) if s]  # fmt: skip


@dataclass(frozen=True)
class ResponseFit:
    """The fit of one response, or why there is none.

    ``status`` is "fitted" (``surface`` holds the model), "no variation" (the response is constant,
    missing, or present in one trial: nothing was modelled and ``reason`` says so in words) or
    "unsupported" (no model of :data:`MODEL_LADDER` fits the design; ``reason`` says why each
    failed). Left empty it follows from ``surface``. ``blocks`` is the block term asked for
    (the surface's own ``blocks`` is None when the model could not carry it) and ``block_why``
    why that term, or why none; ``error_ms_without_blocks`` and ``r2_without_blocks`` are those
    of the same model without the block term.

    :meth:`summary` is what the fit says, in the same words wherever it is printed: the report,
    the notebook and the README's snippet."""

    response: str
    model: str | None
    surface: ResponseSurface | None
    reason: str = ""
    status: Literal["fitted", "no variation", "unsupported", ""] = ""
    error_ms_without_blocks: float | None = None
    findings: Findings | None = None
    blocks: str | None = None
    block_why: str = ""
    r2_without_blocks: float | None = None
    # no model because too few trials have a finite value: "2 of 4 finished trials have no
    # finite value" (the count the report's notes and the headline name); "" otherwise
    short_of_values: str = ""

    def __post_init__(self):
        if not self.status:
            object.__setattr__(self, "status", "unsupported" if self.surface is None else "fitted")

    def _words(self) -> Findings:
        return self.findings or findings(self)

    def model_sentence(self) -> str:
        """Which model: its name on :data:`MODEL_LADDER` and its terms; or why there is none."""
        if self.surface is None:
            lead = "Nothing modelled" if self.status == "no variation" else "No model"
            return f"{lead}: {self.reason}"
        s = self.surface
        terms = ", ".join(_term_words(t) for t in s.terms)
        return (f"Model of {s.response} ({GOAL_WORDS.get(s.goal, s.goal)}, n = {s.n}): "
                f"{model_order(s.terms)}: {terms}.")  # fmt: skip

    def block_sentence(self) -> str:
        """Which block term, and why; or why there is none."""
        s = self.surface
        if s is not None and s.blocks is not None:
            words = self._words()
            why = self.block_why or BLOCK_WHY.get(s.blocks, "")
            return f"Block term: {words.block or f'{s.blocks} is modelled as a block ({why}).'}"
        if self.blocks is not None:  # asked for, but no rung that carries it fits the design
            return (f"Block term: none: {self.blocks} as a block does not fit this design with "
                    f"this model (see the notes).")  # fmt: skip
        return f"Block term: none: {self.block_why or 'none was asked for'}."

    def fit_sentence(self) -> str:
        """R² (and without the block term, when there is one), adjusted and predicted R², and
        the model's F test."""
        s = self.surface
        if s is None:
            return ""
        without = ""
        if s.blocks is not None and self.r2_without_blocks is not None:
            without = f" ({_num(self.r2_without_blocks, '.3f')} without the block term)"
        return (f"R² = {_num(s.r2, '.3f')}{without}, adjusted R² = {_num(s.adj_r2, '.3f')}, "
                f"predicted R² = {_num(s.pred_r2, '.3f')}, model F test p = "
                f"{_num(s.model_p, '.2g')}.")  # fmt: skip

    def optimum_sentence(self) -> str:
        """The predicted optimum with its interval, or "No optimum is named: <why>."."""
        if self.surface is None:
            return "No optimum is named: nothing was modelled."
        words = self._words()
        return words.optimum or words.no_optimum or "No optimum is named."

    def summary(self) -> str:
        """What this fit says, one statement a line: the model, the block term and why, R²,
        whether the model beats the mean, and the optimum (or why none is named). The report
        shows these same lines; ``report.json`` carries them as ``summary``."""
        if self.surface is None:
            return "\n".join((self.model_sentence(), self.optimum_sentence()))
        return "\n".join((self.model_sentence(), self.block_sentence(), self.fit_sentence(),
                          self._words().headline, self.optimum_sentence()))  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        if self.surface is None:
            return {"model": None, "status": self.status, "r2": None, "adj_r2": None,
                    "press": None, "pred_r2": None, "lack_of_fit_p": None,
                    "stationary_kind": None, "optimum": None, "predicted": None,
                    "interval": None, "notes": [self.reason],
                    "summary": self.summary()}  # fmt: skip
        data = {"model": self.model, "status": self.status, **self.surface.to_json()}
        data["error_ms_without_blocks"] = self.error_ms_without_blocks
        data["r2_without_blocks"] = _finite(self.r2_without_blocks)
        data["summary"] = self.summary()
        if self.findings is not None:
            data["beats_mean"] = self.findings.beats_mean
            data["findings"] = self.findings.sentences()
            data["effects"] = [e.to_json() for e in self.findings.effects]
            if not self.findings.beats_mean:  # a model that does not beat the mean names none
                data["optimum"] = data["predicted"] = data["interval"] = None
        if self.reason:
            data["notes"] = [*data["notes"], self.reason]
        return data


@dataclass(frozen=True)
class StudyFits:
    """Every response's fit of one study (:func:`fit_study`): the statistics the findings are
    read from. ``results`` are the trials analysed (:func:`independent_trials`); ``items`` the
    held-out items every accuracy counts over (None when the record does not say)."""

    study: str
    n_trials: int
    fits: dict[str, ResponseFit]
    frontier: pd.DataFrame
    results: pd.DataFrame = field(repr=False)
    items: int | None = None


def fit_best_supported(
    df: pd.DataFrame,
    response: str,
    blocks: str | None = None,
    goal: str | None = None,
    items: int | None = None,
) -> ResponseFit:
    """The richest model of :data:`MODEL_LADDER` the design supports, with ``blocks`` as an
    additive block term when given (on a rung where the block term does not fit, that rung
    without it); its :class:`Findings` attached. ``goal`` (max | min) is the direction of its
    optimum, by default the response's catalogued direction (:func:`trainables.metrics.better`)."""
    reasons = []
    why = block_why(df, blocks)
    for name, base in MODEL_LADDER:
        options = {**base, "goal": goal}
        try:
            surface = without = None
            if blocks is not None:
                try:
                    surface = fit_response_surface(df, response, blocks=blocks, **options)
                    without = fit_response_surface(df, response, **options)
                except NoVariationError:
                    raise
                except UnsupportedDesignError as err:
                    reasons.append(f"{name} with {blocks} as blocks: {err}")
            if surface is None:
                surface = fit_response_surface(df, response, **options)
            fit = ResponseFit(response, name, surface, "; ".join(reasons),
                              error_ms_without_blocks=without.error_ms if without else None,
                              blocks=blocks, block_why=why,
                              r2_without_blocks=without.r2 if without else None)  # fmt: skip
            replicated = replicates_per_point(df) > 1
            return replace(fit, findings=findings(fit, items, replicated, alias_map(df)))
        except NoVariationError as err:  # no simpler model helps: say why once and stop
            return _unfitted(df, response, str(err), "no variation", blocks, why)
        except UnsupportedDesignError as err:
            reasons.append(f"{name}: {err}")
    return _unfitted(df, response, "; ".join(reasons), "unsupported", blocks, why)


def _unfitted(df: pd.DataFrame, response: str, reason: str, status, blocks, why) -> ResponseFit:
    """A response no model fits; when trials lack a finite value of it (missing, NaN, an
    infinity), the reason says first how many, of how many finished: that, not the design,
    is what a reader can mend."""
    short = short_of_values(df, response)
    if short:
        reason = f"{response} has {short}, too few to fit: {reason}"
    return ResponseFit(response, None, None, reason, status, blocks=blocks, block_why=why,
                       short_of_values=short)  # fmt: skip


def short_of_values(df: pd.DataFrame, response: str) -> str:
    """"no finite value in k of n finished trials (…)" when some finished trials have a finite
    ``response`` and k others have none; "" otherwise (a response no trial measured is not short
    of values: it was not measured, and its reason says so)."""
    done = df[df["status"] == "finished"] if "status" in df else df
    if response not in done:
        return ""
    values = pd.to_numeric(done[response], errors="coerce").astype(float)
    lacking = int((~np.isfinite(values)).sum())
    if not 0 < lacking < len(done):
        return ""
    return (f"no finite value in {lacking} of {len(done)} finished trials (missing, NaN or "
            "infinite)")  # fmt: skip


def block_term(df: pd.DataFrame) -> str | None:
    """The block term of every model of this study: :func:`run_blocks`, else
    :func:`common_seed_blocks`, else None (:func:`block_why` says why, in words)."""
    return run_blocks(df) or common_seed_blocks(df)


def block_why(df: pd.DataFrame, blocks: str | None) -> str:
    """Why ``blocks`` is the block term of this study's models, or why there is none."""
    if blocks is not None:
        return BLOCK_WHY.get(blocks, f"{blocks} was given as the block term")
    if run_blocks(df):
        return "the trials ran in blocks, but no block term was asked for"
    if common_seed_blocks(df):
        return "the seeds are common across points, but no block term was asked for"
    rows = df[df["status"] == "finished"] if "status" in df else df
    if "replicate" not in rows or rows["replicate"].dropna().nunique() < 2:
        return "the trials ran in one block and each point ran once: there is nothing to block on"
    if "seed" in rows and (rows.groupby("replicate")["seed"].nunique(dropna=False) > 1).any():
        return ("the trials ran in one block and a replicate does not use one seed at every "
                "point: the seeds are not common across points")  # fmt: skip
    return ("the trials ran in one block and the points do not all have the same replicates: "
            "a replicate is not shared by every point")  # fmt: skip


def run_blocks(df: pd.DataFrame) -> str | None:
    """ "block" when the study ran in blocks (``study augment``: 1 the factorial, 2 the axial
    and centre points added to it later), so that what changed between them (code, machine,
    time) is a block effect, not an effect of the factors; else None. It takes precedence over
    :func:`common_seed_blocks`: one block term per model."""
    if "block" in df and df["block"].dropna().nunique() > 1:
        return "block"
    return None


def common_seed_blocks(df: pd.DataFrame) -> str | None:
    """ "replicate" when seeds are common across points (common random numbers: every point has
    the same set of replicates, and a replicate uses one seed everywhere), so that a seed's luck
    is shared by every point and the replicate is a block; else None."""
    if "replicate" not in df:
        return None
    rows = df[df["status"] == "finished"] if "status" in df else df
    key = "point_id" if "point_id" in rows else list(rows.attrs.get("factors") or [])
    if rows.empty or not key:
        return None
    sets = rows.groupby(key)["replicate"].agg(lambda r: frozenset(r.dropna()))
    if len(sets) < 2 or len(set(sets)) != 1 or len(sets.iloc[0]) < 2:
        return None
    if "seed" in rows and (rows.groupby("replicate")["seed"].nunique(dropna=False) > 1).any():
        return None
    return "replicate"


def more_error_advice(replicated: bool) -> str:
    """What gives a fit without error an error to test against: replicates where the points
    have none; where they have them already, the seeds decide and more of them say the same."""
    if not replicated:
        return "replicate the points"
    return ("the points are replicated already, and the replicates agree: the seeds decide the "
            "outcome; score on more held-out items or run more seeds per point")


def _amount(response: str, value: float) -> str:
    """A change of ``response`` in words: accuracies in percentage points (analysis.stats.units)."""
    return amount(response, value)


def _level(response: str, value: float | None) -> str:
    """A predicted value as a person reads it (accuracies in percent); n/a when undefined."""
    if value is None or not math.isfinite(value):
        return "n/a"
    return level(response, value)


def _signed(response: str, value: float) -> str:
    return ("-" if value < 0 else "+") + _amount(response, value)


def _sub_item_sentence(e: Effect, items: int) -> str:
    """An effect smaller than one held-out item: never called found, whatever its test."""
    change = e.change[0].upper() + e.change[1:]
    return (f"{change}: estimated at {_signed(e.response, e.estimate)} on {e.response}, less "
            f"than one held-out item of {items} ({_amount(e.response, resolution(items))}), "
            "so not called found: a difference that small does not register as one item "
            "on this held-out set.")  # fmt: skip


def _effect_sentence(e: Effect, detected: bool, replicated: bool = False) -> str:
    change = e.change[0].upper() + e.change[1:]
    if e.std_err is None and detected:  # exact data with spare df: certain, but no interval
        verb = "raises" if e.estimate > 0 else "lowers"
        return (f"{change} {verb} {e.response} by {_amount(e.response, e.estimate)} (the model "
                "reproduces every trial: no interval).")  # fmt: skip
    if e.std_err is None:  # no residual degrees of freedom: an estimate, never a finding
        return (f"{change}: estimated at {_signed(e.response, e.estimate)} on {e.response}, not "
                "tested: the model reproduces every trial with at most one residual degree "
                f"of freedom, so there is no error to test it against; "
                f"{more_error_advice(replicated)}.")  # fmt: skip
    p = "n/a" if e.p_adjusted is None else f"{e.p_adjusted:.2g}"
    if detected:
        verb = "raises" if e.estimate > 0 else "lowers"
        lo, hi = (e.ci_low, e.ci_high) if e.estimate > 0 else (-e.ci_high, -e.ci_low)
        return (f"{change} {verb} {e.response} by {_amount(e.response, e.estimate)} (95% CI "
                f"{_amount(e.response, lo)} to {_amount(e.response, hi)}; Holm-adjusted "
                f"p = {p}).")  # fmt: skip
    return (
        f"{change}: no detectable effect on {e.response} (estimate "
        f"{_signed(e.response, e.estimate)}, 95% CI {_signed(e.response, e.ci_low)} to "
        f"{_signed(e.response, e.ci_high)}; Holm-adjusted p = {p}); the smallest effect "
        f"detectable at {POWER:.0%} power is {_amount(e.response, e.detectable or 0.0)}."
    )


def resolved_effects(effects, response: str, items: int | None) -> tuple[Effect, ...]:
    """``effects`` with every detectable size of an accuracy floored at one held-out item
    (``1 / items``): no effect smaller than one item can even be observed."""
    if not items or not is_accuracy(response):
        return tuple(effects)
    return tuple(
        e if e.detectable is None else replace(e, detectable=at_least_one_item(e.detectable, items))
        for e in effects
    )


def _below_one_item(e: Effect, items: int | None) -> bool:
    return bool(items) and is_accuracy(e.response) and abs(e.estimate) < resolution(items)


def aliased_effects(effects, aliases: dict[str, tuple[str, ...]] | None) -> tuple[Effect, ...]:
    """``effects`` whose change names the factor's aliases
    (:func:`analysis.stats.aliases.alias_map`):
    in a fraction, the estimate called one factor's is the sum of its aliases'."""
    if not aliases:
        return tuple(effects)
    return tuple(replace(e, change=e.change + alias_words(aliases[e.factor]))
                 if aliases.get(e.factor) else e for e in effects)  # fmt: skip


def findings(
    fit: ResponseFit,
    items: int | None = None,
    replicated: bool = False,
    aliases: dict[str, tuple[str, ...]] | None = None,
) -> Findings | None:
    """The words of one fit (see :class:`Findings`); None when nothing was fitted. ``items``:
    the held-out items an accuracy counts over (detectable sizes are floored at one item, and
    an effect smaller than one item is never found)."""
    s = fit.surface
    if s is None:
        return None
    effects = resolved_effects(factor_effects(s, ALPHA, POWER), s.response, items)
    effects = aliased_effects(effects, aliases)
    flat = s.optimum is None
    weak = s.model_p is not None and s.model_p > ALPHA
    unpredictive = math.isfinite(s.pred_r2) and s.pred_r2 <= 0
    # no residual degrees of freedom, or one that the model reproduces exactly (accuracies on a
    # few hundred rows take few values: four trials fit by three terms can agree by chance):
    # there is no error to test against, so nothing is tested or found. An exact fit with two
    # or more spare degrees of freedom is data without noise, and its effects are certain.
    saturated = not s.error_df or (s.exact and s.error_df < 2)
    beats_mean = not (flat or weak or unpredictive or saturated)
    evidence = (f"model F test p = {_num(s.model_p, '.2g')}, predicted R² = "
                f"{_num(s.pred_r2, '.2f')}")  # fmt: skip
    block = None
    if s.blocks is not None and fit.error_ms_without_blocks:
        before, after = fit.error_ms_without_blocks, s.error_ms
        change = 1 - after / before
        why = ("the trials ran in blocks: the factorial first, the axial and centre points "
               "added later" if s.blocks == "block" else "the seeds are common across points, "
               "so a seed's luck is shared by every point")  # fmt: skip
        block = (f"{s.blocks} is modelled as a block ({why}): the error mean square "
                 f"{'fell' if change >= 0 else 'rose'} from {before:.3g} to {after:.3g} "
                 f"({abs(change):.0%} {'less' if change >= 0 else 'more'}), on "
                 f"{s.error_df} residual df.")  # fmt: skip
    if not beats_mean:
        sizes = "; ".join(f"{e.change}: {_amount(s.response, e.detectable)}"
                          for e in effects if e.detectable is not None)  # fmt: skip
        why = f"the model does not beat the mean ({evidence})"
        if flat:
            why = "the fitted surface is flat (see the notes)"
        if saturated:
            why = (f"the model leaves {s.error_df} residual degree(s) of freedom and "
                   f"{'reproduces every trial' if s.exact else 'no error'}, so there is no "
                   f"error to test an effect against; {more_error_advice(replicated)}")  # fmt: skip
            untested = tuple(_effect_sentence(e, False, replicated) for e in effects)
            return Findings(s.response, False, f"No effect on {s.response} can be tested: {why}.",
                            (), untested, None, block, effects,
                            no_optimum=f"No optimum is named: {why}.")  # fmt: skip
        headline = (f"No factor has a detectable effect on {s.response}: {why}."
                    + (f" The smallest effects this study could have detected at {POWER:.0%} "
                       f"power, from its own error: {sizes}." if sizes else ""))  # fmt: skip
        return Findings(s.response, False, headline, (), (), None, block, effects,
                        no_optimum=f"No optimum is named: {why}.")  # fmt: skip
    # exact data with residual df to spare (no noise at all): the effects are certain
    detected = [e for e in effects if (e.std_err is None or
                (e.p_adjusted is not None and e.p_adjusted <= ALPHA))
                and not _below_one_item(e, items)]  # fmt: skip
    found = tuple(_effect_sentence(e, True) for e in detected)
    missed = tuple(
        _sub_item_sentence(e, items) if _below_one_item(e, items) else _effect_sentence(e, False)
        for e in effects
        if e not in detected
    )
    headline = f"The model of {s.response} beats the mean ({evidence})."
    point = ", ".join(f"{k} = {v:.4g}" if isinstance(v, float) else f"{k} = {v}"
                      for k, v in s.optimum.items())  # fmt: skip
    limits = bounds(s.response) or (-math.inf, math.inf)  # an accuracy's stays in [0, 1]
    ci = ("no confidence interval: see the notes" if s.interval is None
          else f"95% CI {_level(s.response, max(s.interval[0], limits[0]))} … "
               f"{_level(s.response, min(s.interval[1], limits[1]))}")  # fmt: skip
    optimum = (f"Predicted optimum in the design region: {point} → "
               f"{_level(s.response, s.predicted)} ({ci}).")  # fmt: skip
    return Findings(s.response, True, headline, found, missed, optimum, block, effects,
                    tuple(e.factor for e in detected))  # fmt: skip


def fit_study(
    df: pd.DataFrame, responses: tuple[str, ...] | None = None, outcomes=None
) -> StudyFits:
    """Every response surface and the alignment–uniformity frontier of a results frame. When
    seeds are common across points (:func:`common_seed_blocks`), the replicate is a block. The
    study's target metric (``df.attrs["target"]``) is optimised in its own direction.
    ``outcomes`` (:func:`analysis.reading.load.load_outcomes`), when the record keeps them, make
    every
    accuracy's interval and comparison count the held-out items too."""
    df = independent_trials(df)
    responses = tuple(r for r in (responses or DEFAULT_RESPONSES) if r in df)
    blocks = block_term(df)
    target = df.attrs.get("target") if isinstance(df.attrs.get("target"), dict) else {}
    goals = {target.get("metric"): target.get("mode")}
    for goal in df.attrs.get("goals") or ():  # a goal's response is fitted in its direction
        if goal.get("metric") in df:
            responses = tuple(dict.fromkeys([*responses, goal["metric"]]))
            if goal.get("goal") in ("max", "min"):
                goals.setdefault(goal["metric"], goal["goal"])
    items = heldout_items(df, outcomes)
    fits = {r: fit_best_supported(df, r, blocks, goals.get(r), items) for r in responses}
    finished = df[df["status"] == "finished"] if "status" in df else df
    frontier = (
        pareto_frontier(finished, {"z/align": "min", "z/uniform": "min"})
        if {"z/align", "z/uniform"} <= set(df)
        else finished.iloc[0:0]
    )
    n_trials = len(df) + int(df.attrs.get("repeated_trials", 0))
    return StudyFits(df.attrs.get("study", ""), n_trials, fits, frontier, df, items)


def independent_trials(df: pd.DataFrame) -> pd.DataFrame:
    """The results with every finished trial that repeats an earlier one exactly (the same
    factor values and the same seed: the same computation, so not a second observation) kept
    once; ``attrs["repeated_trials"]`` counts those left out (the headline says so)."""
    factors = [f for f in df.attrs.get("factors", []) if f in df]
    if "seed" not in df or not factors or df.empty:
        return df
    done = df["status"] == "finished" if "status" in df else pd.Series(True, index=df.index)
    key = df[[*factors, "seed"]].astype(str).agg("|".join, axis=1)
    repeated = done & key.where(done).duplicated(keep="first") & key.where(done).notna()
    if not repeated.any():
        return df
    kept = df[~repeated].copy()
    kept.attrs = {**df.attrs, "repeated_trials": int(repeated.sum())}
    return kept


def _num(value: float | None, spec: str) -> str:
    """``value`` formatted by ``spec``, or "n/a" when it is None or not finite (see the notes)."""
    if value is None or not math.isfinite(value):
        return "n/a"
    return format(value, spec)


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def model_order(terms: list[str] | tuple[str, ...]) -> str:
    """The fitted model named by the terms it holds, not by the rung asked for: a factor with
    two levels carries no curvature, so the ladder's "second order" on a 2^k factorial is a
    first-order model with interactions (Montgomery, Design and Analysis of Experiments,
    ch. 6: a 2^k design estimates main effects and interactions, not curvature)."""
    quadratic = any(term.startswith("I(") and term.endswith(" ** 2)") for term in terms)
    interactions = any(":" in term for term in terms)
    if quadratic:
        return "second order" + (
            " with two-factor interactions" if interactions else ", no interactions"
        )
    return "first order" + (
        " with two-factor interactions" if interactions else " (main effects only)"
    )


def _term_words(term: str) -> str:
    """A model term as a person reads it: ``I(t ** 2)`` is t², ``a:b`` is a × b."""
    words = term.replace("C(", "").replace(", Sum)", "")
    if words.startswith("I(") and words.endswith(" ** 2)"):
        return words[2:-6] + "²"
    return words.replace(":", " × ")
