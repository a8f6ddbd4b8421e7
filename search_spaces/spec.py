"""The study file: schema, loading, and its fingerprint.

A study file is YAML (see ``shared/design.md``)::

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

Every model forbids unknown keys. Values of fixed fields and factors are validated against
:class:`trainables.config.TrialConfig` row by row when the design is built.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from trainables.config import TrialConfig

SPEC_DIR = Path(__file__).resolve().parent
DEFAULT_SPEC = SPEC_DIR / "default.yaml"


class StudyError(ValueError):
    """A study that cannot run: the message names the field and the value."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


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
            dupes = sorted({v for v in seen if seen.count(v) > 1})
            if dupes:
                raise ValueError(f"levels repeat {', '.join(dupes)}")
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


class Design(_Strict):
    """How factor levels become design points."""

    kind: Literal[
        "full_factorial", "fractional_factorial", "central_composite", "latin_hypercube", "optuna"
    ] = "full_factorial"
    replicates: int = Field(1, ge=1)
    seed: int = 0  # replicate r of every point runs with seed + r (common random numbers)
    # fractional_factorial: pyDOE generator string ("a b c abc") or a resolution (3, 4, 5 …)
    generators: str | None = None
    resolution: int | None = Field(None, ge=3)
    # central_composite: face-centred (ccf, inside the levels), inscribed (cci) or circumscribed
    face: Literal["ccf", "cci", "ccc"] = "ccf"
    # latin_hypercube and optuna: how many points
    samples: int | None = Field(None, ge=1)
    # optuna: the metric to optimise
    metric: str | None = None
    mode: Literal["max", "min"] = "max"


class Resources(_Strict):
    """Per-trial resources; fractional GPUs pack several small trials on one device."""

    cpu: float = Field(1.0, gt=0)
    gpu: float = Field(0.0, ge=0)

    @field_validator("gpu")
    @classmethod
    def _packable(cls, value: float) -> float:
        if value > 1 and value != int(value):
            raise ValueError(f"a trial takes a fraction of one GPU or whole GPUs, got {value}")
        return value


class Target(_Strict):
    """The metric the progress view calls 'best so far'."""

    metric: str = "probe/knn_top1_h"
    mode: Literal["max", "min"] = "max"


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

    @field_validator("factors")
    @classmethod
    def _known_factors(cls, factors: dict[str, Factor]) -> dict[str, Factor]:
        if not factors:
            raise ValueError("a study needs at least one factor")
        known = set(TrialConfig.model_fields)
        for name in factors:
            if name not in known or name == "seed":
                raise ValueError(
                    f"unknown factor {name!r}: a factor must be a TrialConfig field other than "
                    "seed (the design sets seeds through replicates)"
                )
        return factors

    @model_validator(mode="after")
    def _fixed_and_varied_disjoint(self) -> StudySpec:
        unknown = sorted(set(self.trial) - set(TrialConfig.model_fields))
        if unknown:
            raise ValueError(f"trial: unknown TrialConfig field {unknown[0]!r}")
        both = sorted(set(self.trial) & set(self.factors))
        if both:
            raise ValueError(f"{both[0]!r} is both a fixed trial field and a factor")
        return self

    def canonical(self) -> dict[str, Any]:
        """The validated spec as plain data, defaults filled in (what the fingerprint covers)."""
        return self.model_dump(mode="json")

    @property
    def sha(self) -> str:
        """Fingerprint of everything that changes what runs (the description does not)."""
        data = {k: v for k, v in self.canonical().items() if k != "description"}
        text = json.dumps(data, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _format_validation(err: ValidationError, source: str) -> str:
    lines = []
    for e in err.errors():
        where = ".".join(str(p) for p in e["loc"]) or "(file)"
        value = e.get("input")
        shown = f" (got {value!r})"
        if isinstance(value, dict) and len(repr(value)) > 120:
            shown = ""  # a whole section; the message names what is wrong in it
        lines.append(f"{source}: {where}: {e['msg'].removeprefix('Value error, ')}{shown}")
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


def load_spec(path: str | Path | None = None) -> StudySpec:
    """Read and validate a study file; ``None`` is the embedded default study."""
    file = Path(path) if path is not None else DEFAULT_SPEC
    if not file.exists() and (SPEC_DIR / f"{file}").exists():
        file = SPEC_DIR / f"{file}"
    if not file.exists() and (SPEC_DIR / f"{file}.yaml").exists():
        file = SPEC_DIR / f"{file}.yaml"
    if not file.is_file():
        raise StudyError(f"study file {str(path)!r} not found")
    try:
        data = yaml.safe_load(file.read_text())
    except yaml.YAMLError as err:
        raise StudyError(f"{file}: not valid YAML: {err}") from None
    return parse_spec(data, str(file))


def spec_yaml(spec: StudySpec) -> str:
    """The canonical spec as YAML, for diffs and the parent run's artifact."""
    return yaml.safe_dump(spec.canonical(), sort_keys=True)
