"""Figures of a study's results frame (see ``analysis.load``), drawn with matplotlib.

Every figure function first computes the table it draws (the public ``*_table`` helpers are pure
and tested against hand-built tables), then returns a
``matplotlib.figure.Figure`` built without pyplot, so importing this module never touches the
interactive backend. ``save_figure`` writes a figure as PNG and SVG; ``all_figures`` makes every
figure that applies to a study.

The alignment–uniformity plane follows Wang & Isola: x = ``{space}/uniform``, y =
``{space}/align``, both lower-is-better, so good encoders sit bottom-left. Uniformity 0 is the
collapsed corner (every feature the same point) and alignment 2 is what two unrelated unit vectors
score, i.e. positives that share no information; both are always drawn, with the axes extended to
show them and an inset zoom on the data when that leaves the points in a small corner.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize, to_rgba
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, MaxNLocator, NullFormatter, NullLocator
from matplotlib.tri import Triangulation

from analysis.frontier import pareto_frontier

__all__ = [
    "all_figures",
    "contour_grid",
    "interaction_table",
    "interactions",
    "main_effect_table",
    "main_effects",
    "phase_diagram",
    "phase_table",
    "plane",
    "probe_vs_temperature",
    "save_figure",
    "surface_contours",
    "trajectories",
]

COLLAPSE_UNIFORMITY = 0.0
NO_INFORMATION_ALIGNMENT = 2.0
_COLLAPSE_LABEL = "collapse (uniformity 0)"
_NO_INFO_LABEL = "no information (alignment 2)"
_REFERENCE_STYLE = {"color": "0.35", "linestyle": "--", "linewidth": 1.0, "zorder": 1}
_CMAP = "viridis"

_LABELS = {
    "temperature": "temperature τ",
    "batch_size": "batch size B",
    "derived.negatives_per_anchor": "negatives per anchor (2B − 2)",
}

_SPACE_NAMES = {"z": "z, projection output", "h": "h, backbone features"}

# Final metrics drawn as phase diagrams when the study varies temperature and candidate count
# (seed 003 §BC: geometry, false-negative pressure, rank and transfer over the same cells).
_PHASE_METRICS = ("z/align", "z/uniform", "sim/false_negative_rate", "z/effective_rank")


# --------------------------------------------------------------------------------------------
# Pure tables


def _is_numeric(values: pd.Series | Sequence[Any]) -> bool:
    series = pd.Series(values)
    return pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)


def _binned(values: pd.Series, max_levels: int) -> pd.Series:
    """The factor's values, or for a numeric factor with more than ``max_levels`` distinct values
    (a Latin hypercube's continuous levels) the median of each value's quantile bin."""
    if not _is_numeric(values) or values.nunique(dropna=True) <= max_levels:
        return values
    numeric = values.astype(float)
    rank_source = np.log(numeric) if (numeric.dropna() > 0).all() else numeric
    bins = pd.qcut(rank_source, max_levels, labels=False, duplicates="drop")
    return numeric.groupby(bins).transform("median")


def _was_binned(values: pd.Series, max_levels: int) -> bool:
    return _is_numeric(values) and values.nunique(dropna=True) > max_levels


def _cells(df: pd.DataFrame, response: str, keys: Sequence[str]) -> pd.DataFrame:
    """Mean, standard error and count of ``response`` per combination of ``keys``."""
    _require(df, [response, *keys])
    data = df.dropna(subset=[response, *keys])
    if data.empty:
        return pd.DataFrame(columns=[*keys, "mean", "se", "n"])
    grouped = data.groupby(list(keys), sort=True)[response]
    table = grouped.agg(["mean", "std", "count"]).reset_index()
    table = table.rename(columns={"count": "n"})
    table["n"] = table["n"].astype(int)
    table["se"] = np.where(table["n"] >= 2, table["std"] / np.sqrt(table["n"]), np.nan)
    return table[[*keys, "mean", "se", "n"]]


def main_effect_table(
    df: pd.DataFrame, response: str, factor: str, max_levels: int = 8
) -> pd.DataFrame:
    """Columns ``level``, ``mean``, ``se``, ``n``: the response averaged over every trial at each
    level of ``factor`` (replicates included); se = sample sd / sqrt(n), NaN when n = 1. A
    numeric factor with more than ``max_levels`` distinct values is binned by quantile."""
    _require(df, [response, factor])
    data = df[[factor, response]].copy()
    data[factor] = _binned(data[factor], max_levels)
    return _cells(data, response, [factor]).rename(columns={factor: "level"})


def interaction_table(
    df: pd.DataFrame,
    response: str,
    first: str,
    second: str,
    max_levels: int = 8,
    max_lines: int = 4,
) -> pd.DataFrame:
    """Columns ``first``, ``second``, ``mean``, ``se``, ``n``: the response per cell of the two
    factors, se over the cell's trials (its replicates). Numeric factors with many distinct values
    are binned by quantile (``max_levels`` for ``first``, ``max_lines`` for ``second``)."""
    _require(df, [response, first, second])
    data = df[[first, second, response]].copy()
    data[first] = _binned(data[first], max_levels)
    data[second] = _binned(data[second], max_lines)
    return _cells(data, response, [first, second])


def phase_table(
    df: pd.DataFrame,
    response: str,
    x: str = "temperature",
    y: str = "derived.negatives_per_anchor",
) -> pd.DataFrame:
    """Columns ``x``, ``y``, ``mean``, ``se``, ``n``: the response averaged over replicates in
    every (x, y) cell of the design."""
    return _cells(df, response, [x, y])


def contour_grid(
    surface: Any, x: str, y: str, n: int = 60
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(xs, ys, Z)``: an n × n grid over the design region of numeric factors ``x`` and ``y``
    (geometric spacing for log-scale factors) with every other factor at ``surface.optimum``,
    and ``Z[i, j]`` the surface's predicted mean at ``(xs[j], ys[i])``."""
    axes = []
    for name in (x, y):
        if name not in surface.factors:
            raise ValueError(f"{name!r} is not a factor of the surface ({surface.factors})")
        coding = surface.coding[name]
        if coding.kind != "numeric":
            raise ValueError(f"contours need numeric factors; {name!r} is {coding.kind}")
        low, high = float(coding.low), float(coding.high)
        if coding.scale == "log":
            axes.append(np.geomspace(low, high, n))
        else:
            axes.append(np.linspace(low, high, n))
    xs, ys = axes
    gx, gy = np.meshgrid(xs, ys)
    columns = {}
    for name in surface.factors:
        if name == x:
            columns[name] = gx.ravel()
        elif name == y:
            columns[name] = gy.ravel()
        else:
            columns[name] = [surface.optimum[name]] * gx.size
    predicted = surface.predict(pd.DataFrame(columns))
    Z = np.asarray(predicted["mean"], dtype=float).reshape(gx.shape)
    return xs, ys, Z


# --------------------------------------------------------------------------------------------
# Small drawing helpers


def _require(df: pd.DataFrame, columns: Sequence[str]) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise KeyError(f"missing column(s) {missing}")


def _has(df: pd.DataFrame | None, *columns: str) -> bool:
    return df is not None and all(c in df.columns and df[c].notna().any() for c in columns)


def _varies(df: pd.DataFrame, column: str) -> bool:
    return column in df.columns and df[column].nunique(dropna=True) >= 2


def _label(name: str) -> str:
    return _LABELS.get(name, name)


def _fmt(value: Any) -> str:
    if isinstance(value, float | np.floating):
        if value.is_integer() and abs(value) < 1e7:
            return str(int(value))
        return f"{value:.3g}"
    return str(value)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")


def _title(df: pd.DataFrame | None, text: str) -> str:
    study = df.attrs.get("study") if df is not None else None
    return f"{study}: {text}" if study else text


def _factors(df: pd.DataFrame, factors: Sequence[str] | None) -> list[str]:
    names = list(factors) if factors is not None else list(df.attrs.get("factors") or [])
    return [f for f in names if _varies(df, f)]


def _use_log(levels: Sequence[Any]) -> bool:
    """Log scale for positive numeric levels spanning at least a factor of 4."""
    if len(levels) < 2 or not _is_numeric(levels):
        return False
    values = np.asarray(levels, dtype=float)
    return bool((values > 0).all() and values.max() / values.min() >= 4)


def _positions(levels: Sequence[Any]) -> tuple[np.ndarray, bool]:
    """x positions of the levels and whether they are categorical (then 0, 1, ...)."""
    if _is_numeric(levels):
        return np.asarray(levels, dtype=float), False
    return np.arange(len(levels), dtype=float), True


def _level_axis(
    ax: Axes,
    levels: Sequence[Any],
    axis: str = "x",
    log: bool | None = None,
    explicit: bool = True,
) -> None:
    """Scale and ticks of an axis whose values are a factor's levels: log scale by ``_use_log``
    unless ``log`` says otherwise; ticks at the levels themselves when they are few, well apart
    and ``explicit`` (not quantile-bin medians), else plain ticks over their range."""
    levels = list(levels)
    positions, categorical = _positions(levels)
    set_scale = ax.set_xscale if axis == "x" else ax.set_yscale
    set_ticks = ax.set_xticks if axis == "x" else ax.set_yticks
    target = ax.xaxis if axis == "x" else ax.yaxis
    if categorical:
        rotate = any(len(str(v)) > 6 for v in levels) and axis == "x"
        set_ticks(positions, labels=[str(v) for v in levels], rotation=30 if rotate else 0)
        return
    log = _use_log(levels) if log is None else log
    if log:
        set_scale("log")
    spread = np.log(positions) if log else positions
    gaps = np.diff(np.sort(spread)) / (np.ptp(spread) or 1.0)
    if explicit and len(levels) <= 8 and (gaps.size == 0 or gaps.min() >= 0.06):
        set_ticks(positions, labels=[_fmt(float(v)) for v in levels])
        target.set_minor_locator(NullLocator())
    elif log:
        _log_ticks(target, float(np.min(positions)), float(np.max(positions)), ends=False)


def _log_ticks(target: Any, lo: float, hi: float, ends: bool = True) -> None:
    """Plain-number ticks on a log axis: the 1-2-5 series inside [lo, hi] plus, when ``ends``
    (or when the series has fewer than two ticks there), both ends, leaving out series values
    within 12% of the log range of an end."""
    span = math.log(hi / lo) if hi > lo else 1.0
    series = [
        m * 10.0**k
        for k in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1)
        for m in (1, 2, 5)
    ]
    inside = [
        t for t in series if lo < t < hi and min(math.log(t / lo), math.log(hi / t)) >= 0.12 * span
    ]
    series_only = [t for t in series if lo <= t <= hi]
    ticks = {lo, hi, *inside} if ends or len(series_only) < 2 else set(series_only)
    target.set_major_locator(FixedLocator(sorted(ticks)))
    target.set_major_formatter(_plain)
    target.set_minor_locator(NullLocator())
    target.set_minor_formatter(NullFormatter())


