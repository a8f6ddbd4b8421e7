"""What a study aims at: the :class:`Target` metric the progress view calls 'best so far' and
the :class:`Goal` of each response for the overall desirability. Fields of
:class:`search_spaces.spec.StudySpec` (which re-exports them).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from search_spaces.spec_base import _Strict
from trainables.metrics import better


class Target(_Strict):
    """The metric the progress view calls 'best so far', and its direction: by default the
    catalogue's (:func:`trainables.metrics.better`: a loss, alignment or uniformity is minimised,
    an accuracy maximised), resolved when the file is read so the canonical file names it."""

    metric: str = "probe/knn_top1_h"
    mode: Literal["max", "min"] = None  # type: ignore[assignment]

    @model_validator(mode="after")
    def _direction(self) -> Target:
        if self.mode is None:
            object.__setattr__(self, "mode", better(self.metric))
        return self


class Goal(_Strict):
    """One response's goal for the overall desirability (Derringer & Suich 1980;
    ``analysis.stats.desirability``): ``max``, ``min`` or ``target`` between ``low`` and ``high``,
    ``weight`` the shape exponent, ``importance`` its weight in the geometric mean."""

    metric: str
    goal: Literal["max", "min", "target"]
    low: float
    high: float
    target: float | None = None
    weight: float = Field(1.0, gt=0)
    importance: float = Field(1.0, gt=0)

    @model_validator(mode="after")
    def _reachable(self) -> Goal:
        if not self.low < self.high:
            raise ValueError(f"low ({self.low:g}) must be below high ({self.high:g})")
        if self.goal == "target" and (self.target is None or
                                      not self.low < self.target < self.high):  # fmt: skip
            raise ValueError(f"a target goal needs low < target < high, got target = "
                             f"{self.target}")  # fmt: skip
        if self.goal != "target" and self.target is not None:
            raise ValueError(f"target is only for goal: target (this goal is {self.goal})")
        return self
