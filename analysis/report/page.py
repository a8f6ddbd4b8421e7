"""A study's report: response-surface fits, the frontier, every figure and the evidence card,
written as one self-contained ``report.html`` (figures embedded) plus the pieces beside it.

Compute first (:func:`analysis.study_analysis.analyse` returns a frozen
:class:`analysis.study_analysis.StudyAnalysis`), then write (:func:`write_report`). The JSON
summary is the contract of ``study report --json``: ``study``, ``next_step``
(:class:`analysis.findings.next_step.NextStep`), ``headline``
(:class:`analysis.findings.headline.Headline`:
``sentence``, ``target``, ``found``, ``not_detected``, ``best``, ``next_step`` and the
terminal's ``lines``), ``n_trials``, ``responses`` (metric -> ``model``, ``status``, ``r2``,
``adj_r2``, ``press``, ``pred_r2``, ``lack_of_fit_p``, ``stationary_kind``, ``optimum``,
``predicted``, ``interval``, ``notes``, and for a fitted one ``blocks``, ``error_ms``,
``error_ms_without_blocks``, ``model_p``, ``beats_mean``, ``findings`` (the sentences, findings
first) and ``effects``; for every one ``summary``, :meth:`analysis.stats.fits.ResponseFit.summary`,
shown in the page too, and ``direction``) and ``frontier`` (the point ids on the z
alignment–uniformity frontier). What is undefined is
null, never 0 or inf, and ``notes`` says why in words (a constant response: status "no
variation", nothing modelled).
"""

from __future__ import annotations

import base64
import html
import json
import math
import numbers
import re
import shutil
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.findings.baselines import baseline_label, baselines_json
from analysis.findings.direction import Direction
from analysis.stats.best import finished_trials, target_of
from analysis.stats.fits import ResponseFit, _num, findings
from analysis.stats.measurement import resolution_words
from analysis.stats.units import is_accuracy, level
from analysis.study_analysis import StudyAnalysis


# ---------------------------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------------------------
def _png_data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


def _figure_data_uri(png: Path, svg: Path) -> str:
    """The lighter of a figure's two embeddings: its SVG (text as text, sharp at any width) or
    its PNG reduced to a 256-colour palette (matplotlib's flat colours survive it), so that
    line plots travel as vectors and dense ones (many markers, filled contours) as pixels."""
    import io

    from PIL import Image

    with Image.open(png) as image:
        palette = image.convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT)
    buffer = io.BytesIO()
    palette.save(buffer, format="PNG", optimize=True)
    candidates = [("image/png", buffer.getvalue()), ("image/svg+xml", svg.read_bytes())]
    mime, data = min(candidates, key=lambda c: len(c[1]))
    return f"data:{mime};base64," + base64.b64encode(data).decode()


def _fit_html(fit: ResponseFit, direction: Direction) -> str:
    """Findings first (what was found, how sure, what was not detectable), then statistics."""
    # every line of fit.summary() (the notebook's and the README snippet's words) is shown here
    if fit.surface is None:
        return (f"<h3>{html.escape(fit.response)}</h3><p>{html.escape(fit.model_sentence())}</p>"
                f"<p>{html.escape(fit.optimum_sentence())}</p>")  # fmt: skip
    s = fit.surface
    words = fit.findings or findings(fit)
    found = "".join(f"<li>{html.escape(x)}</li>" for x in words.found)
    missed = "".join(f"<li>{html.escape(x)}</li>" for x in words.not_detected)
    optimum = f"<p>{html.escape(fit.optimum_sentence())}</p>"
    effects = pd.DataFrame([e.to_json() for e in words.effects])
    effects = effects.drop(columns=["ci"], errors="ignore")
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in (*s.notes, fit.reason) if n)
    return (
        f"<h3>{html.escape(s.response)} ({s.goal})</h3>"
        f"<p><b>{html.escape(words.headline)}</b></p>"
        + (f"<p>Found:</p><ul>{found}</ul>" if found else "")
        + (f"<p>Not detectable:</p><ul>{missed}</ul>" if missed else "")
        + optimum
        + _direction_html(direction)
        + f"<p>{html.escape(fit.block_sentence())}</p>"
        + f"<p>{html.escape(fit.model_sentence())}</p>"
        + f"<p>{html.escape(fit.fit_sentence())} PRESS = {_num(s.press, '.4g')}, lack-of-fit "
        f"p = {_num(s.lack_of_fit_p, '.3g')}. Stationary point: {s.stationary_kind or 'none'}.</p>"
        f"<ul>{notes}</ul>"
        f"<details><summary>effects, coefficients and ANOVA (in the recorded units: "
        f"accuracies as fractions, 0.01 = 1 point)</summary>"
        f"{effects.to_html(index=False, float_format=lambda v: f'{v:.4g}', na_rep='n/a')}"
        f"{s.coefficients.to_html(float_format=lambda v: f'{v:.4g}', na_rep='n/a')}"
        f"{s.anova.to_html(float_format=lambda v: f'{v:.4g}', na_rep='n/a')}</details>"
    )


