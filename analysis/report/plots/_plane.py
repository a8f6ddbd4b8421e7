"""The alignment–uniformity plane of every trial.

The plane follows Wang & Isola: x = ``{space}/uniform``, y = ``{space}/align``, both
lower-is-better, so good encoders sit bottom-left. Uniformity 0 is the collapsed corner (every
feature the same point) and alignment 2 is what two unrelated unit vectors score, i.e. positives
that share no information; both are always drawn, with the axes extended to show them and an inset
zoom on the data when that leaves the points in a small corner.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize, to_rgba
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from analysis.report.plots._common import (
    _CMAP,
    _SPACE_NAMES,
    FIG_WIDTH,
    SMALL_PT,
    _has,
    _norm,
    _require,
    _space_caption,
    _title,
)
from analysis.stats.frontier import pareto_frontier

CAPTION = (
    "Each point is a trial, placed by uniformity (x) and alignment (y) of its {space} features "
    "({space_name}) and coloured by the response; lower is better on both, so good encoders sit "
    "bottom-left. The step line is the Pareto frontier, the dashed lines mark collapse "
    "(uniformity 0) and no information (alignment 2), and an X marks a collapsed trial."
)

COLLAPSE_UNIFORMITY = 0.0
NO_INFORMATION_ALIGNMENT = 2.0
_COLLAPSE_LABEL = "collapse (uniformity 0)"
_NO_INFO_LABEL = "no information (alignment 2)"
_REFERENCE_STYLE = {"color": "0.35", "linestyle": "--", "linewidth": 1.0, "zorder": 1}
_MARKERS = {"finished": "o", "collapsed": "X", "diverged": "P"}


def caption_of(name: str) -> str | None:
    """The caption of ``plane_{space}``; None for any other name."""
    return _space_caption("plane", name, CAPTION)


def plane_table(df: pd.DataFrame, space: str = "z") -> pd.DataFrame:
    """The trials that have both ``{space}/uniform`` and ``{space}/align`` (index and columns
    kept), with ``on_frontier``: whether no other of them is at least as low on both and lower on
    one (``analysis.stats.frontier.pareto_frontier``; exact ties are all on it)."""
    x, y = f"{space}/uniform", f"{space}/align"
    _require(df, [x, y])
    data = df.dropna(subset=[x, y])
    by_position = data.set_axis(pd.RangeIndex(len(data)))
    front = pareto_frontier(by_position, {x: "min", y: "min"})
    return data.assign(on_frontier=by_position.index.isin(front.index))


def plane(
    df: pd.DataFrame,
    space: str = "z",
    color: str | None = "probe/knn_top1_h",
    frontier: pd.DataFrame | None = None,
) -> Figure:
    """Wang & Isola's alignment–uniformity plane of every trial in ``space`` ("z" or "h"),
    coloured by ``color``, with the Pareto frontier (minimising both) as a step line; the frontier
    rows come from ``frontier`` when given, else from ``plane_table`` (``pareto_frontier``)."""
    x, y = f"{space}/uniform", f"{space}/align"
    data = plane_table(df, space)
    front = data[data["on_frontier"]] if frontier is None else frontier.dropna(subset=[x, y])
    front = front.sort_values([x, y], kind="stable")
    color = color if color is not None and _has(data, color) else None
    norm = _norm(data[color]) if color else None
    status = data["status"] if "status" in data else pd.Series("finished", index=data.index)

    def draw(target: Axes) -> None:
        _draw_trials(target, data, x, y, status, color, norm)
        _draw_front(target, front, x, y)

    fig = Figure(figsize=(FIG_WIDTH, 5.0), layout="constrained")
    ax = fig.add_subplot()
    draw(ax)
    _plane_frame(ax, data[x].to_numpy(float), data[y].to_numpy(float), draw)
    _label_plane_axes(ax, x, y)
    ax.set_title(_title(df, f"alignment–uniformity plane ({_SPACE_NAMES.get(space, space)})"))
    if color:
        fig.colorbar(ScalarMappable(norm=norm, cmap=colormaps[_CMAP]), ax=ax, label=color)
    handles = _legend_handles(status)
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=8)
    return fig


def _draw_trials(
    target: Axes,
    data: pd.DataFrame,
    x: str,
    y: str,
    status: pd.Series,
    color: str | None,
    norm: Normalize | None,
) -> None:
    """The trials, one scatter per status (its own marker), faces coloured by ``color``."""
    cmap = colormaps[_CMAP]
    for name, rows in data.groupby(status, sort=False):
        if color:
            values = rows[color].to_numpy(dtype=float)
            faces = [cmap(norm(v)) if np.isfinite(v) else to_rgba("0.7") for v in values]
        else:
            faces = "tab:blue"
        target.scatter(
            rows[x],
            rows[y],
            c=faces,
            marker=_MARKERS.get(str(name), "s"),
            s=46,
            edgecolors="black",
            linewidths=0.6,
            zorder=3,
            label=f"trials ({name})",
        )


def _draw_front(target: Axes, front: pd.DataFrame, x: str, y: str) -> None:
    if len(front):
        target.step(front[x], front[y], where="post", color="crimson", linewidth=1.4, zorder=2,
                    label="Pareto frontier")  # fmt: skip


def _legend_handles(status: pd.Series) -> list[Line2D]:
    """The frontier's line and one marker per status, with its count of trials."""
    return [
        Line2D([], [], color="crimson", linewidth=1.4, label="Pareto frontier (min both)"),
        *[
            Line2D([], [], linestyle="", marker=_MARKERS.get(str(name), "s"),
                   markerfacecolor="0.8", markeredgecolor="black", label=f"{name} ({count})")
            for name, count in status.value_counts(sort=False).items()
        ],
    ]  # fmt: skip


