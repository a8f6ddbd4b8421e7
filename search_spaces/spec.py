"""The study file: schema, loading, and its fingerprint.

A study file is YAML (every key: ``docs/study-file.md``)::

    study: digits-tau-batch              # MLflow experiment name
    description: temperature × batch size on digits
    trial: {dataset: digits, budget_examples: 61440, lr_scaling: sqrt}   # fixed TrialConfig fields
    factors:
      temperature: {levels: [0.1, 0.5], scale: log}
      batch_size: {levels: [64, 256], scale: log}
      lam_t: {range: [0.5, 4.0], scale: log}
    design: {kind: full_factorial, replicates: 2}
    resources: {cpu: 1, gpu: 0}
    target: {metric: probe/knn_top1_h, mode: max}
    goals:                               # optional: several responses at once (desirability)
      - {metric: probe/knn_top1_h, goal: max, low: 0.8, high: 0.95}
      - {metric: z/uniform, goal: min, low: -3.5, high: -2.0, weight: 1, importance: 1}

Every model forbids unknown keys. Values of fixed fields and factors are validated against
:class:`trainables.config.TrialConfig` row by row when the design is built.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from search_spaces.aims import Goal, Target
from search_spaces.designs.registry import KIND_NAMES, options_read
from search_spaces.spec_base import MAX_NAME, StudyError, _Strict
from search_spaces.study_text import BOMS as BOMS  # re-exported: spec is where callers look
from search_spaces.study_text import read_study_text, yaml_refusal
from trainables.config import TrialConfig
from trainables.machine import parse_size
from trainables.metrics import better
from trainables.names import (
    FIELD_SYNONYMS,
    UNKNOWN_KEY,
    choice_error,
    did_you_mean,
    listing,
    unknown,
)
from trainables.text import NUMBER, base_type, load_yaml, typed_inputs

SPEC_DIR = Path(__file__).resolve().parent
DEFAULT_SPEC = SPEC_DIR / "default.yaml"


PRINTED_DIGITS = 6  # the most significant digits a level is shown with anywhere


def _printed_alike(levels: list[Any]) -> str:
    """The first pair of distinct numeric levels that print alike at :data:`PRINTED_DIGITS`
    significant digits ('0.1 and 0.10000000000000002'), or ''."""
    numbers = [v for v in levels if isinstance(v, int | float) and not isinstance(v, bool)]
    seen: dict[str, Any] = {}
    for v in numbers:
        shown = f"{float(v):.{PRINTED_DIGITS}g}"
        if shown in seen and seen[shown] != v:
            return f"{seen[shown]!r} and {v!r}"
        seen.setdefault(shown, v)
    return ""


class Factor(_Strict):
    """One varied TrialConfig field: discrete ``levels`` or a numeric ``range``, on a ``scale``."""

    levels: list[Any] | None = None
    range: tuple[float, float] | None = None
    scale: Literal["linear", "log"] = "linear"

    @model_validator(mode="after")
    def _one_of(self) -> Factor:
        if (self.levels is None) == (self.range is None):
            raise ValueError("give exactly one of levels or range")
        if self.levels is not None:
            if not self.levels:
                raise ValueError("levels is empty")
            seen = [json.dumps(v, sort_keys=True) for v in self.levels]
            dupes = {s: v for s, v in zip(seen, self.levels, strict=True) if seen.count(s) > 1}
            if dupes:
                shown = ", ".join(_shown(v) for _, v in sorted(dupes.items()))
                raise ValueError(f"levels repeat {shown}")
            alike = _printed_alike(self.levels)
            if alike:
                raise ValueError(
                    f"levels {alike} differ by less than a reader can see: every table, run "
                    f"name and report prints them alike ({PRINTED_DIGITS} significant digits), "
                    "so they would be two design points that read as one; remove one or space "
                    "them apart"
                )
        if self.range is not None:
            lo, hi = self.range
            if not (math.isfinite(lo) and math.isfinite(hi)) or lo >= hi:
                raise ValueError(
                    f"range must be [low, high] with low < high, got {list(self.range)}"
                )
        if self.scale == "log" and any(v <= 0 for v in self.numeric_values()):
            raise ValueError(
                f"scale log needs positive values, got {self.levels or list(self.range)}"
            )
        return self

    def typed_for(self, name: str) -> Factor:
        """This factor with its levels converted by the TrialConfig field's declared type.

        ``1e-4`` typed for a float field is the number 0.0001, ``20240501`` for a text field is
        that text; a level the type cannot hold, a ``range`` on a field that is not numeric and
        a ``scale`` on a factor that is not numeric are refused with the reason.
        """
        field = TrialConfig.model_fields[name]
        kind = base_type(field.annotation)
        numeric = kind in (int, float)
        what = kind_words(name)
        if self.range is not None and not numeric:
            raise ValueError(
                f"range {list(self.range)} needs a numeric field, but {name} takes {what}; "
                "give levels instead"
            )
        if self.range is not None and kind is int and math.ceil(min(self.range)) > math.floor(
                max(self.range)):  # fmt: skip
            raise ValueError(
                f"range {list(self.range)} holds no whole number, but {name} takes {what}: "
                "every design would round its values outside the range; widen it to include "
                "one, or give levels"
            )
        if "scale" in self.model_fields_set and not numeric:
            raise ValueError(
                f"scale {self.scale!r} applies to numeric factors only, but {name} takes {what} "
                f"(levels {self.levels}): its levels are categories with no order or spacing; "
                "remove scale"
            )
        if self.levels is None:
            return self
        adapter = TypeAdapter(field.annotation)
        levels = []
        for level in self.levels:
            value = typed_inputs({name: level}, {name: field.annotation})[name]
            wrong = choice_error(field.annotation, value)
            if wrong:
                raise ValueError(f"level {wrong}")
            try:
                levels.append(adapter.validate_python(value))
            except ValidationError as err:
                reason = err.errors()[0]["msg"]
                raise ValueError(f"level {level!r}: {name} takes {what}: {reason}") from None
        data = {k: getattr(self, k) for k in self.model_fields_set} | {"levels": levels}
        try:
            return Factor(**data)
        except ValidationError as err:
            raise ValueError(err.errors()[0]["msg"].removeprefix("Value error, ")) from None

    @property
    def is_numeric(self) -> bool:
        if self.range is not None:
            return True
        return all(isinstance(v, int | float) and not isinstance(v, bool) for v in self.levels)

    def numeric_values(self) -> list[float]:
        if self.range is not None:
            return list(self.range)
        return [
            float(v) for v in self.levels if isinstance(v, int | float) and not isinstance(v, bool)
        ]

    @property
    def bounds(self) -> tuple[float, float]:
        values = self.numeric_values()
        return min(values), max(values)


_KIND_WORDS = {
    int: "integers", float: "numbers", str: "text", bool: "booleans (true/false)",
    tuple: "lists",
}  # fmt: skip


def kind_words(name: str) -> str:
    """What a TrialConfig field takes, in words (for messages)."""
    annotation = TrialConfig.model_fields[name].annotation
    return _KIND_WORDS.get(base_type(annotation), f"values of type {annotation}")


# Centre runs of a response-surface design unless the study says otherwise: the textbook
# rule of thumb of 3 to 5 (NIST e-Handbook 5.3.3.5, Montgomery §11.4), at its cheap end: every
# run trains a model, and 3 runs give 2 degrees of freedom of pure error. Box and Behnken's own
# 3- and 4-factor designs have 3.
DEFAULT_CENTER = 3
ALPHA_WORDS = ("rotatable", "orthogonal")


class Augments(_Strict):
    """``design.augments``: the finished two-level factorial a central composite design extends
    (``study augment``). Its trials are the design's block 1, kept as recorded (never re-run);
    the axial and centre points are block 2. ``spec_sha`` is that study's fingerprint: the
    factorial's study file is this one with ``design`` set to ``kind`` (and ``generators`` or
    ``resolution``), ``replicates`` and ``seed``, so the factors, fixed fields, budget and
    resources cannot differ from it."""

    spec_sha: str = Field(pattern=r"^[0-9a-f]{16}$")
    kind: Literal["full_factorial", "fractional_factorial"]
    generators: str | None = None
    resolution: int | None = Field(None, ge=3)


class Objective(_Strict):
    """One objective of a multi-objective Optuna design: a metric and its direction (by default
    the catalogue's, :func:`trainables.metrics.better`: a loss, alignment or uniformity is
    minimised)."""

    metric: str
    mode: Literal["max", "min"] = None  # type: ignore[assignment]

    @model_validator(mode="after")
    def _direction(self) -> Objective:
        if self.mode is None:
            object.__setattr__(self, "mode", better(self.metric))
        return self


class Design(_Strict):
    """How factor levels become design points."""

    kind: Literal[KIND_NAMES] = "full_factorial"  # the registry's kinds, in its order
    replicates: int = Field(1, ge=1)
    # replicate r of every point runs with seed + r (common random numbers); centre run c of a
    # response-surface design runs with seed + c * replicates + r, so no two centre runs share one
    seed: int = 0
    # fractional_factorial: pyDOE generator string ("a b c abc") or a resolution (3, 4, 5 …)
    generators: str | None = None
    resolution: int | None = Field(None, ge=3)
    # central_composite: face-centred (ccf, inside the levels), inscribed (cci) or circumscribed
    face: Literal["ccf", "cci", "ccc"] = "ccf"
    # central_composite: the axial distance in coded units: rotatable (2^k)^(1/4), orthogonal
    # (orthogonal quadratic effects) or a number >= 1; None is the face's own: rotatable for ccc
    # and cci, 1 for ccf (resolved when the spec is read, so the canonical file names it)
    alpha: str | float | None = None
    # central_composite and box_behnken: centre runs, each with its own seed (pure error)
    center: int = Field(DEFAULT_CENTER, ge=1)
    # latin_hypercube and optuna: how many points
    samples: int | None = Field(None, ge=1)
    # central_composite: the finished two-level factorial it extends as a second block (left
    # out of model_dump, so every fingerprint made before it existed stays the same)
    augments: Augments | None = Field(None, exclude=True)
    # points: the design points themselves, each naming a value of every factor (study next
    # writes the points along a path of steepest ascent this way)
    points: tuple[dict[str, Any], ...] | None = None
    # optuna: the metric to optimise, and its direction (by default the catalogue's, resolved
    # when the file is read: trainables.metrics.better)
    metric: str | None = None
    mode: Literal["max", "min"] = None  # type: ignore[assignment]
    # optuna, several objectives at once (instead of metric and mode): the Pareto front is
    # sought, by NSGA-II (sampler nsga2, the default) or multi-objective TPE (sampler tpe)
    objectives: tuple[Objective, ...] | None = None
    sampler: Literal["nsga2", "tpe"] | None = None

    @field_validator("alpha", mode="before")
    @classmethod
    def _alpha(cls, value: Any) -> Any:
        """``rotatable``, ``orthogonal`` or a number >= 1 (the loader keeps numbers as text)."""
        if value is None:
            return None
        if isinstance(value, str) and value.strip().lower() in ALPHA_WORDS:
            return value.strip().lower()
        numeric_text = isinstance(value, str) and NUMBER.match(value.strip())
        number_given = isinstance(value, int | float) and not isinstance(value, bool)
        if not (numeric_text or number_given):
            hint = did_you_mean(str(value).strip().lower(), ALPHA_WORDS)
            raise ValueError(
                f"design.alpha: must be rotatable, orthogonal or a number (got "
                f"{_shown(value)}){hint}"
            )
        number = float(value)
        if not (math.isfinite(number) and number >= 1):
            raise ValueError(
                f"design.alpha: must be at least 1 (got {_shown(value)}): the axial points "
                "lie at ±alpha coded units and alpha < 1 would put them inside the factorial cube"
            )
        return number

    @field_validator("points")
    @classmethod
    def _numbers_in_points(cls, points):
        """A point's numbers as numbers, however they were read (the loader keeps text), and
        whole ones as integers, so a file and the mapping it was written from agree."""
        if points is None:
            return None

        def number(value: Any) -> Any:
            if isinstance(value, str) and NUMBER.match(value.strip()):
                value = float(value)
            if isinstance(value, float) and value.is_integer():
                return int(value)
            return value

        return tuple({k: number(v) for k, v in point.items()} for point in points)

    @model_validator(mode="after")
    def _direction(self) -> Design:
        if self.mode is None:
            object.__setattr__(self, "mode", better(self.metric) if self.metric else "max")
        return self

    @model_validator(mode="after")
    def _face_alpha(self) -> Design:
        """ccf has alpha = 1 by definition (its axial points are the faces' centres); ccc and
        cci default to the rotatable alpha."""
        if self.kind != "central_composite":
            return self
        if self.face == "ccf":
            if self.alpha is not None and self.alpha != 1.0:
                raise ValueError(
                    f"design.alpha: {self.alpha!r} does not apply to face 'ccf', whose axial "
                    "points sit on the faces (alpha = 1); use face ccc or cci, or remove alpha"
                )
            object.__setattr__(self, "alpha", 1.0)
        elif self.alpha is None:
            object.__setattr__(self, "alpha", "rotatable")
        if self.augments is not None and self.face == "cci":
            raise ValueError(
                "design.face: 'cci' cannot augment a finished factorial: it would move the "
                "factorial points inside the bounds (±1/alpha); use ccf (alpha 1) or ccc"
            )
        return self

    @model_validator(mode="after")
    def _options_apply(self) -> Design:
        """An option the design kind does not use would be silently ignored: refuse it."""
        for option in sorted(self.model_fields_set):
            kinds = DESIGN_OPTIONS.get(option)
            if kinds is not None and self.kind not in kinds:
                raise ValueError(
                    f"design.{option}: {getattr(self, option)!r} applies to "
                    f"{' and '.join(kinds)} designs only, not kind {self.kind!r}; remove it"
                )
        if self.kind == "latin_hypercube" and self.samples is not None and self.samples < 2:
            # pyDOE's maximin criterion compares distances between samples: one has none
            raise ValueError(
                f"design.samples: a latin_hypercube needs at least 2 samples, got "
                f"{self.samples} (one sample spans no range of any factor)"
            )
        if self.objectives is not None:
            if self.metric is not None:
                raise ValueError(
                    f"design.objectives: give metric ({self.metric!r}) for one objective or "
                    "objectives for several, not both"
                )
            if len(self.objectives) < 2:
                raise ValueError(
                    f"design.objectives: several objectives means two or more, got "
                    f"{len(self.objectives)}; for one, give metric and mode"
                )
            metrics = [o.metric for o in self.objectives]
            twice = sorted({m for m in metrics if metrics.count(m) > 1})
            if twice:
                raise ValueError(f"design.objectives: {twice[0]!r} is listed twice")
        elif self.sampler == "nsga2":
            raise ValueError(
                "design.sampler: 'nsga2' searches several objectives; with one (metric), "
                "leave sampler out (TPE)"
            )
        if self.generators is not None and self.resolution is not None:
            raise ValueError(
                f"design.generators: give generators ({self.generators!r}) or resolution "
                f"({self.resolution}), not both"
            )
        return self


# Options that only some design kinds read -> those kinds (the registry's rows).
DESIGN_OPTIONS = options_read()

# Options added after studies were first recorded: left out of the fingerprint of a design kind
# that does not read them, so a recorded full factorial still resumes under the same spec_sha.
LATER_OPTIONS = ("alpha", "center", "points")
# Options added later to a kind that already had recorded studies: left out of the fingerprint
# while unset, so a recorded single-objective Optuna study keeps its spec_sha.
UNSET_OPTIONS = ("objectives", "sampler")
# TrialConfig fields the study sets from its resources, never from trial: or factors:
SET_BY_RESOURCES = {
    "workers": "{where}.workers: a trial's data-parallel workers are a resource: set "
    "resources.workers (each worker then holds resources.cpu and resources.gpu)",
}


class Resources(_Strict):
    """Per-trial resources; fractional GPUs pack several small trials on one device.

    ``workers`` W > 1 runs each trial as W data-parallel workers (Ray Train), each holding
    ``cpu`` CPUs and ``gpu`` GPUs: a trial holds W × cpu CPUs and W × gpu GPUs in all. The
    trial's ``batch_size`` stays the global batch (each worker takes B / W of it).

    ``memory`` (bytes; written ``2GiB``, ``512MB`` or a number of bytes) is what one trial (each
    worker) holds of Ray's ``memory`` resource: Ray starts no more trials on a node than its
    memory holds. None (the default) asks for none."""

    workers: int = Field(1, ge=1)
    cpu: float = Field(1.0, gt=0)
    gpu: float = Field(0.0, ge=0)
    memory: int | None = Field(None, gt=0)

    @field_validator("memory", mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        return value if value is None else parse_size(value)

    @field_validator("gpu")
    @classmethod
    def _packable(cls, value: float) -> float:
        if value > 1 and value != int(value):
            raise ValueError(f"a trial takes a fraction of one GPU or whole GPUs, got {value}")
        return value

    @model_validator(mode="after")
    def _whole_gpus_per_worker(self) -> Resources:
        # NCCL binds one process to one device: several workers cannot share a GPU's fraction
        if self.workers > 1 and 0 < self.gpu < 1:
            raise ValueError(
                f"resources.gpu: each of workers={self.workers} data-parallel workers needs "
                f"whole GPUs (NCCL gives each worker its own device), got gpu={self.gpu:g}"
            )
        return self

    @property
    def trial_cpu(self) -> float:
        """CPUs one trial holds: every worker's."""
        return self.workers * self.cpu

    @property
    def trial_gpu(self) -> float:
        """GPUs one trial holds: every worker's."""
        return self.workers * self.gpu

    @property
    def trial_memory(self) -> int:
        """Bytes of memory one trial holds: every worker's (0 when it asks for none)."""
        return self.workers * (self.memory or 0)


class Confirms(_Strict):
    """What a confirmation study confirms (``study next --confirm``): the finished ``study``'s
    chosen ``point`` (its factor values, selected among that study's points) and its closest
    ``rival``, with their ids there. Read when the study is analysed: the report says whether
    the chosen point held against its rival, on fresh seeds."""

    study: str
    point_id: str
    point: dict[str, Any]
    rival_id: str
    rival: dict[str, Any]

    @field_validator("point", "rival")
    @classmethod
    def _numbers(cls, values: dict[str, Any]) -> dict[str, Any]:
        """Numbers as numbers, however the loader read them (it keeps text), as a point's."""
        return Design._numbers_in_points((values,))[0]


class StudySpec(_Strict):
    """A whole study file."""

    study: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str = ""
    trial: dict[str, Any] = Field(default_factory=dict)
    factors: dict[str, Factor]
    design: Design = Design()
    resources: Resources = Resources()
    max_concurrent: int | None = Field(None, ge=1)
    max_failures: int = Field(2, ge=0)
    target: Target = Target()
    # the references every result is read against (trainables.baselines): measured once per
    # study, they change no trial, so they are not in the fingerprint
    baselines: tuple[Literal["raw", "random_init", "supervised"], ...] = ("raw", "random_init")
    # several responses at once (the report's overall desirability): read when the study is
    # analysed, they change no trial, so they are not in the fingerprint either
    goals: tuple[Goal, ...] = ()
    # a confirmation study's chosen point and rival: read when analysed, no trial changes
    confirms: Confirms | None = None

    @field_validator("goals")
    @classmethod
    def _goals_once(cls, goals: tuple[Goal, ...]) -> tuple[Goal, ...]:
        metrics = [g.metric for g in goals]
        repeated = sorted({m for m in metrics if metrics.count(m) > 1})
        if repeated:
            raise ValueError(f"goals: {repeated[0]!r} has two goals")
        return goals

    @field_validator("baselines")
    @classmethod
    def _baselines_once(cls, kinds: tuple[str, ...]) -> tuple[str, ...]:
        repeated = sorted({k for k in kinds if kinds.count(k) > 1})
        if repeated:
            raise ValueError(f"baselines: {repeated[0]!r} is listed twice")
        return kinds

    @field_validator("study")
    @classmethod
    def _short_name(cls, name: str) -> str:
        if len(name) > MAX_NAME:
            raise ValueError(
                f"study: a name of {len(name)} characters is too long: at most {MAX_NAME}, "
                "because it names the study's folder, its Ray experiment and its MLflow "
                f"experiment (got {name[:40]!r}…)"
            )
        return name

    @field_validator("factors")
    @classmethod
    def _known_factors(cls, factors: dict[str, Factor]) -> dict[str, Factor]:
        if not factors:
            raise ValueError("a study needs at least one factor")
        known = set(TrialConfig.model_fields)
        problems = []  # every offending factor, named in one refusal
        for name in factors:
            if name in SET_BY_RESOURCES:
                problems.append(SET_BY_RESOURCES[name].format(where="factors"))
            elif name == "seed":
                problems.append(
                    "factors: 'seed' cannot be a factor: the design sets seeds through "
                    "replicates (design.seed, design.replicates)"
                )
            elif name not in known:
                problems.append("factors: " + unknown_field("factor", name, "factors"))
        typed = {}
        for name, factor in factors.items():
            if name not in known or name in SET_BY_RESOURCES or name == "seed":
                continue
            try:
                typed[name] = factor.typed_for(name)
            except ValueError as err:
                problems.append(f"factors.{name}: {err}")
        if problems:
            raise ValueError("; ".join(problems))
        return typed

    @model_validator(mode="after")
    def _fixed_and_varied_disjoint(self) -> StudySpec:
        strange = [name for name in self.trial if name not in TrialConfig.model_fields]
        problems = ["trial: " + unknown_field("TrialConfig field", name, "trial")
                    for name in strange]  # fmt: skip
        problems += [SET_BY_RESOURCES[name].format(where="trial")
                     for name in sorted(set(self.trial) & set(SET_BY_RESOURCES))]  # fmt: skip
        problems += [f"factors.{name}: {name!r} is both a fixed trial field and a factor"
                     for name in sorted(set(self.trial) & set(self.factors))]  # fmt: skip
        if problems:  # every one at once
            raise ValueError("; ".join(problems))
        object.__setattr__(self, "trial", _typed_trial(self.trial))
        return self

    def canonical(self) -> dict[str, Any]:
        """The validated spec as plain data, defaults filled in, less the design options its
        kind does not read: a study file that parses back to this same spec."""
        data = self.model_dump(mode="json")
        for name, factor in self.factors.items():
            if not factor.is_numeric:
                data["factors"][name].pop("scale", None)  # a category has no scale
        for option, kinds in DESIGN_OPTIONS.items():
            if self.design.kind not in kinds:
                data["design"].pop(option, None)
        if self.resources.memory is None:  # asked for none: the file says nothing of it
            data["resources"].pop("memory")
        _add_augments(self, data)
        return data

    @property
    def sha(self) -> str:
        """Fingerprint of everything that changes what runs (the description does not)."""
        unrun = ("description", "baselines", "goals", "confirms")  # no trial changes with these
        data = {k: v for k, v in self.model_dump(mode="json").items() if k not in unrun}
        for option in LATER_OPTIONS:  # absent from fingerprints made before they existed
            if self.design.kind not in DESIGN_OPTIONS[option]:
                data["design"].pop(option, None)
        for option in UNSET_OPTIONS:
            if data["design"].get(option) is None:
                data["design"].pop(option, None)
        if self.resources.workers == 1:  # studies recorded before workers existed keep theirs
            data["resources"].pop("workers")
        if self.resources.memory is None:  # and those recorded before memory existed too
            data["resources"].pop("memory")
        _add_augments(self, data)
        text = json.dumps(data, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _add_augments(spec: StudySpec, data: dict[str, Any]) -> None:
    """``design.augments`` into plain data, for the canonical file and the fingerprint (absent
    when the design augments nothing)."""
    augments = spec.design.augments
    if augments is not None:
        data["design"]["augments"] = augments.model_dump(mode="json", exclude_none=True)


def _typed_trial(trial: dict[str, Any]) -> dict[str, Any]:
    """The fixed fields converted by their declared types (``1e-4`` -> 0.0001, text stays text);
    range checks and cross-field rules are TrialConfig's, row by row, when the design is built."""
    out = {}
    for name, value in trial.items():
        annotation = TrialConfig.model_fields[name].annotation
        value = typed_inputs({name: value}, {name: annotation})[name]
        wrong = choice_error(annotation, value)
        if wrong:
            raise ValueError(f"trial.{name}: {wrong}")
        try:
            out[name] = TypeAdapter(annotation).validate_python(value)
        except ValidationError as err:
            raise ValueError(f"trial.{name}: {err.errors()[0]['msg']} (got {value!r})") from None
    return out


def unknown_field(what: str, name: str, where: str) -> str:
    """An unknown factor or trial key, with the closest TrialConfig fields (``temprature``:
    temperature; ``learning_rate``: base_lr); what a factor may be, in a few words."""
    fields = [f for f in TrialConfig.model_fields if f != "seed" or where != "factors"]
    return unknown(
        what, name, fields, synonyms=FIELD_SYNONYMS, noun="TrialConfig fields",
        how_to_list="every field is listed in trainables/config.py",
    )  # fmt: skip


def _shown(value: Any) -> str:
    """A value as the user typed it: numbers (kept as text by the loader) without quotes."""
    if isinstance(value, str) and NUMBER.match(value):
        return value
    text = repr(value)
    return text if len(text) <= 120 else text[:100] + "…"


def valid_name(name: str) -> str:
    """A study name like ``name`` that the pattern takes: runs of other characters become one
    '-', and it starts with a letter or digit ('my study!' -> 'my-study')."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", name.strip()).strip("-_.")
    return cleaned or "my-study"


def _belongs(name: str, where: str) -> str:
    """Where a known key given at the wrong level belongs ('' when it is no known key): a
    factor dedented to the top level, a design option under trial, a trial field under design."""
    homes = []
    if name in StudySpec.model_fields and where:
        homes.append("at the top level")
    if name in Design.model_fields and where != "design":
        homes.append("under design:")
    if name in Resources.model_fields and where != "resources":
        homes.append("under resources:")
    if name in TrialConfig.model_fields and where not in ("trial", "factors"):
        homes.append("under factors: (to vary it) or trial: (to fix it)")
    if not homes:
        return ""
    return f"; {name!r} is a known key at another level: it belongs {' or '.join(homes)}"


def _format_validation(err: ValidationError, source: str) -> str:
    lines = []
    for e in err.errors():
        where = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        value = e.get("input")
        shown = f" (got {_shown(value)})"
        if isinstance(value, dict) or "(got " in msg or msg.startswith(repr(value)):
            shown = ""  # a whole section, or the message shows the value itself
        key = UNKNOWN_KEY.match(msg)
        if key:
            msg += _belongs(key.group(1).split(".")[-1], where)
        if where == "study" and e.get("type") == "string_pattern_mismatch":
            msg = (f"{_shown(value)} is not a valid study name (letters, digits, '_', '.' and "
                   f"'-', starting with a letter or digit: it names the MLflow experiment and "
                   f"the folder studies/<study>/); try {valid_name(str(value))!r}")  # fmt: skip
            shown = ""
        if key and where:  # an unknown key names itself: put the section before it
            lines.append(f"{source}: {where}.{msg}")
        elif key or re.match(r"^[a-z_]+(\.[A-Za-z0-9_]+)*:", msg):
            lines.append(f"{source}: {msg}{shown}")  # the message names its own field
        else:
            lines.append(f"{source}: {where or '(file)'}: {msg}{shown}")
    return "\n".join(lines)


def parse_spec(data: Any, source: str = "study file") -> StudySpec:
    """Validate a mapping as a study file; errors become one :class:`StudyError`."""
    if not isinstance(data, dict):
        raise StudyError(
            f"{source}: expected a mapping at the top level, got {type(data).__name__}"
        )
    try:
        return StudySpec(**data)
    except ValidationError as err:
        raise StudyError(_format_validation(err, source)) from None


def study_file(path: str | Path | None = None) -> Path:
    """The file a study is read from: ``path``, else a shipped study of that name, else the
    embedded default study (``None``). It need not exist (:func:`load_spec` says so)."""
    file = Path(path) if path is not None else DEFAULT_SPEC
    if not file.exists() and (SPEC_DIR / f"{file}").exists():
        file = SPEC_DIR / f"{file}"
    if not file.exists() and (SPEC_DIR / f"{file}.yaml").exists():
        file = SPEC_DIR / f"{file}.yaml"
    return file


def in_file(err: StudyError, path: str | Path | None) -> StudyError:
    """``err`` naming the study file it is about, as the schema's refusals do: a refusal found
    later (a level a trial refuses, a budget a batch size cannot match) reads the same way."""
    source = str(study_file(path))
    text = str(err)
    return err if text.startswith(source) else StudyError(f"{source}: {text}")


def load_spec(path: str | Path | None = None) -> StudySpec:
    """Read and validate a study file; ``None`` is the embedded default study."""
    return read_spec(path)[0]


def read_spec(path: str | Path | None = None) -> tuple[StudySpec, str]:
    """A study file read once: its validated spec and its text (``None``: the embedded default
    study)."""
    file = study_file(path)
    if not file.is_file():
        raise StudyError(missing_study_file(path))
    text = read_study_text(file)
    try:
        data = load_yaml(text)
    except yaml.YAMLError as err:
        raise StudyError(yaml_refusal(file, err, text)) from None
    return parse_spec(data, str(file)), text


def shipped_studies() -> list[str]:
    """The names of the study files shipped in search_spaces/ (``study run NAME`` finds them)."""
    return sorted(p.stem for p in SPEC_DIR.glob("*.yaml"))


def missing_study_file(path: str | Path | None) -> str:
    """A study file that is not there, with the closest shipped ones."""
    text = str(path)
    name = Path(text).name.removesuffix(".yaml").removesuffix(".yml")
    shipped = shipped_studies()
    hint = did_you_mean(name, shipped)
    return (
        f"study file {text!r} not found{hint} (a path to a YAML file, or one of the "
        f"{listing(shipped, noun='shipped studies')})"
    )


def spec_yaml(spec: StudySpec) -> str:
    """The canonical spec as YAML, for diffs and the parent run's artifact."""
    return yaml.safe_dump(spec.canonical(), sort_keys=True)


def smoke_spec(spec: StudySpec) -> StudySpec:
    """A seconds-per-trial copy named ``<study>-smoke``: tiny budget, one replicate."""
    data = spec.canonical()
    batches = spec.factors["batch_size"].levels if "batch_size" in spec.factors else None
    batches = batches or [spec.trial.get("batch_size", 256)]
    budget = 2 * math.lcm(*[int(b) for b in batches])
    data["study"] = f"{spec.study}-smoke"
    data["trial"] = data["trial"] | {
        "budget_examples": budget, "eval_marks": 1, "heldout_size": 200,
        "probe_train_size": 300, "linear_probe_iters": 20,
    }  # fmt: skip
    data["design"] = data["design"] | {"replicates": 1}
    if spec.design.samples:
        data["design"]["samples"] = min(spec.design.samples, 4)
    return parse_spec(data, f"{spec.study} (smoke)")
