"""Per-class geometry beside the global value: at each design point, alignment and uniformity
over all held-out positive pairs, in the worst held-out class, and the range from the best class
to the worst (``{space}/{metric}_worst_class`` and ``_class_spread``), mean over replicates."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from analysis.report.plots._common import (
    FIG_WIDTH,
    SMALL_PT,
    _has,
    _require,
    _space_caption,
    _title,
)
from analysis.report.plots._trajectories import _point_descriptions

CAPTION = (
    "Per-class geometry of the {space} features ({space_name}) at each design point: alignment "
    "(above) and uniformity (below), lower is better for both. The circle is the global value "
    "over all held-out positive pairs, the bar runs from the best class (worst minus spread) to "
    "the worst class (triangle, ±1 SE over the point's replicates); look for points "
    "whose global value looks good while the worst class sits far above it (a long bar is a "
    "class the average hides), and compare alignment only between points that share an "
    "augmentation pipeline. A class's own uniformity sits above the global value wherever "
    "classes form clusters, as they should, so read the uniformity bar's length (how unevenly "
    "the classes spread), not its distance from the circle."
)
METRICS = ("align", "uniform")
_NAMES = {"align": "alignment", "uniform": "uniformity"}


def caption_of(name: str) -> str | None:
    """The caption of ``class_spread_{space}``; None for any other name."""
    return _space_caption("class_spread", name, CAPTION)


def class_spread_table(df: pd.DataFrame, space: str = "z", metric: str = "align") -> pd.DataFrame:
    """Columns ``point_id``, ``global_mean``, ``global_se``, ``worst_mean``, ``worst_se``,
    ``spread_mean``, ``spread_se``, ``best_mean``, ``n``, one row per design point (sorted; each
    trial its own point in a frame without ``point_id``), over the trials with both
    ``{space}/{metric}_worst_class`` and ``_class_spread``: their means and standard errors
    (sd / sqrt(n), NaN when n = 1), the global ``{space}/{metric}`` likewise (NaN where it is not
    recorded), and ``best_mean`` the mean of worst minus spread (the best class)."""
    worst, spread = f"{space}/{metric}_worst_class", f"{space}/{metric}_class_spread"
    _require(df, [worst, spread])
    data = df.dropna(subset=[worst, spread])
    points = data["point_id"] if "point_id" in data else pd.Series(data.index, index=data.index)
    values = pd.DataFrame(
        {
            "global": data.get(f"{space}/{metric}", np.nan),
            "worst": data[worst],
            "spread": data[spread],
            "best": data[worst] - data[spread],
        },
        index=data.index,
    ).astype(float)
    grouped = values.groupby(points.to_numpy(), sort=True)
    means, sds, n = grouped.mean(), grouped.std(), grouped["worst"].count()
    table = pd.DataFrame({"point_id": means.index.to_numpy()})
    for name in ("global", "worst", "spread"):
        table[f"{name}_mean"] = means[name].to_numpy()
        table[f"{name}_se"] = np.where(n >= 2, sds[name] / np.sqrt(n), np.nan)
    table["best_mean"] = means["best"].to_numpy()
    table["n"] = n.to_numpy().astype(int)
    return table


def class_spread(df: pd.DataFrame, space: str = "z") -> Figure:
    """Alignment and uniformity of ``space`` per design point: global value (circle), worst class
    (triangle ± SE) and the best-to-worst class range (bar); a panel whose per-class columns are
    not recorded says so."""
    if not any(_has(df, f"{space}/{m}_worst_class", f"{space}/{m}_class_spread") for m in METRICS):
        raise KeyError(f"no {space}/*_worst_class and {space}/*_class_spread columns")
    fig = Figure(figsize=(FIG_WIDTH, 7.8), layout="constrained")
    axes = fig.subplots(2, 1)
    for ax, metric in zip(axes, METRICS, strict=True):
        ax.set_title(f"{space}/{metric}  ({_NAMES[metric]}, lower = better)", fontsize=10)
        ax.grid(alpha=0.3, axis="y")
        if not _has(df, f"{space}/{metric}_worst_class", f"{space}/{metric}_class_spread"):
            ax.text(0.5, 0.5, "not recorded", ha="center", va="center", transform=ax.transAxes)
            continue
        _draw_metric(ax, df, space, metric)
    fig.suptitle(
        _title(df, f"per-class {space} geometry by design point  (mean over replicates)"),
        fontsize=11,
    )
    return fig


def _draw_metric(ax: Axes, df: pd.DataFrame, space: str, metric: str) -> None:
    table = class_spread_table(df, space, metric)
    xs = np.arange(len(table), dtype=float)
    ax.vlines(xs, table["best_mean"], table["worst_mean"], color="tab:blue", alpha=0.45,
              linewidth=6, label="best to worst class")  # fmt: skip
    ax.errorbar(xs, table["worst_mean"], yerr=table["worst_se"], marker="^", linestyle="none",
                color="tab:red", capsize=3, label="worst class ± SE")  # fmt: skip
    if table["global_mean"].notna().any():
        ax.plot(xs, table["global_mean"], marker="o", linestyle="none", color="black",
                label="global (all pairs)")  # fmt: skip
    described = _point_descriptions(df, table["point_id"].tolist())
    labels = [
        f"{p}\n" + described[p].replace(", ", "\n") if p in described else str(p)
        for p in table["point_id"].tolist()
    ]
    many = len(labels) > 8
    ax.set_xticks(xs, labels=labels, rotation=60 if many else 0, fontsize=SMALL_PT,
                  ha="right" if many else "center")  # fmt: skip
    ax.set_xlim(-0.6, len(xs) - 0.4)
    ax.set_ylabel(f"{space}/{metric}")
    ax.legend(fontsize=SMALL_PT)