def _plain(value: float, _pos: Any = None) -> str:
    return _fmt(float(value))


def _dodge(positions: np.ndarray, index: int, count: int, log: bool, categorical: bool):
    """Shift overlapping series a little apart along x."""
    if count <= 1:
        return positions
    offset = index - (count - 1) / 2
    if categorical:
        return positions + 0.06 * offset
    if log:
        return positions * 10 ** (0.012 * offset)
    span = np.ptp(positions) or 1.0
    return positions + 0.01 * span * offset


def _colors(count: int) -> list[tuple[float, float, float, float]]:
    if count <= 10:
        return [colormaps["tab10"](i) for i in range(count)]
    if count <= 20:
        return [colormaps["tab20"](i) for i in range(count)]
    return [colormaps[_CMAP](v) for v in np.linspace(0, 0.95, count)]


def _text_color(rgba: Sequence[float]) -> str:
    r, g, b = rgba[:3]
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"


def _norm(values: pd.Series) -> Normalize:
    lo, hi = float(values.min()), float(values.max())
    if lo == hi:
        lo, hi = lo - 0.5 * (abs(lo) or 1) * 1e-3, hi + 0.5 * (abs(hi) or 1) * 1e-3
    return Normalize(lo, hi)


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


# --------------------------------------------------------------------------------------------
# The alignment–uniformity plane