def figure_inputs(analysis: StudyAnalysis) -> dict:
    """What the figures of a study are drawn from, decided once for the report and for the
    notebook (``analysis.report.plots.all_figures(df, history, **figure_inputs(analysis))``): the
    surfaces that have an optimum, the responses whose model does not beat the mean (no contour
    and no optimum star for them), the desirability, the Pareto front, the paths and the
    learning curves."""
    surfaces = {r: f.surface for r, f in analysis.fits.items()  # a flat one has no optimum
                if f.surface is not None and f.surface.optimum is not None}  # fmt: skip
    unnamed = frozenset(
        r for r, f in analysis.fits.items() if f.findings is not None and not f.findings.beats_mean
    )
    return {"surfaces": surfaces, "no_optimum": unnamed, "desirability": analysis.desirability,
            "pareto": analysis.pareto, "paths": _paths(analysis, surfaces),
            "learning": analysis.learning}  # fmt: skip


def _paths(analysis: StudyAnalysis, surfaces: dict) -> dict[str, pd.DataFrame]:
    """Each drawn surface's path (steepest ascent, or the ridge), for its contour figure."""
    out = {}
    for name in surfaces:
        path = analysis.directions[name].path
        if path is not None:
            out[name] = path.table
    return out


def _learning_html(analysis: StudyAnalysis) -> str:
    """Where each point's learning curve stands against each baseline at the last mark, and
    whether it is still rising (:mod:`analysis.stats.learning_curve`); nothing without one."""
    curves = analysis.learning
    if curves is None:
        return ""
    marks = sorted(int(s) for s in curves.table["step"].unique())
    lead = (f"{curves.metric} at {len(marks)} evaluation marks ({marks[0]:,} to {marks[-1]:,} "
            "examples), each design point's mean over its replicates, against each baseline at "
            "the last mark. A budget at which a rising curve would reach a baseline is an "
            "extrapolation of a line in log examples through its last marks, never a "
            "measurement.")  # fmt: skip
    if not curves.baselines:
        lead += " No baseline measured this probe."
    items = "".join(f"<li>{html.escape(s)}</li>" for s in curves.sentences())
    return (f'<h2 id="learning-curves">Learning curves</h2><p>{html.escape(lead)}</p>'
            + (f"<ul>{items}</ul>" if items else ""))  # fmt: skip


def _desirability_html(analysis: StudyAnalysis) -> str:
    """The study file's goals met together: the most desirable point, each response's
    prediction, interval and desirability (nothing when the study has no goals)."""
    found = analysis.desirability
    if found is None:
        return ""
    head = '<h2 id="goals">Several goals at once (desirability)</h2>'
    if isinstance(found, str):
        return f"{head}<p>{html.escape(found[0].upper() + found[1:])}.</p>"
    words = "".join(f"<p>{html.escape(x)}</p>" for x in found.sentences())
    rows = pd.DataFrame([
        {"metric": g.metric, "goal": g.goal, "low": g.low,
         "target": "" if g.target is None else g.target, "high": g.high,
         "weight": g.weight, "importance": g.importance,
         "predicted": found.responses[g.metric]["predicted"],
         "95% CI": _interval_text(found.responses[g.metric]["interval"]),
         "d": found.responses[g.metric]["d"]}
        for g in found.goals
    ])  # fmt: skip
    table = rows.to_html(index=False, float_format=lambda v: f"{v:.4g}", na_rep="")
    units = ("<p>The table is in the recorded units, as the study file's goals are written "
             "(accuracies as fractions: 0.01 = 1 point).</p>")  # fmt: skip
    return head + words + _scrolling_tables(table) + units


