"""What the figures share: labels and names, number formatting, colours, the cell tables (mean,
standard error, count) and the axes of factor levels, plain and logarithmic."""

from __future__ import annotations

import functools
import math
import re
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.ticker import (
    FixedFormatter,
    FixedLocator,
    NullFormatter,
    NullLocator,
    PercentFormatter,
)

from analysis.findings.baselines import baselines_of, counterpart
from analysis.stats.units import is_accuracy, level

_CMAP = "viridis"

# Every figure is at most FIG_WIDTH inches wide and sets no text smaller than SMALL_PT points, so
# that shown 400 CSS px wide (a phone; report.html scales figures to the page) its smallest text
# is SMALL_PT * 400 / (FIG_WIDTH * 72) ≈ 8 px: readable. tests/analysis/report/test_plots.py
# measures it.
FIG_WIDTH = 5.5
SMALL_PT = 8
_TITLE_CHARS = 56  # a title's line at 12 pt across FIG_WIDTH

_LABELS = {
    "temperature": "temperature τ",
    "batch_size": "batch size B",
    "derived.negatives_per_anchor": "negatives per anchor (2B − 2)",
}

_SPACE_NAMES = {"z": "z, projection output", "h": "h, backbone features"}

# Metric and factor names a figure's file name may carry as a slug (see ``_slug``), for captions
# to name them back: every number a trial reports (trainables.metrics.final_metrics) and every
# numeric trial setting a design can vary (trainables.config.TrialConfig);
# tests/analysis/report/test_plots.py checks both lists against trainables.
_GEOMETRY = ("align", "uniform", "effective_rank", "dim_std_min", "dim_std_mean", "zero_rows")
_CLASS_GEOMETRY = ("align_worst_class", "align_class_spread", "align_classes",
                   "uniform_worst_class", "uniform_class_spread", "uniform_classes")  # fmt: skip
_SUBGROUPS = ("", "_worst_class", "_class_gap", "_worst_group", "_group_gap")
# The shift tests' corruption families (trainables.corruption_families.COVERED_BY: images, then
# toy vectors) and severities; tests/analysis/report/test_plots.py checks the families against
# trainables.
_SHIFT_FAMILIES = ("gaussian_noise", "gaussian_blur", "contrast", "jpeg", "occlusion", "noise",
                   "mean_shift")  # fmt: skip
_SHIFT_SEVERITIES = (1, 2, 3, 4, 5)
_PROBE_LEAVES = tuple(f"{p}_top1_{s}" for p in ("knn", "linear") for s in ("h", "z"))
KNOWN_METRICS = (
    *(f"{space}/{name}" for space in ("h", "z") for name in (*_GEOMETRY, *_CLASS_GEOMETRY)),
    *(f"probe/{leaf}{part}" for leaf in _PROBE_LEAVES for part in _SUBGROUPS),
    *(f"shift/{family}/s{k}/{leaf}" for family in _SHIFT_FAMILIES for k in _SHIFT_SEVERITIES
      for leaf in _PROBE_LEAVES),
    *(f"shift/{family}/{leaf}" for family in _SHIFT_FAMILIES for leaf in _PROBE_LEAVES),
    *(f"shift/mean_{leaf}" for leaf in _PROBE_LEAVES),
    "sim/pos_mean", "sim/neg_mean", "sim/neg_q99", "sim/false_negative_rate",
    "sim/hardest_neg_share", "loss/candidates", "loss/candidates_steps",
    "train/loss", "train/lr", "train/examples_seen", "train/steps", "train/examples_per_s",
    "examples_seen", "steps", "resumed_from", "wall_s", "heldout_items",
    *(f"time/{name}" for name in ("train_s", "eval_s", "data_s", "checkpoint_s", "compile_s",
                                  "evidence_s")),
)  # fmt: skip
KNOWN_FACTORS = (
    "temperature", "lam_t", "uniform_t", "align_alpha", "batch_size", "budget_examples",
    "base_lr", "momentum", "weight_decay", "warmup_fraction", "aug_strength", "crop_area_min",
    "cnn_width", "cnn_grid", "feature_dim",
    "projection_hidden", "projection_dim", "knn_k", "knn_temperature", "toy_classes", "toy_dim",
    "toy_spread", "toy_noise", "toy_train_size", "toy_photos_per_item", "image_size",
    "heldout_size", "probe_train_size", "eval_marks", "linear_probe_iters", "collapse_std",
    "data_seed", "seed", "num_workers", "workers", "derived.negatives_per_anchor",
)  # fmt: skip

