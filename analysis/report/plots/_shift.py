"""Shift tests: probe top-1 accuracy against corruption severity (0 = clean), one panel per
corruption family and space, one line per design point, solid where the point's training
augmentation covers the family and dashed where it does not (the evidence for release-gate
item 12, see ``analysis.report.evidence.shift``)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from analysis.report.evidence.shift import HOLD_UP_DROP
from analysis.report.plots._common import (
    _SPACE_NAMES,
    FIG_WIDTH,
    SMALL_PT,
    _colors,
    _fmt,
    _percent_axis,
    _title,
)
from analysis.report.plots._trajectories import _point_descriptions
from trainables.corruption_families import COVERED_BY, covered

CAPTION = (
    "{probe} probe top-1 accuracy on the held-out split against corruption severity (0 = clean), "
    "one row of panels per corruption family, h (backbone features) left and z (projection "
    "output) right where both are recorded, one line per design point (mean ± SE over its "
    "replicates): solid where "
    "the point's training augmentation covers the family "
    "(trainables.corruption_families.COVERED_BY), "
    "dashed where it does not. Look for solid lines that fall: an invariance the augmentation "
    "implies but did not deliver (release-gate item 12 fails when the mean drop over severities "
    f"exceeds {_fmt(HOLD_UP_DROP)} at a point); flat dashed lines are robustness beyond what was "
    "trained, falling ones are corruptions the invariance claim must leave out."
)
_PROBE_NAMES = {"knn": "k-NN", "linear": "Linear"}
_SEVERITY = re.compile(r"shift/(?P<family>[^/]+)/s(?P<severity>\d+)/(?P<leaf>\w+)")
_STYLES = {True: "-", False: "--", None: ":"}


def caption_of(name: str) -> str | None:
    """The caption of ``shift_{probe}``; None for any other name."""
    match = re.fullmatch(r"shift_(?P<probe>\w+)", name)
    if match is None:
        return None
    return CAPTION.format(probe=_PROBE_NAMES.get(match["probe"], match["probe"]))


def shift_families(df: pd.DataFrame, probe: str = "knn", space: str = "h") -> dict[str, list[int]]:
    """family -> its severities with a ``shift/<family>/s<k>/{probe}_top1_{space}`` column, the
    families in ``trainables.corruption_families.COVERED_BY`` order (unknown ones after, by
    name)."""
    leaf = f"{probe}_top1_{space}"
    found: dict[str, list[int]] = {}
    for col in df.columns:
        match = _SEVERITY.fullmatch(str(col))
        if match and match["leaf"] == leaf and df[col].notna().any():
            found.setdefault(match["family"], []).append(int(match["severity"]))
    if not found:
        return {}
    order = {family: i for i, family in enumerate(COVERED_BY)}
    return {f: sorted(found[f]) for f in sorted(found, key=lambda f: (order.get(f, len(order)), f))}


def shift_table(df: pd.DataFrame, probe: str = "knn", space: str = "h") -> pd.DataFrame:
    """Columns ``point_id``, ``augmentation``, ``family``, ``covered``, ``severity``, ``mean``,
    ``se``, ``n``: per design point (each trial its own point without ``point_id``) and family
    (:func:`shift_families`), top-1 at severity 0 (clean: ``probe/{probe}_top1_{space}``) and
    at each severity k (``shift/<family>/s<k>/{probe}_top1_{space}``), mean over the trials
    with a value, se = sd / sqrt(n) (NaN when n = 1). ``covered``: whether the point's
    ``augmentation`` trains for the family (``trainables.corruption_families.covered``); None
    when the point has no augmentation recorded or the family is not in ``COVERED_BY``."""
    clean = f"probe/{probe}_top1_{space}"
    columns = ["point_id", "augmentation", "family", "covered", "severity", "mean", "se", "n"]
    families = shift_families(df, probe, space)
    if clean not in df or not families:
        return pd.DataFrame(columns=columns)
    points = df["point_id"] if "point_id" in df else pd.Series(df.index, index=df.index)
    rows = []
    for point in sorted(points.unique()):
        mine = df[points == point]
        aug = mine["augmentation"].dropna() if "augmentation" in mine else pd.Series(dtype=str)
        augmentation = str(aug.iloc[0]) if len(aug) else None
        for family, severities in families.items():
            known = augmentation is not None and family in COVERED_BY
            cover = bool(covered(augmentation, family)) if known else None
            for severity in (0, *severities):
                col = clean if severity == 0 else f"shift/{family}/s{severity}/{probe}_top1_{space}"
                values = pd.to_numeric(mine[col], errors="coerce").dropna()
                n = len(values)
                se = float(values.std() / np.sqrt(n)) if n >= 2 else np.nan
                mean = float(values.mean()) if n else np.nan
                rows.append((point, augmentation, family, cover, severity, mean, se, n))
    table = pd.DataFrame(rows, columns=columns)
    return table[table["n"] > 0].reset_index(drop=True)


def shift(df: pd.DataFrame, probe: str = "knn") -> Figure:
    """One panel per corruption family (rows) and space with shift tests (columns, h then z):
    :func:`shift_table` as one line per design point against severity, solid where the point's
    augmentation covers the family, dashed where not, dotted where coverage is unknown."""
    spaces = [s for s in ("h", "z") if shift_families(df, probe, s)]
    if not spaces:
        raise KeyError(f"no shift/<family>/s<k>/{probe}_top1_h or _z column with a value")
    families = list(dict.fromkeys(f for s in spaces for f in shift_families(df, probe, s)))
    points = sorted(
        (df["point_id"] if "point_id" in df else pd.Series(df.index, dtype=object)).unique()
    )
    height = 1.9 * len(families) + 1.4 + 0.18 * len(points)  # the legend: a line per point
    fig = Figure(figsize=(FIG_WIDTH, height), layout="constrained")
    grid = fig.subplots(len(families), len(spaces), squeeze=False, sharex=True, sharey=True)
    axes = np.asarray(grid).T  # axes[space][family]
    palette = dict(zip(points, _colors(len(points)), strict=True))
    coverage: set = set()
    for row, space in enumerate(spaces):
        table = shift_table(df, probe, space)
        coverage |= set(table["covered"])
        for col, family in enumerate(families):
            ax = axes[row, col]
            _draw_family(ax, table[table["family"] == family], palette)
            ax.set_title(f"{family}  ({space})", fontsize=9)
            _percent_axis(ax, f"probe/{probe}_top1_{space}")
            ax.grid(alpha=0.3)
        axes[row, -1].set_xlabel(f"severity (0 = clean)\n{_SPACE_NAMES[space]}")
    for col in range(len(families)):
        axes[0, col].set_ylabel(f"{probe} top-1")
    handles = _legend_handles(df, points, palette, coverage)
    fig.legend(handles=handles, loc="outside lower center", ncols=1, fontsize=SMALL_PT)
    fig.suptitle(_title(df, f"{probe} probe top-1 under corruption\n(mean ± SE over replicates)"))
    return fig


def _draw_family(ax: Axes, table: pd.DataFrame, palette: dict) -> None:
    if table.empty:
        ax.text(0.5, 0.5, "not recorded", ha="center", va="center", transform=ax.transAxes)
        return
    for point, line in table.groupby("point_id", sort=True):
        line = line.sort_values("severity")
        cover = line["covered"].iloc[0]
        ax.errorbar(line["severity"], line["mean"], yerr=line["se"], marker="o", markersize=3,
                    capsize=2, color=palette[point], linestyle=_STYLES[cover],
                    label=str(point))  # fmt: skip
    ax.set_xticks(sorted(table["severity"].unique()))


_STYLE_LABELS = {True: "covered by the training augmentation", False: "not covered",
                 None: "coverage unknown"}  # fmt: skip


def _legend_handles(df: pd.DataFrame, points: list, palette: dict, coverage: set) -> list[Line2D]:
    """One entry per design point (its colour), then one per line style drawn."""
    described = _point_descriptions(df, points)
    handles = [
        Line2D([], [], color=palette[p], marker="o",
               label=f"{p}: {described[p]}" if p in described else str(p))
        for p in points
    ]  # fmt: skip
    styles = [
        Line2D([], [], color="black", linestyle=_STYLES[cover], label=label)
        for cover, label in _STYLE_LABELS.items()
        if cover in coverage
    ]
    return [*handles, *styles]
