"""Shared helpers of every design kind: a coded or unit value -> a factor's value on its
scale, integer fields snapped so that the budget stays matched, the fields every trial shares,
and refusals that name every offending factor at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from search_spaces.designs.base import INTEGER_FIELDS
from search_spaces.spec import Factor, StudyError, StudySpec
from trainables.config import TrialConfig


def on_scale(factor: Factor, unit: float) -> float:
    """unit in [0, 1] (may exceed for circumscribed designs) -> value between the bounds."""
    lo, hi = factor.bounds
    if unit in (0, 1):  # the ends are the values the user wrote, not exp(log(...)) of them
        return float(lo if unit == 0 else hi)
    if factor.scale == "log":
        return float(math.exp(math.log(lo) + unit * (math.log(hi) - math.log(lo))))
    return float(lo + unit * (hi - lo))


def level_from_unit(factor: Factor, unit: float) -> Any:
    """unit in [0, 1] -> one of the factor's levels (equal-width strata)."""
    index = min(len(factor.levels) - 1, int(unit * len(factor.levels)))
    return factor.levels[index]


def fixed_fields(spec: StudySpec) -> dict[str, Any]:
    """The TrialConfig fields every trial shares: the study's ``trial:`` block and the workers
    its resources set (``trial:`` as the user wrote it stays untouched)."""
    return {**spec.trial, "workers": spec.resources.workers}


def field_default(fixed: dict[str, Any], name: str) -> Any:
    return fixed.get(name, TrialConfig.model_fields[name].default)


def valid_batch_sizes(lo: int, hi: int, fixed: dict[str, Any]) -> list[int]:
    """Batch sizes in [lo, hi] that keep the budget matched (they divide budget_examples) and
    split evenly over the trial's data-parallel workers."""
    budget, workers = field_default(fixed, "budget_examples"), field_default(fixed, "workers")
    return [d for d in range(max(2, lo), hi + 1) if budget % d == 0 and d % workers == 0]


def batch_rule(fixed: dict[str, Any]) -> str:
    """What a valid batch size is, in words, for error messages."""
    rule = f"divides budget_examples={field_default(fixed, 'budget_examples')}"
    workers = field_default(fixed, "workers")
    return rule + (f" and is a multiple of resources.workers={workers}" if workers > 1 else "")


def snap_integer(name: str, value: float, factor: Factor, fixed: dict[str, Any]) -> Any:
    """A continuous value for an integer field -> an integer that keeps the budget matched."""
    if name != "batch_size":
        return round(value)
    lo, hi = factor.bounds
    candidates = valid_batch_sizes(math.ceil(lo), int(hi), fixed)
    if not candidates:
        raise StudyError(
            f"factors.batch_size: no batch size in [{lo:g}, {hi:g}] {batch_rule(fixed)}, so "
            "no snapped point can match the budget"
        )
    distance = (
        (lambda d: abs(math.log(d / value)))
        if factor.scale == "log"
        else (lambda d: abs(d - value))
    )
    return min(candidates, key=distance)


def continuous(name: str, factor: Factor, unit: float, fixed: dict, snapped: dict) -> Any:
    return kept_matched(name, on_scale(factor, unit), factor, fixed, snapped)


def kept_matched(name: str, value: float, factor: Factor, fixed: dict, snapped: dict) -> Any:
    """``value`` itself, or for an integer field the nearest that keeps the budget matched (the
    value it replaced noted in ``snapped``)."""
    if name in INTEGER_FIELDS:
        result = snap_integer(name, value, factor, fixed)
        if not math.isclose(result, value):
            snapped[name] = value
        return result
    return value


def every_factor(names: list[str], check: Callable[[str], Any]) -> dict[str, Any]:
    """``check(name)`` of every factor in ``names``, by name; when any refuses, one refusal that
    names every offending factor (a user fixes them all in one edit, not one per run).

    Raises:
        StudyError: the refusals of every factor that failed its check, in factor order.
    """
    results, problems = {}, []
    for name in names:
        try:
            results[name] = check(name)
        except StudyError as err:
            problems.append(str(err))
    refuse_all(problems)
    return results


def refuse_all(problems: list[str]) -> None:
    """One refusal naming every problem found (each said once), or nothing when none was."""
    if problems:
        raise StudyError("; ".join(dict.fromkeys(problems)))
