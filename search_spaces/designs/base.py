"""The designs' shared values: a trial's plan (:class:`TrialPlan`), a recorded trial
(:class:`PastTrial`), what to launch now (:class:`Schedule`), a fixed design (:class:`FixedDesign`)
and a design point (:class:`Point`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from search_spaces.spec import StudySpec
from trainables.config import TrialConfig
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