def _pareto_html(analysis: StudyAnalysis) -> str:
    """A multi-objective study's Pareto front: the sentence, then its trials (nothing for a
    study with one objective)."""
    front = analysis.pareto
    if front is None:
        return ""
    columns = [c for c in ("point_id", *front.factors, *front.objectives) if c in front.front]
    table = front.front[columns].to_html(index=False, float_format=lambda v: f"{v:.4g}")
    return (f'<h2 id="pareto">Pareto front</h2><p>{html.escape(front.sentence())}</p>'
            + _scrolling_tables(table))  # fmt: skip


def _interval_text(interval) -> str:
    return "n/a" if interval is None else f"{interval[0]:.4g} to {interval[1]:.4g}"


def _direction_html(direction: Direction) -> str:
    """Where to go next on this surface: the sentences, then the path's table."""
    words = "".join(f"<li>{html.escape(x)}</li>" for x in direction.sentences())
    path = direction.path
    if path is None:
        return f"<p>Where next:</p><ul>{words}</ul>"
    kind = "steepest-ascent path" if direction.steepest is not None else "ridge analysis"
    if direction.steepest is not None and direction.steepest.goal == "min":
        kind = "steepest-descent path"
    table = path.table.to_html(index=False, float_format=lambda v: f"{v:.4g}", na_rep="n/a")
    return (f"<p>Where next:</p><ul>{words}</ul><details><summary>the {kind}, step by step "
            f"(coded and natural units, the fitted value and its 95% CI)</summary>{table}"
            "</details>")  # fmt: skip


_STYLE = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:0 auto;padding:1em;
line-height:1.45;overflow-wrap:anywhere}
img{max-width:100%;height:auto} figure{margin:1.5em 0}
figcaption{font-size:0.9em;color:#333}
.scroll{overflow-x:auto;max-width:100%} table{border-collapse:collapse;font-size:0.85em}
td,th{border:1px solid #ccc;padding:2px 6px;overflow-wrap:normal}
pre,code{white-space:pre-wrap}
.lead{font-size:1.15em} #headline{border-left:4px solid #2a6;padding-left:1em}
#toc>ol{columns:2 16em} #toc ol ol{font-size:0.9em;padding-left:1.2em}
#toc li{break-inside:avoid-column}
.figures{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,440px),1fr));
gap:0 1.5em;align-items:start} .figures>figure{min-width:0}
.figure-index{font-size:0.9em}
table.trials td{text-align:right} table.trials td:nth-child(-n+3){text-align:left}
@media (max-width:480px){body{padding:0.4em}}
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


def _card_html(markdown: str) -> str:
    """The evidence card under the report's own "Evidence card" heading: its title (a level-1
    heading that repeats the study's name) dropped, its sections one level down (h3)."""
    body = re.sub(r"<h1>.*?</h1>\n?", "", _markdown_html(markdown), count=1, flags=re.S)
    return re.sub(r"<(/?)h2>", r"<\1h3>", body)


def _figure_html(name: str, data_uri: str) -> str:
    """One figure: the image (``data_uri``, alt text: what it plots against what), its title and
    caption."""
    from analysis.report.plots import caption, title

    return (
        f'<figure id="figure-{html.escape(name)}"><img src="{data_uri}" '
        f'alt="{html.escape(title(name))}"><figcaption><b>{html.escape(title(name))}.</b> '
        f"{html.escape(caption(name))} <small>(figures/{html.escape(name)}.png, .svg)</small>"
        "</figcaption></figure>"
    )


# The figures' groups in the report, in order: (file-name prefix, heading)
FIGURE_GROUPS = (
    ("plane_", "Alignment–uniformity plane"),
    ("trajectories_", "Training trajectories"),
    ("main_effects", "Effects of the factors"),
    ("interactions", "Effects of the factors"),
    ("phase_", "Phase diagrams: temperature × negatives"),
    ("probe_vs_temperature_", "Probe accuracy against temperature"),
    ("contours_", "Response-surface contours"),
    ("class_spread_", "Per-class geometry"),
    ("shift_", "Shift tests"),
)


NOT_DRAWN = (
    "<p>The figures were not drawn for this report (it was written without them, to save the "
    "time they take). <code>study report</code> on this study writes the report again with "
    "them; every number here stays the same.</p>"
)