# What a reader should know of a metric to read it: its direction or meaning.
_METRIC_NOTES = {
    "align": "lower = tighter positives",
    "uniform": "lower = more uniform",
    "effective_rank": "higher = more dimensions in use",
    "false_negative_rate": "the share of anchors whose hardest negative is of their own class",
    "top1": "higher = better features",
    "align_worst_class": "the worst held-out class, lower = tighter positives",
    "uniform_worst_class": "the worst held-out class, lower = more uniform",
    "class_spread": "worst minus best held-out class, lower = more even",
    "classes": "the held-out classes it was measured on",
    "candidates_steps": "the training steps loss/candidates averages over",
    "gap": "overall top-1 minus the worst class or group, lower = more even",
}


# --------------------------------------------------------------------------------------------
# Names and numbers


def _space_caption(prefix: str, name: str, caption: str) -> str | None:
    """``caption`` filled for the figure ``{prefix}_{space}`` (``space`` and ``space_name``);
    None when ``name`` is not such a figure."""
    match = re.fullmatch(rf"{prefix}_(?P<space>\w+)", name)
    if match is None:
        return None
    space = match["space"]
    return caption.format(space=space, space_name=_SPACE_NAMES.get(space, space))


def _label(name: str) -> str:
    return _LABELS.get(name, name)


def _fmt(value: Any) -> str:
    if isinstance(value, float | np.floating):
        if value.is_integer() and abs(value) < 1e7:
            return str(int(value))
        return f"{value:.3g}"
    return str(value)


def _plain(value: float, _pos: Any = None) -> str:
    return _fmt(float(value))


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")


def _title(df: pd.DataFrame | None, text: str) -> str:
    """``text`` after the study's name, each line wrapped to fit a figure FIG_WIDTH wide."""
    study = df.attrs.get("study") if df is not None else None
    text = f"{study}: {text}" if study else text
    return "\n".join(textwrap.fill(line, _TITLE_CHARS) for line in text.split("\n"))


def _metric_note(metric: str) -> str:
    """The metric's name, with its direction or meaning in brackets when known."""
    leaf = metric.rsplit("/", 1)[-1]
    if leaf.endswith("_class_spread"):
        leaf = "class_spread"
    elif "_top1_" in leaf:
        leaf = "gap" if leaf.endswith("_gap") else "top1"
    note = _METRIC_NOTES.get(leaf)
    return f"{metric} ({note})" if note else metric


def _unslug(slug: str, names: tuple[str, ...]) -> str | None:
    """The name among ``names`` whose slug is ``slug``, or None."""
    return _slugs(names).get(slug)


@functools.cache
def _slugs(names: tuple[str, ...]) -> dict[str, str]:
    return {_slug(name): name for name in reversed(names)}


# --------------------------------------------------------------------------------------------
# Columns of a results frame


def _require(df: pd.DataFrame, columns: Sequence[str]) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise KeyError(f"missing column(s) {missing}")


def _has(df: pd.DataFrame | None, *columns: str) -> bool:
    return df is not None and all(c in df.columns and df[c].notna().any() for c in columns)


def _varies(df: pd.DataFrame, column: str) -> bool:
    return column in df.columns and df[column].nunique(dropna=True) >= 2


def _factors(df: pd.DataFrame, factors: Sequence[str] | None) -> list[str]:
    names = list(factors) if factors is not None else list(df.attrs.get("factors") or [])
    return [f for f in names if _varies(df, f)]


