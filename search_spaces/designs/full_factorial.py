"""``full_factorial``: every combination of the factors' levels (pyDOE's ``fullfact``)."""

from __future__ import annotations

import itertools

from search_spaces.designs.base import Point
from search_spaces.designs.levels import every_factor
from search_spaces.spec import StudyError, StudySpec


def points(spec: StudySpec) -> tuple[list[Point], dict]:
    names = list(spec.factors)

    def has_levels(name: str) -> None:
        if spec.factors[name].levels is None:
            raise StudyError(f"factors.{name}: full_factorial needs levels, got a range")

    every_factor(names, has_levels)
    # every combination of level indices, the first factor varying slowest: pyDOE's fullfact
    # rows sorted (tests/search_spaces checks it), without importing pyDOE (and scipy.stats,
    # a second) for what `study plan` of the commonest design needs
    indices = list(itertools.product(*[range(len(spec.factors[n].levels)) for n in names]))
    return [
        Point({n: spec.factors[n].levels[row[i]] for i, n in enumerate(names)}) for row in indices
    ], {}
