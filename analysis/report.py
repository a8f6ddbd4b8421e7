"""A study's report: response-surface fits, the frontier, every figure and the evidence card,
written as one self-contained ``report.html`` (figures embedded) plus the pieces beside it.

Compute first (:func:`analyse` returns a frozen :class:`StudyAnalysis`), then write
(:func:`write_report`). The JSON summary is the contract of ``study report --json``: ``study``,
``headline`` (:class:`analysis.headline.Headline`: ``sentence``, ``target``, ``found``,
``not_detected``, ``best``, ``next_step`` and the terminal's ``lines``), ``n_trials``,
``responses`` (metric -> ``model``, ``status``, ``r2``, ``adj_r2``, ``press``,
``pred_r2``, ``lack_of_fit_p``, ``stationary_kind``, ``optimum``, ``predicted``, ``interval``,
``notes``, and for a fitted one ``blocks``, ``error_ms``, ``error_ms_without_blocks``,
``model_p``, ``beats_mean``, ``findings`` (the sentences, findings first) and ``effects``) and
``frontier`` (the point ids on the z alignment–uniformity frontier). What is
undefined is null, never 0 or inf, and ``notes`` says why in words (a constant response: status
"no variation", nothing modelled).
"""

from __future__ import annotations

import base64
import functools
import html
import json
import math
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd

from analysis.baselines import baselines_json
from analysis.best import finished_trials
from analysis.frontier import pareto_frontier
from analysis.surface import (
    Effect,
    NoVariationError,
    ResponseSurface,
    UnsupportedDesignError,
    factor_effects,
    fit_response_surface,
)
from analysis.units import amount, bounds, level

if TYPE_CHECKING:
    from analysis.headline import Headline

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


@dataclass(frozen=True)
class Findings:
    """What a fit says, in words, before any statistic: computed by :func:`findings`.

    ``beats_mean`` is False when the model does not beat the mean (its F test of every factor
    term has p > :data:`ALPHA`, or predicted R² ≤ 0, or the surface is flat); then ``headline``
    says that no factor has a detectable effect and gives the smallest effect of each factor this
    study could have detected at :data:`POWER` power, and ``optimum`` is None (none is named).
    Otherwise ``found`` holds one sentence per effect with Holm-adjusted p ≤ :data:`ALPHA` and
    ``not_detected`` one per other effect (with its detectable size). ``block`` says how much the
    block term changed the error mean square, when there is one."""

    response: str
    beats_mean: bool
    headline: str
    found: tuple[str, ...]
    not_detected: tuple[str, ...]
    optimum: str | None
    block: str | None
    effects: tuple[Effect, ...]
    detected: tuple[str, ...] = ()  # the factors of the effects in ``found``

    def sentences(self) -> list[str]:
        return [s for s in (self.headline, *self.found, *self.not_detected, self.optimum,
                            self.block) if s]  # fmt: skip


