"""Response surfaces: filled contours of a fitted surface (``analysis.stats.surface``) over two
numeric
factors, the others held at the surface's optimum."""

from __future__ import annotations

import itertools
import re
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from analysis.report.plots._common import (
    _CMAP,
    FIG_WIDTH,
    KNOWN_FACTORS,
    KNOWN_METRICS,
    SMALL_PT,
    _fmt,
    _label,
    _log_ticks,
    _unslug,
)

CAPTION = (
    "Filled contours of the fitted {response} over {factors}, every other factor held at the "
    "surface's optimum; the star marks the predicted optimum and the white dots are the design "
    "points, so trust the surface near the dots rather than far from them. A model that does "
    "not beat the mean gets no contours (report.html draws none for it)."
)


def caption_of(name: str) -> str | None:
    """The caption of ``contours_{response}_{x}_{y}`` (slugs, named back where known); None for
    any other name."""
    match = re.fullmatch(r"contours_(?P<rest>\w+)", name)
    if match is None:
        return None
    response, factors = _split_contours_name(match["rest"])
    return CAPTION.format(response=response, factors=factors)


def _split_contours_name(rest: str) -> tuple[str, str]:
    """(response, "x × y") named back from the slugs after ``contours_``: the first split of the
    words into a response and two known factors, one with a known response first; without two
    known factors, the known response (else the whole tail) and "two numeric factors"."""
    words = rest.split("_")
    found = []
    for i, j in itertools.combinations(range(1, len(words)), 2):
        x = _unslug("_".join(words[i:j]), KNOWN_FACTORS)
        y = _unslug("_".join(words[j:]), KNOWN_FACTORS)
        if x and y:
            response = _unslug("_".join(words[:i]), KNOWN_METRICS)
            found.append((response is None, response or "_".join(words[:i]), x, y))
    if found:
        _, response, x, y = min(found, key=lambda split: split[0])
        return response, f"{_label(x)} × {_label(y)}"
    for i in range(len(words) - 1, 0, -1):
        response = _unslug("_".join(words[:i]), KNOWN_METRICS)
        if response:
            return response, f"two numeric factors ({'_'.join(words[i:])})"
    return rest, "two numeric factors"


def contour_grid(
    surface: Any, x: str, y: str, n: int = 60
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(xs, ys, Z)``: an n × n grid over the design region of numeric factors ``x`` and ``y``
    (geometric spacing for log-scale factors) with every other factor at ``surface.optimum``,
    and ``Z[i, j]`` the surface's predicted mean at ``(xs[j], ys[i])``."""
    xs, ys = (_factor_axis(surface, name, n) for name in (x, y))
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


def _factor_axis(surface: Any, name: str, n: int) -> np.ndarray:
    """n values over a numeric factor's design range, geometric for a log-scale factor."""
    if name not in surface.factors:
        raise ValueError(f"{name!r} is not a factor of the surface ({surface.factors})")
    coding = surface.coding[name]
    if coding.kind != "numeric":
        raise ValueError(f"contours need numeric factors; {name!r} is {coding.kind}")
    low, high = float(coding.low), float(coding.high)
    return np.geomspace(low, high, n) if coding.scale == "log" else np.linspace(low, high, n)


def surface_contours(
    surface: Any, x: str, y: str, n: int = 60, *, name_optimum: bool = True, path: Any = None
) -> Figure:
    """Filled contours of a fitted response surface over numeric factors ``x`` and ``y`` with the
    other factors at the surface's optimum; the optimum is a star and the design points (the
    surface's ``data``, when it has one) are dots. With ``name_optimum`` False (a model that does
    not beat the mean) there is no surface to show: only the design points are drawn, with no
    contour, colour or star, and the title and a note in the axes say why. ``surface`` is
    duck-typed: ``response``, ``factors``, ``coding``, ``optimum`` and ``predict(frame) ->
    [mean, lower, upper]``. ``path`` (a table with columns ``x`` and ``y``: the path of steepest
    ascent or the ridge, :mod:`analysis.findings.direction`) is drawn over the contours, where it
    runs
    inside the axes."""
    xs, ys, Z = contour_grid(surface, x, y, n)
    fig = Figure(figsize=(FIG_WIDTH, 4.8), layout="constrained")
    ax = fig.add_subplot()
    if surface.coding[x].scale == "log":
        ax.set_xscale("log")
    if surface.coding[y].scale == "log":
        ax.set_yscale("log")
    filled = None
    if name_optimum:
        filled = ax.contourf(xs, ys, Z, levels=14, cmap=_CMAP)
        lines = ax.contour(xs, ys, Z, levels=filled.levels[::2], colors="black", linewidths=0.6)
        ax.clabel(lines, fontsize=SMALL_PT, fmt="%.3g")
    else:
        ax.text(0.5, 0.5, "the model does not beat the mean:\nno surface is drawn", ha="center",
                va="center", transform=ax.transAxes, fontsize=10, color="0.3")  # fmt: skip
    _draw_design_points(ax, surface, x, y)
    if name_optimum:
        _draw_optimum(ax, surface.optimum, x, y)
        if path is not None and {x, y} <= set(path.columns):
            ax.plot(path[x], path[y], color="white", linewidth=1.6, marker="o", markersize=3.5,
                    markeredgecolor="black", zorder=3, label="where next (path)")  # fmt: skip
    ax.set_xlim(xs[0], xs[-1])
    ax.set_ylim(ys[0], ys[-1])
    for target, values, name in ((ax.xaxis, xs, x), (ax.yaxis, ys, y)):
        if surface.coding[name].scale == "log":
            _log_ticks(target, float(values[0]), float(values[-1]))
    ax.set_xlabel(_label(x))
    ax.set_ylabel(_label(y))
    ax.set_title(_contours_title(surface, x, y, name_optimum), fontsize=10)
    if filled is not None:
        fig.colorbar(filled, ax=ax, label=f"{surface.response} (predicted mean)")
    fig.legend(loc="outside lower center", ncols=2, fontsize=SMALL_PT)
    return fig


def _draw_design_points(ax: Axes, surface: Any, x: str, y: str) -> None:
    data = getattr(surface, "data", None)
    if isinstance(data, pd.DataFrame) and {x, y} <= set(data.columns):
        ax.scatter(data[x], data[y], s=18, color="white", edgecolors="black", zorder=3,
                   label="design points", clip_on=False)  # fmt: skip


def _draw_optimum(ax: Axes, optimum: dict, x: str, y: str) -> None:
    ax.plot([float(optimum[x])], [float(optimum[y])], linestyle="", marker="*", markersize=16,
            color="gold", markeredgecolor="black", zorder=4, label="optimum",
            clip_on=False)  # fmt: skip


def _contours_title(surface: Any, x: str, y: str, name_optimum: bool) -> str:
    held = [f for f in surface.factors if f not in (x, y)]
    subtitle = ", ".join(f"{f}={_fmt(surface.optimum[f])}" for f in held)
    title = f"fitted {surface.response} over {x} × {y}"
    if not name_optimum:
        title += "\nthe model does not beat the mean: no optimum is named"
    return title + (f"\nothers at optimum: {subtitle}" if subtitle else "")
