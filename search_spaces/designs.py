"""Designs: a study file becomes compute-matched trials (design point × replicate).

A design is one object, built by :func:`build_design`: a :class:`FixedDesign` (pyDOE's
``fullfact``, ``fracfact``/``fracfact_by_res``, central composite, ``bbdesign``, ``lhs``, or a
finished factorial augmented to a central composite (:func:`augmented_design`): every trial known
before anything runs) or an :class:`AdaptiveDesign` (``optuna``: trials proposed one by one by an
Optuna sampler from the results so far). The runner asks either for a :class:`Schedule` given
the trials already in the record (:class:`PastTrial`), launches what the schedule proposes,
and reports each finished trial's value back; it never looks inside. A resumed study gets the
same trials under the same keys: a fixed design's unfinished rows, an adaptive design's
unfinished proposals (resumed from their checkpoints) before any new proposal.
Continuous values for integer fields are snapped: ``batch_size`` to the nearest divisor of
``budget_examples`` inside the factor's bounds (so compute still matches exactly), other integers
to the nearest integer; the table shows the snapped value and what it was snapped from.
Every row is validated as a :class:`TrialConfig` before anything runs.
"""

from __future__ import annotations

import itertools
import math
import re
import string
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from pydantic import ValidationError

from search_spaces.spec import Factor, StudyError, StudySpec, kind_words, parse_spec
from trainables.config import INT64, TrialConfig
from trainables.metrics import evaluation_metrics, final_metrics
from trainables.names import did_you_mean, listing
from trainables.shown import shown
from trainables.text import base_type

# Short names for run names: ``τ=0.1 B=128 aug=crop seed=1``.
ABBREVIATIONS = {
    "temperature": "τ", "batch_size": "B", "augmentation": "aug", "aug_strength": "s",
    "lam_t": "λt", "uniform_t": "t", "base_lr": "lr", "group_policy": "groups",
    "objective": "obj", "encoder": "enc", "dataset": "data", "projection": "head",
}  # fmt: skip
INTEGER_FIELDS = {
    name for name, f in TrialConfig.model_fields.items() if base_type(f.annotation) is int
}
FINISHED = "FINISHED"


@dataclass(frozen=True)
class TrialPlan:
    """One trial: a design point at one replicate (or one adaptive proposal), its compute plan."""

    point_id: str
    replicate: int
    seed: int
    factors: dict[str, Any]
    config: TrialConfig
    snapped: dict[str, float] = field(default_factory=dict)  # factor -> value before snapping
    proposal: str | None = None  # adaptive designs: the key given to the proposal
    role: str | None = None  # response surfaces: factorial, axial, edge or center
    block: int | None = None  # augmented designs: 1 the factorial it extends, 2 the new points

    @property
    def key(self) -> str:
        return self.proposal or f"{self.point_id}-r{self.replicate}"

    @property
    def run_name(self) -> str:
        """'τ=0.1 B=64 seed=0': plain text in MLflow's UI, its levels shown as written."""
        parts = [f"{ABBREVIATIONS.get(k, k)}={_short(v)}" for k, v in self.factors.items()]
        return shown(" ".join([*parts, f"seed={self.seed}"]))

    def row(self) -> dict[str, Any]:
        role = {"role": self.role} if self.role else {}
        block = {"block": self.block} if self.block else {}
        return {
            "point_id": self.point_id,
            "replicate": self.replicate,
            "seed": self.seed,
            **block,
            **role,
            **self.factors,
            "steps": self.config.steps,
            "examples_seen": self.config.examples_seen,
            "lr_effective": self.config.lr_effective,
            "snapped": ", ".join(f"{k} {v:g}→{self.factors[k]}" for k, v in self.snapped.items()),
        }

    def payload(self) -> dict[str, Any]:
        """Everything a worker and the recorder need, as plain JSON data."""
        return {
            "key": self.key, "point_id": self.point_id, "replicate": self.replicate,
            "seed": self.seed, "factors": dict(self.factors),
            "trial": self.config.model_dump(mode="json"), "snapped": dict(self.snapped),
            "proposal": self.proposal, "role": self.role, "block": self.block,
        }  # fmt: skip

    @classmethod
    def from_payload(cls, data: dict[str, Any]) -> TrialPlan:
        config = TrialConfig(**data["trial"])
        factors = {k: getattr(config, k) for k in data["factors"]}  # typed, as the config holds
        return cls(data["point_id"], data["replicate"], data["seed"], factors, config,
                   dict(data.get("snapped") or {}), data.get("proposal"),
                   data.get("role"), data.get("block"))  # fmt: skip