@dataclass(frozen=True)
class ResponseFit:
    """The fit of one response, or why there is none.

    ``status`` is "fitted" (``surface`` holds the model), "no variation" (the response is constant,
    missing, or present in one trial: nothing was modelled and ``reason`` says so in words) or
    "unsupported" (no model of :data:`MODEL_LADDER` fits the design; ``reason`` says why each
    failed). Left empty it follows from ``surface``."""

    response: str
    model: str | None
    surface: ResponseSurface | None
    reason: str = ""
    status: Literal["fitted", "no variation", "unsupported", ""] = ""
    error_ms_without_blocks: float | None = None
    findings: Findings | None = None

    def __post_init__(self):
        if not self.status:
            object.__setattr__(self, "status", "unsupported" if self.surface is None else "fitted")

    def to_json(self) -> dict[str, Any]:
        if self.surface is None:
            return {"model": None, "status": self.status, "r2": None, "adj_r2": None,
                    "press": None, "pred_r2": None, "lack_of_fit_p": None,
                    "stationary_kind": None, "optimum": None, "predicted": None,
                    "interval": None, "notes": [self.reason]}  # fmt: skip
        data = {"model": self.model, "status": self.status, **self.surface.to_json()}
        data["error_ms_without_blocks"] = self.error_ms_without_blocks
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
class StudyAnalysis:
    study: str
    n_trials: int
    fits: dict[str, ResponseFit]
    frontier: pd.DataFrame
    results: pd.DataFrame = field(repr=False)

    @functools.cached_property
    def headline(self) -> Headline:
        """What the study found, said first (:func:`analysis.headline.headline`); computed once
        for the report, its JSON, the terminal and the parent run's description."""
        from analysis.headline import headline

        return headline(self)

    @functools.cached_property
    def best(self):
        """The best point of the target (:func:`analysis.headline.best_of_target`), or None."""
        from analysis.headline import best_of_target, target_of

        return best_of_target(self.results, target_of(self.results))

    def to_json(self) -> dict[str, Any]:
        return {
            "study": self.study,
            "headline": self.headline.to_json(),
            "baselines": baselines_json(self.results, self.best),
            "n_trials": self.n_trials,
            "responses": {name: fit.to_json() for name, fit in self.fits.items()},
            "frontier": sorted(set(self.frontier.get("point_id", pd.Series(dtype=str)))),
        }


def fit_best_supported(
    df: pd.DataFrame, response: str, blocks: str | None = None, goal: str | None = None
) -> ResponseFit:
    """The richest model of :data:`MODEL_LADDER` the design supports, with ``blocks`` as an
    additive block term when given (on a rung where the block term does not fit, that rung
    without it); its :class:`Findings` attached. ``goal`` (max | min) is the direction of its
    optimum, by default the response's usual one (:func:`analysis.surface.default_goal`)."""
    reasons = []
    for name, base in MODEL_LADDER:
        options = {**base, "goal": goal}
        try:
            surface = without = None
            if blocks is not None:
                try:
                    surface = fit_response_surface(df, response, blocks=blocks, **options)
                    without = fit_response_surface(df, response, **options).error_ms
                except NoVariationError:
                    raise
                except UnsupportedDesignError as err:
                    reasons.append(f"{name} with {blocks} as blocks: {err}")
            if surface is None:
                surface = fit_response_surface(df, response, **options)
            fit = ResponseFit(response, name, surface, "; ".join(reasons),
                              error_ms_without_blocks=without)  # fmt: skip
            return replace(fit, findings=findings(fit))
        except NoVariationError as err:  # no simpler model helps: say why once and stop
            return ResponseFit(response, None, None, str(err), "no variation")
        except UnsupportedDesignError as err:
            reasons.append(f"{name}: {err}")
    return ResponseFit(response, None, None, "; ".join(reasons), "unsupported")


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


def _amount(response: str, value: float) -> str:
    """A change of ``response`` in words: accuracies in percentage points (analysis.units)."""
    return amount(response, value)


def _level(response: str, value: float | None) -> str:
    """A predicted value as a person reads it (accuracies in percent); n/a when undefined."""
    if value is None or not math.isfinite(value):
        return "n/a"
    return level(response, value)


def _signed(response: str, value: float) -> str:
    return ("-" if value < 0 else "+") + _amount(response, value)


def _effect_sentence(e: Effect, detected: bool) -> str:
    change = e.change[0].upper() + e.change[1:]
    if e.std_err is None and detected:  # exact data with spare df: certain, but no interval
        verb = "raises" if e.estimate > 0 else "lowers"
        return (f"{change} {verb} {e.response} by {_amount(e.response, e.estimate)} (the model "
                "reproduces every trial: no interval).")  # fmt: skip
    if e.std_err is None:  # no residual degrees of freedom: an estimate, never a finding
        return (f"{change}: estimated at {_signed(e.response, e.estimate)} on {e.response}, not "
                "tested: the model reproduces every trial with at most one residual degree "
                "of freedom, so there is no error to test it against; replicate the "
                "points.")  # fmt: skip
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


