"""Designs: a study file becomes a table of compute-matched trials (design point × replicate).

Points come from pyDOE (``fullfact``, ``fracfact``/``fracfact_by_res``, ``ccdesign``, ``lhs``);
``optuna`` designs are adaptive and get their points from Ray Tune's OptunaSearch at run time.
Continuous values for integer fields are snapped: ``batch_size`` to the nearest divisor of
``budget_examples`` inside the factor's bounds (so compute still matches exactly), other integers
to the nearest integer; the table shows the snapped value and what it was snapped from.
Every row is validated as a :class:`TrialConfig` before anything runs.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import ValidationError
from pydoe import ccdesign, fracfact, fracfact_by_res, fullfact, lhs

from search_spaces.spec import Factor, StudyError, StudySpec
from trainables.config import TrialConfig

# Short names for run names: ``τ=0.1 B=128 aug=crop seed=1``.
ABBREVIATIONS = {
    "temperature": "τ", "batch_size": "B", "augmentation": "aug", "aug_strength": "s",
    "lam_t": "λt", "uniform_t": "t", "base_lr": "lr", "group_policy": "groups",
    "objective": "obj", "encoder": "enc", "dataset": "data", "projection": "head",
}  # fmt: skip
INTEGER_FIELDS = {
    name for name, f in TrialConfig.model_fields.items() if f.annotation in (int, "int")
}


@dataclass(frozen=True)
class TrialPlan:
    """One row of the design: a design point at one replicate, and its compute plan."""

    point_id: str
    replicate: int
    seed: int
    factors: dict[str, Any]
    config: TrialConfig
    snapped: dict[str, float] = field(default_factory=dict)  # factor -> value before snapping

    @property
    def key(self) -> str:
        return f"{self.point_id}-r{self.replicate}"

    @property
    def run_name(self) -> str:
        parts = [f"{ABBREVIATIONS.get(k, k)}={_short(v)}" for k, v in self.factors.items()]
        return " ".join([*parts, f"seed={self.seed}"])

    def row(self) -> dict[str, Any]:
        return {
            "point_id": self.point_id,
            "replicate": self.replicate,
            "seed": self.seed,
            **self.factors,
            "steps": self.config.steps,
            "examples_seen": self.config.examples_seen,
            "lr_effective": self.config.lr_effective,
            "snapped": ", ".join(f"{k} {v:g}→{self.factors[k]}" for k, v in self.snapped.items()),
        }


@dataclass(frozen=True)
class DesignTable:
    """The whole plan of a study: its trials in run order."""

    spec: StudySpec
    trials: tuple[TrialPlan, ...]

    @property
    def adaptive(self) -> bool:
        return self.spec.design.kind == "optuna"

    def totals(self) -> dict[str, Any]:
        examples = {t.config.examples_seen for t in self.trials}
        return {
            "trials": len(self.trials),
            "points": len({t.point_id for t in self.trials}),
            "replicates": self.spec.design.replicates,
            "examples_per_trial": examples.pop() if len(examples) == 1 else None,
            "examples": sum(t.config.examples_seen for t in self.trials),
            "steps": sum(t.config.steps for t in self.trials),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "study": self.spec.study,
            "design": self.spec.design.kind,
            "spec_sha": self.spec.sha,
            "trials": [t.row() for t in self.trials],
            "totals": self.totals(),
        }


def _short(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


# ---------------------------------------------------------------------------------------------
# coded points -> factor values
# ---------------------------------------------------------------------------------------------
def _on_scale(factor: Factor, unit: float) -> float:
    """unit in [0, 1] (may exceed for circumscribed designs) -> value between the bounds."""
    lo, hi = factor.bounds
    if factor.scale == "log":
        return float(math.exp(math.log(lo) + unit * (math.log(hi) - math.log(lo))))
    return float(lo + unit * (hi - lo))


def _level_from_unit(factor: Factor, unit: float) -> Any:
    """unit in [0, 1] -> one of the factor's levels (equal-width strata)."""
    index = min(len(factor.levels) - 1, int(unit * len(factor.levels)))
    return factor.levels[index]