def _padded(lo: float, hi: float, frac: float, minimum: float) -> tuple[float, float]:
    pad = max((hi - lo) * frac, minimum)
    return lo - pad, hi + pad


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
    x_lo = min(xs.min(), COLLAPSE_UNIFORMITY)
    x_hi = max(xs.max(), COLLAPSE_UNIFORMITY)
    y_lo = min(ys.min(), 0.0)
    y_hi = max(ys.max(), NO_INFORMATION_ALIGNMENT)
    x_span, y_span = (x_hi - x_lo) or 1.0, (y_hi - y_lo) or 1.0
    # Zoom window around the data (drawn as an inset only when the data fill little of the axes).
    zx = _padded(xs.min(), xs.max(), 0.12, 0.01 * x_span)
    zy = _padded(ys.min(), ys.max(), 0.12, 0.01 * y_span)
    x_lim = (min(x_lo, zx[0]) - 0.03 * x_span, max(x_hi + 0.08 * x_span, zx[1]))
    y_lim = (min(y_lo, zy[0]) - 0.03 * y_span, max(y_hi + 0.08 * y_span, zy[1]))
    ax.set_xlim(*x_lim)
    ax.set_ylim(*y_lim)
    ax.annotate(
        _COLLAPSE_LABEL,
        xy=(COLLAPSE_UNIFORMITY, 0.02),
        xycoords=("data", "axes fraction"),
        xytext=(3, 0),
        textcoords="offset points",
        rotation=90,
        ha="left",
        va="bottom",
        fontsize=8,
        color="0.3",
    )
    ax.annotate(
        _NO_INFO_LABEL,
        xy=(0.02, NO_INFORMATION_ALIGNMENT),
        xycoords=("axes fraction", "data"),
        xytext=(0, 3),
        textcoords="offset points",
        ha="left",
        va="bottom",
        fontsize=8,
        color="0.3",
    )

    fx = [(v - x_lim[0]) / (x_lim[1] - x_lim[0]) for v in zx]
    fy = [(v - y_lim[0]) / (y_lim[1] - y_lim[0]) for v in zy]
    if fx[1] - fx[0] > 0.35 and fy[1] - fy[0] > 0.35:
        return None
    # The inset stays inside the box the two reference lines close off, clear of the data.
    right = (COLLAPSE_UNIFORMITY - x_lim[0]) / (x_lim[1] - x_lim[0]) - 0.03
    top = (NO_INFORMATION_ALIGNMENT - y_lim[0]) / (y_lim[1] - y_lim[0]) - 0.03
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
            clear = cx + w < fx[0] or cx > fx[1] or cy + h < fy[0] or cy > fy[1]
            if clear:
                inset = ax.inset_axes((cx, cy, w, h))
                draw(inset)
                inset.set_xlim(*zx)
                inset.set_ylim(*zy)
                inset.tick_params(labelsize=7)
                inset.xaxis.set_major_locator(MaxNLocator(5))
                inset.yaxis.set_major_locator(MaxNLocator(5))
                ax.indicate_inset_zoom(inset, edgecolor="0.4")
                return inset
    return None