def _figures_html(names: list[str], blocks: dict[str, str], no_contours: list[str],
                  panels: dict[str, str]) -> str:  # fmt: skip
    """The Figures section: an index (one line per figure, linked to it, source-return panels
    included) then the figures under a heading per group, two columns wide on a wide screen."""
    from analysis.report.plots import title

    groups: dict[str, list[str]] = {}
    for name in names:
        heading = next((h for prefix, h in FIGURE_GROUPS if name.startswith(prefix)), "Other")
        groups.setdefault(heading, []).append(name)
    lines = [f'<li><a href="#figure-{html.escape(n)}">{html.escape(title(n))}</a></li>'
             for group in groups.values() for n in group]  # fmt: skip
    lines += [f'<li><a href="#{anchor}">Source return: {html.escape(label)}</a></li>'
              for label, anchor in panels.items()]  # fmt: skip
    index = f'<h3>Figure index</h3><ol class="figure-index">{"".join(lines)}</ol>'
    if not names:
        index = "<p>No figure applies to this study's results.</p>" + (
            index if panels else "")  # fmt: skip
    skipped = (f"<p>No contours for {html.escape(', '.join(no_contours))}: "
               f"{'its model does' if len(no_contours) == 1 else 'their models do'} not beat "
               "the mean (see Response surfaces), so there is no fitted surface to draw.</p>"
               if no_contours else "")  # fmt: skip
    parts = [index]
    for heading, group in groups.items():
        note = skipped if heading == "Response-surface contours" else ""
        parts.append(f'<h3>{html.escape(heading)}</h3>{note}<div class="figures">'
                     f"{''.join(blocks[n] for n in group)}</div>")  # fmt: skip
    if skipped and "Response-surface contours" not in groups:
        parts.append(f"<h3>Response-surface contours</h3>{skipped}")
    return "".join(parts)