def _snap(name: str, value: float, factor: Factor, fixed: dict[str, Any]) -> Any:
    """A continuous value for an integer field -> an integer that keeps the budget matched."""
    if name != "batch_size":
        return round(value)
    budget = fixed.get("budget_examples", TrialConfig.model_fields["budget_examples"].default)
    lo, hi = factor.bounds
    candidates = [d for d in range(max(2, math.ceil(lo)), int(hi) + 1) if budget % d == 0]
    if not candidates:
        raise StudyError(
            f"factors.batch_size: no batch size in [{lo:g}, {hi:g}] divides "
            f"budget_examples={budget}, so no snapped point can match the budget"
        )
    distance = (
        (lambda d: abs(math.log(d / value)))
        if factor.scale == "log"
        else (lambda d: abs(d - value))
    )
    return min(candidates, key=distance)


def _continuous(name: str, factor: Factor, unit: float, fixed: dict, snapped: dict) -> Any:
    value = _on_scale(factor, unit)
    if name in INTEGER_FIELDS:
        result = _snap(name, value, factor, fixed)
        if not math.isclose(result, value):
            snapped[name] = value
        return result
    return value


def _points_full_factorial(spec: StudySpec) -> list[tuple[dict, dict]]:
    names = list(spec.factors)
    for name in names:
        if spec.factors[name].levels is None:
            raise StudyError(f"factors.{name}: full_factorial needs levels, got a range")
    indices = fullfact([len(spec.factors[n].levels) for n in names]).astype(int)
    # pyDOE varies the first factor fastest; reverse so the first factor varies slowest
    order = sorted(range(len(indices)), key=lambda r: tuple(indices[r]))
    return [
        ({n: spec.factors[n].levels[indices[r][i]] for i, n in enumerate(names)}, {}) for r in order
    ]


def _two_levels(name: str, factor: Factor) -> tuple[Any, Any]:
    if factor.levels is not None:
        if len(factor.levels) != 2:
            raise StudyError(
                f"factors.{name}: fractional_factorial needs exactly 2 levels, "
                f"got {len(factor.levels)} ({factor.levels})"
            )
        return factor.levels[0], factor.levels[1]
    lo, hi = factor.range
    return (int(lo), int(hi)) if name in INTEGER_FIELDS else (lo, hi)


def _points_fractional(spec: StudySpec) -> list[tuple[dict, dict]]:
    names = list(spec.factors)
    design = spec.design
    if len(names) < 3:
        raise StudyError(
            f"design.kind: fractional_factorial needs at least 3 two-level factors, got "
            f"{len(names)} ({', '.join(names)}); use full_factorial"
        )
    lows_highs = {n: _two_levels(n, spec.factors[n]) for n in names}
    if design.generators:
        coded = fracfact(design.generators)
        if coded.shape[1] != len(names):
            raise StudyError(
                f"design.generators: {design.generators!r} defines {coded.shape[1]} columns "
                f"but the study has {len(names)} factors"
            )
    else:
        coded = fracfact_by_res(len(names), design.resolution or 3)
    return [
        ({n: lows_highs[n][int(c > 0)] for n, c in zip(names, row, strict=True)}, {})
        for row in coded
    ]


def _points_central_composite(spec: StudySpec) -> list[tuple[dict, dict]]:
    numeric = [n for n, f in spec.factors.items() if f.is_numeric]
    categorical = [n for n in spec.factors if n not in numeric]
    if not numeric:
        raise StudyError(
            "design.kind: central_composite needs at least one numeric factor, got none "
            f"({', '.join(categorical)} are categorical)"
        )
    if len(numeric) == 1:
        coded = np.array([[-1.0], [1.0], [0.0]])
    else:
        coded = ccdesign(len(numeric), center=(0, 1), alpha="orthogonal", face=spec.design.face)
    span = max(1.0, float(np.abs(coded).max())) if spec.design.face == "cci" else 1.0
    fixed = spec.trial
    points, seen = [], set()
    cat_levels = [spec.factors[n].levels for n in categorical]
    for combo in itertools.product(*cat_levels):
        for row in coded:
            snapped: dict[str, float] = {}
            values = {
                n: _continuous(n, spec.factors[n], (c / span + 1) / 2, fixed, snapped)
                for n, c in zip(numeric, row, strict=True)
            }
            values |= dict(zip(categorical, combo, strict=True))
            values = {n: values[n] for n in spec.factors}  # spec order
            key = repr(values)
            if key not in seen:  # snapping can merge points; keep each once
                seen.add(key)
                points.append((values, snapped))
    return points