def plane(
    df: pd.DataFrame,
    space: str = "z",
    color: str | None = "probe/knn_top1_h",
    frontier: pd.DataFrame | None = None,
) -> Figure:
    """Wang & Isola's alignment–uniformity plane of every trial in ``space`` ("z" or "h"),
    coloured by ``color``, with the Pareto frontier (minimising both) as a step line; the frontier
    rows come from ``frontier`` when given, else from ``pareto_frontier``."""
    x, y = f"{space}/uniform", f"{space}/align"
    _require(df, [x, y])
    data = df.dropna(subset=[x, y])
    front = (
        pareto_frontier(data, {x: "min", y: "min"})
        if frontier is None
        else frontier.dropna(subset=[x, y])
    )
    front = front.sort_values([x, y], kind="stable")
    has_color = color is not None and _has(data, color)
    norm = _norm(data[color]) if has_color else None
    cmap = colormaps[_CMAP]
    status = data["status"] if "status" in data else pd.Series("finished", index=data.index)
    markers = {"finished": "o", "collapsed": "X", "diverged": "P"}

    def draw(target: Axes) -> None:
        for name, rows in data.groupby(status, sort=False):
            if has_color:
                values = rows[color].to_numpy(dtype=float)
                faces = [cmap(norm(v)) if np.isfinite(v) else to_rgba("0.7") for v in values]
            else:
                faces = "tab:blue"
            target.scatter(
                rows[x],
                rows[y],
                c=faces,
                marker=markers.get(str(name), "s"),
                s=46,
                edgecolors="black",
                linewidths=0.6,
                zorder=3,
                label=f"trials ({name})",
            )
        if len(front):
            target.step(
                front[x],
                front[y],
                where="post",
                color="crimson",
                linewidth=1.4,
                zorder=2,
                label="Pareto frontier",
            )

    fig = Figure(figsize=(7.5, 5.8), layout="constrained")
    ax = fig.add_subplot()
    draw(ax)
    _plane_frame(ax, data[x].to_numpy(float), data[y].to_numpy(float), draw)
    ax.set_xlabel(f"{x}  (ℓ_uniform: lower = more uniform)")
    ax.set_ylabel(f"{y}  (ℓ_align: lower = tighter positives)")
    ax.set_title(_title(df, f"alignment–uniformity plane ({_SPACE_NAMES.get(space, space)})"))
    if has_color:
        fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=ax, label=color)
    handles = [
        Line2D([], [], color="crimson", linewidth=1.4, label="Pareto frontier (min both)"),
        *[
            Line2D(
                [],
                [],
                linestyle="",
                marker=markers.get(str(name), "s"),
                markerfacecolor="0.8",
                markeredgecolor="black",
                label=f"{name} ({count})",
            )
            for name, count in status.value_counts(sort=False).items()
        ],
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=8)
    return fig


MAX_DETAILED_PATHS = 40  # beyond this, paths are averaged per point and drawn in one collection