def _cell(column: str, value) -> str:
    """A value of the trials table: accuracies in percent (the header says so), counts whole,
    other numbers to 4 significant digits; a missing one is a dash."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return html.escape(str(value))
    if is_accuracy(column):
        return f"{float(value) * 100:.1f}"
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{float(value):.4g}"


def _header(column: str) -> str:
    return html.escape(column) + (" (%)" if is_accuracy(column) else "")


KEY_METRICS = ("probe/knn_top1_h", "probe/linear_top1_h", "probe/knn_top1_z",
               "probe/linear_top1_z", "z/align", "z/uniform")  # fmt: skip


def _trials_html(analysis: StudyAnalysis) -> str:
    """The trials: one row each (point, replicate, status, the factors, examples seen, the
    target then the key probes and the z geometry), rounded, accuracies in percent."""
    df = analysis.results
    factors = [f for f in df.attrs.get("factors") or [] if f in df]
    seen = next((c for c in ("examples_seen", "train/examples_seen") if c in df), None)
    target = target_of(df)["metric"]
    metrics = [m for m in dict.fromkeys((target, *KEY_METRICS)) if m in df]
    columns = [c for c in ("point_id", "replicate", "status") if c in df]
    columns += [*factors, *([seen] if seen else []), *metrics]
    order = [c for c in ("point_id", "replicate") if c in df]
    rows = df.sort_values(order, kind="stable") if order else df
    head = "".join(f"<th>{'examples seen' if c == seen else _header(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{_cell(c, row[c])}</td>" for c in columns) + "</tr>"
        for _, row in rows[columns].astype(object).iterrows()
    )
    repeated = int(df.attrs.get("repeated_trials", 0))
    note = (f" {repeated} finished trial(s) that repeat one of these exactly (the same factors "
            "and seed) are left out." if repeated else "")  # fmt: skip
    return (f"<p>{len(rows)} trials; {html.escape(target)} is the study's target. Accuracies "
            f"in percent, other metrics in their own units.{note}</p>"
            f'<div class="scroll"><table class="trials"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>")  # fmt: skip


def _frontier_html(frontier: pd.DataFrame) -> str:
    columns = [c for c in ("point_id", "replicate", "z/align", "z/uniform", "probe/knn_top1_h")
               if c in frontier]  # fmt: skip
    if frontier.empty or not columns:
        return "<p>No trial has both z/align and z/uniform: there is no frontier.</p>"
    head = "".join(f"<th>{_header(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{_cell(c, row[c])}</td>" for c in columns) + "</tr>"
        for _, row in frontier[columns].astype(object).iterrows()
    )
    return (f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
            "</table></div>")  # fmt: skip


SOURCE_RETURN_CAPTION = (
    "Held-out anchors of this point's trial, each beside its positive (the other augmented view "
    "of the same source) and its three most similar negatives, with their similarities; a "
    "negative of the anchor's own class is marked as a false negative. Look for false "
    "negatives among the hardest negatives (the loss pushes them away although the receiver "
    "wants them close), negatives at least as similar as the positive (the "
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
    them with its interval and the verdict (:mod:`analysis.findings.baselines`)."""
    found = baselines_json(analysis.results, analysis.best, analysis.standings)
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
    for kind, entry in found.items():
        cells = "".join(
            f"<td>{level(m, entry['metrics'][m]) if m in entry['metrics'] else '–'}</td>"
            for m in probes
        )
        standing = entry["standing"]["verdict"] if entry["standing"] else "–"
        label = baseline_label(kind, entry.get("architecture") or (), entry.get("whose", ""))
        rows.append(f"<tr><td>{html.escape(label)}<br><small>"
                    f"{html.escape(entry['about'])}</small></td>{cells}"
                    f"<td>{html.escape(standing)}</td></tr>")  # fmt: skip
    for kind, entry in found.items():  # a study of several architectures: the others' too
        for other in entry.get("by_architecture") or []:
            if other["architecture"] == entry.get("architecture"):
                continue
            cells = "".join(
                f"<td>{level(m, other['metrics'][m]) if m in other['metrics'] else '–'}</td>"
                for m in probes
            )
            rows.append(f"<tr><td>{html.escape(baseline_label(kind, other['architecture']))}"
                        f"<br><small>{html.escape(other['about'])}; not the best point's "
                        f"architecture</small></td>{cells}<td>–</td></tr>")  # fmt: skip
    table = (f"<table><thead><tr><th>representation</th>{head}<th>best point</th></tr></thead>"
             f"<tbody>{''.join(rows)}</tbody></table>")  # fmt: skip
    said = analysis.headline.against or ""
    paired = _paired_html(analysis)
    measured = ""
    if analysis.items:
        p = best.mean if best is not None and is_accuracy(best.metric) else None
        measured = f'<p class="resolution">{html.escape(resolution_words(analysis.items, p))}</p>'
    how = (
        "paired on the shared held-out items (per replicate an exact McNemar test; over "
        "replicates the mean paired difference with its 95% interval, counting seeds and "
        "items)"
        if paired
        else "against the best point's 95% interval over replicates"
    )
    return (f'<h2 id="baselines">Baselines</h2><p>{html.escape(said)}</p>{measured}'
            f"{_scrolling_tables(table)}{paired}<p>Each baseline is scored by the trials' own "
            "evaluation: the same held-out rows, the same k-NN and linear probes fit on the same "
            f"probe rows. The last column compares the target's best point with each, {how}."
            "</p>")  # fmt: skip


def _paired_html(analysis: StudyAnalysis) -> str:
    """The paired comparisons behind the verdicts: per replicate, the discordant items (only
    the trained encoder right, only the baseline right) and McNemar's exact p; over replicates,
    the mean paired difference and its interval. Empty without per-item outcomes."""
    rows = []
    for s in analysis.standings:
        if s.paired is None:
            continue
        d = s.paired.difference
        for t in s.paired.tests:
            against = "" if t.against_seed is None else f" (its seed {t.against_seed})"
            rows.append(
                f"<tr><td>{html.escape(s.label)}{against}</td><td>{t.seed}</td><td>{t.b}</td>"
                f"<td>{t.c}</td><td>{t.p:.3g}</td><td></td></tr>"
            )
        rows.append(
            f"<tr><td><b>{html.escape(s.label)}</b>, over replicates</td><td>all</td>"
            f"<td><b>{s.paired.only_trained}</b></td><td><b>{s.paired.only_baseline}</b></td>"
            f"<td></td><td>{_signed_points(d.mean)} ({_signed_points(d.low)} to "
            f"{_signed_points(d.high)}): <b>{html.escape(s.verdict)}</b></td></tr>"
        )
    if not rows:
        return ""
    head = ("<tr><th>against</th><th>seed</th><th>items only the trained encoder got right</th>"
            "<th>items only the baseline got right</th><th>exact McNemar p</th>"
            "<th>mean paired difference (95% interval)</th></tr>")  # fmt: skip
    return _scrolling_tables(
        f'<table class="paired"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>'
    )


