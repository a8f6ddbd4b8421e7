"""Shared by the response-surface kinds (central composite, Box-Behnken): the numeric factors
on the coded axes and the categorical ones crossed, levels a design would replace refused, and
coded rows turned into design points."""

from __future__ import annotations

import itertools
import math

import numpy as np

from search_spaces.designs.base import Point
from search_spaces.designs.levels import continuous, every_factor, fixed_fields, on_scale
from search_spaces.spec import StudyError, StudySpec, kind_words


def numeric_split(spec: StudySpec) -> tuple[list[str], list[str]]:
    """The numeric factors (on the design's coded axes) and the categorical ones (crossed)."""
    numeric = [n for n, f in spec.factors.items() if f.is_numeric]
    categorical = [n for n in spec.factors if n not in numeric]
    if not numeric:
        why = "; ".join(f"{n} takes {kind_words(n)}" for n in categorical)
        raise StudyError(
            f"design.kind: {spec.design.kind} needs at least one numeric factor, got none "
            f"({', '.join(categorical)} are categorical: {why})"
        )
    return numeric, categorical


def check_levels_kept(spec: StudySpec, numeric: list[str]) -> None:
    """A response-surface design spans a numeric factor's two ends and places its own centre
    (the middle on the factor's scale): a level the user wrote between them would be replaced
    without a word, so it is refused, unless it is that centre."""
    every_factor(numeric, lambda name: _level_kept(spec, name))


def _level_kept(spec: StudySpec, name: str) -> None:
    factor = spec.factors[name]
    if factor.levels is not None and len(factor.levels) > 2:
        lo, hi = factor.bounds
        centre = on_scale(factor, 0.5)
        dropped = [v for v in factor.levels
                   if v not in (lo, hi) and not math.isclose(v, centre, rel_tol=1e-9)]  # fmt: skip
        if dropped:
            raise StudyError(
                f"factors.{name}: {spec.design.kind} uses the ends of a factor, {lo:g} and "
                f"{hi:g}, and its own centre, {centre:.4g} on the {factor.scale} scale; the "
                f"level(s) {', '.join(f'{v:g}' for v in dropped)} would be replaced. Give "
                f"levels [{lo:g}, {hi:g}] (or range [{lo:g}, {hi:g}]), or a full_factorial to "
                "run every level as written"
            )


def coded_points(
    spec: StudySpec, numeric: list[str], categorical: list[str], coded: np.ndarray, roles: list
) -> list[Point]:
    """Coded rows -> points on each factor's scale, crossed with every categorical combination.

    Coded ±1 are a factor's bounds (beyond them for ccc's axial points). Centre run c keeps
    ``run`` c (its seed's offset); other points that snapping merges are kept once.
    """
    fixed = fixed_fields(spec)
    points, seen = [], set()
    cat_levels = [spec.factors[n].levels for n in categorical]
    for combo in itertools.product(*cat_levels):
        runs = 0
        for row, role in zip(coded, roles, strict=True):
            snapped: dict[str, float] = {}
            values = {
                n: continuous(n, spec.factors[n], (c + 1) / 2, fixed, snapped)
                for n, c in zip(numeric, row, strict=True)
            }
            values |= dict(zip(categorical, combo, strict=True))
            values = {n: values[n] for n in spec.factors}  # spec order
            if role == "center":  # repeated on purpose: each run its own seed
                points.append(Point(values, snapped, role, runs))
                runs += 1
            elif repr(values) not in seen:  # snapping can merge points; keep each once
                seen.add(repr(values))
                points.append(Point(values, snapped, role))
    return points