def _label_plane_axes(ax: Axes, x: str, y: str) -> None:
    ax.set_xlabel(f"{x}  (ℓ_uniform: lower = more uniform)")
    ax.set_ylabel(f"{y}  (ℓ_align: lower = tighter positives)")


# --------------------------------------------------------------------------------------------
# The frame: references, limits and the zoom inset (shared with the trajectories)


def _plane_frame(
    ax: Axes,
    xs: np.ndarray,
    ys: np.ndarray,
    draw: Callable[[Axes], None],
) -> Axes | None:
    """Reference lines, limits that show both references, and an inset zoom on the data when the
    references leave the points in a small corner. Returns the inset (or None)."""
    xs = xs[np.isfinite(xs)]
    ys = ys[np.isfinite(ys)]
    ax.axvline(COLLAPSE_UNIFORMITY, label=_COLLAPSE_LABEL, **_REFERENCE_STYLE)
    ax.axhline(NO_INFORMATION_ALIGNMENT, label=_NO_INFO_LABEL, **_REFERENCE_STYLE)
    if xs.size == 0 or ys.size == 0:
        xs = np.array([-1.0])
        ys = np.array([1.0])
    x_lim, zx = _window(xs, COLLAPSE_UNIFORMITY, COLLAPSE_UNIFORMITY)
    y_lim, zy = _window(ys, 0.0, NO_INFORMATION_ALIGNMENT)
    ax.set_xlim(*x_lim)
    ax.set_ylim(*y_lim)
    _annotate_references(ax)
    fx = [(v - x_lim[0]) / (x_lim[1] - x_lim[0]) for v in zx]
    fy = [(v - y_lim[0]) / (y_lim[1] - y_lim[0]) for v in zy]
    if fx[1] - fx[0] > 0.35 and fy[1] - fy[0] > 0.35:
        return None
    # The inset stays inside the box the two reference lines close off, clear of the data.
    right = (COLLAPSE_UNIFORMITY - x_lim[0]) / (x_lim[1] - x_lim[0]) - 0.03
    top = (NO_INFORMATION_ALIGNMENT - y_lim[0]) / (y_lim[1] - y_lim[0]) - 0.03
    box = _inset_box(fx, fy, right, top)
    return None if box is None else _zoom_inset(ax, box, zx, zy, draw)


def _padded(lo: float, hi: float, frac: float, minimum: float) -> tuple[float, float]:
    pad = max((hi - lo) * frac, minimum)
    return lo - pad, hi + pad


def _window(
    values: np.ndarray, low: float, high: float
) -> tuple[tuple[float, float], tuple[float, float]]:
    """(axis limits, zoom window) along one axis: limits that show the values and the references
    ``low`` and ``high`` with a margin, and the window around the values alone."""
    lo, hi = min(values.min(), low), max(values.max(), high)
    span = (hi - lo) or 1.0
    zoom = _padded(values.min(), values.max(), 0.12, 0.01 * span)
    return (min(lo, zoom[0]) - 0.03 * span, max(hi + 0.08 * span, zoom[1])), zoom


def _annotate_references(ax: Axes) -> None:
    text = {"textcoords": "offset points", "ha": "left", "va": "bottom", "fontsize": 8,
            "color": "0.3"}  # fmt: skip
    ax.annotate(_COLLAPSE_LABEL, xy=(COLLAPSE_UNIFORMITY, 0.02), xycoords=("data", "axes fraction"),
                xytext=(3, 0), rotation=90, **text)  # fmt: skip
    ax.annotate(_NO_INFO_LABEL, xy=(0.02, NO_INFORMATION_ALIGNMENT),
                xycoords=("axes fraction", "data"), xytext=(0, 3), **text)  # fmt: skip


def _inset_box(
    fx: list[float], fy: list[float], right: float, top: float
) -> tuple[float, float, float, float] | None:
    """(x, y, width, height) in axes fractions of the largest inset that fits left of ``right``
    and below ``top`` without covering the data window ``fx`` × ``fy``, as far from it as it can
    be; None when none fits."""
    left, bottom = 0.06, 0.05
    centre = ((fx[0] + fx[1]) / 2, (fy[0] + fy[1]) / 2)
    for size in (0.5, 0.42, 0.34):
        w = min(size, right - left)
        h = min(size, top - bottom)
        if w < 0.25 or h < 0.25:
            continue
        corners = [(left, bottom), (right - w, bottom), (left, top - h), (right - w, top - h)]
        corners.sort(key=lambda c: -math.dist((c[0] + w / 2, c[1] + h / 2), centre))
        for cx, cy in corners:
            if cx + w < fx[0] or cx > fx[1] or cy + h < fy[0] or cy > fy[1]:
                return cx, cy, w, h
    return None


def _zoom_inset(
    ax: Axes,
    box: tuple[float, float, float, float],
    zx: tuple[float, float],
    zy: tuple[float, float],
    draw: Callable[[Axes], None],
) -> Axes:
    inset = ax.inset_axes(box)
    draw(inset)
    inset.set_xlim(*zx)
    inset.set_ylim(*zy)
    inset.tick_params(labelsize=SMALL_PT)
    inset.xaxis.set_major_locator(MaxNLocator(5))
    inset.yaxis.set_major_locator(MaxNLocator(5))
    ax.indicate_inset_zoom(inset, edgecolor="0.4")
    return inset
