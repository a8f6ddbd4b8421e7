"""Two-factor interactions: the mean response against one factor's levels, one line per level of
another, with standard errors over each cell's replicates."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from analysis.report.plots._common import (
    FIG_WIDTH,
    SMALL_PT,
    _binned,
    _cells,
    _draw_lines,
    _factors,
    _fmt,
    _grid,
    _label,
    _percent_axis,
    _require,
    _title,
    _was_binned,
)

CAPTION = (
    "One panel per pair of factors: the mean response against the first factor, one line per "
    "level of the second, ±1 standard error over each cell's replicates; parallel lines mean the "
    "two factors act independently, lines that converge, diverge or cross mean the effect of one "
    "depends on the level of the other."
)


def caption_of(name: str) -> str | None:
    """The caption of ``interactions``; None for any other name."""
    return CAPTION if name == "interactions" else None


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


def interactions(df: pd.DataFrame, response: str, factors: Sequence[str] | None = None) -> Figure:
    """For each pair of factors, the mean response against the first factor's levels with one
    line per level of the second; error bars ±1 SE over each cell's replicates."""
    names = _factors(df, factors)
    pairs = list(itertools.combinations(names, 2))
    if not pairs:
        raise ValueError("an interaction plot needs at least two varied factors")
    fig, axes = _grid(len(pairs), 1, (FIG_WIDTH, 3.4))
    for ax, (first, second) in zip(axes, pairs, strict=True):
        _draw_interaction(ax, df, response, first, second)
        _percent_axis(ax, response)
    axes[0].set_ylabel(response)
    fig.suptitle(
        _title(df, f"interactions on {response}\n(error bars ±1 SE over each cell's replicates)"),
        fontsize=11,
    )
    return fig


def _draw_interaction(ax: Axes, df: pd.DataFrame, response: str, first: str, second: str) -> None:
    """One pair's panel: a line per level of ``second`` (≈ when its levels are bin medians)."""
    table = interaction_table(df, response, first, second)
    sign = "≈" if _was_binned(df[second], 4) else "="
    _draw_lines(
        ax,
        table,
        first,
        second,
        lambda v: f"{_label(second)} {sign} {_fmt(v)}",
        explicit=not _was_binned(df[first], 8),
    )
    ax.set_title(f"{first} × {second}", fontsize=10)
    ax.set_xlabel(_label(first))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=SMALL_PT)