def findings(fit: ResponseFit) -> Findings | None:
    """The words of one fit (see :class:`Findings`); None when nothing was fitted."""
    s = fit.surface
    if s is None:
        return None
    effects = factor_effects(s, ALPHA, POWER)
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
            why = "the fitted surface is flat"
        if saturated:
            why = (f"the model leaves {s.error_df} residual degree(s) of freedom and "
                   f"{'reproduces every trial' if s.exact else 'no error'}, so there is no "
                   "error to test an effect against; replicate the points")  # fmt: skip
            untested = tuple(_effect_sentence(e, False) for e in effects)
            return Findings(s.response, False, f"No effect on {s.response} can be tested: {why}.",
                            (), untested, None, block, effects)  # fmt: skip
        headline = (f"No factor has a detectable effect on {s.response}: {why}."
                    + (f" The smallest effects this study could have detected at {POWER:.0%} "
                       f"power, from its own error: {sizes}." if sizes else ""))  # fmt: skip
        return Findings(s.response, False, headline, (), (), None, block, effects)
    # exact data with residual df to spare (no noise at all): the effects are certain
    detected = [e for e in effects if e.std_err is None or
                (e.p_adjusted is not None and e.p_adjusted <= ALPHA)]  # fmt: skip
    found = tuple(_effect_sentence(e, True) for e in detected)
    missed = tuple(_effect_sentence(e, False) for e in effects if e not in detected)
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


def analyse(df: pd.DataFrame, responses: tuple[str, ...] | None = None) -> StudyAnalysis:
    """Every response surface and the alignment–uniformity frontier of a results frame. When
    seeds are common across points (:func:`common_seed_blocks`), the replicate is a block. The
    study's target metric (``df.attrs["target"]``) is optimised in its own direction."""
    df = independent_trials(df)
    responses = tuple(r for r in (responses or DEFAULT_RESPONSES) if r in df)
    blocks = run_blocks(df) or common_seed_blocks(df)
    target = df.attrs.get("target") if isinstance(df.attrs.get("target"), dict) else {}
    goals = {target.get("metric"): target.get("mode")}
    fits = {r: fit_best_supported(df, r, blocks, goals.get(r)) for r in responses}
    finished = df[df["status"] == "finished"] if "status" in df else df
    frontier = (
        pareto_frontier(finished, {"z/align": "min", "z/uniform": "min"})
        if {"z/align", "z/uniform"} <= set(df)
        else finished.iloc[0:0]
    )
    n_trials = len(df) + int(df.attrs.get("repeated_trials", 0))
    return StudyAnalysis(df.attrs.get("study", ""), n_trials, fits, frontier, df)


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


# ---------------------------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------------------------
def _png_data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


def _num(value: float | None, spec: str) -> str:
    """``value`` formatted by ``spec``, or "n/a" when it is None or not finite (see the notes)."""
    if value is None or not math.isfinite(value):
        return "n/a"
    return format(value, spec)