def _signed_points(value: float) -> str:
    return f"{'+' if value >= 0 else '−'}{abs(value) * 100:.2f} points"


_HEADING = re.compile(r"<h([23])((?:\s[^>]*)?)>(.*?)</h\1>", re.S)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


def _with_contents(body: str, marker: str) -> str:
    """``body`` with an id on every h2 and h3 that has none (an h3's starts with its h2's) and
    the contents, every h2 with its h3s nested under it, in place of ``marker``."""
    taken = set(re.findall(r'\sid="([^"]+)"', body))
    entries: list[tuple[int, str, str]] = []
    parent = ""

    def named(match: re.Match) -> str:
        nonlocal parent
        depth, attrs, inner = int(match[1]), match[2], match[3]
        text = html.unescape(re.sub(r"<[^>]+>", "", inner)).strip()
        found = re.search(r'\sid="([^"]+)"', attrs)
        if found:
            anchor = found[1]
        else:
            base = _slug(text) if depth == 2 else f"{parent}-{_slug(text)}"
            anchor, n = base, 2
            while anchor in taken:
                anchor, n = f"{base}-{n}", n + 1
            taken.add(anchor)
            attrs = f'{attrs} id="{anchor}"'
        if depth == 2:
            parent = anchor
        entries.append((depth, anchor, text))
        return f"<h{depth}{attrs}>{inner}</h{depth}>"

    body = _HEADING.sub(named, body)
    items, open_sub = [], False
    for depth, anchor, text in entries:
        link = f'<a href="#{anchor}">{html.escape(text)}</a>'
        if depth == 2:
            items.append(("</ol></li>" if open_sub else "</li>" if items else "") + f"<li>{link}")
            open_sub = False
        else:
            items.append(("" if open_sub else "<ol>") + f"<li>{link}</li>")
            open_sub = True
    if items:
        items.append("</ol></li>" if open_sub else "</li>")
    toc = f'<nav id="toc"><h2>Contents</h2><ol>{"".join(items)}</ol></nav>'
    return body.replace(marker, toc, 1)


def _draw_figures(
    analysis: StudyAnalysis,
    history: pd.DataFrame | None,
    inputs: dict[str, Any],
    figures_dir: Path,
) -> tuple[dict[str, list[Path]], int]:
    """The report's figures saved under ``figures_dir`` (name -> (png, svg)) and the threads to
    embed them with. The figure package (matplotlib: half a second of imports) is imported only
    here, to draw."""
    from analysis.report.plots import iter_figures, save_figures, usable_cores

    # each figure drawn as soon as it is made, while the next are made
    made = iter_figures(analysis.results, history=history, **inputs)
    saved = save_figures(made, figures_dir)
    return saved, max(1, min(len(saved), usable_cores()))


def _copy_panels(
    panels: Mapping[str, str | Path], out: Path
) -> tuple[dict[str, Path], dict[str, Path]]:
    """The source-return panels copied to ``out/source_return/`` (label -> the copy), and those
    whose file is not there (label -> the path given)."""
    shown: dict[str, Path] = {}
    missing: dict[str, Path] = {}
    for i, (label, png) in enumerate(panels.items(), start=1):
        if not Path(png).is_file():
            missing[label] = Path(png)
            continue
        copy = out / "source_return" / f"{i}_{re.sub(r'[^A-Za-z0-9._-]+', '_', label)}.png"
        copy.parent.mkdir(exist_ok=True)
        shutil.copyfile(png, copy)
        shown[label] = copy
    return shown, missing


