"""Training trajectories: each trial's path across its evaluations on the alignment–uniformity
plane (see ``_plane``), from a study's history frame (``analysis.reading.load.load_history``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from analysis.report.plots._common import (
    _SPACE_NAMES,
    FIG_WIDTH,
    _colors,
    _factors,
    _fmt,
    _require,
    _space_caption,
    _title,
)
from analysis.report.plots._plane import _label_plane_axes, _plane_frame

CAPTION = (
    "Each line is one trial's path on the alignment–uniformity plane of its {space} features "
    "({space_name}), from its first evaluation (hollow marker) to its last (filled, arrow), one "
    "colour per design point; a path heading bottom-left improves both alignment and uniformity "
    "as training goes on, and the dashed lines mark collapse and no information."
)

MAX_DETAILED_PATHS = 40  # beyond this, paths are averaged per point and drawn in one collection


def caption_of(name: str) -> str | None:
    """The caption of ``trajectories_{space}``; None for any other name."""
    return _space_caption("trajectories", name, CAPTION)


def trajectory_table(history: pd.DataFrame, space: str = "z") -> pd.DataFrame:
    """The paths to draw, sorted by ``trial_key`` then ``step``: the history's evaluations that
    have both ``{space}/uniform`` and ``{space}/align``; with more than ``MAX_DETAILED_PATHS``
    trials, one path per design point instead (columns ``point_id``, ``step``, the two metrics
    averaged over the point's replicates, and ``trial_key`` = ``point_id``)."""
    x, y = f"{space}/uniform", f"{space}/align"
    _require(history, ["trial_key", "point_id", "step", x, y])
    data = history.dropna(subset=[x, y]).sort_values(["trial_key", "step"])
    if not _averaged(data):
        return data
    data = data.groupby(["point_id", "step"], as_index=False)[[x, y]].mean()
    data["trial_key"] = data["point_id"]
    return data


def _averaged(data: pd.DataFrame) -> bool:
    return data["trial_key"].nunique() > MAX_DETAILED_PATHS


def trajectories(history: pd.DataFrame, df: pd.DataFrame | None = None, space: str = "z") -> Figure:
    """Each trial's path across its evaluations on the alignment–uniformity plane, coloured by
    point_id (hollow marker = first evaluation, filled = last, arrow on the last step); ``df``,
    when given, labels each point with its factor values."""
    x, y = f"{space}/uniform", f"{space}/align"
    data = trajectory_table(history, space)
    averaged = _averaged(history.dropna(subset=[x, y]))
    points = sorted(data["point_id"].unique())
    palette = dict(zip(points, _colors(len(points)), strict=True))

    def draw(target: Axes) -> None:
        paths = list(data.groupby("trial_key", sort=True))
        if len(paths) > MAX_DETAILED_PATHS:
            _draw_paths_fast(target, paths, x, y, palette)
            return
        for _key, path in paths:
            _draw_path(target, path, x, y, palette[path["point_id"].iloc[0]])

    fig = Figure(figsize=(FIG_WIDTH, 5.4), layout="constrained")
    ax = fig.add_subplot()
    draw(ax)
    _plane_frame(ax, data[x].to_numpy(float), data[y].to_numpy(float), draw)
    _label_plane_axes(ax, x, y)
    what = f"training trajectories ({_SPACE_NAMES.get(space, space)})"
    if averaged:
        what += ", mean over replicates per point"
    ax.set_title(_title(df if df is not None else history, what))
    if len(points) <= 20:
        handles = _legend_handles(points, palette, _point_descriptions(df, points))
        fig.legend(handles=handles, loc="outside lower center", ncols=2, fontsize=8)
    return fig


def _draw_path(target: Axes, path: pd.DataFrame, x: str, y: str, colour) -> None:
    """One trial's path: a line, hollow first and filled last marker, an arrow on the last step."""
    px, py = path[x].to_numpy(float), path[y].to_numpy(float)
    target.plot(px, py, color=colour, linewidth=1.2, marker=".", markersize=4, zorder=2)
    target.scatter(px[:1], py[:1], s=40, facecolors="white", edgecolors=[colour], zorder=3)
    target.scatter(px[-1:], py[-1:], s=40, c=[colour], edgecolors="black", zorder=3)
    if len(px) >= 2:
        arrow = {"arrowstyle": "-|>", "color": colour, "lw": 1.2, "shrinkA": 0, "shrinkB": 4}
        target.annotate("", xy=(px[-1], py[-1]), xytext=(px[-2], py[-2]), arrowprops=arrow,
                        zorder=3)  # fmt: skip


def _draw_paths_fast(target: Axes, paths, x: str, y: str, palette: dict) -> None:
    """Many paths at once: one LineCollection and two scatters, no per-path artists."""
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


def _point_descriptions(df: pd.DataFrame | None, points: list) -> dict:
    """point_id -> "factor=value, ..." for the points ``df`` has (empty without factors)."""
    factors = _factors(df, None) if df is not None else []
    if not factors or "point_id" not in df:
        return {}
    first = df.drop_duplicates("point_id").set_index("point_id")
    return {
        point: ", ".join(f"{f}={_fmt(first.at[point, f])}" for f in factors)
        for point in points
        if point in first.index
    }


def _legend_handles(points: list, palette: dict, described: dict) -> list[Line2D]:
    handles = [
        Line2D([], [], color=palette[p], marker="o",
               label=f"{p}: {described[p]}" if p in described else p)
        for p in points
    ]  # fmt: skip
    return [
        *handles,
        Line2D([], [], linestyle="", marker="o", markerfacecolor="white",
               markeredgecolor="black", label="first evaluation"),
        Line2D([], [], linestyle="", marker="o", markerfacecolor="black",
               markeredgecolor="black", label="last evaluation"),
    ]  # fmt: skip
