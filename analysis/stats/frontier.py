"""Pareto frontiers over any set of metrics, e.g. the alignment–uniformity plane.

The project's one Pareto implementation: the report's frontier table, the plane's step line
(``analysis.report.plots.plane_table``) and a multi-objective study's Pareto front
(``pareto_front``)
all come from ``pareto_frontier``."""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True)
class ParetoFront:
    """The Pareto front of a multi-objective study's finished trials (``objectives``: metric ->
    max | min, in the study file's order): ``front`` the trials no other trial dominates,
    ``trials`` every finished trial with a value of each objective, ``missing`` how many
    finished trials lacked one (they cannot be placed)."""

    objectives: dict[str, str]
    front: pd.DataFrame
    trials: pd.DataFrame
    missing: int

    def to_json(self) -> dict:
        columns = [c for c in ("point_id", "trial_key", *self.factors, *self.objectives)
                   if c in self.front]  # fmt: skip
        rows = self.front[columns].to_dict("records")
        return {
            "objectives": [{"metric": m, "mode": d} for m, d in self.objectives.items()],
            "front": [{k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()}
                      for row in rows],
            "n_trials": len(self.trials), "missing": self.missing,
        }  # fmt: skip

    @property
    def factors(self) -> list[str]:
        return list(self.trials.attrs.get("factors") or [])

    def sentence(self) -> str:
        sought = " and ".join(f"{'highest' if d == 'max' else 'lowest'} {m}"
                              for m, d in self.objectives.items())  # fmt: skip
        left = ""
        if self.missing:
            left = (f"; {self.missing} more finished trial{'s' if self.missing > 1 else ''} "
                    "lacked an objective and cannot be placed")  # fmt: skip
        return (f"{len(self.front)} of {len(self.trials)} finished trials are on the Pareto front "
                f"of {sought} (no other trial is at least as good on every objective and better "
                f"on one){left}.")  # fmt: skip


def pareto_front(df: pd.DataFrame, objectives: list[dict]) -> ParetoFront:
    """The :class:`ParetoFront` of ``df``'s finished trials under ``objectives`` ([{metric,
    mode}], as the study file's ``design.objectives``), through :func:`pareto_frontier`."""
    sought = {o["metric"]: o.get("mode", "max") for o in objectives}
    finished = df[df["status"] == "finished"] if "status" in df else df
    present = [m for m in sought if m in finished]
    complete = finished.dropna(subset=present) if present else finished.iloc[0:0]
    if len(present) < len(sought):
        complete = finished.iloc[0:0]
    complete = complete.copy()
    complete.attrs = dict(df.attrs)
    front = pareto_frontier(complete, sought) if len(complete) else complete
    return ParetoFront(sought, front, complete, len(finished) - len(complete))
