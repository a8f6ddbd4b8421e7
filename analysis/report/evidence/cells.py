"""The evidence card's shared helpers: reading the results frame (finished trials, numeric
columns, the target, grouped data, design-point labels) and formatting what is read into the
short text of a cell ("n/a", ranges, mean ± sd, mean (range)), and the names every section
uses (:data:`NOT_MEASURED`, :data:`PROBES`, :data:`DEFAULT_TARGET`)."""

from __future__ import annotations

import contextlib
import math
import numbers

import pandas as pd

from trainables.objectives.registry import TEMPERATURE_OBJECTIVES

NOT_MEASURED = "not measured"

PROBES: tuple[str, ...] = (
    "probe/knn_top1_h", "probe/knn_top1_z", "probe/linear_top1_h", "probe/linear_top1_z",
)  # fmt: skip
DEFAULT_TARGET = "probe/knn_top1_h"


def _cell(x: object) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def _fmt(x: object) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, numbers.Real) and not isinstance(x, bool):
        if not math.isfinite(x):
            return "n/a"
        return str(int(x)) if float(x).is_integer() and abs(x) < 1e12 else f"{x:.4g}"
    return str(x)


def _num(df: pd.DataFrame, col: str) -> pd.Series | None:
    return pd.to_numeric(df[col], errors="coerce") if col in df.columns else None


def _finished(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["status"] == "finished"] if "status" in df.columns else df


def _first(df: pd.DataFrame, col: str) -> object:
    return df[col].dropna().iloc[0] if col in df.columns and df[col].notna().any() else None


def _distinct(df: pd.DataFrame, col: str) -> list[str]:
    if col not in df.columns:
        return []
    values = df[col].dropna().unique().tolist()
    with contextlib.suppress(TypeError):
        values = sorted(values)
    return [_fmt(v) for v in values]


def _listing(df: pd.DataFrame, col: str) -> str:
    return ", ".join(_distinct(df, col)) or "not recorded"


def _mean_sd(s: pd.Series) -> str:
    s = s.dropna()
    if s.empty:
        return "n/a"
    sd = f" ± {s.std(ddof=1):.3f}" if len(s) > 1 else ""
    return f"{s.mean():.3f}{sd} (n={len(s)})"


def _range(s: pd.Series | None) -> str:
    s = s.dropna() if s is not None else None
    if s is None or s.empty:
        return "n/a"
    return _fmt(s.iloc[0]) if s.min() == s.max() else f"{_fmt(s.min())} to {_fmt(s.max())}"


def _mean_range(s: pd.Series | None) -> str:
    if s is None or s.dropna().empty:
        return "n/a"
    return f"{_fmt(round(float(s.mean()), 4))} ({_range(s)})"


def _is_infonce(df: pd.DataFrame) -> pd.Series:
    """The trials whose objective is weighted by a temperature (InfoNCE's: the registry's
    ``temperature`` rows); every trial when the objective is not recorded."""
    if "objective" not in df.columns:
        return pd.Series(True, index=df.index)
    return df["objective"].isin(TEMPERATURE_OBJECTIVES)


def _target(attrs: dict) -> str:
    target = attrs.get("target")
    metric = target.get("metric") if isinstance(target, dict) else target
    return metric if isinstance(metric, str) and metric else DEFAULT_TARGET


def _grouped(df: pd.DataFrame) -> pd.Series:
    """Trials whose training data carries groups (toy items of several photos)."""
    photos = _num(df, "toy_photos_per_item")
    if photos is None:
        return pd.Series(False, index=df.index)
    toy = df["dataset"] == "toy" if "dataset" in df.columns else True
    return (photos > 1) & toy


def _point_label(df: pd.DataFrame, point: object, factors: list[str]) -> str:
    rows = df[df["point_id"] == point] if "point_id" in df.columns else df
    values = [f"{f}={_fmt(_first(rows, f))}" for f in factors if f in rows.columns]
    return f"{point} ({', '.join(values)})" if values else str(point)


def _factors(attrs: dict) -> list[str]:
    return [str(f) for f in attrs.get("factors") or []]
