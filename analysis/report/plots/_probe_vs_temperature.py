"""Probe accuracy against temperature: the k-NN or linear probe's top-1 accuracy on h and on z,
one line per batch size, mean ± SE over replicates."""

from __future__ import annotations

import re

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from analysis.report.plots._common import (
    _SPACE_NAMES,
    FIG_WIDTH,
    _draw_baselines,
    _draw_lines,
    _fmt,
    _has,
    _label,
    _require,
    _title,
    _varies,
    _was_binned,
)
from analysis.report.plots._interactions import interaction_table
from analysis.report.plots._main_effects import main_effect_table

CAPTION = (
    "{probe} probe top-1 accuracy against temperature τ (log axis) on h (backbone features, "
    "above) and z (projection output, below), mean ± SE over replicates, one line per batch "
    "size; look "
    "for the temperature where accuracy peaks, whether the peak moves with batch size, and how far "
    "h and z differ; grey lines are the study's baselines (raw input dotted, random-init encoder "
    "dashed, supervised dash-dotted), the levels a trained representation has to clear."
)
_PROBE_NAMES = {"knn": "k-NN", "linear": "Linear"}


def caption_of(name: str) -> str | None:
    """The caption of ``probe_vs_temperature_{probe}``; None for any other name."""
    match = re.fullmatch(r"probe_vs_temperature_(?P<probe>\w+)", name)
    if match is None:
        return None
    return CAPTION.format(probe=_PROBE_NAMES.get(match["probe"], match["probe"]))


def probe_table(df: pd.DataFrame, probe: str = "knn", space: str = "h") -> pd.DataFrame:
    """Columns ``temperature``, ``batch_size`` (only when batch size varies), ``mean``, ``se``,
    ``n``: ``probe/{probe}_top1_{space}`` over the replicates of each cell. Many distinct
    temperatures are binned by quantile into 8 levels, many batch sizes into 6."""
    column = f"probe/{probe}_top1_{space}"
    if _varies(df, "batch_size"):
        return interaction_table(df, column, "temperature", "batch_size", max_lines=6)
    table = main_effect_table(df, column, "temperature", max_levels=8)
    return table.rename(columns={"level": "temperature"})


def probe_vs_temperature(df: pd.DataFrame, probe: str = "knn") -> Figure:
    """Probe accuracy (``probe/{probe}_top1_h`` and ``_z``, mean ± SE over replicates) against
    temperature on a log axis, one line per batch size (one line when batch size is fixed)."""
    _require(df, ["temperature"])
    columns = {space: f"probe/{probe}_top1_{space}" for space in ("h", "z")}
    if not any(_has(df, c) for c in columns.values()):
        raise KeyError(f"no probe/{probe}_top1_h or probe/{probe}_top1_z column")
    fig = Figure(figsize=(FIG_WIDTH, 6.6), layout="constrained")
    axes = fig.subplots(2, 1, sharex=True, sharey=True)
    for ax, (space, column) in zip(axes, columns.items(), strict=True):
        ax.set_title(f"{column}  ({_SPACE_NAMES[space]})", fontsize=10)
        ax.set_ylabel(f"{probe} probe top-1")
        ax.grid(alpha=0.3)
        if not _has(df, column):
            ax.text(0.5, 0.5, "not recorded", ha="center", va="center", transform=ax.transAxes)
            continue
        _draw_probe(ax, df, probe, space)
    axes[-1].set_xlabel(_label("temperature"))
    fig.suptitle(_title(df, f"{probe} probe accuracy vs temperature  (mean ± SE over replicates)"))
    return fig


def _draw_probe(ax: Axes, df: pd.DataFrame, probe: str, space: str) -> None:
    """One space's panel: ``probe_table`` as a line per batch size, or one line for all trials."""
    table = probe_table(df, probe, space)
    log = bool((df["temperature"].dropna() > 0).all())
    explicit = not _was_binned(df["temperature"], 8)
    if "batch_size" in table.columns:
        sign = "≈" if _was_binned(df["batch_size"], 6) else "="
        _draw_lines(ax, table, "temperature", "batch_size", lambda v: f"B {sign} {_fmt(v)}",
                    log=log, explicit=explicit)  # fmt: skip
    else:
        _draw_lines(ax, table, "temperature", None, lambda v: "all trials", log=log,
                    explicit=explicit)  # fmt: skip
    _draw_baselines(ax, df, f"probe/{probe}_top1_{space}")
    ax.legend(fontsize=8)