def _draw_paths_fast(target: Axes, paths, x: str, y: str, palette: dict) -> None:
    """Many paths at once: one LineCollection and two scatters, no per-path artists."""
    from matplotlib.collections import LineCollection

    segments, colours, starts, ends = [], [], [], []
    for _key, path in paths:
        xy = path[[x, y]].to_numpy(float)
        colour = palette[path["point_id"].iloc[0]]
        segments.append(xy)
        colours.append(colour)
        starts.append(xy[0])
        ends.append(xy[-1])
    target.add_collection(LineCollection(segments, colors=colours, linewidths=0.8, zorder=2))
    starts, ends = np.array(starts), np.array(ends)
    target.scatter(starts[:, 0], starts[:, 1], s=12, facecolors="white", edgecolors=colours,
                   linewidths=0.6, zorder=3)  # fmt: skip
    target.scatter(ends[:, 0], ends[:, 1], s=12, c=colours, zorder=3)


def trajectories(history: pd.DataFrame, df: pd.DataFrame | None = None, space: str = "z") -> Figure:
    """Each trial's path across its evaluations on the alignment–uniformity plane, coloured by
    point_id (hollow marker = first evaluation, filled = last, arrow on the last step); ``df``,
    when given, labels each point with its factor values."""
    x, y = f"{space}/uniform", f"{space}/align"
    _require(history, ["trial_key", "point_id", "step", x, y])
    data = history.dropna(subset=[x, y]).sort_values(["trial_key", "step"])
    averaged = data["trial_key"].nunique() > MAX_DETAILED_PATHS
    if averaged:  # many trials: one path per design point, the mean over its replicates
        data = data.groupby(["point_id", "step"], as_index=False)[[x, y]].mean()
        data["trial_key"] = data["point_id"]
    points = sorted(data["point_id"].unique())
    palette = dict(zip(points, _colors(len(points)), strict=True))

    def draw(target: Axes) -> None:
        paths = list(data.groupby("trial_key", sort=True))
        if len(paths) > MAX_DETAILED_PATHS:
            _draw_paths_fast(target, paths, x, y, palette)
            return
        for _key, path in paths:
            colour = palette[path["point_id"].iloc[0]]
            px, py = path[x].to_numpy(float), path[y].to_numpy(float)
            target.plot(px, py, color=colour, linewidth=1.2, marker=".", markersize=4, zorder=2)
            target.scatter(px[:1], py[:1], s=40, facecolors="white", edgecolors=[colour], zorder=3)
            target.scatter(px[-1:], py[-1:], s=40, c=[colour], edgecolors="black", zorder=3)
            if len(px) >= 2:
                target.annotate(
                    "",
                    xy=(px[-1], py[-1]),
                    xytext=(px[-2], py[-2]),
                    arrowprops={
                        "arrowstyle": "-|>",
                        "color": colour,
                        "lw": 1.2,
                        "shrinkA": 0,
                        "shrinkB": 4,
                    },
                    zorder=3,
                )

    fig = Figure(figsize=(7.5, 6.2), layout="constrained")
    ax = fig.add_subplot()
    draw(ax)
    _plane_frame(ax, data[x].to_numpy(float), data[y].to_numpy(float), draw)
    ax.set_xlabel(f"{x}  (ℓ_uniform: lower = more uniform)")
    ax.set_ylabel(f"{y}  (ℓ_align: lower = tighter positives)")
    study_frame = df if df is not None else history
    what = f"training trajectories ({_SPACE_NAMES.get(space, space)})"
    if averaged:
        what += ", mean over replicates per point"
    ax.set_title(_title(study_frame, what))
    if len(points) <= 20:
        factors = _factors(df, None) if df is not None else []
        described = {}
        if factors and "point_id" in df:
            first = df.drop_duplicates("point_id").set_index("point_id")
            for point in points:
                if point in first.index:
                    described[point] = ", ".join(f"{f}={_fmt(first.at[point, f])}" for f in factors)
        handles = [
            Line2D(
                [],
                [],
                color=palette[p],
                marker="o",
                label=f"{p}: {described[p]}" if p in described else p,
            )
            for p in points
        ]
        handles += [
            Line2D([], [], linestyle="", marker="o", markerfacecolor="white",
                   markeredgecolor="black", label="first evaluation"),
            Line2D([], [], linestyle="", marker="o", markerfacecolor="black",
                   markeredgecolor="black", label="last evaluation"),
        ]  # fmt: skip
        fig.legend(handles=handles, loc="outside lower center", ncols=2, fontsize=8)
    return fig


