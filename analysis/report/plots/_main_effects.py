"""Main effects: the response's mean at each level of each factor, with its standard error over
the trials at that level (replicates included)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from analysis.report.plots._common import (
    _binned,
    _cells,
    _draw_baselines,
    _factors,
    _grid,
    _label,
    _level_axis,
    _positions,
    _require,
    _title,
    _was_binned,
)
from analysis.stats.aliases import alias_map

CAPTION = (
    "One panel per factor: the response's mean at each level with ±1 standard error over the "
    "trials at that level, the trials themselves in grey; a steep line means the factor moves the "
    "response, and a difference smaller than the error bars is within noise; grey horizontal lines "
    "are the study's baselines for that response (the raw input, a random-init encoder)."
)


def caption_of(name: str) -> str | None:
    """The caption of ``main_effects``; None for any other name."""
    return CAPTION if name == "main_effects" else None


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


def main_effects(df: pd.DataFrame, response: str, factors: Sequence[str] | None = None) -> Figure:
    """One panel per factor: the response's mean at each level, error bars ±1 standard error
    over the trials at that level (replicates included), with the trials themselves in grey."""
    names = _factors(df, factors)
    if not names:
        raise ValueError("no varied factors to draw (pass factors= or set df.attrs['factors'])")
    fig, axes = _grid(len(names), 2, (2.75, 2.9))
    aliases = alias_map(df)  # a fraction: each panel is its factor's and its aliases' sum
    for ax, factor in zip(axes, names, strict=True):
        _draw_main_effect(ax, df, response, factor)
        if aliases.get(factor):
            ax.set_xlabel(f"{_label(factor)}\n= {' = '.join(aliases[factor])} (aliased)",
                          fontsize=8)  # fmt: skip
    axes[0].set_ylabel(response)
    axes[0].legend(fontsize=8)
    fig.suptitle(
        _title(df, f"main effects on {response}\n(error bars ±1 SE over the trials at a level)"),
        fontsize=11,
    )
    return fig


def _draw_main_effect(ax: Axes, df: pd.DataFrame, response: str, factor: str) -> None:
    """One factor's panel: the trials in grey, the mean ± SE per level on top."""
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
    ax.errorbar(positions, table["mean"], yerr=table["se"], marker="o", capsize=4,
                color="tab:blue", linestyle="none" if categorical else "-", zorder=2,
                label="mean ± SE")  # fmt: skip
    _draw_baselines(ax, df, response)
    _level_axis(ax, levels, explicit=not _was_binned(df[factor], 8))
    ax.margins(x=0.12)
    ax.set_xlabel(_label(factor))
    ax.grid(alpha=0.3)