@dataclass(frozen=True)
class PastTrial:
    """A trial as the record holds it: what the runner hands a design when a study resumes."""

    key: str
    status: str  # the MLflow run status: FINISHED, FAILED, KILLED, RUNNING, SCHEDULED
    config: dict[str, Any]  # its TrialConfig fields, exactly as recorded
    metrics: dict[str, float]  # final values


class Schedule:
    """What to launch now: trials in order, then (adaptive) proposals until ``remaining`` run.

    ``next(trial_id)`` gives the next trial to launch (None when there is none);
    ``observe(key, result)`` hands back a finished trial's last result (its final metrics; None
    when it failed). Fixed designs ignore what they observe.
    """

    def __init__(self, queued: list[TrialPlan], remaining: int, done: int, total: int) -> None:
        self.queued = list(queued)
        self.remaining = remaining  # trials this run launches
        self.done = done  # trials already FINISHED in the record
        self.total = total
        self.launched = 0

    @property
    def known(self) -> tuple[TrialPlan, ...]:
        """Trials known before anything runs (their runs can be created up front)."""
        return tuple(self.queued)

    def next(self, trial_id: str) -> TrialPlan | None:
        if self.launched >= self.remaining:
            return None
        plan = self.queued.pop(0) if self.queued else self._propose(trial_id)
        if plan is not None:
            self.launched += 1
        return plan

    def _propose(self, trial_id: str) -> TrialPlan | None:
        return None

    def observe(self, key: str, result: dict[str, Any] | None) -> None:
        return None


@dataclass(frozen=True)
class FixedDesign:
    """The whole plan of a study known up front: its trials in run order."""

    spec: StudySpec
    trials: tuple[TrialPlan, ...]
    # what the design's kind adds to the table: alpha and centre runs of a response surface,
    # the defining relation, aliases and resolution of a fractional factorial (plain JSON data)
    structure: dict[str, Any] = field(default_factory=dict)
    adaptive = False

    @property
    def total(self) -> int:
        return len(self.trials)

    def sample_config(self) -> TrialConfig:
        return self.trials[0].config

    def representatives(self) -> tuple[TrialPlan, ...]:
        """Trials that stand for the design in checks made before anything runs: all of them."""
        return self.trials

    def schedule(self, past: list[PastTrial]) -> Schedule:
        """The trials without a FINISHED run, each under its own key (resumed, never doubled)."""
        finished = {p.key for p in past if p.status == FINISHED}
        pending = [t for t in self.trials if t.key not in finished]
        return Schedule(pending, len(pending), len(self.trials) - len(pending), len(self.trials))

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
            **({"structure": self.structure} if self.structure else {}),
        }


DesignTable = FixedDesign  # the name the plan and its tests grew up with