def write_report(
    analysis: StudyAnalysis,
    out_dir: str | Path,
    history: pd.DataFrame | None = None,
    panels: Mapping[str, str | Path] | None = None,
    source_return: Mapping[str, pd.DataFrame] | None = None,
    figures: bool = True,
) -> dict[str, Path]:
    """Write ``report.html``, ``report.json``, ``evidence.md``, ``evidence.json`` and
    ``figures/*.png|svg`` under ``out_dir``; returns name -> path.

    ``figures=False`` writes everything but the figures, most of a report's time (the Figures
    section then says they were not drawn and how to draw them); every number is the same.

    ``report.html`` opens with the headline (:mod:`analysis.findings.headline`: the study in one
    sentence, the findings with their evidence, the best point, the next study), then the
    response surfaces, the frontier, a table of the trials, the figures (an index of them with
    one line each, then the figures by group, each with a caption that says what to look for
    and alt text that says what it plots against what; no contours for a model that does not
    beat the mean), the source-return panels when given, and the evidence card; the contents
    link every h2 and h3 section, the card's included. It is one self-contained file (figures
    embedded as SVG or palette PNG, whichever is lighter; no script, no external resource),
    readable from 400 px wide up (analysis.report.plots sizes its figures for that).

    ``panels``: label (e.g. "best point p002 (τ=0.5, B=64)") -> a source-return PNG of that
    point's trial; each is copied to ``source_return/`` (returned as ``source_return:<label>``)
    and embedded with a caption. ``source_return``: label -> that trial's source-return table
    (the columns of :data:`analysis.report.evidence.source_return.SOURCE_RETURN_COLUMNS`), for the
    evidence card's numbers; a panel without a table still makes the card's section say what
    was shown."""
    from analysis.report.evidence.card import evidence_card

    out = Path(out_dir)
    figures_dir = out / "figures"
    out.mkdir(parents=True, exist_ok=True)
    if figures:
        figures_dir.mkdir(exist_ok=True)
    inputs = figure_inputs(analysis)
    surfaces, unnamed = inputs["surfaces"], inputs["no_optimum"]
    written: dict[str, Path] = {}
    saved, cores = _draw_figures(analysis, history, inputs, figures_dir) if figures else ({}, 1)
    written |= {f"figure:{name}": png for name, (png, _) in saved.items()}
    # the embeddings (a palette PNG each: seconds for a study's figures) are made in threads,
    # as Pillow works without the GIL, while this thread writes the card and the JSON
    with ThreadPoolExecutor(cores, "report-embed") as embedding:
        uris = {n: embedding.submit(_figure_data_uri, png, svg) for n, (png, svg) in saved.items()}
        no_contours = [r for r in surfaces if r in unnamed and sum(
            surfaces[r].coding[f].kind == "numeric" for f in surfaces[r].factors) >= 2]  # fmt: skip
        shown, missing = _copy_panels(panels or {}, out)
        written |= {f"source_return:{label}": copy for label, copy in shown.items()}
        examples = {label: None for label in shown} | dict(source_return or {})
        card = evidence_card(analysis.results, source_return=examples or None)
        (out / "evidence.md").write_text(card.to_markdown())
        (out / "evidence.json").write_text(json.dumps(card.to_json(), indent=1, default=str))
        summary = analysis.to_json()
        (out / "report.json").write_text(json.dumps(summary, indent=1, default=str))
        top = analysis.headline
        returned = (
            f'<h2 id="source-return">Source return</h2>{_source_return_html(shown, missing)}'
            if panels
            else ""
        )
        panel_anchors = {label: f"source-return-{i}" for i, label in enumerate(shown, start=1)}
        blocks = {name: _figure_html(name, uri.result()) for name, uri in uris.items()}
    figures_html = (
        _figures_html(list(blocks), blocks, no_contours, panel_anchors) if figures else NOT_DRAWN
    )
    fits = _scrolling_tables("".join(_fit_html(f, analysis.directions[name])
                                     for name, f in analysis.fits.items()))
    marker = "<!-- contents -->"
    body = _with_contents(
        f"""{top.html()}
{_baselines_html(analysis)}
{marker}
{_learning_html(analysis)}
{_desirability_html(analysis)}
{_pareto_html(analysis)}
<h2 id="surfaces">Response surfaces</h2>{fits}
<h2 id="frontier">Alignment–uniformity frontier (z)</h2>{_frontier_html(analysis.frontier)}
<h2 id="trials">Trials</h2>{_trials_html(analysis)}
<h2 id="figures">Figures</h2>{figures_html}
{returned}
<h2 id="evidence">Evidence card</h2>{_card_html(card.to_markdown())}""",
        marker,
    )
    page = f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Study {html.escape(analysis.study)}</title><style>{_STYLE}</style></head><body>
<h1>Study {html.escape(analysis.study)}</h1>
{body}
</body></html>"""
    (out / "report.html").write_text(page)
    written |= {name: out / name for name in
                ("report.html", "report.json", "evidence.md", "evidence.json")}  # fmt: skip
    return written
