"""``points``: the design points as the study file lists them (``study next`` writes its path
of steepest ascent this way)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from search_spaces.designs.base import Point
from search_spaces.designs.levels import every_factor, fixed_fields, kept_matched, refuse_all
from search_spaces.spec import StudyError, StudySpec


def points(spec: StudySpec) -> tuple[list[Point], dict]:
    """``design.points`` as written: each names a value of every factor, a numeric one within
    the factor's bounds, a categorical one among its levels; integer fields (the batch size)
    snap to a value that keeps the budget matched, and say so."""
    listed = spec.design.points
    if not listed:
        raise StudyError("design.points: a points design needs its points (a list of factor "
                         "values)")  # fmt: skip
    found, problems = [], []
    for i, given in enumerate(listed):  # every point's every offence, in one refusal
        where = f"design.points.{i}"  # as the schema's own messages name a list's item
        if set(given) != set(spec.factors):
            missing = sorted(set(spec.factors) - set(given))
            extra = sorted(set(given) - set(spec.factors))
            wrong = [f"no value of {', '.join(missing)}"] if missing else []
            wrong += [f"{', '.join(extra)} is not a factor"] if extra else []
            problems.append(f"{where}: every point gives a value of each factor "
                            f"({', '.join(spec.factors)}): {'; '.join(wrong)}")  # fmt: skip
        snapped: dict[str, float] = {}
        try:
            values = every_factor([n for n in spec.factors if n in given],
                                  _listed_values(spec, where, given, snapped))  # fmt: skip
        except StudyError as err:
            problems.append(str(err))
            continue
        found.append(Point(values, snapped))
    refuse_all(problems)
    return found, {}


def _listed_values(spec: StudySpec, where: str, given: dict, snapped: dict) -> Callable:
    """The check of one listed point's value of a factor, by the factor's name."""
    fixed = fixed_fields(spec)
    return lambda name: _listed_value(f"{where}.{name}", name, spec.factors[name], given[name],
                                      fixed, snapped)  # fmt: skip


def _listed_value(where: str, name: str, factor, value: Any, fixed: dict, snapped: dict) -> Any:
    if not factor.is_numeric:
        value = next((level for level in factor.levels if str(level) == str(value)), value)
        if value not in factor.levels:
            raise StudyError(f"{where}: {value!r} is not one of the levels {factor.levels}")
        return value
    try:
        number = float(value)  # YAML 1.1 reads 1e-3 as text
    except (TypeError, ValueError):
        raise StudyError(f"{where}: {value!r} is not a number") from None
    lo, hi = factor.bounds
    if not lo <= number <= hi:
        raise StudyError(f"{where}: {number:g} lies outside the factor's bounds [{lo:g}, {hi:g}]")
    return kept_matched(name, number, factor, fixed, snapped)
