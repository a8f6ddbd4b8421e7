"""Several goals at once: filled contours of the overall desirability D (Derringer & Suich;
``analysis.stats.desirability``) over two numeric factors, every other factor at the most desirable
point, beside each response's own contours."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.report.plots._common import (
    _CMAP,
    FIG_WIDTH,
    KNOWN_FACTORS,
    SMALL_PT,
    _label,
    _log_ticks,
    _unslug,
)
from analysis.report.plots._surface_contours import _factor_axis
from analysis.stats.desirability import DesirabilityOptimum, overall

CAPTION = (
    "The overall desirability D of the study file's goals over {factors}, every other factor "
    "at the most desirable point (the star); D is the geometric mean of each goal's "
    "desirability, 0 where any goal is wholly unmet and 1 where every goal is fully met, read "
    "from the fitted surfaces. The white dots are the design points: trust D near them."
)


def caption_of(name: str) -> str | None:
    """The caption of ``desirability_{x}_{y}`` (factor slugs, named back where known)."""
    match = re.fullmatch(r"desirability_(?P<rest>\w+)", name)
    if match is None:
        return None
    words = match["rest"].split("_")
    for i in range(1, len(words)):
        x = _unslug("_".join(words[:i]), KNOWN_FACTORS)
        y = _unslug("_".join(words[i:]), KNOWN_FACTORS)
        if x and y:
            return CAPTION.format(factors=f"{_label(x)} × {_label(y)}")
    return CAPTION.format(factors="two numeric factors")


def desirability_grid(
    found: DesirabilityOptimum, surfaces: dict[str, Any], x: str, y: str, n: int = 60
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(xs, ys, D)``: an n × n grid over the design range of ``x`` and ``y`` (geometric for a
    log-scale factor), every other factor at ``found.point``, and D there."""
    first = surfaces[found.goals[0].metric]
    xs, ys = (_factor_axis(first, name, n) for name in (x, y))
    gx, gy = np.meshgrid(xs, ys)
    frame = pd.DataFrame({name: found.point[name] for name in found.point}, index=range(gx.size))
    frame[x], frame[y] = gx.ravel(), gy.ravel()
    ds = np.column_stack([
        goal.d(surfaces[goal.metric].predict(frame[list(surfaces[goal.metric].coding)])["mean"])
        for goal in found.goals
    ])  # fmt: skip
    grid = overall(ds, [g.importance for g in found.goals]).reshape(gx.shape)
    return xs, ys, grid


def desirability_contours(
    found: DesirabilityOptimum, surfaces: dict[str, Any], x: str, y: str, n: int = 60
) -> Figure:
    """Filled contours of D over numeric factors ``x`` and ``y`` (see the module docstring)."""
    xs, ys, grid = desirability_grid(found, surfaces, x, y, n)
    first = surfaces[found.goals[0].metric]
    fig = Figure(figsize=(FIG_WIDTH, 4.8), layout="constrained")
    ax = fig.add_subplot()
    for name, set_scale in ((x, ax.set_xscale), (y, ax.set_yscale)):
        if first.coding[name].scale == "log":
            set_scale("log")
    filled = ax.contourf(xs, ys, grid, levels=np.linspace(0, 1, 11), cmap=_CMAP)
    lines = ax.contour(xs, ys, grid, levels=filled.levels[1::2], colors="black", linewidths=0.6)
    ax.clabel(lines, fontsize=SMALL_PT, fmt="%.1f")
    data = first.data
    ax.scatter(data[x], data[y], s=18, color="white", edgecolors="black", zorder=3,
               label="design points", clip_on=False)  # fmt: skip
    ax.plot([found.point[x]], [found.point[y]], linestyle="", marker="*", markersize=16,
            color="gold", markeredgecolor="black", zorder=4,
            label=f"most desirable (D = {found.overall:.2f})", clip_on=False)  # fmt: skip
    ax.set_xlim(xs[0], xs[-1])
    ax.set_ylim(ys[0], ys[-1])
    for axis, values, name in ((ax.xaxis, xs, x), (ax.yaxis, ys, y)):
        if first.coding[name].scale == "log":
            _log_ticks(axis, float(values[0]), float(values[-1]))
    ax.set_xlabel(_label(x))
    ax.set_ylabel(_label(y))
    goals = ", ".join(f"{g.metric} {g.goal}" for g in found.goals)
    ax.set_title(f"overall desirability over {x} × {y}\n{goals}", fontsize=10)
    fig.colorbar(filled, ax=ax, label="overall desirability D")
    fig.legend(loc="outside lower center", ncols=2, fontsize=SMALL_PT)
    return fig
