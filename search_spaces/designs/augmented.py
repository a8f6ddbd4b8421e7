"""The augmented design (``design.augments``, ``study augment``): block 1 the finished
factorial as planned, block 2 its axial and centre points."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from typing import Any

from search_spaces.designs.base import INTEGER_FIELDS, FixedDesign, Point, TrialPlan
from search_spaces.designs.levels import (
    batch_rule,
    continuous,
    every_factor,
    field_default,
    fixed_fields,
    on_scale,
    valid_batch_sizes,
)
from search_spaces.designs.registry import augmentable_kinds
from search_spaces.designs.trials import fixed_design, trial_config
from search_spaces.spec import Factor, StudyError, StudySpec, kind_words, parse_spec


def check_augmentable(spec: StudySpec) -> list[str]:
    """The numeric factors of a two-level factorial that a central composite can extend;
    StudyError naming the field and value for any other study."""
    kind = spec.design.kind
    if kind not in augmentable_kinds() or spec.design.augments:
        what = "an augmented design already" if spec.design.augments else f"a {kind}"
        raise StudyError(
            f"design.kind: {kind!r}: only a finished two-level factorial (full_factorial or "
            f"fractional_factorial) can be augmented to a central composite; this study is {what}"
        )
    numeric = [n for n, f in spec.factors.items() if f.is_numeric]
    if not numeric:
        why = "; ".join(f"{n} takes {kind_words(n)}" for n in spec.factors)
        raise StudyError(
            f"factors: a central composite needs at least one numeric factor to put axial and "
            f"centre points on, but every factor is categorical ({why})"
        )
    every_factor(numeric, lambda name: _two_levels_to_augment(name, spec.factors[name]))
    return numeric


def _two_levels_to_augment(name: str, factor: Factor) -> None:
    if factor.levels is not None and len(factor.levels) != 2:
        raise StudyError(
            f"factors.{name}: levels {factor.levels}: augmenting to a central composite "
            f"needs exactly 2 levels per numeric factor (its -1 and +1), got "
            f"{len(factor.levels)}"
        )


def factorial_spec(spec: StudySpec) -> StudySpec:
    """The study file of the factorial an augmented design extends: this one with ``design``
    set back to ``design.augments``' kind (and generators or resolution), replicates and seed."""
    augments = spec.design.augments
    data = spec.canonical()
    design = {"kind": augments.kind, "replicates": spec.design.replicates,
              "seed": spec.design.seed}  # fmt: skip
    for option in ("generators", "resolution"):
        if getattr(augments, option) is not None:
            design[option] = getattr(augments, option)
    data["design"] = design
    return parse_spec(data, f"{spec.study} (design.augments)")


def augment_alpha(face: str, rule: str | float, k: int, factorial: int, center: int) -> float:
    """The axial distance of the augmenting block in coded units of the factorial's ±1.

    ccf: 1. ``rotatable``: F^(1/4) for the F factorial points (2^k, or 2^(k-p) for a fraction).
    ``orthogonal``: orthogonal blocking of the two blocks (Box and Hunter 1957; Montgomery,
    Design and Analysis of Experiments, §11.4.2): each block's sum of x_i^2 in proportion to its
    size, F / (F + c1) = 2 alpha^2 / (2k + c2), with no centre runs in the finished factorial
    (c1 = 0): alpha = sqrt((2k + c2) / 2); the block effect then leaves the quadratic
    coefficients unbiased and uncorrelated with it. A number: itself.
    """
    if face == "ccf":
        return 1.0
    if rule == "rotatable":
        return float(factorial**0.25)
    if rule == "orthogonal":
        return float(math.sqrt((2 * k + center) / 2))
    return float(rule)


def _beyond(name: str, factor: Factor, coded: float, fixed: dict, snapped: dict) -> Any:
    """A value at a coded distance beyond the bounds (a ccc axial point), snapped for an integer
    field without the bounds' clamp; refused when snapping pulls it back into the factorial."""
    value = on_scale(factor, (coded + 1) / 2)
    if name not in INTEGER_FIELDS:
        return value
    if name == "batch_size":
        candidates = valid_batch_sizes(2, field_default(fixed, "budget_examples"), fixed)
        if factor.scale == "log" and value > 0:
            result = min(candidates, key=lambda d: abs(math.log(d / value)))
        else:
            result = min(candidates, key=lambda d: abs(d - value))
    else:
        result = round(value)
    lo, hi = factor.bounds
    if lo <= result <= hi:
        raise StudyError(
            f"factors.{name}: the axial point at {coded:+.4g} coded units is {name} = "
            f"{value:.4g}, but the nearest valid {name} is {result} (a batch size "
            f"{batch_rule(fixed)}), inside the factorial's range "
            f"[{lo:g}, {hi:g}]: the axial point would not be one; use face ccf or another alpha"
            if name == "batch_size"
            else f"factors.{name}: the axial point at {coded:+.4g} coded units rounds to "
            f"{result}, inside the factorial's range [{lo:g}, {hi:g}]; use face ccf or another "
            "alpha"
        )
    if not math.isclose(result, value):
        snapped[name] = value
    return result