def _is_numeric(values: pd.Series | Sequence[Any]) -> bool:
    series = pd.Series(values)
    return pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)


def _binned(values: pd.Series, max_levels: int) -> pd.Series:
    """The factor's values, or for a numeric factor with more than ``max_levels`` distinct values
    (a Latin hypercube's continuous levels) the median of each value's quantile bin."""
    if not _was_binned(values, max_levels):
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


# --------------------------------------------------------------------------------------------
# Colours


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


# --------------------------------------------------------------------------------------------
# Axes of factor levels


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
    set_ticks = ax.set_xticks if axis == "x" else ax.set_yticks
    if categorical:
        rotate = any(len(str(v)) > 6 for v in levels) and axis == "x"
        set_ticks(positions, labels=[str(v) for v in levels], rotation=30 if rotate else 0)
        return
    log = _use_log(levels) if log is None else log
    if log:
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    target = ax.xaxis if axis == "x" else ax.yaxis
    if explicit and _well_apart(positions, log):
        set_ticks(positions, labels=[_fmt(float(v)) for v in levels])
        target.set_minor_locator(NullLocator())
    elif log:
        _log_ticks(target, float(np.min(positions)), float(np.max(positions)), ends=False)


def _well_apart(positions: np.ndarray, log: bool) -> bool:
    """At most 8 positions, none closer than 6% of their range (in log space if ``log``)."""
    spread = np.log(positions) if log else positions
    gaps = np.diff(np.sort(spread)) / (np.ptp(spread) or 1.0)
    return len(positions) <= 8 and (gaps.size == 0 or gaps.min() >= 0.06)


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
    # the labels as text, not a function of this package: a figure that carries a function
    # pickles a reference to it, and a drawing process that unpickles it then imports the
    # figure package and the analysis (a second and a half, analysis.report.plots.save_figures)
    target.set_major_formatter(FixedFormatter([_plain(t) for t in sorted(ticks)]))
    target.set_minor_locator(NullLocator())
    target.set_minor_formatter(NullFormatter())


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


# --------------------------------------------------------------------------------------------
# Panels of lines with error bars (main effects, interactions, probe accuracy)


def _grid(count: int, ncols_max: int, panel: tuple[float, float]) -> tuple[Figure, list[Axes]]:
    ncols = max(1, min(count, ncols_max, math.floor(FIG_WIDTH / panel[0])))
    nrows = math.ceil(count / ncols)
    width = FIG_WIDTH
    fig = Figure(figsize=(width, panel[1] * nrows + 0.8), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, sharey=True).ravel().tolist()
    for extra in axes[count:]:
        extra.set_visible(False)
    return fig, axes[:count]


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


# the study's baselines (analysis.findings.baselines) as reference lines on a probe's axis
_BASELINE_STYLES = {"raw": ":", "random_init": "--", "supervised": "-."}
_BASELINE_NAMES = {"raw": "raw input", "random_init": "random-init", "supervised": "supervised"}


def _percent_axis(ax: Axes, metric: str) -> None:
    """An accuracy's axis in percent, as the headline and the reference lines speak of it."""
    if is_accuracy(metric):
        ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=None))


def _draw_baselines(ax: Axes, df: pd.DataFrame | None, metric: str) -> int:
    """A labelled horizontal line for each of the study's baselines that measured ``metric``
    (the raw input answers a ``_z`` probe with its ``_h`` score), on an axis in percent for an
    accuracy; returns how many were drawn."""
    _percent_axis(ax, metric)
    drawn = 0
    for kind, entry in baselines_of(df if df is not None else pd.DataFrame()).items():
        metrics = entry.get("metrics") or {}
        name = counterpart(kind, metric, metrics)
        if name is None:
            continue
        value = float(metrics[name])
        label = f"{_BASELINE_NAMES.get(kind, kind)} {level(metric, value)}"
        ax.axhline(value, color="0.35", linestyle=_BASELINE_STYLES.get(kind, "--"),
                   linewidth=1.2, label=label)  # fmt: skip
        drawn += 1
    return drawn
