"""Subgroups: each probe's top-1 on its worst held-out class (or group) and the gap to its
overall top-1, and the card's Subgroups section."""

from __future__ import annotations

import pandas as pd

from analysis.report.evidence.cells import (
    NOT_MEASURED,
    PROBES,
    _factors,
    _finished,
    _fmt,
    _grouped,
    _mean_range,
    _num,
    _point_label,
)
from analysis.report.evidence.geometry import _class_geometry
from analysis.report.evidence.table import Table

# Per-class and per-group probe accuracy, <probe>_<suffix>: gap = overall top-1 - worst.
SUBGROUP_SUFFIXES = ("worst_class", "class_gap", "worst_group", "group_gap")


def subgroup_table(df: pd.DataFrame) -> Table:
    """Per probe with per-class (or per-group) results: its overall top-1 and each recorded
    ``<probe>_<suffix>`` of :data:`SUBGROUP_SUFFIXES`, as "mean (range)" over finished trials."""
    done = _finished(df)
    suffixes = [x for x in SUBGROUP_SUFFIXES if any(_values(done, f"{p}_{x}") for p in PROBES)]
    rows = []
    for probe in PROBES:
        cells = [_num(done, f"{probe}_{x}") for x in suffixes]
        if any(_values(done, f"{probe}_{x}") for x in suffixes):
            rows.append((probe, _mean_range(_num(done, probe)), *map(_mean_range, cells)))
    return Table(("probe", "overall", *(x.replace("_", " ") for x in suffixes)), tuple(rows))


def _values(df: pd.DataFrame, col: str) -> bool:
    value = _num(df, col)
    return value is not None and value.notna().any()


def _largest_gap(done: pd.DataFrame, attrs: dict, kind: str) -> str:
    """The design point with the largest mean ``<probe>_<kind>_gap`` over its replicates."""
    key = done["point_id"] if "point_id" in done.columns else pd.Series("all", index=done.index)
    best: tuple[float, str, object] | None = None
    for probe in PROBES:
        gap = _num(done, f"{probe}_{kind}_gap")
        means = gap.groupby(key).mean().dropna() if gap is not None else pd.Series(dtype=float)
        if len(means) and (best is None or means.max() > best[0]):
            best = (float(means.max()), probe, means.idxmax())
    if best is None:
        return ""
    where = _point_label(done, best[2], _factors(attrs)) if "point_id" in done.columns else "all"
    return f" Largest {kind} gap: {_fmt(round(best[0], 4))} ({best[1]}) at {where}."


def subgroups(df: pd.DataFrame, attrs: dict) -> str | Table:
    done = _finished(df)
    table = subgroup_table(df)
    geometry = (
        "Per-class alignment and uniformity: see Geometry (*_worst_class, *_class_spread)."
        if _class_geometry(done)
        else f"Per-class alignment and uniformity: {NOT_MEASURED}."
    )
    if "group gap" in table.columns or "worst group" in table.columns:
        groups = ""
    elif _grouped(df).any():
        groups = f" Per-group retrieval: {NOT_MEASURED} (grouped data, no *_worst_group column)."
    else:
        groups = " Per-group retrieval: no groups in the data."
    if not table.rows:
        if not _class_geometry(done):
            return (
                f"{NOT_MEASURED}: only global averages are recorded "
                "(no per-class or per-group metrics)."
            )
        return f"Per-class retrieval: {NOT_MEASURED} (no probe/*_worst_class column). {geometry}"
    caption = (
        "Top-1 of each probe on the held-out class (or group, where the data have groups) where "
        "it is lowest, and the gap = overall top-1 minus that worst class (group); mean (range) "
        f"over {len(done)} finished trials.{_largest_gap(done, attrs, 'class')}"
        f"{_largest_gap(done, attrs, 'group')} {geometry}{groups}"
    )
    return Table(table.columns, table.rows, caption)
