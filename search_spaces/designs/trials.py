"""A design's points become trials: each point at each replicate, validated as a
:class:`~trainables.config.TrialConfig` (refusals name the study file's field), compute-matched
(every trial sees ``budget_examples`` examples), with seeds the record and torch can hold."""

from __future__ import annotations

import math
import re
from typing import Any

from pydantic import ValidationError

from search_spaces.designs.base import FixedDesign, TrialPlan
from search_spaces.designs.levels import fixed_fields
from search_spaces.designs.registry import kind_module
from search_spaces.spec import StudyError, StudySpec
from trainables.config import INT64, TrialConfig
from trainables.names import did_you_mean, listing


def trial_config(spec: StudySpec, factors: dict[str, Any], seed: int) -> TrialConfig:
    """Fixed fields + one point's factor values + the seed, validated; errors name the field,
    each problem of a message that holds several (one a line) by its own field."""
    try:
        return TrialConfig(**fixed_fields(spec) | factors | {"seed": seed})
    except ValidationError as err:
        parts = []
        for error in err.errors():  # every field that refused, not only the first
            name = str(error["loc"][0]) if error["loc"] else ""
            msg = error["msg"].removeprefix("Value error, ")
            msg = re.sub(r"\bworkers=", "resources.workers=", msg)  # the study sets it there
            parts += [_placed(part, name, spec, factors) for part in msg.split("\n")]
        raise StudyError("\n".join(dict.fromkeys(parts))) from None


def _placed(msg: str, name: str, spec: StudySpec, factors: dict[str, Any]) -> str:
    """One problem of a trial, named where the study file sets what it is about."""
    if name in factors:
        return f"factors.{name}: level {factors[name]!r}: {msg}"
    if name in spec.trial:
        return f"trial.{name}: {msg} (got {spec.trial[name]!r})"
    named = [n for n in [*factors, *spec.trial] if re.search(rf"\b{n}=", msg)]
    named = named or [n for n in [*factors, *spec.trial] if re.search(rf"\b{n}\b", msg)]
    if named and named[0] in spec.trial and named[0] not in factors:
        return f"trial.{named[0]}: {msg}"  # the same at every point: said without one
    point = ", ".join(f"{k}={v!r}" for k, v in factors.items())
    where = ("factors." + named[0] + ": ") if named else ""
    return f"{where}{msg} (at point {point})"


def check_metric(where: str, metric: str, reported: tuple[str, ...]) -> None:
    """A metric no trial reports would be waited for in vain (and fail the study at its end)."""
    if metric not in reported:
        hint = did_you_mean(metric, reported)
        known = listing(reported, noun="metrics")
        raise StudyError(
            f"{where}: {metric!r} is not a metric this study's trials report{hint} "
            f"(they report {known})"
        )


UNMATCHABLE = re.compile(
    r"^(?P<field>[\w.]+: )?budget_examples=(?P<budget>\d+) is unmatchable with "
    r"batch_size=(?P<batch>\d+): it leaves a partial batch of (?P<left>\d+) examples"
)


def merged_budget_problems(spec: StudySpec, trials: list, said: list[str]) -> list[str]:
    """The refusal's parts with every batch size the budget leaves a partial batch at said in
    one sentence, with the budgets that would fit (:func:`fitting_budgets`): one fact, once,
    however many batch sizes or design points meet it."""
    found = [(part, UNMATCHABLE.match(part)) for part in said]
    hits = [m for _, m in found if m]
    if not hits:
        return said
    batches = sorted({(int(m["batch"]), int(m["left"])) for m in hits})
    each = " and ".join(f"batch_size={b} (a partial batch of {left} examples)"
                        for b, left in batches)  # fmt: skip
    sentence = (
        f"{hits[0]['field'] or ''}budget_examples={hits[0]['budget']} is unmatchable with "
        f"{each}, and every trial must see exactly budget_examples examples in full batches; "
        + fitting_budgets(spec, trials, [m.group(0) for m in hits])
    )
    rest = [part for part, m in found if not m]
    return [sentence, *rest]


def fitting_budgets(spec: StudySpec, trials: list, said: list[str]) -> str:
    """The budgets nearest the study's that every batch size of the study divides (their least
    common multiple's multiples): a refusal for an unmatchable budget says what would fit."""
    sizes = {int(t.config.batch_size) for t in trials}
    sizes |= {int(m) for p in said for m in re.findall(r"is unmatchable with batch_size=(\d+)", p)}
    budget = int(spec.trial.get("budget_examples", TrialConfig.model_fields["budget_examples"]
                                .default))  # fmt: skip
    if not sizes or budget <= 0:
        return ""
    step = math.lcm(*sizes)
    below, above = (budget // step) * step, -(-budget // step) * step
    options = [b for b in (below, above) if b > 0 and b != budget]
    fits = " or ".join(f"{b:,}".replace(",", "") for b in sorted(set(options)))
    return (
        f"choose a trial.budget_examples that every batch size divides "
        f"({', '.join(str(b) for b in sorted(sizes))}: their least common multiple is "
        f"{step}); the nearest budgets that fit all of them are {fits}"
    )


def _check_seeds(spec: StudySpec, points) -> None:
    """The trials' seeds (design.seed + run · replicates + replicate) within the 64-bit integers
    the record and torch hold, refused naming design.seed before any trial is made."""
    runs = max((p.run for p in points), default=0)
    highest = spec.design.seed + (runs + 1) * spec.design.replicates - 1
    low, high = INT64
    if spec.design.seed < low or highest > high:
        raise StudyError(
            f"design.seed: {spec.design.seed} with {spec.design.replicates} replicates gives "
            f"trial seeds up to {highest}, beyond the 64-bit integers the record (Parquet, "
            f"MLflow) and torch hold ({low} to {high}); choose a seed of at most "
            f"{high - (highest - spec.design.seed)}"
        )


def fixed_design(spec: StudySpec) -> FixedDesign:
    """The points of the study's kind (its module's ``points``, found in the registry), each at
    every replicate, as trials; every problem of every point refused at once."""
    points, structure = kind_module(spec.design.kind).points(spec)
    replicates = spec.design.replicates
    _check_seeds(spec, points)
    trials, problems = [], {}
    for index, point in enumerate(points):
        for replicate in range(replicates):
            # common random numbers across points; centre run c shifted past every earlier
            # run's seeds, so the centre runs differ by seed alone and measure pure error
            seed = spec.design.seed + point.run * replicates + replicate
            try:
                config = trial_config(spec, point.values, seed)
            except StudyError as err:  # every distinct problem, said once, all at once
                for part in str(err).split("\n"):
                    problems.setdefault(re.sub(r" \(at point [^)]*\)$", "", part), part)
                continue
            trials.append(TrialPlan(f"p{index:03d}", replicate, seed, point.values, config,
                                    point.snapped, role=point.role))  # fmt: skip
    if problems:
        raise StudyError(
            "; ".join(s for s in merged_budget_problems(spec, trials, list(problems.values())) if s)
        )
    examples = {t.config.examples_seen for t in trials}
    if len(examples) != 1:  # cannot happen while the budget is fixed; guard the invariant
        raise StudyError(f"trials would see different numbers of examples: {sorted(examples)}")
    return FixedDesign(spec, tuple(trials), structure)