def _points_latin_hypercube(spec: StudySpec) -> list[tuple[dict, dict]]:
    names = list(spec.factors)
    if not spec.design.samples:
        raise StudyError("design.samples: latin_hypercube needs samples (how many points)")
    units = lhs(len(names), samples=spec.design.samples, criterion="maximin", seed=spec.design.seed)
    points = []
    for row in units:
        snapped: dict[str, float] = {}
        values = {}
        for name, unit in zip(names, row, strict=True):
            factor = spec.factors[name]
            if factor.range is not None:
                values[name] = _continuous(name, factor, float(unit), spec.trial, snapped)
            else:
                values[name] = _level_from_unit(factor, float(unit))
        points.append((values, snapped))
    return points


GENERATORS = {
    "full_factorial": _points_full_factorial,
    "fractional_factorial": _points_fractional,
    "central_composite": _points_central_composite,
    "latin_hypercube": _points_latin_hypercube,
}


# ---------------------------------------------------------------------------------------------
# the table
# ---------------------------------------------------------------------------------------------
def trial_config(spec: StudySpec, factors: dict[str, Any], seed: int) -> TrialConfig:
    """Fixed fields + one point's factor values + the seed, validated; errors name the field."""
    try:
        return TrialConfig(**spec.trial | factors | {"seed": seed})
    except ValidationError as err:
        first = err.errors()[0]
        name = str(first["loc"][0]) if first["loc"] else ""
        msg = first["msg"].removeprefix("Value error, ")
        if name in factors:
            raise StudyError(f"factors.{name}: level {factors[name]!r}: {msg}") from None
        if name in spec.trial:
            raise StudyError(f"trial.{name}: {msg} (got {spec.trial[name]!r})") from None
        point = ", ".join(f"{k}={v!r}" for k, v in factors.items())
        named = [n for n in [*factors, *spec.trial] if re.search(rf"\b{n}\b", msg)]
        where = ""
        if named:
            where = ("factors." if named[0] in factors else "trial.") + named[0] + ": "
        raise StudyError(f"{where}{msg} (at point {point})") from None


def build_design(spec: StudySpec) -> DesignTable:
    """Every trial of the study with its compute plan, validated, before anything runs."""
    if "budget_examples" in spec.factors:
        levels = spec.factors["budget_examples"].levels or list(
            spec.factors["budget_examples"].range
        )
        raise StudyError(
            f"factors.budget_examples: the budget cannot be a factor (got {levels}): every trial "
            "of a study sees the same number of examples (run one study per budget)"
        )
    if spec.design.kind == "optuna":
        return _optuna_table(spec)
    points = GENERATORS[spec.design.kind](spec)
    trials = []
    for index, (values, snapped) in enumerate(points):
        for replicate in range(spec.design.replicates):
            seed = spec.design.seed + replicate
            config = trial_config(spec, values, seed)
            trials.append(TrialPlan(f"p{index:03d}", replicate, seed, values, config, snapped))
    examples = {t.config.examples_seen for t in trials}
    if len(examples) != 1:  # cannot happen while the budget is fixed; guard the invariant
        raise StudyError(f"trials would see different numbers of examples: {sorted(examples)}")
    return DesignTable(spec, tuple(trials))


def _optuna_table(spec: StudySpec) -> DesignTable:
    """Adaptive designs have no fixed points: validate the space at its corners instead."""
    design = spec.design
    if not design.samples or not design.metric:
        raise StudyError("design: optuna needs samples (how many trials) and metric (to optimise)")
    if design.replicates != 1:
        raise StudyError(
            f"design.replicates: optuna proposes each point once, got {design.replicates}; "
            "re-run the best points in a factorial study to replicate them"
        )
    adaptive_sample(spec)  # the space's first corner must be a valid trial
    return DesignTable(spec, ())


def adaptive_sample(spec: StudySpec) -> TrialConfig:
    """One valid trial of an adaptive design: every factor at its first level or lower bound
    (batch sizes snapped to the budget), for checks that need a concrete trial."""
    values = {}
    for name, factor in spec.factors.items():
        if factor.levels is not None:
            values[name] = factor.levels[0]
        else:
            values[name] = _continuous(name, factor, 0.0, spec.trial, {})
    return trial_config(spec, values, spec.design.seed)


def batch_sizes_matching(spec: StudySpec, factor: Factor) -> list[int]:
    """Every batch size inside the factor's bounds that divides the budget (optuna's choices)."""
    budget = spec.trial.get("budget_examples", TrialConfig.model_fields["budget_examples"].default)
    lo, hi = factor.bounds
    return [d for d in range(max(2, math.ceil(lo)), int(hi) + 1) if budget % d == 0]
