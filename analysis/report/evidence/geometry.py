"""Representation geometry: global and per-class alignment and uniformity in h and z, the
no-information flag for a class, and the card's Geometry section."""

from __future__ import annotations

import pandas as pd

from analysis.report.evidence.cells import NOT_MEASURED, _finished, _fmt, _num, _range
from analysis.report.evidence.table import Table

SPACES = {"h": "h (encoder output)", "z": "z (projection-head output)"}
GEOMETRY = ("align", "uniform", "effective_rank", "dim_std_min", "dim_std_mean")
# Per held-out class geometry, {h,z}/<name>: the worst class (the highest value: alignment and
# uniformity are both lower-is-better) and the spread (highest minus lowest class).
CLASS_GEOMETRY = ("align_worst_class", "align_class_spread", "uniform_worst_class",
                  "uniform_class_spread")  # fmt: skip
# Alignment (Wang & Isola 2020: the mean squared distance between the normalised features of a
# positive pair) of two independent uniform points on the unit sphere: E‖x − y‖² = 2 − 2E[x·y]
# = 2. A class at or above it has positives no closer than unrelated inputs.
NO_INFORMATION_ALIGNMENT = 2.0


def geometry(df: pd.DataFrame, attrs: dict) -> str | Table:
    done = _finished(df)
    rows = []
    for m in (*GEOMETRY, *CLASS_GEOMETRY):
        h, z = _num(done, f"h/{m}"), _num(done, f"z/{m}")
        if h is not None or z is not None:
            rows.append((m, *_mean_and_range(h), *_mean_and_range(z)))
    for m in ("sim/pos_mean", "sim/neg_mean", "sim/neg_q99"):
        if m in done.columns:
            rows.append((m, "-", "-", *_mean_and_range(_num(done, m))))
    if not rows or done.empty:
        return f"{NOT_MEASURED}: no finished trial records geometry metrics."
    caption = (
        f"Held-out positive pairs, {len(done)} finished trials; alignment and uniformity use one "
        "fixed protocol (α = 2, t = 2) whatever the training t; sim/* are cosines in z. "
        "Neighbourhood and class structure: see the kNN probes (Transfer)"
    )
    if _class_geometry(done):
        caption += (
            " and the per-class rows: *_worst_class is the held-out class with the highest "
            "(worst) value among the classes measured"
            + _classes_measured(done)
            + ", *_class_spread the highest minus the lowest class (not measured with fewer than "
            "two), so a global "
            "average can hide a class the spread exposes. Alignment compares only across "
            "trials that share an augmentation pipeline: it measures the positives that "
            "pipeline makes (Wang & Isola 2020)" + _no_information_flag(done)
        )
    else:
        caption += f"; per-class alignment and uniformity: {NOT_MEASURED}"
    return Table(("metric", "h mean", "h range", "z mean", "z range"), tuple(rows), caption + ".")


def _classes_measured(done: pd.DataFrame) -> str:
    """' (on k classes: ...)': how many classes the per-class geometry covered, when recorded
    (a class needs one held-out row for alignment and two for uniformity)."""
    parts = []
    for space in SPACES:
        for m in ("align", "uniform"):
            count = _num(done, f"{space}/{m}_classes")
            if count is not None and count.notna().any():
                parts.append(f"{space} {m} {_range(count)}")
    if not parts:
        return ""
    return f" (classes measured per trial: {'; '.join(parts)})"


def _class_geometry(done: pd.DataFrame) -> dict[str, pd.Series]:
    """The per-class geometry columns ({h,z}/CLASS_GEOMETRY) with a value in some trial."""
    found = {}
    for name in (f"{space}/{m}" for space in SPACES for m in CLASS_GEOMETRY):
        value = _num(done, name)
        if value is not None and value.notna().any():
            found[name] = value
    return found


def _no_information_flag(done: pd.DataFrame) -> str:
    """'. FLAG: ...' naming the trials whose worst class aligns no better than unrelated points."""
    flags = []
    for space in SPACES:
        worst = _num(done, f"{space}/align_worst_class")
        n = 0 if worst is None else int((worst >= NO_INFORMATION_ALIGNMENT).sum())
        if n:
            flags.append(f"{space} in {n} trial(s)")
    if not flags:
        return ""
    return (
        f". FLAG: worst-class alignment at or above {_fmt(NO_INFORMATION_ALIGNMENT)}, the value "
        f"of two independent uniform points on the sphere, {'; '.join(flags)}: that class's "
        "positives are no closer than chance"
    )


def _mean_and_range(s: pd.Series | None) -> tuple[str, str]:
    if s is None or s.dropna().empty:
        return "n/a", "n/a"
    return f"{s.mean():.4g}", _range(s)