def _fit_html(fit: ResponseFit) -> str:
    """Findings first (what was found, how sure, what was not detectable), then statistics."""
    if fit.surface is None:
        lead = "Nothing modelled" if fit.status == "no variation" else "No model"
        return f"<h3>{html.escape(fit.response)}</h3><p>{lead}: {html.escape(fit.reason)}</p>"
    s = fit.surface
    words = fit.findings or findings(fit)
    found = "".join(f"<li>{html.escape(x)}</li>" for x in words.found)
    missed = "".join(f"<li>{html.escape(x)}</li>" for x in words.not_detected)
    if s.optimum is None:
        optimum = "<p>No optimum: the fitted surface is flat (see the notes).</p>"
    elif words.optimum is None:
        optimum = "<p>No optimum is named: the model does not beat the mean.</p>"
    else:
        optimum = f"<p>{html.escape(words.optimum)}</p>"
    effects = pd.DataFrame([e.to_json() for e in words.effects])
    effects = effects.drop(columns=["ci"], errors="ignore")
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in (*s.notes, fit.reason) if n)
    return (
        f"<h3>{html.escape(s.response)} ({s.goal})</h3>"
        f"<p><b>{html.escape(words.headline)}</b></p>"
        + (f"<p>Found:</p><ul>{found}</ul>" if found else "")
        + (f"<p>Not detectable:</p><ul>{missed}</ul>" if missed else "")
        + optimum
        + (f"<p>{html.escape(words.block)}</p>" if words.block else "")
        + f"<p>Model: {html.escape(fit.model or '')}. n = {s.n}, R² = {_num(s.r2, '.3f')}, "
        f"adjusted R² = {_num(s.adj_r2, '.3f')}, predicted R² = {_num(s.pred_r2, '.3f')}, "
        f"PRESS = {_num(s.press, '.4g')}, lack-of-fit p = {_num(s.lack_of_fit_p, '.3g')}. "
        f"Stationary point: {s.stationary_kind or 'none'}.</p>"
        f"<ul>{notes}</ul>"
        f"<details><summary>effects, coefficients and ANOVA (in the recorded units: "
        f"accuracies as fractions, 0.01 = 1 point)</summary>"
        f"{effects.to_html(index=False, float_format=lambda v: f'{v:.4g}', na_rep='n/a')}"
        f"{s.coefficients.to_html(float_format=lambda v: f'{v:.4g}', na_rep='n/a')}"
        f"{s.anova.to_html(float_format=lambda v: f'{v:.4g}', na_rep='n/a')}</details>"
    )


