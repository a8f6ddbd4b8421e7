"""Temperature × candidates phase diagrams: a final metric's mean over replicates in every
(temperature, negatives per anchor) cell of the design, on log–log axes. Temperature and the
number of negatives are the two knobs of the InfoNCE loss (SimCLR: Chen et al. 2020, which
reports them together), so their cells are read as one map."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Colormap, Normalize
from matplotlib.figure import Figure
from matplotlib.tri import Triangulation

from analysis.report.plots._common import (
    _CMAP,
    FIG_WIDTH,
    KNOWN_METRICS,
    _cells,
    _label,
    _level_axis,
    _metric_note,
    _norm,
    _text_color,
    _title,
    _unslug,
)

CAPTION = (
    "The mean of {metric} over replicates in each temperature τ (x) × negatives per anchor (y) "
    "cell, on log axes: a heatmap for a full grid, filled contours through the cells otherwise. "
    "Read along a row for the effect of temperature at a fixed number of candidates, and up a "
    "column for the effect of more candidates at a fixed temperature."
)

# Final metrics drawn as phase diagrams when the study varies temperature and candidate count:
# geometry, false-negative pressure and rank over the same cells as the probe's transfer.
_PHASE_METRICS = ("z/align", "z/uniform", "sim/false_negative_rate", "z/effective_rank")


def caption_of(name: str) -> str | None:
    """The caption of ``phase_{metric slug}``; None for any other name."""
    match = re.fullmatch(r"phase_(?P<slug>\w+)", name)
    if match is None:
        return None
    metric = _unslug(match["slug"], KNOWN_METRICS) or match["slug"]
    return CAPTION.format(metric=_metric_note(metric))


def phase_table(
    df: pd.DataFrame,
    response: str,
    x: str = "temperature",
    y: str = "derived.negatives_per_anchor",
) -> pd.DataFrame:
    """Columns ``x``, ``y``, ``mean``, ``se``, ``n``: the response averaged over replicates in
    every (x, y) cell of the design."""
    return _cells(df, response, [x, y])


def phase_diagram(
    df: pd.DataFrame,
    response: str,
    x: str = "temperature",
    y: str = "derived.negatives_per_anchor",
) -> Figure:
    """The response's mean over replicates in each (x, y) cell on log–log axes: a heatmap when
    the design is a full grid, otherwise filled contours through the points (>= 4 of them) with
    the points on top; every cell is annotated with its mean."""
    table = phase_table(df, response, x, y)
    if table.empty:
        raise ValueError(f"no finite {response!r} values to draw")
    if table[x].nunique() < 2 or table[y].nunique() < 2:
        raise ValueError(f"a phase diagram needs at least two levels of both {x!r} and {y!r}")
    xl = np.sort(table[x].unique().astype(float))
    yl = np.sort(table[y].unique().astype(float))
    log_x, log_y = bool((xl > 0).all()), bool((yl > 0).all())
    norm, cmap = _norm(table["mean"]), colormaps[_CMAP]
    grid = len(table) == len(xl) * len(yl)
    fig = Figure(figsize=(FIG_WIDTH, 4.8), layout="constrained")
    ax = fig.add_subplot()
    if log_x:
        ax.set_xscale("log")
    if log_y:
        ax.set_yscale("log")
    if grid:
        _draw_heatmap(ax, table, x, y, (xl, log_x), (yl, log_y), cmap, norm)
    else:
        _draw_scattered(ax, table, x, y, (log_x, log_y), cmap, norm)
    if len(table) <= 36:
        _annotate_cells(ax, table, grid, cmap, norm)
    _level_axis(ax, xl, "x", log=log_x)
    _level_axis(ax, yl, "y", log=log_y)
    ax.set_xlabel(_label(x))
    ax.set_ylabel(_label(y))
    ax.set_title(_title(df, f"{response}\nmean over replicates per ({x}, {y}) cell"), fontsize=11)
    fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=ax, label=response)
    return fig


def _draw_heatmap(
    ax: Axes,
    table: pd.DataFrame,
    x: str,
    y: str,
    xs: tuple[np.ndarray, bool],
    ys: tuple[np.ndarray, bool],
    cmap: Colormap,
    norm: Normalize,
) -> None:
    """A full grid: one cell per (x level, y level), edges halfway between levels."""
    (xl, log_x), (yl, log_y) = xs, ys
    Z = table.pivot(index=y, columns=x, values="mean").reindex(index=yl, columns=xl)
    edges = _geometric_edges(xl, log_x), _geometric_edges(yl, log_y)
    ax.pcolormesh(*edges, Z.to_numpy(), cmap=cmap, norm=norm, shading="flat",
                  edgecolors="white", linewidth=1.5)  # fmt: skip


def _draw_scattered(
    ax: Axes,
    table: pd.DataFrame,
    x: str,
    y: str,
    logs: tuple[bool, bool],
    cmap: Colormap,
    norm: Normalize,
) -> None:
    """Not a grid: filled contours through the cells (>= 4, triangulated in log space), the cells
    on top as coloured dots."""
    (log_x, log_y), px, py = logs, table[x].to_numpy(float), table[y].to_numpy(float)
    if len(table) >= 4:
        try:
            shape = Triangulation(np.log(px) if log_x else px, np.log(py) if log_y else py)
            triangles = Triangulation(px, py, shape.triangles)
            ax.tricontourf(triangles, table["mean"], levels=12, cmap=cmap, norm=norm)
        except (ValueError, RuntimeError):
            pass  # collinear points: the scatter alone
    ax.scatter(px, py, c=table["mean"], cmap=cmap, norm=norm, s=70, edgecolors="black",
               zorder=3, clip_on=False)  # fmt: skip
    ax.set_xlim(*_padded_range(px, log_x, 0.04))
    ax.set_ylim(*_padded_range(py, log_y, 0.04))


def _annotate_cells(
    ax: Axes, table: pd.DataFrame, grid: bool, cmap: Colormap, norm: Normalize
) -> None:
    """Each cell's mean (± SE when it has replicates): centred in a grid's cell, beside a dot."""
    for row in table.itertuples(index=False):
        xv, yv, mean, se = float(row[0]), float(row[1]), row.mean, row.se
        text = f"{mean:.3g}" + (f"\n±{se:.2g}" if np.isfinite(se) else "")
        if grid:
            ax.text(xv, yv, text, ha="center", va="center", fontsize=9,
                    color=_text_color(cmap(norm(mean))))  # fmt: skip
        else:
            ax.annotate(text, (xv, yv), xytext=(6, 6), textcoords="offset points",
                        fontsize=8, color="black")  # fmt: skip


def _padded_range(values: np.ndarray, log: bool, frac: float) -> tuple[float, float]:
    """(low, high) of the values widened by ``frac`` of their range (in log space if ``log``)."""
    v = np.log(values) if log else np.asarray(values, dtype=float)
    pad = frac * (np.ptp(v) or 1.0)
    lo, hi = v.min() - pad, v.max() + pad
    return (float(np.exp(lo)), float(np.exp(hi))) if log else (float(lo), float(hi))


def _geometric_edges(levels: np.ndarray, log: bool) -> np.ndarray:
    values = np.log(levels) if log else levels.astype(float)
    mids = (values[1:] + values[:-1]) / 2
    edges = np.concatenate(
        [[values[0] - (mids[0] - values[0])], mids, [values[-1] + (values[-1] - mids[-1])]]
    )
    return np.exp(edges) if log else edges