# --------------------------------------------------------------------------------------------
# Temperature × candidates phase diagram (seed 003 §BC)


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
    log_x = bool((xl > 0).all())
    log_y = bool((yl > 0).all())
    norm = _norm(table["mean"])
    cmap = colormaps[_CMAP]
    grid = len(table) == len(xl) * len(yl)

    fig = Figure(figsize=(7.0, 5.4), layout="constrained")
    ax = fig.add_subplot()
    if log_x:
        ax.set_xscale("log")
    if log_y:
        ax.set_yscale("log")
    if grid:
        Z = table.pivot(index=y, columns=x, values="mean").reindex(index=yl, columns=xl)
        ax.pcolormesh(
            _geometric_edges(xl, log_x),
            _geometric_edges(yl, log_y),
            Z.to_numpy(),
            cmap=cmap,
            norm=norm,
            shading="flat",
            edgecolors="white",
            linewidth=1.5,
        )
    else:
        px = table[x].to_numpy(float)
        py = table[y].to_numpy(float)
        if len(table) >= 4:
            try:
                shape = Triangulation(
                    np.log(px) if log_x else px, np.log(py) if log_y else py
                ).triangles
                ax.tricontourf(
                    Triangulation(px, py, shape), table["mean"], levels=12, cmap=cmap, norm=norm
                )
            except (ValueError, RuntimeError):
                pass  # collinear points: the scatter alone
        ax.scatter(
            px,
            py,
            c=table["mean"],
            cmap=cmap,
            norm=norm,
            s=70,
            edgecolors="black",
            zorder=3,
            clip_on=False,
        )
        ax.set_xlim(*_padded_range(px, log_x, 0.04))
        ax.set_ylim(*_padded_range(py, log_y, 0.04))
    annotate = len(table) <= 36
    if annotate:
        for row in table.itertuples(index=False):
            xv, yv, mean, se = float(row[0]), float(row[1]), row.mean, row.se
            text = f"{mean:.3g}" + (f"\n±{se:.2g}" if np.isfinite(se) else "")
            if grid:
                ax.text(xv, yv, text, ha="center", va="center", fontsize=9,
                        color=_text_color(cmap(norm(mean))))  # fmt: skip
            else:
                ax.annotate(text, (xv, yv), xytext=(6, 6), textcoords="offset points",
                            fontsize=8, color="black")  # fmt: skip
    _level_axis(ax, xl, "x", log=log_x)
    _level_axis(ax, yl, "y", log=log_y)
    ax.set_xlabel(_label(x))
    ax.set_ylabel(_label(y))
    ax.set_title(_title(df, f"{response}\nmean over replicates per ({x}, {y}) cell"), fontsize=11)
    fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=ax, label=response)
    return fig


# --------------------------------------------------------------------------------------------
# Factor effects


def _grid(count: int, ncols_max: int, panel: tuple[float, float]) -> tuple[Figure, list[Axes]]:
    ncols = min(count, ncols_max)
    nrows = math.ceil(count / ncols)
    width = max(panel[0] * ncols, 5.5)
    fig = Figure(figsize=(width, panel[1] * nrows + 0.8), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, sharey=True).ravel().tolist()
    for extra in axes[count:]:
        extra.set_visible(False)
    return fig, axes[:count]


def main_effects(df: pd.DataFrame, response: str, factors: Sequence[str] | None = None) -> Figure:
    """One panel per factor: the response's mean at each level, error bars ±1 standard error
    over the trials at that level (replicates included), with the trials themselves in grey."""
    names = _factors(df, factors)
    if not names:
        raise ValueError("no varied factors to draw (pass factors= or set df.attrs['factors'])")
    fig, axes = _grid(len(names), 4, (3.4, 3.4))
    for ax, factor in zip(axes, names, strict=True):
        table = main_effect_table(df, response, factor)
        levels = table["level"].tolist()
        positions, categorical = _positions(levels)
        raw = df.dropna(subset=[response, factor])
        if categorical:
            where = {level: i for i, level in enumerate(levels)}
            raw_x = raw[factor].map(where).to_numpy(float)
        else:
            raw_x = raw[factor].to_numpy(float)
        ax.scatter(raw_x, raw[response], s=12, color="0.6", zorder=1, label="trials")
        ax.errorbar(
            positions,
            table["mean"],
            yerr=table["se"],
            marker="o",
            capsize=4,
            color="tab:blue",
            linestyle="none" if categorical else "-",
            zorder=2,
            label="mean ± SE",
        )
        _level_axis(ax, levels, explicit=not _was_binned(df[factor], 8))
        ax.margins(x=0.12)
        ax.set_xlabel(_label(factor))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(response)
    axes[0].legend(fontsize=8)
    fig.suptitle(
        _title(df, f"main effects on {response}\n(error bars ±1 SE over the trials at a level)"),
        fontsize=11,
    )
    return fig