def _short(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Point:
    """One design point: factor values, values before snapping, its role and its centre run."""

    values: dict[str, Any]
    snapped: dict[str, float] = field(default_factory=dict)
    role: str | None = None  # response surfaces: factorial, axial, edge, center
    run: int = 0  # centre run c of its centre point: its seeds are offset by c * replicates


# ---------------------------------------------------------------------------------------------
# coded points -> factor values
# ---------------------------------------------------------------------------------------------
def _on_scale(factor: Factor, unit: float) -> float:
    """unit in [0, 1] (may exceed for circumscribed designs) -> value between the bounds."""
    lo, hi = factor.bounds
    if unit in (0, 1):  # the ends are the values the user wrote, not exp(log(...)) of them
        return float(lo if unit == 0 else hi)
    if factor.scale == "log":
        return float(math.exp(math.log(lo) + unit * (math.log(hi) - math.log(lo))))
    return float(lo + unit * (hi - lo))


def _level_from_unit(factor: Factor, unit: float) -> Any:
    """unit in [0, 1] -> one of the factor's levels (equal-width strata)."""
    index = min(len(factor.levels) - 1, int(unit * len(factor.levels)))
    return factor.levels[index]


def fixed_fields(spec: StudySpec) -> dict[str, Any]:
    """The TrialConfig fields every trial shares: the study's ``trial:`` block and the workers
    its resources set (``trial:`` as the user wrote it stays untouched)."""
    return {**spec.trial, "workers": spec.resources.workers}


def _default(fixed: dict[str, Any], name: str) -> Any:
    return fixed.get(name, TrialConfig.model_fields[name].default)


def valid_batch_sizes(lo: int, hi: int, fixed: dict[str, Any]) -> list[int]:
    """Batch sizes in [lo, hi] that keep the budget matched (they divide budget_examples) and
    split evenly over the trial's data-parallel workers."""
    budget, workers = _default(fixed, "budget_examples"), _default(fixed, "workers")
    return [d for d in range(max(2, lo), hi + 1) if budget % d == 0 and d % workers == 0]


def _batch_rule(fixed: dict[str, Any]) -> str:
    """What a valid batch size is, in words, for error messages."""
    rule = f"divides budget_examples={_default(fixed, 'budget_examples')}"
    workers = _default(fixed, "workers")
    return rule + (f" and is a multiple of resources.workers={workers}" if workers > 1 else "")


def snap_integer(name: str, value: float, factor: Factor, fixed: dict[str, Any]) -> Any:
    """A continuous value for an integer field -> an integer that keeps the budget matched."""
    if name != "batch_size":
        return round(value)
    lo, hi = factor.bounds
    candidates = valid_batch_sizes(math.ceil(lo), int(hi), fixed)
    if not candidates:
        raise StudyError(
            f"factors.batch_size: no batch size in [{lo:g}, {hi:g}] {_batch_rule(fixed)}, so "
            "no snapped point can match the budget"
        )
    distance = (
        (lambda d: abs(math.log(d / value)))
        if factor.scale == "log"
        else (lambda d: abs(d - value))
    )
    return min(candidates, key=distance)


def _continuous(name: str, factor: Factor, unit: float, fixed: dict, snapped: dict) -> Any:
    return _kept_matched(name, _on_scale(factor, unit), factor, fixed, snapped)


def _kept_matched(name: str, value: float, factor: Factor, fixed: dict, snapped: dict) -> Any:
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


def _points_full_factorial(spec: StudySpec) -> tuple[list[Point], dict]:
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


def _main_letters(n: int) -> str:
    return string.ascii_lowercase[:n]


def check_generators(text: str, names: list[str]) -> list[str]:
    """Validate a fractional-factorial generator string for these factors; returns its words.

    Every word is one column: a single letter is a main factor (``a``, ``b``, …, one each), a
    longer word the product of main factors (``ab``, ``-abc``). A word whose letters cancel to
    a main factor (``aab`` is ``b``) or repeat another column would confound two factors: refused.
    """
    words = text.lower().split()
    where = f"design.generators: {text!r}"
    if len(words) != len(names):
        raise StudyError(
            f"{where} defines {len(words)} columns but the study has {len(names)} factors "
            f"({', '.join(names)}): give one word per factor"
        )
    columns: dict[frozenset, str] = {}
    for word in words:
        bare = word.lstrip("+-")
        if not bare.isalpha() or not bare.isascii():
            raise StudyError(f"{where}: word {word!r} is not made of letters (a, b, ab, -abc)")
    mains = [w.lstrip("+-") for w in words if len(w.lstrip("+-")) == 1]
    if mains != list(_main_letters(len(mains))):
        raise StudyError(
            f"{where}: the main factors (single letters) must be "
            f"{' '.join(_main_letters(len(mains))) or 'a b c …'}, once each and in that order; "
            f"got {' '.join(mains) or 'none'}"
        )
    for word in words:
        bare = word.lstrip("+-")
        strange = sorted(set(bare) - set(mains))
        if strange:
            raise StudyError(
                f"{where}: word {word!r} uses {', '.join(strange)}, which "
                f"{'is not a main factor' if len(strange) == 1 else 'are not main factors'} "
                f"(the main factors are the single letters: {', '.join(mains) or 'none'})"
            )
        # letters that appear twice cancel (x·x = 1 for ±1 columns)
        product = frozenset(c for c in set(bare) if bare.count(c) % 2)
        if not product:
            raise StudyError(f"{where}: word {word!r} cancels to a constant column")
        if product in columns:
            raise StudyError(
                f"{where}: column {word!r} equals column {columns[product]!r}, so two factors "
                "would be confounded with each other; every column must differ"
            )
        columns[product] = word
    return words


# Alias analysis enumerates every word of the 2^k candidates; beyond this many factors it is
# skipped (a study of learned models with more two-level factors is not one we expect).
MAX_ALIAS_FACTORS = 16


def alias_structure(coded: np.ndarray, names: list[str]) -> dict[str, Any]:
    """The defining relation, the aliases up to two-factor interactions and the resolution of a
    two-level fraction, read from its ±1 design matrix (shape (runs, k)).

    Factors are lettered A, B, C, … in study order (``letters``). A word (a product of factor
    columns) is in the defining relation when its column is constant: ``I = ABD = -ACE`` (+1 or
    -1). The resolution is the length of the shortest word (None for a full factorial). Alias
    chains list the main effects and two-factor interactions whose columns coincide (``-``:
    opposite sign), every main effect's chain and each two-factor chain with more than one
    member, as in Montgomery, Design and Analysis of Experiments, §8.4.
    """
    k = len(names)
    letters = {string.ascii_uppercase[i]: name for i, name in enumerate(names)}
    if k > MAX_ALIAS_FACTORS:
        return {"letters": letters, "defining_relation": None, "resolution": None,
                "aliases": None,
                "note": f"alias analysis skipped beyond {MAX_ALIAS_FACTORS} factors"}  # fmt: skip
    signs = np.sign(np.asarray(coded, dtype=float))
    runs = len(signs)

    def column(word: tuple[int, ...]) -> np.ndarray:
        return np.prod(signs[:, list(word)], axis=1) if word else np.ones(runs)

    def text(word: tuple[int, ...]) -> str:
        return "".join(string.ascii_uppercase[i] for i in word)

    words = []
    for size in range(1, k + 1):
        for word in itertools.combinations(range(k), size):
            col = column(word)
            if np.all(col == col[0]):
                words.append(("" if col[0] > 0 else "-") + text(word))
    effects = [(i,) for i in range(k)] + list(itertools.combinations(range(k), 2))
    chains, placed = [], set()
    for effect in effects:
        if effect in placed:
            continue
        col = column(effect)
        chain = [text(effect)]
        for other in effects:
            if other != effect and other not in placed:
                dot = float(col @ column(other))
                if abs(dot) == runs:  # identical or opposite columns
                    chain.append(("" if dot > 0 else "-") + text(other))
                    placed.add(other)
        placed.add(effect)
        if len(effect) == 1 or len(chain) > 1:
            chains.append(" = ".join(chain))
    resolution = min((len(w.lstrip("-")) for w in words), default=None)
    return {"letters": letters, "defining_relation": ["I", *words], "resolution": resolution,
            "aliases": chains}  # fmt: skip


def _points_fractional(spec: StudySpec) -> tuple[list[Point], dict]:
    names = list(spec.factors)
    design = spec.design
    if len(names) < 3:
        raise StudyError(
            f"design.kind: fractional_factorial needs at least 3 two-level factors, got "
            f"{len(names)} ({', '.join(names)}); use full_factorial"
        )
    lows_highs = every_factor(names, lambda n: _two_levels(n, spec.factors[n]))
    if design.generators:
        check_generators(design.generators, names)
        try:
            from pydoe import fracfact

            coded = fracfact(design.generators.lower())
        except ValueError as err:  # anything our check did not foresee still names the field
            raise StudyError(f"design.generators: {design.generators!r}: {err}") from None
    else:
        try:
            from pydoe import fracfact_by_res

            coded = fracfact_by_res(len(names), design.resolution or 3)
        except ValueError as err:
            raise StudyError(
                f"design.resolution: {design.resolution}: no two-level fractional factorial of "
                f"that resolution for {len(names)} factors ({err})"
            ) from None
    points = [
        Point({n: lows_highs[n][int(c > 0)] for n, c in zip(names, row, strict=True)})
        for row in coded
    ]
    return points, alias_structure(coded, names)


# Response-surface designs: coded rows (factorial/axial/edge points, then centre runs) and the
# role of each row. Coded units: -1 and +1 are a factor's bounds, 0 its centre on its scale.
def rotatable_alpha(k: int) -> float:
    """(2^k)^(1/4): the prediction variance depends only on the distance from the centre
    (NIST e-Handbook 5.3.3.6.1, Table 3.23: 1.414 for 2 factors, 1.682 for 3)."""
    return float((2**k) ** 0.25)


def orthogonal_alpha(k: int, center: int) -> float:
    """The alpha at which the pure quadratic columns of one unblocked CCD are orthogonal.

    With F = 2^k factorial runs and N = F + 2k + center runs in all, the centred columns x_i^2
    and x_j^2 are orthogonal when (F + 2 alpha^2)^2 = F N (Myers, Montgomery and Anderson-Cook,
    Response Surface Methodology, §7.4): alpha = sqrt((sqrt(F N) - F) / 2). pyDOE's
    "orthogonal" is another thing, orthogonal blocking of a two-block design.
    """
    f = 2**k
    return float(math.sqrt((math.sqrt(f * (f + 2 * k + center)) - f) / 2))


def ccd_alpha(k: int, face: str, alpha: str | float, center: int) -> float:
    """The axial distance in coded units (ccf: 1); errors never reach here (the spec checks)."""
    if face == "ccf":
        return 1.0
    if alpha == "rotatable":
        return rotatable_alpha(k)
    if alpha == "orthogonal":
        return orthogonal_alpha(k, center)
    return float(alpha)


def ccd_coded(k: int, face: str, alpha: float, center: int) -> tuple[np.ndarray, list[str]]:
    """Central composite design in coded units and each row's role.

    Rows (shape (2^k + 2k + center, k)): the 2^k factorial points (pyDOE ``ff2n``: the first
    factor varies slowest, as in every table of this project; NIST lists the same rows in Yates
    order), the 2k axial points (-a, +a on each factor in turn), the centre runs. ccc: factorial
    at ±1, axial at ±alpha (outside the bounds); cci: the ccc scaled by 1/alpha, so axial points
    sit on the bounds; ccf: axial at ±1. Roles: factorial, axial, center.
    """
    from pydoe import ff2n

    factorial = ff2n(k)
    axial = np.zeros((2 * k, k))
    for i in range(k):
        axial[2 * i : 2 * i + 2, i] = [-1.0, 1.0]
    if face == "cci":
        factorial = factorial / alpha
    elif face == "ccc":
        axial = axial * alpha
    coded = np.vstack([factorial, axial, np.zeros((center, k))])
    roles = ["factorial"] * len(factorial) + ["axial"] * len(axial) + ["center"] * center
    return coded, roles


def bb_coded(k: int, center: int) -> tuple[np.ndarray, list[str]]:
    """Box-Behnken design in coded units (pyDOE ``bbdesign``) and each row's role.

    Rows (shape (4 * k(k-1)/2 + center, k)): for every pair of factors a 2^2 factorial (first
    of the pair slowest) with the others at 0 (midpoints of the cube's edges), then the centre
    runs. Roles: edge, center. This is Box and Behnken's construction for 3 to 5 factors; their
    designs for 6 or more cross larger blocks, pyDOE crosses pairs still. Needs k >= 3 (checked
    by the caller).
    """
    from pydoe import bbdesign

    edges = bbdesign(k, center=0)
    coded = np.vstack([edges, np.zeros((center, k))])
    return coded, ["edge"] * len(edges) + ["center"] * center


def _numeric_split(spec: StudySpec) -> tuple[list[str], list[str]]:
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


def _check_levels_kept(spec: StudySpec, numeric: list[str]) -> None:
    """A response-surface design spans a numeric factor's two ends and places its own centre
    (the middle on the factor's scale): a level the user wrote between them would be replaced
    without a word, so it is refused, unless it is that centre."""
    every_factor(numeric, lambda name: _level_kept(spec, name))


def _level_kept(spec: StudySpec, name: str) -> None:
    factor = spec.factors[name]
    if factor.levels is not None and len(factor.levels) > 2:
        lo, hi = factor.bounds
        centre = _on_scale(factor, 0.5)
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


def _points_central_composite(spec: StudySpec) -> tuple[list[Point], dict]:
    numeric, categorical = _numeric_split(spec)
    _check_levels_kept(spec, numeric)
    design = spec.design
    k = len(numeric)
    if k == 1:  # no axial points on one axis: low, high and the centre runs
        if "alpha" in design.model_fields_set and design.face != "ccf":
            raise StudyError(
                f"design.alpha: {design.alpha!r} needs at least 2 numeric factors, got 1 "
                f"({numeric[0]}): one factor has low, high and centre runs only; remove alpha"
            )
        coded = np.array([[-1.0], [1.0]] + [[0.0]] * design.center)
        roles = ["factorial", "factorial"] + ["center"] * design.center
        alpha = 1.0
    else:
        alpha = ccd_alpha(k, design.face, design.alpha, design.center)
        coded, roles = ccd_coded(k, design.face, alpha, design.center)
    structure = {"face": design.face, "alpha": alpha, "alpha_rule": design.alpha,
                 "center_runs": design.center, "numeric_factors": numeric}  # fmt: skip
    return _coded_points(spec, numeric, categorical, coded, roles), structure


def _points_box_behnken(spec: StudySpec) -> tuple[list[Point], dict]:
    numeric, categorical = _numeric_split(spec)
    _check_levels_kept(spec, numeric)
    if len(numeric) < 3:
        raise StudyError(
            f"design.kind: box_behnken needs at least 3 numeric factors, got {len(numeric)} "
            f"({', '.join(numeric)}); use central_composite"
        )
    coded, roles = bb_coded(len(numeric), spec.design.center)
    structure = {"center_runs": spec.design.center, "numeric_factors": numeric}
    return _coded_points(spec, numeric, categorical, coded, roles), structure


def _coded_points(
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
                n: _continuous(n, spec.factors[n], (c + 1) / 2, fixed, snapped)
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


def _points_latin_hypercube(spec: StudySpec) -> tuple[list[Point], dict]:
    names = list(spec.factors)
    if not spec.design.samples:
        raise StudyError("design.samples: latin_hypercube needs samples (how many points)")
    from pydoe import lhs

    units = lhs(len(names), samples=spec.design.samples, criterion="maximin", seed=spec.design.seed)
    points = []
    for row in units:
        snapped: dict[str, float] = {}
        values = {}
        for name, unit in zip(names, row, strict=True):
            factor = spec.factors[name]
            if factor.range is not None:
                values[name] = _continuous(name, factor, float(unit), fixed_fields(spec), snapped)
            else:
                values[name] = _level_from_unit(factor, float(unit))
        points.append(Point(values, snapped))
    return points, {}


def _points_listed(spec: StudySpec) -> tuple[list[Point], dict]:
    """``design.points`` as written: each names a value of every factor, a numeric one within
    the factor's bounds, a categorical one among its levels; integer fields (the batch size)
    snap to a value that keeps the budget matched, and say so."""
    listed = spec.design.points
    if not listed:
        raise StudyError("design.points: a points design needs its points (a list of factor "
                         "values)")  # fmt: skip
    points, problems = [], []
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
        points.append(Point(values, snapped))
    refuse_all(problems)
    return points, {}


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
    return _kept_matched(name, number, factor, fixed, snapped)


GENERATORS = {
    "points": _points_listed,
    "full_factorial": _points_full_factorial,
    "fractional_factorial": _points_fractional,
    "central_composite": _points_central_composite,
    "box_behnken": _points_box_behnken,
    "latin_hypercube": _points_latin_hypercube,
}


# ---------------------------------------------------------------------------------------------
# the augmented design: block 1 the factorial as planned, block 2 its axial and centre points
# ---------------------------------------------------------------------------------------------
def check_augmentable(spec: StudySpec) -> list[str]:
    """The numeric factors of a two-level factorial that a central composite can extend;
    StudyError naming the field and value for any other study."""
    kind = spec.design.kind
    if kind not in ("full_factorial", "fractional_factorial") or spec.design.augments:
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
    value = _on_scale(factor, (coded + 1) / 2)
    if name not in INTEGER_FIELDS:
        return value
    if name == "batch_size":
        candidates = valid_batch_sizes(2, _default(fixed, "budget_examples"), fixed)
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
            f"{_batch_rule(fixed)}), inside the factorial's range "
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
                    values[name] = _continuous(name, factor, (c + 1) / 2, fixed, snapped)
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
    base = _fixed_design(base_spec)
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


# ---------------------------------------------------------------------------------------------
# the table
# ---------------------------------------------------------------------------------------------
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


def build_design(spec: StudySpec) -> FixedDesign | AdaptiveDesign:
    """The study's design, every trial (or the adaptive space) validated before anything runs."""
    if "budget_examples" in spec.factors:
        levels = spec.factors["budget_examples"].levels or list(
            spec.factors["budget_examples"].range
        )
        raise StudyError(
            f"factors.budget_examples: the budget cannot be a factor (got {levels}): every trial "
            "of a study sees the same number of examples (run one study per budget)"
        )
    if spec.design.augments is not None:  # a second block of a finished factorial
        design: FixedDesign | AdaptiveDesign = augmented_design(spec)
    elif spec.design.kind == "optuna":
        design = _adaptive_design(spec)
    else:
        design = _fixed_design(spec)
    reported = evaluation_metrics(design.sample_config())
    _check_metric("target.metric", spec.target.metric, reported)
    for i, goal in enumerate(spec.goals):
        _check_metric(f"goals.{i}.metric", goal.metric, reported)
    return design


def _check_metric(where: str, metric: str, reported: tuple[str, ...]) -> None:
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
    return (f"choose a trial.budget_examples that every batch size divides "
            f"({', '.join(str(b) for b in sorted(sizes))}: their least common multiple is "
            f"{step}); the nearest budgets that fit all of them are {fits}")


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


def _fixed_design(spec: StudySpec) -> FixedDesign:
    points, structure = GENERATORS[spec.design.kind](spec)
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
        raise StudyError("; ".join(s for s in merged_budget_problems(spec, trials,
                                                                    list(problems.values())) if s))
    examples = {t.config.examples_seen for t in trials}
    if len(examples) != 1:  # cannot happen while the budget is fixed; guard the invariant
        raise StudyError(f"trials would see different numbers of examples: {sorted(examples)}")
    return FixedDesign(spec, tuple(trials), structure)


# ---------------------------------------------------------------------------------------------
# adaptive designs (Optuna)
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AdaptiveDesign:
    """``samples`` trials proposed one at a time by Optuna's TPE sampler (seeded by
    ``design.seed``) on ``design.metric``; every factor's space is validated up front."""

    spec: StudySpec
    trials: tuple[TrialPlan, ...] = ()
    adaptive = True

    @property
    def total(self) -> int:
        return int(self.spec.design.samples or 0)

    def sample_config(self) -> TrialConfig:
        return adaptive_sample(self.spec)

    def representatives(self) -> tuple[TrialPlan, ...]:
        """The space's first corner, as a trial, for checks made before anything runs."""
        config = self.sample_config()
        factors = {n: getattr(config, n) for n in self.spec.factors}
        return (TrialPlan("o-sample", 0, config.seed, factors, config, proposal="o-sample"),)

    def schedule(self, past: list[PastTrial]) -> Schedule:
        """Finished trials warm the sampler; unfinished ones are proposed again first, under
        their own keys, so each resumes from its checkpoint in its own run."""
        return _OptunaSchedule(self.spec, past)

    def totals(self) -> dict[str, Any]:
        budget = self.sample_config().examples_seen
        return {"trials": self.total, "points": self.total, "replicates": 1,
                "examples_per_trial": budget, "examples": budget * self.total,
                "steps": None}  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {
            "study": self.spec.study,
            "design": self.spec.design.kind,
            "spec_sha": self.spec.sha,
            "trials": [],
            "totals": self.totals(),
            "adaptive": {"samples": self.total, "metric": self.spec.design.metric,
                         "mode": self.spec.design.mode, "factors": list(self.spec.factors),
                         "objectives": [{"metric": m, "mode": d}
                                        for _, m, d in objectives_of(self.spec)]},
        }  # fmt: skip


def _adaptive_design(spec: StudySpec) -> AdaptiveDesign:
    design = spec.design
    if not design.samples or not (design.metric or design.objectives):
        raise StudyError("design: optuna needs samples (how many trials) and metric (to "
                         "optimise), or objectives (several at once)")  # fmt: skip
    if design.replicates != 1:
        raise StudyError(
            f"design.replicates: optuna proposes each point once, got {design.replicates}; "
            "re-run the best points in a factorial study to replicate them"
        )
    sample = adaptive_sample(spec)  # the space's first corner must be a valid trial
    for where, metric, _ in objectives_of(spec):
        _check_metric(where, metric, final_metrics(sample))
    for name, factor in spec.factors.items():
        if name == "batch_size" and factor.range is not None:
            batch_sizes_matching(spec, factor, required=True)
    return AdaptiveDesign(spec)


def objectives_of(spec: StudySpec) -> list[tuple[str, str, str]]:
    """(where in the study file, metric, max | min) of each objective an Optuna design seeks."""
    design = spec.design
    if design.objectives:
        return [(f"design.objectives.{i}.metric", o.metric, o.mode)
                for i, o in enumerate(design.objectives)]  # fmt: skip
    return [("design.metric", design.metric, design.mode)]


def _sampler(spec: StudySpec, several: bool):
    """NSGA-II for several objectives unless the study asks for TPE (multi-objective TPE); TPE
    for one. NSGA-II's population is a third of the samples (4 to 50), so that a small study
    still breeds a few generations instead of sampling at random throughout."""
    import optuna

    seed = spec.design.seed
    if several and (spec.design.sampler or "nsga2") == "nsga2":
        population = max(4, min(50, int(spec.design.samples or 0) // 3))
        return optuna.samplers.NSGAIISampler(population_size=population, seed=seed)
    return optuna.samplers.TPESampler(seed=seed)


def adaptive_sample(spec: StudySpec) -> TrialConfig:
    """One valid trial of an adaptive design: every factor at its first level or lower bound
    (batch sizes snapped to the budget), for checks that need a concrete trial."""
    values = {}
    for name, factor in spec.factors.items():
        if factor.levels is not None:
            values[name] = factor.levels[0]
        else:
            values[name] = _continuous(name, factor, 0.0, fixed_fields(spec), {})
    return trial_config(spec, values, spec.design.seed)


def batch_sizes_matching(spec: StudySpec, factor: Factor, required: bool = False) -> list[int]:
    """Every batch size inside the factor's bounds that divides the budget (optuna's choices)."""
    fixed = fixed_fields(spec)
    lo, hi = factor.bounds
    found = valid_batch_sizes(math.ceil(lo), int(hi), fixed)
    if required and not found:
        raise StudyError(
            f"factors.batch_size: no batch size in [{lo:g}, {hi:g}] {_batch_rule(fixed)}, so "
            "no proposal can match the budget"
        )
    return found


def _distributions(spec: StudySpec) -> dict[str, Any]:
    """Optuna distributions of the factors: levels by index, ranges on their scale."""
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    space: dict[str, Any] = {}
    for name, factor in spec.factors.items():
        log = factor.scale == "log"
        if factor.levels is not None:
            space[name] = CategoricalDistribution(list(range(len(factor.levels))))
        elif name == "batch_size":
            space[name] = CategoricalDistribution(batch_sizes_matching(spec, factor))
        elif name in INTEGER_FIELDS:
            lo, hi = factor.bounds
            space[name] = IntDistribution(math.ceil(lo), math.floor(hi), log=log)
        else:
            lo, hi = factor.bounds
            space[name] = FloatDistribution(lo, hi, log=log)
    return space


class _OptunaSchedule(Schedule):
    """Ask/tell over an in-memory Optuna study rebuilt from the record at every (re)start."""

    def __init__(self, spec: StudySpec, past: list[PastTrial]) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.spec = spec
        self.space = _distributions(spec)
        self.objectives = [(metric, mode) for _, metric, mode in objectives_of(spec)]
        directions = ["maximize" if mode == "max" else "minimize" for _, mode in self.objectives]
        sampler = _sampler(spec, several=len(directions) > 1)
        self.study = optuna.create_study(directions=directions, sampler=sampler)
        finished = [p for p in past if p.status == FINISHED]
        for trial in finished:
            self._tell_past(trial.config, self._values(trial.metrics))
        remaining = max(0, self.total_samples - len(finished))
        unfinished = [self._plan(p.key, p.config) for p in past if p.status != FINISHED]
        super().__init__(unfinished[:remaining], remaining, len(finished), self.total_samples)
        self.asked: dict[str, Any] = {}  # key -> optuna trial awaiting its value
        self.resumed = {plan.key: plan for plan in self.queued}
        # every proposal trains with a seed of its own: the sampler may propose a point twice
        # (a categorical space certainly will), and the same point with the same seed is the
        # same trial again, not a second observation
        self.seeds = {int(p.config.get("seed", spec.design.seed)) for p in past}
        self.seeds |= {plan.seed for plan in self.queued}

    @property
    def total_samples(self) -> int:
        return int(self.spec.design.samples or 0)

    def __getstate__(self) -> dict[str, Any]:
        """Without the Optuna study: Ray Tune pickles its tuner with the search algorithm
        (tuner.pkl), but a study resumes from its MLflow record, never from that file, and an
        NSGA-II sampler holds a thread lock, which cannot be pickled. An unpickled schedule
        proposes nothing until it is rebuilt from the record (:meth:`AdaptiveDesign.schedule`)."""
        return {k: v for k, v in self.__dict__.items() if k != "study"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.study = None

    def _params(self, config: dict[str, Any]) -> dict[str, Any]:
        typed = TrialConfig(**config)
        params = {}
        for name, factor in self.spec.factors.items():
            value = getattr(typed, name)
            params[name] = factor.levels.index(value) if factor.levels is not None else value
        return params

    def _values(self, metrics: dict[str, Any] | None) -> list[float] | None:
        """The objectives' values in a trial's results; None when one is missing or not finite
        (the trial then counts as failed: it cannot place a point on the front)."""
        values = []
        for metric, _ in self.objectives:
            value = None if metrics is None else metrics.get(metric)
            if not isinstance(value, int | float) or isinstance(value, bool):
                return None
            if not math.isfinite(value):
                return None
            values.append(float(value))
        return values

    def _tell_past(self, config: dict[str, Any], values: list[float] | None) -> None:
        import optuna

        try:
            params = self._params(config)
        except ValueError:  # a recorded value outside today's levels: it cannot guide the sampler
            return
        self.study.add_trial(optuna.trial.create_trial(
            params=params, distributions=self.space, values=values,
            state=optuna.trial.TrialState.COMPLETE if values else optuna.trial.TrialState.FAIL,
        ))  # fmt: skip

    def _plan(self, key: str, config: dict[str, Any]) -> TrialPlan:
        typed = TrialConfig(**config)
        factors = {n: getattr(typed, n) for n in self.spec.factors}
        return TrialPlan(key, 0, typed.seed, factors, typed, proposal=key)

    def _propose(self, trial_id: str) -> TrialPlan | None:
        trial = self.study.ask(self.space)
        values = {}
        for name, factor in self.spec.factors.items():
            raw = trial.params[name]
            values[name] = factor.levels[raw] if factor.levels is not None else raw
        key = f"o-{trial_id}"
        seed = self.spec.design.seed
        while seed in self.seeds:
            seed += 1
        self.seeds.add(seed)
        config = trial_config(self.spec, values, seed)
        self.asked[key] = trial
        return TrialPlan(key, 0, config.seed, values, config, proposal=key)

    def observe(self, key: str, result: dict[str, Any] | None) -> None:
        import optuna

        values = self._values(result)
        trial = self.asked.pop(key, None)
        if trial is not None:
            if values:
                self.study.tell(trial, values if len(values) > 1 else values[0])
            else:
                self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        elif key in self.resumed:  # proposed in an earlier run: it joins the history now
            self._tell_past(self.resumed.pop(key).config.model_dump(), values)