def _bound(name: str, factor: Factor, high: bool) -> Any:
    """A numeric factor's low or high level as the study file types it."""
    if factor.levels is not None:
        return (max if high else min)(factor.levels)
    value = factor.range[int(high)]
    return int(value) if name in INTEGER_FIELDS else value


def _augment_points(spec: StudySpec, numeric: list[str], alpha: float) -> list[Point]:
    """The axial points (-alpha, +alpha on each numeric factor in turn) and the centre runs,
    crossed with every combination of the categorical factors."""
    k, fixed = len(numeric), fixed_fields(spec)
    categorical = [n for n in spec.factors if n not in numeric]
    rows: list[tuple[list[float], str]] = []
    if not (k == 1 and alpha == 1.0):  # one factor at alpha 1: the axial points are factorial
        for i in range(k):
            for sign in (-1.0, 1.0):
                rows.append(([sign * alpha if j == i else 0.0 for j in range(k)], "axial"))
    rows += [([0.0] * k, "center")] * spec.design.center
    points = []
    for combo in itertools.product(*[spec.factors[n].levels for n in categorical]):
        runs = 0
        for coded, role in rows:
            snapped: dict[str, float] = {}
            values = {}
            for name, c in zip(numeric, coded, strict=True):
                factor = spec.factors[name]
                if abs(c) > 1 + 1e-12:
                    values[name] = _beyond(name, factor, c, fixed, snapped)
                elif abs(c) == 1:  # the factorial's own level, exactly (never exp(log(x)))
                    values[name] = _bound(name, factor, c > 0)
                else:
                    values[name] = continuous(name, factor, (c + 1) / 2, fixed, snapped)
            values |= dict(zip(categorical, combo, strict=True))
            values = {n: values[n] for n in spec.factors}
            points.append(Point(values, snapped, role, runs if role == "center" else 0))
            runs += role == "center"
    return points


def augmented_design(spec: StudySpec) -> FixedDesign:
    """Block 1: the factorial's trials as it planned them (same keys and seeds, so the finished
    runs are found and never re-run). Block 2: axial and centre points, numbered after it, with
    the factorial's common seeds (centre run c: seed + c * replicates + r, as every centre run)."""
    augments = spec.design.augments
    base_spec = factorial_spec(spec)
    if base_spec.sha != augments.spec_sha:
        raise StudyError(
            f"design.augments.spec_sha: {augments.spec_sha} is not the fingerprint of this study "
            f"file with design kind {augments.kind} ({base_spec.sha}): its factors, fixed fields, "
            "budget or resources differ from those of the factorial it augments"
        )
    numeric = check_augmentable(base_spec)
    base = fixed_design(base_spec)
    block1 = [replace(t, role="factorial", block=1) for t in base.trials]
    factorial = len({tuple(t.factors[n] for n in numeric) for t in base.trials})
    rule = spec.design.alpha
    alpha = augment_alpha(spec.design.face, rule, len(numeric), factorial, spec.design.center)
    first = len({t.point_id for t in base.trials})
    replicates = spec.design.replicates
    block2 = []
    for index, point in enumerate(_augment_points(spec, numeric, alpha)):
        for replicate in range(replicates):
            seed = spec.design.seed + point.run * replicates + replicate
            try:
                config = trial_config(spec, point.values, seed)
            except StudyError as err:
                raise StudyError(
                    f"{err}; at the {point.role} point {point.values} of the augmenting block "
                    f"(alpha {alpha:.4g}): use face ccf or a smaller alpha"
                ) from None
            block2.append(TrialPlan(f"p{first + index:03d}", replicate, seed, point.values,
                                    config, point.snapped, role=point.role, block=2))  # fmt: skip
    structure = {
        "face": spec.design.face, "alpha": alpha,
        "alpha_rule": f"{rule} (blocking)" if rule == "orthogonal" else rule,
        "center_runs": spec.design.center, "numeric_factors": numeric,
        "augments": augments.model_dump(mode="json", exclude_none=True),
        "blocks": {"1": len(block1), "2": len(block2)},
        "note": f"block 1: the {augments.kind} {augments.spec_sha} ({len(block1)} trials, run "
                f"before); block 2: {len(block2)} axial and centre trials",
    }  # fmt: skip
    return FixedDesign(spec, tuple(block1 + block2), structure)