def interactions(df: pd.DataFrame, response: str, factors: Sequence[str] | None = None) -> Figure:
    """For each pair of factors, the mean response against the first factor's levels with one
    line per level of the second; error bars ±1 SE over each cell's replicates."""
    names = _factors(df, factors)
    pairs = list(itertools.combinations(names, 2))
    if not pairs:
        raise ValueError("an interaction plot needs at least two varied factors")
    fig, axes = _grid(len(pairs), 3, (4.2, 3.6))
    for ax, (first, second) in zip(axes, pairs, strict=True):
        table = interaction_table(df, response, first, second)
        sign = "≈" if _was_binned(df[second], 4) else "="
        _draw_lines(
            ax,
            table,
            first,
            second,
            lambda v, s=second, sign=sign: f"{_label(s)} {sign} {_fmt(v)}",
            explicit=not _was_binned(df[first], 8),
        )
        ax.set_title(f"{first} × {second}", fontsize=10)
        ax.set_xlabel(_label(first))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_ylabel(response)
    fig.suptitle(
        _title(df, f"interactions on {response}\n(error bars ±1 SE over each cell's replicates)"),
        fontsize=11,
    )
    return fig


def _draw_lines(
    ax: Axes,
    table: pd.DataFrame,
    first: str,
    second: str | None,
    label: Callable[[Any], str],
    log: bool | None = None,
    explicit: bool = True,
) -> None:
    """Mean ± SE against ``first``'s levels, one line per level of ``second`` (or one line)."""
    levels = sorted(table[first].unique().tolist())
    positions, categorical = _positions(levels)
    where = dict(zip(levels, positions, strict=True))
    log = not categorical and (_use_log(levels) if log is None else log)
    groups = list(table.groupby(second, sort=True)) if second else [(None, table)]
    colours = _colors(len(groups))
    for index, (value, cells) in enumerate(groups):
        cells = cells.sort_values(first)
        xs = np.array([where[v] for v in cells[first]])
        ax.errorbar(
            _dodge(xs, index, len(groups), log, categorical),
            cells["mean"],
            yerr=cells["se"],
            marker="o",
            capsize=3,
            color=colours[index],
            label=label(value),
        )
    _level_axis(ax, levels, log=log, explicit=explicit)
    ax.margins(x=0.1)


