"""A study's report: response-surface fits, the frontier, every figure and the evidence card,
written as one self-contained ``report.html`` (figures embedded) plus the pieces beside it.

Compute first (:func:`analyse` returns a frozen :class:`StudyAnalysis`), then write
(:func:`write_report`). The JSON summary is the contract of ``study report --json``: ``study``,
``n_trials``, ``responses`` (metric -> ``model``, ``status``, ``r2``, ``adj_r2``, ``press``,
``pred_r2``, ``lack_of_fit_p``, ``stationary_kind``, ``optimum``, ``predicted``, ``interval``,
``notes``, …) and ``frontier`` (the point ids on the z alignment–uniformity frontier). What is
undefined is null, never 0 or inf, and ``notes`` says why in words (a constant response: status
"no variation", nothing modelled).
"""

from __future__ import annotations

import base64
import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from analysis.frontier import pareto_frontier
from analysis.surface import (
    NoVariationError,
    ResponseSurface,
    UnsupportedDesignError,
    fit_response_surface,
)

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

    def to_json(self) -> dict[str, Any]:
        return {
            "study": self.study,
            "n_trials": self.n_trials,
            "responses": {name: fit.to_json() for name, fit in self.fits.items()},
            "frontier": sorted(set(self.frontier.get("point_id", pd.Series(dtype=str)))),
        }


def fit_best_supported(df: pd.DataFrame, response: str) -> ResponseFit:
    """The richest model of :data:`MODEL_LADDER` the design supports."""
    reasons = []
    for name, options in MODEL_LADDER:
        try:
            return ResponseFit(response, name, fit_response_surface(df, response, **options),
                               "; ".join(reasons))  # fmt: skip
        except NoVariationError as err:  # no simpler model helps: say why once and stop
            return ResponseFit(response, None, None, str(err), "no variation")
        except UnsupportedDesignError as err:
            reasons.append(f"{name}: {err}")
    return ResponseFit(response, None, None, "; ".join(reasons), "unsupported")


def analyse(df: pd.DataFrame, responses: tuple[str, ...] | None = None) -> StudyAnalysis:
    """Every response surface and the alignment–uniformity frontier of a results frame."""
    responses = tuple(r for r in (responses or DEFAULT_RESPONSES) if r in df)
    fits = {r: fit_best_supported(df, r) for r in responses}
    finished = df[df["status"] == "finished"] if "status" in df else df
    frontier = (
        pareto_frontier(finished, {"z/align": "min", "z/uniform": "min"})
        if {"z/align", "z/uniform"} <= set(df)
        else finished.iloc[0:0]
    )
    return StudyAnalysis(df.attrs.get("study", ""), len(df), fits, frontier, df)


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
    if fit.surface is None:
        lead = "Nothing modelled" if fit.status == "no variation" else "No model"
        return f"<h3>{html.escape(fit.response)}</h3><p>{lead}: {html.escape(fit.reason)}</p>"
    s = fit.surface
    if s.optimum is None:
        optimum = "<p>No optimum: the fitted surface is flat (see the notes).</p>"
    else:
        point = ", ".join(f"{k} = {v:.4g}" if isinstance(v, float) else f"{k} = {v}"
                          for k, v in s.optimum.items())  # fmt: skip
        ci = (
            "no confidence interval: see the notes"
            if s.interval is None
            else f"95% CI {_num(s.interval[0], '.4g')} … {_num(s.interval[1], '.4g')}"
        )
        optimum = (f"<p>Predicted optimum in the design region: {html.escape(point)} → "
                   f"{_num(s.predicted, '.4g')} ({ci}).</p>")  # fmt: skip
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in (*s.notes, fit.reason) if n)
    return (
        f"<h3>{html.escape(s.response)} ({s.goal})</h3>"
        f"<p>Model: {html.escape(fit.model or '')}. n = {s.n}, R² = {_num(s.r2, '.3f')}, "
        f"adjusted R² = {_num(s.adj_r2, '.3f')}, predicted R² = {_num(s.pred_r2, '.3f')}, "
        f"PRESS = {_num(s.press, '.4g')}, lack-of-fit p = {_num(s.lack_of_fit_p, '.3g')}. "
        f"Stationary point: {s.stationary_kind or 'none'}.</p>"
        f"{optimum}"
        f"<ul>{notes}</ul>"
        f"<details><summary>coefficients and ANOVA</summary>"
        f"{s.coefficients.to_html(float_format=lambda v: f'{v:.4g}', na_rep='n/a')}"
        f"{s.anova.to_html(float_format=lambda v: f'{v:.4g}', na_rep='n/a')}</details>"
    )


def write_report(
    analysis: StudyAnalysis, out_dir: str | Path, history: pd.DataFrame | None = None
) -> dict[str, Path]:
    """Write ``report.html``, ``report.json``, ``evidence.md``, ``evidence.json`` and
    ``figures/*.png|svg`` under ``out_dir``; returns name -> path."""
    from analysis.evidence import evidence_card
    from analysis.plots import all_figures, save_figure

    out = Path(out_dir)
    figures_dir = out / "figures"
    figures_dir.mkdir(parents=True, exist_ok=True)
    surfaces = {r: f.surface for r, f in analysis.fits.items()  # a flat one has no optimum
                if f.surface is not None and f.surface.optimum is not None}  # fmt: skip
    written: dict[str, Path] = {}
    figure_html = []
    for name, fig in all_figures(analysis.results, history=history, surfaces=surfaces).items():
        paths = save_figure(fig, figures_dir, name)
        png = next(p for p in paths if p.suffix == ".png")
        written[f"figure:{name}"] = png
        figure_html.append(
            f'<figure><img src="{_png_data_uri(png)}" alt="{html.escape(name)}">'
            f"<figcaption>{html.escape(name)}</figcaption></figure>"
        )
    card = evidence_card(analysis.results)
    (out / "evidence.md").write_text(card.to_markdown())
    (out / "evidence.json").write_text(json.dumps(card.to_json(), indent=1, default=str))
    summary = analysis.to_json()
    (out / "report.json").write_text(json.dumps(summary, indent=1, default=str))
    frontier_cols = [c for c in ("point_id", "replicate", "z/align", "z/uniform",
                                 "probe/knn_top1_h") if c in analysis.frontier]  # fmt: skip
    factors = analysis.results.attrs.get("factors", [])
    page = f"""<!doctype html><html><head><meta charset="utf-8">
<title>Study {html.escape(analysis.study)}</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto;line-height:1.4}}
img{{max-width:100%}} table{{border-collapse:collapse;font-size:0.85em}}
td,th{{border:1px solid #ccc;padding:2px 6px}} pre{{white-space:pre-wrap;background:#f6f6f6;
padding:1em}}</style></head><body>
<h1>Study {html.escape(analysis.study)}</h1>
<p>{analysis.n_trials} trials. Factors: {html.escape(", ".join(factors))}.</p>
<h2>Response surfaces</h2>{"".join(_fit_html(f) for f in analysis.fits.values())}
<h2>Alignment–uniformity frontier (z)</h2>
{analysis.frontier[frontier_cols].to_html(index=False, float_format=lambda v: f"{v:.4g}")}
<h2>Figures</h2>{"".join(figure_html)}
<h2>Evidence card</h2><pre>{html.escape(card.to_markdown())}</pre>
</body></html>"""
    (out / "report.html").write_text(page)
    written |= {name: out / name for name in
                ("report.html", "report.json", "evidence.md", "evidence.json")}  # fmt: skip
    return written
