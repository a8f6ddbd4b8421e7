"""Pareto frontiers over any set of metrics, e.g. the alignment–uniformity plane.

The project's one Pareto implementation: the report's frontier table and the plane's step line
(``analysis.plots.plane_table``) both come from ``pareto_frontier``."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd


def pareto_frontier(df: pd.DataFrame, objectives: dict[str, Literal["min", "max"]]) -> pd.DataFrame:
    """Rows of ``df`` that no other row dominates.

    Row a dominates row b when a is at least as good on every objective and strictly better on
    one. Ties are kept: rows with identical objective values are all on the frontier when any
    of them is. Rows with a missing objective are never on it.

    Args:
        df: one row per trial.
        objectives: metric -> "min" or "max", e.g. ``{"z/align": "min", "z/uniform": "min"}``.

    Returns:
        The frontier rows in their original order (index kept).
    """
    if not objectives:
        raise ValueError("objectives is empty: name at least one metric and its direction")
    for name, sense in objectives.items():
        if name not in df:
            raise ValueError(f"objective {name!r} is not a column of the results")
        if sense not in ("min", "max"):
            raise ValueError(f"objective {name!r}: direction must be 'min' or 'max', got {sense!r}")
    complete = df.dropna(subset=list(objectives))
    # as minimisation: (n, k)
    values = np.column_stack(
        [complete[n].to_numpy(float) * (1 if s == "min" else -1) for n, s in objectives.items()]
    )
    keep = [not np.any(np.all(values <= v, axis=1) & np.any(values < v, axis=1)) for v in values]
    return complete[np.array(keep, dtype=bool)] if len(complete) else complete