def probe_vs_temperature(df: pd.DataFrame, probe: str = "knn") -> Figure:
    """Probe accuracy (``probe/{probe}_top1_h`` and ``_z``, mean ± SE over replicates) against
    temperature on a log axis, one line per batch size (one line when batch size is fixed)."""
    _require(df, ["temperature"])
    columns = {space: f"probe/{probe}_top1_{space}" for space in ("h", "z")}
    if not any(_has(df, c) for c in columns.values()):
        raise KeyError(f"no probe/{probe}_top1_h or probe/{probe}_top1_z column")
    by_batch = _varies(df, "batch_size")
    log = bool((df["temperature"].dropna() > 0).all())
    explicit = not _was_binned(df["temperature"], 8)
    fig = Figure(figsize=(10.0, 4.4), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    for ax, (space, column) in zip(axes, columns.items(), strict=True):
        ax.set_title(f"{column}  ({_SPACE_NAMES[space]})", fontsize=10)
        ax.set_xlabel(_label("temperature"))
        ax.grid(alpha=0.3)
        if not _has(df, column):
            ax.text(0.5, 0.5, "not recorded", ha="center", va="center", transform=ax.transAxes)
            continue
        if by_batch:
            table = interaction_table(df, column, "temperature", "batch_size", max_lines=6)
            sign = "≈" if _was_binned(df["batch_size"], 6) else "="
            _draw_lines(
                ax,
                table,
                "temperature",
                "batch_size",
                lambda v, sign=sign: f"B {sign} {_fmt(v)}",
                log=log,
                explicit=explicit,
            )
        else:
            table = main_effect_table(df, column, "temperature", max_levels=8)
            table = table.rename(columns={"level": "temperature"})
            _draw_lines(
                ax, table, "temperature", None, lambda v: "all trials", log=log, explicit=explicit
            )
        ax.legend(fontsize=8)
    axes[0].set_ylabel(f"{probe} probe top-1 accuracy")
    fig.suptitle(_title(df, f"{probe} probe accuracy vs temperature  (mean ± SE over replicates)"))
    return fig


# --------------------------------------------------------------------------------------------
# Response surfaces


def surface_contours(
    surface: Any, x: str, y: str, n: int = 60, *, name_optimum: bool = True
) -> Figure:
    """Filled contours of a fitted response surface over numeric factors ``x`` and ``y`` with the
    other factors at the surface's optimum; the optimum is a star (unless ``name_optimum`` is
    False: a model that does not beat the mean names none, and the title says so) and the
    design points (the surface's ``data``, when it has one) are dots. ``surface`` is duck-typed:
    ``response``, ``factors``, ``coding``, ``optimum`` and ``predict(frame) -> [mean, lower,
    upper]``."""
    xs, ys, Z = contour_grid(surface, x, y, n)
    fig = Figure(figsize=(6.8, 5.4), layout="constrained")
    ax = fig.add_subplot()
    if surface.coding[x].scale == "log":
        ax.set_xscale("log")
    if surface.coding[y].scale == "log":
        ax.set_yscale("log")
    filled = ax.contourf(xs, ys, Z, levels=14, cmap=_CMAP)
    lines = ax.contour(xs, ys, Z, levels=filled.levels[::2], colors="black", linewidths=0.6)
    ax.clabel(lines, fontsize=7, fmt="%.3g")
    data = getattr(surface, "data", None)
    if isinstance(data, pd.DataFrame) and {x, y} <= set(data.columns):
        ax.scatter(
            data[x], data[y], s=18, color="white", edgecolors="black", zorder=3,
            label="design points", clip_on=False,
        )  # fmt: skip
    optimum = surface.optimum
    if name_optimum:
        ax.plot(
            [float(optimum[x])],
            [float(optimum[y])],
            linestyle="",
            marker="*",
            markersize=16,
            color="gold",
            markeredgecolor="black",
            zorder=4,
            label="optimum",
            clip_on=False,
        )
    ax.set_xlim(xs[0], xs[-1])
    ax.set_ylim(ys[0], ys[-1])
    for target, values, name in ((ax.xaxis, xs, x), (ax.yaxis, ys, y)):
        if surface.coding[name].scale == "log":
            _log_ticks(target, float(values[0]), float(values[-1]))
    ax.set_xlabel(_label(x))
    ax.set_ylabel(_label(y))
    held = [f for f in surface.factors if f not in (x, y)]
    subtitle = ", ".join(f"{f}={_fmt(optimum[f])}" for f in held)
    title = f"fitted {surface.response} over {x} × {y}"
    if not name_optimum:
        title += "\nthe model does not beat the mean: no optimum is named"
    ax.set_title(title + (f"\nothers at optimum: {subtitle}" if subtitle else ""), fontsize=10)
    fig.colorbar(filled, ax=ax, label=f"{surface.response} (predicted mean)")
    fig.legend(loc="outside lower center", ncols=2, fontsize=8)
    return fig


# --------------------------------------------------------------------------------------------
# Output


def save_figure(fig: Figure, out_dir: str | Path, name: str) -> list[Path]:
    """Write ``name.png`` (120 dpi) and ``name.svg`` under ``out_dir``; returns both paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.png", out / f"{name}.svg"]
    fig.savefig(paths[0], dpi=120)
    fig.savefig(paths[1])
    return paths


def all_figures(
    df: pd.DataFrame,
    history: pd.DataFrame | None = None,
    surfaces: dict[str, Any] | None = None,
    response: str = "probe/knn_top1_h",
    no_optimum: frozenset[str] = frozenset(),
) -> dict[str, Figure]:
    """Every figure that applies to this study, by file name: the plane in z and h, trajectories
    (given a history), main effects and interactions of ``response``, temperature × candidates
    phase diagrams and probe-vs-temperature (when temperature varies), and contours of each
    surface in ``surfaces`` (response -> fitted surface) over its first two numeric factors,
    with no optimum marked for the responses in ``no_optimum`` (they do not beat the mean)."""
    figures: dict[str, Figure] = {}
    for space in ("z", "h"):
        x, y = f"{space}/uniform", f"{space}/align"
        if _has(df, x, y):
            figures[f"plane_{space}"] = plane(df, space, color=response)
        if _has(history, x, y, "trial_key", "point_id", "step"):
            figures[f"trajectories_{space}"] = trajectories(history, df, space)
    factors = _factors(df, None)
    if _has(df, response) and factors:
        figures["main_effects"] = main_effects(df, response, factors)
        if len(factors) >= 2:
            figures["interactions"] = interactions(df, response, factors)
    if _varies(df, "temperature") and _varies(df, "derived.negatives_per_anchor"):
        for metric in dict.fromkeys((response, *_PHASE_METRICS)):
            if _has(df, metric):
                figures[f"phase_{_slug(metric)}"] = phase_diagram(df, metric)
    if _varies(df, "temperature"):
        for probe in ("knn", "linear"):
            if _has(df, f"probe/{probe}_top1_h") or _has(df, f"probe/{probe}_top1_z"):
                figures[f"probe_vs_temperature_{probe}"] = probe_vs_temperature(df, probe)
    for name, surface in (surfaces or {}).items():
        numeric = [f for f in surface.factors if surface.coding[f].kind == "numeric"]
        if len(numeric) >= 2 and surface.optimum is not None:  # a flat surface has no optimum
            key = f"contours_{_slug(name)}_{_slug(numeric[0])}_{_slug(numeric[1])}"
            figures[key] = surface_contours(
                surface, numeric[0], numeric[1], name_optimum=name not in no_optimum
            )
    return figures
