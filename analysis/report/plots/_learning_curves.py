"""Learning curves beside the baselines: each design point's probe accuracy (the mean over its
replicates) against the examples seen, at every evaluation mark, on a log axis, with each
baseline as a labelled horizontal line (:mod:`analysis.stats.learning_curve` computes the table
and the standings; this module only draws them)."""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure

from analysis.report.plots._common import FIG_WIDTH, SMALL_PT, _colors

CAPTION = (
    "Each line is one design point's probe accuracy (the mean over its replicates) at every "
    "evaluation "
    "mark, against the examples seen (log axis); each dashed line is a baseline's value of the "
    "same probe on the same held-out items. A line still rising at its last mark has not "
    "converged within the budget; a line below a baseline has not learned what that baseline "
    "already holds. Where the report gives a budget at which a rising line would reach a "
    "baseline, it is an extrapolation of a line in log examples, not a measurement."
)


def caption_of(name: str) -> str | None:
    if name == "learning_curves" or name.startswith("learning_curves_"):
        return CAPTION
    return None


def learning_curves_figure(curves: Any) -> Figure:
    """The figure of a :class:`analysis.stats.learning_curve.LearningCurves`."""
    table = curves.table
    fig = Figure(figsize=(FIG_WIDTH, 4.4), layout="constrained")
    ax = fig.add_subplot()
    points = sorted(table["point_id"].unique())
    colors = _colors(len(points))
    for color, point in zip(colors, points, strict=True):
        curve = table[table["point_id"] == point]
        ax.plot(curve["step"], curve["mean"] * 100, marker="o", markersize=3, linewidth=1.2,
                color=color, label=str(point))  # fmt: skip
    for i, (name, value) in enumerate(curves.baselines.items()):
        ax.axhline(value * 100, color="0.3", linestyle=(0, (4, 2 + i)), linewidth=1)
        ax.annotate(name, (1.0, value * 100), xycoords=("axes fraction", "data"),
                    xytext=(-4, 2), textcoords="offset points", ha="right", va="bottom",
                    fontsize=SMALL_PT, color="0.2")  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlabel("examples seen (log scale)")
    ax.set_ylabel(f"{curves.metric} (%)")
    ax.set_title(f"{curves.metric} over training, beside the baselines", fontsize=10)
    if len(points) <= 12:
        ax.legend(title="design point", fontsize=SMALL_PT, title_fontsize=SMALL_PT, ncols=2)
    return fig
