"""``optuna``: an adaptive design, its trials proposed one at a time by an Optuna sampler
(TPE; NSGA-II or multi-objective TPE for several objectives) from the results so far."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from search_spaces.designs.base import FINISHED, INTEGER_FIELDS, PastTrial, Schedule, TrialPlan
from search_spaces.designs.levels import batch_rule, continuous, fixed_fields, valid_batch_sizes
from search_spaces.designs.trials import check_metric, trial_config
from search_spaces.spec import Factor, StudyError, StudySpec
from trainables.config import TrialConfig
from trainables.metrics import final_metrics


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


def design(spec: StudySpec) -> AdaptiveDesign:
    """The registry's entry of ``optuna``: the design, its space and objectives checked (the
    space's first corner a valid trial, every objective a metric the trials report)."""
    options = spec.design
    if not options.samples or not (options.metric or options.objectives):
        raise StudyError("design: optuna needs samples (how many trials) and metric (to "
                         "optimise), or objectives (several at once)")  # fmt: skip
    if options.replicates != 1:
        raise StudyError(
            f"design.replicates: optuna proposes each point once, got {options.replicates}; "
            "re-run the best points in a factorial study to replicate them"
        )
    sample = adaptive_sample(spec)  # the space's first corner must be a valid trial
    for where, metric, _ in objectives_of(spec):
        check_metric(where, metric, final_metrics(sample))
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
            values[name] = continuous(name, factor, 0.0, fixed_fields(spec), {})
    return trial_config(spec, values, spec.design.seed)


def batch_sizes_matching(spec: StudySpec, factor: Factor, required: bool = False) -> list[int]:
    """Every batch size inside the factor's bounds that divides the budget (optuna's choices)."""
    fixed = fixed_fields(spec)
    lo, hi = factor.bounds
    found = valid_batch_sizes(math.ceil(lo), int(hi), fixed)
    if required and not found:
        raise StudyError(
            f"factors.batch_size: no batch size in [{lo:g}, {hi:g}] {batch_rule(fixed)}, so "
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
