"""``latin_hypercube``: ``design.samples`` maximin points (pyDOE's ``lhs``); a categorical
factor takes its levels in equal-width strata."""

from __future__ import annotations

from search_spaces.designs.base import Point
from search_spaces.designs.levels import continuous, fixed_fields, level_from_unit
from search_spaces.spec import StudyError, StudySpec


def points(spec: StudySpec) -> tuple[list[Point], dict]:
    names = list(spec.factors)
    if not spec.design.samples:
        raise StudyError("design.samples: latin_hypercube needs samples (how many points)")
    from pydoe import lhs

    units = lhs(len(names), samples=spec.design.samples, criterion="maximin", seed=spec.design.seed)
    found = []
    for row in units:
        snapped: dict[str, float] = {}
        values = {}
        for name, unit in zip(names, row, strict=True):
            factor = spec.factors[name]
            if factor.range is not None:
                values[name] = continuous(name, factor, float(unit), fixed_fields(spec), snapped)
            else:
                values[name] = level_from_unit(factor, float(unit))
        found.append(Point(values, snapped))
    return found, {}