_STYLE = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:0 auto;padding:1em;
line-height:1.45;overflow-wrap:anywhere}
img{max-width:100%;height:auto} figure{margin:1.5em 0}
figcaption{font-size:0.9em;color:#333}
.scroll{overflow-x:auto;max-width:100%} table{border-collapse:collapse;font-size:0.85em}
td,th{border:1px solid #ccc;padding:2px 6px;overflow-wrap:normal}
pre,code{white-space:pre-wrap}
.lead{font-size:1.15em} #headline{border-left:4px solid #2a6;padding-left:1em}
nav ol{columns:2 14em}
"""


def _scrolling_tables(markup: str) -> str:
    """Wide tables scroll inside their own box, so a narrow screen never scrolls the page."""
    return markup.replace("<table", '<div class="scroll"><table').replace(
        "</table>", "</table></div>"
    )


def _markdown_html(text: str) -> str:
    """Markdown (CommonMark with tables) as HTML, rendered by markdown-it-py."""
    from markdown_it import MarkdownIt

    return _scrolling_tables(MarkdownIt("commonmark", {"html": False}).enable("table").render(text))


def _figure_html(name: str, png: Path) -> str:
    from analysis.plots import caption

    return (
        f'<figure id="figure-{html.escape(name)}"><img src="{_png_data_uri(png)}" '
        f'alt="{html.escape(name)}"><figcaption><b>{html.escape(name)}.</b> '
        f"{html.escape(caption(name))}</figcaption></figure>"
    )


SOURCE_RETURN_CAPTION = (
    "Held-out anchors of this point's trial, each beside its positive (the other augmented view "
    "of the same source) and its three most similar negatives, with their similarities; a "
    "negative of the anchor's own class is marked as a false negative. Look for false "
    "negatives among the hardest negatives (the loss pushes them away although the receiver "
    "wants them close: seed 003 §B, §H), negatives at least as similar as the positive (the "
    "anchor would be matched to the wrong source), and what the hardest negatives share with "
    "their anchor: a shortcut such as background, colour or stroke width rather than the class."
)


def _source_return_html(shown: dict[str, Path], missing: dict[str, Path]) -> str:
    """The Source return section: each panel as a captioned figure, then any that were named
    but not found."""
    figures = "".join(
        f'<figure id="source-return-{i}"><img src="{_png_data_uri(png)}" '
        f'alt="source return: {html.escape(label)}"><figcaption><b>{html.escape(label)}.</b> '
        f"{html.escape(SOURCE_RETURN_CAPTION)}</figcaption></figure>"
        for i, (label, png) in enumerate(shown.items(), start=1)
    )
    lost = "".join(f"<li>{html.escape(label)}: {html.escape(str(png))}</li>"
                   for label, png in missing.items())  # fmt: skip
    return (
        "<p>Examples that show why positives and negatives were judged valid, for the points "
        "named (each a per-trial artifact of the record, not a column of the results); the "
        "evidence card's Source return section counts what they show.</p>"
        + figures
        + (f"<p>Panel file not found:</p><ul>{lost}</ul>" if lost else "")
    )


def _baselines_html(analysis: StudyAnalysis) -> str:
    """The baselines section: what each measured on the probes, and the best point beside
    them with its interval and the verdict (:mod:`analysis.baselines`)."""
    found = baselines_json(analysis.results, analysis.best)
    if not found:
        return ('<h2 id="baselines">Baselines</h2><p>No baseline was measured for this study '
                "(<code>baselines: []</code>, or a study recorded before baselines existed): "
                "nothing says whether training learned more than its input holds.</p>")  # fmt: skip
    probes = sorted({m for entry in found.values() for m in entry["metrics"]
                     if m.startswith("probe/")})  # fmt: skip
    head = "".join(f"<th>{html.escape(m)}</th>" for m in probes)
    rows = []
    best = analysis.best
    if best is not None:
        done = finished_trials(analysis.results)
        cells = []
        for m in probes:
            values = done.loc[done["point_id"] == best.point_id, m] if m in done else []
            values = pd.to_numeric(pd.Series(values), errors="coerce").dropna()
            cells.append(level(m, float(values.mean())) if len(values) else "–")
        label = f"best point {best.point_id} (mean of {best.n} replicate{'s' * (best.n > 1)})"
        bold = "".join(f"<td><b>{c}</b></td>" for c in cells)
        rows.append(f"<tr><td><b>{html.escape(label)}</b></td>{bold}<td></td></tr>")
    for entry in found.values():
        cells = "".join(
            f"<td>{level(m, entry['metrics'][m]) if m in entry['metrics'] else '–'}</td>"
            for m in probes
        )
        standing = entry["standing"]["verdict"] if entry["standing"] else "–"
        rows.append(f"<tr><td>{html.escape(entry['name'])}<br><small>"
                    f"{html.escape(entry['about'])}</small></td>{cells}"
                    f"<td>{html.escape(standing)}</td></tr>")  # fmt: skip
    table = (f"<table><thead><tr><th>representation</th>{head}<th>best point</th></tr></thead>"
             f"<tbody>{''.join(rows)}</tbody></table>")  # fmt: skip
    said = analysis.headline.against or ""
    return (f'<h2 id="baselines">Baselines</h2><p>{html.escape(said)}</p>'
            f"{_scrolling_tables(table)}<p>Each baseline is scored by the trials' own "
            "evaluation: the same held-out rows, the same k-NN and linear probes fit on the same "
            "probe rows. The last column compares the target's best point, with its 95% "
            "interval over replicates, against each.</p>")  # fmt: skip


def _toc(sections: list[tuple[str, str]]) -> str:
    items = "".join(f'<li><a href="#{anchor}">{html.escape(title)}</a></li>'
                    for anchor, title in sections)  # fmt: skip
    return f'<nav id="toc"><h2>Contents</h2><ol>{items}</ol></nav>'


def write_report(
    analysis: StudyAnalysis,
    out_dir: str | Path,
    history: pd.DataFrame | None = None,
    panels: Mapping[str, str | Path] | None = None,
    source_return: Mapping[str, pd.DataFrame] | None = None,
) -> dict[str, Path]:
    """Write ``report.html``, ``report.json``, ``evidence.md``, ``evidence.json`` and
    ``figures/*.png|svg`` under ``out_dir``; returns name -> path.

    ``report.html`` opens with the headline (:mod:`analysis.headline`: the study in one
    sentence, the findings with their evidence, the best point, the next study), then the
    response surfaces, the frontier, the figures (each with a caption that says what to look
    for), the source-return panels when given, and the evidence card; a table of contents
    links them. It is one self-contained file (figures embedded, no script, no external
    resource), readable from 400 px wide up.

    ``panels``: label (e.g. "best point p002 (τ=0.5, B=64)") -> a source-return PNG of that
    point's trial; each is copied to ``source_return/`` (returned as ``source_return:<label>``)
    and embedded with a caption. ``source_return``: label -> that trial's source-return table
    (the columns of :data:`analysis.evidence.SOURCE_RETURN_COLUMNS`), for the evidence card's
    numbers; a panel without a table still makes the card's section say what was shown."""
    from analysis.evidence import evidence_card
    from analysis.plots import all_figures, save_figure

    out = Path(out_dir)
    figures_dir = out / "figures"
    figures_dir.mkdir(parents=True, exist_ok=True)
    surfaces = {r: f.surface for r, f in analysis.fits.items()  # a flat one has no optimum
                if f.surface is not None and f.surface.optimum is not None}  # fmt: skip
    written: dict[str, Path] = {}
    figure_html = []
    unnamed = frozenset(
        r for r, f in analysis.fits.items() if f.findings is not None and not f.findings.beats_mean
    )
    figures = all_figures(analysis.results, history=history, surfaces=surfaces, no_optimum=unnamed)
    for name, fig in figures.items():
        paths = save_figure(fig, figures_dir, name)
        png = next(p for p in paths if p.suffix == ".png")
        written[f"figure:{name}"] = png
        figure_html.append(_figure_html(name, png))
    shown, missing = {}, {}
    for i, (label, png) in enumerate((panels or {}).items(), start=1):
        if not Path(png).is_file():
            missing[label] = Path(png)
            continue
        copy = out / "source_return" / f"{i}_{re.sub(r'[^A-Za-z0-9._-]+', '_', label)}.png"
        copy.parent.mkdir(exist_ok=True)
        shutil.copyfile(png, copy)
        shown[label] = written[f"source_return:{label}"] = copy
    examples = {label: None for label in shown} | dict(source_return or {})
    card = evidence_card(analysis.results, source_return=examples or None)
    (out / "evidence.md").write_text(card.to_markdown())
    (out / "evidence.json").write_text(json.dumps(card.to_json(), indent=1, default=str))
    summary = analysis.to_json()
    (out / "report.json").write_text(json.dumps(summary, indent=1, default=str))
    frontier_cols = [c for c in ("point_id", "replicate", "z/align", "z/uniform",
                                 "probe/knn_top1_h") if c in analysis.frontier]  # fmt: skip
    frontier = analysis.frontier[frontier_cols].to_html(
        index=False, float_format=lambda v: f"{v:.4g}"
    )
    sections = [("findings", "Findings"), ("best", "Best point"), ("baselines", "Baselines"),
                ("surfaces", "Response surfaces"), ("frontier", "Alignment–uniformity frontier"),
                ("figures", "Figures"), ("evidence", "Evidence card")]  # fmt: skip
    if panels:
        sections.insert(-1, ("source-return", "Source return"))
    top = analysis.headline
    returned = (
        f'<h2 id="source-return">Source return</h2>{_source_return_html(shown, missing)}'
        if panels
        else ""
    )
    fits = _scrolling_tables("".join(_fit_html(f) for f in analysis.fits.values()))
    if top.best is None:
        sections.remove(("best", "Best point"))
    page = f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Study {html.escape(analysis.study)}</title><style>{_STYLE}</style></head><body>
<h1>Study {html.escape(analysis.study)}</h1>
{top.html()}
{_baselines_html(analysis)}
{_toc(sections)}
<h2 id="surfaces">Response surfaces</h2>{fits}
<h2 id="frontier">Alignment–uniformity frontier (z)</h2>{_scrolling_tables(frontier)}
<h2 id="figures">Figures</h2>{"".join(figure_html)}
{returned}
<h2 id="evidence">Evidence card</h2>{_markdown_html(card.to_markdown())}
</body></html>"""
    (out / "report.html").write_text(page)
    written |= {name: out / name for name in
                ("report.html", "report.json", "evidence.md", "evidence.json")}  # fmt: skip
    return written
