"""``study plan --estimate``: how long a study would take on this machine, before anything runs.

Measured, not guessed: for each kind of trial the design holds (trials that differ only in
fields that do not change their cost, such as the temperature or the seed, are one kind), a
short probe of the costliest kinds runs here, in this process, with the trial's own CPU share:
a few training steps and one evaluation, read from the trial's own timers (``time/train_s``,
``time/data_s``, ``time/eval_s``, ``time/evidence_s``). A trial then costs its setup, its steps
at the measured seconds per step, its evaluations at the measured seconds per evaluation, and the
final evaluation's evidence once. The trials are laid out on the study's slots (its concurrency,
else the CPUs this process may use over a trial's share: its affinity and cgroup quota, not the
machine's count) longest first, and the study's fixed costs are added: the driver's start
(imports, Ray), the baselines when they are not cached, a worker's start per slot, and the
export and report at the end (:data:`FIXED_S`, measured on this project's 2-core machine; see
``docs/running.md``). Nothing is recorded and nothing is written.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass

from search_spaces.spec import StudySpec
from study.commands import duration

# fields that do not change what a trial costs: one probe stands for every value of them
COST_NEUTRAL = frozenset({
    "seed", "temperature", "base_lr", "lr_scaling", "weight_decay", "warmup_fraction",
    "schedule", "lam_t", "optimizer", "momentum", "aug_strength", "crop_area_min", "data_seed",
    "collapse_std", "device",
})  # fmt: skip
PROBE_STEPS = 12  # timed steps per probe (after its first, which warms the caches)
MAX_KINDS = 4  # the costliest kinds probed; the others are scaled from the nearest by their steps
# the study's fixed costs here (seconds): the driver's start to its first trial (imports, Ray's
# start, the record), a trial worker's start (torch's import) per slot, and the export and the
# report after the last trial (figures drawn), measured on this project's 2-core machine
FIXED_S = {"driver": 12.0, "worker": 6.0, "report": 12.0}


@dataclass(frozen=True)
class Estimate:
    wall_s: float
    trials: int
    slots: int
    per_kind: tuple[tuple[str, int, float], ...]  # (kind, trials of it, seconds per trial)
    fixed_s: float
    probe_s: float

    def lines(self) -> list[str]:
        kinds = "; ".join(f"{n} × {kind} at ~{duration(s)} each" for kind, n, s in self.per_kind)
        return [
            f"estimate: about {duration(self.wall_s)} on this machine ({self.trials} trials, "
            f"{self.slots} at a time: {kinds}; plus ~{duration(self.fixed_s)} of fixed costs: "
            f"start, baselines, report); measured from a probe of {self.probe_s:.0f} s, "
            "nothing recorded",
        ]



def _kind(config) -> tuple:
    data = config.model_dump()
    return tuple(sorted((k, repr(v)) for k, v in data.items() if k not in COST_NEUTRAL))


def _kind_words(config) -> str:
    return f"B={config.batch_size} ({config.steps} steps, {config.eval_marks} evaluations)"


def estimate(spec: StudySpec, design, concurrency: int | None = None) -> Estimate:
    """The study's wall time here (see the module docstring)."""
    t0 = time.perf_counter()
    configs = _trial_configs(design)
    kinds: dict[tuple, list] = {}
    for config in configs:
        kinds.setdefault(_kind(config), []).append(config)
    ranked = sorted(kinds.values(), key=lambda group: -group[0].steps * group[0].batch_size)
    probed = {id(group): _probe(group[0], spec.resources.trial_cpu)
              for group in ranked[:MAX_KINDS]}  # fmt: skip
    per_trial: list[float] = []
    per_kind = []
    for group in ranked:
        cost = probed.get(id(group)) or _scaled(group[0], ranked, probed)
        seconds = _trial_seconds(group[0], cost)
        per_trial += [seconds] * len(group)
        per_kind.append((_kind_words(group[0]), len(group), seconds))
    slots = _slots(spec, concurrency, len(per_trial))
    fixed = FIXED_S["driver"] + FIXED_S["report"] + FIXED_S["worker"] * slots
    fixed += _baselines_seconds(spec, design, ranked, probed)
    wall = _makespan(per_trial, slots) + fixed
    return Estimate(wall, len(per_trial), slots, tuple(per_kind), fixed,
                    time.perf_counter() - t0)  # fmt: skip


def _trial_configs(design) -> list:
    if getattr(design, "adaptive", False):
        return [design.sample_config()] * design.total
    return [t.config for t in design.trials]


def _slots(spec: StudySpec, concurrency: int | None, trials: int) -> int:
    """Trials at once here: the concurrency asked for, at most as many as the CPUs this process
    may use (its affinity and cgroup quota, not the machine's count) and, for trials that ask
    for memory, the memory a local Ray gives them hold."""
    from study.capacity import fitting_trials, local_capacity

    fit = fitting_trials(spec, local_capacity())
    asked = concurrency or spec.max_concurrent
    return max(1, min(trials, min(asked, fit) if asked else fit))


@dataclass(frozen=True)
class _Cost:
    setup_s: float
    step_s: float
    eval_s: float
    evidence_s: float


def _probe(config, cpu: float) -> _Cost:
    """A few steps and one evaluation of ``config`` here, with the trial's CPU share."""
    import torch

    from trainables.device import trial_threads
    from trainables.train import run_trial

    threads = torch.get_num_threads()
    torch.set_num_threads(trial_threads(cpu))
    steps = min(config.steps, PROBE_STEPS + 1)
    probe = config.model_copy(update={"budget_examples": steps * config.batch_size,
                                      "eval_marks": 1, "eval_at_start": False,
                                      "device": "cpu"})  # fmt: skip
    try:
        t0 = time.perf_counter()
        result = run_trial(type(config)(**probe.model_dump()))
        wall = time.perf_counter() - t0
    finally:
        torch.set_num_threads(threads)
    times = {k.removeprefix("time/"): float(v) for k, v in result.items()
             if k.startswith("time/")}  # fmt: skip
    step_s = (times.get("train_s", 0.0) + times.get("data_s", 0.0)) / steps
    evidence = times.get("evidence_s", 0.0)
    eval_s = times.get("eval_s", 0.0)
    setup = max(0.0, wall - sum(times.values()))
    return _Cost(setup, step_s, eval_s, evidence)


def _scaled(config, ranked, probed) -> _Cost:
    """A kind beyond the probed ones: the nearest probed kind's cost per example."""
    nearest = min((g for g in ranked if id(g) in probed),
                  key=lambda g: abs(math.log(g[0].batch_size / config.batch_size)))  # fmt: skip
    cost = probed[id(nearest)]
    return _Cost(cost.setup_s, cost.step_s * config.batch_size / nearest[0].batch_size,
                 cost.eval_s, cost.evidence_s)  # fmt: skip


def _trial_seconds(config, cost: _Cost) -> float:
    evaluations = config.eval_marks + int(config.eval_at_start)
    return cost.setup_s + config.steps * cost.step_s + evaluations * cost.eval_s + cost.evidence_s


def _makespan(durations: list[float], slots: int) -> float:
    """Longest first onto the slot that frees first (as Tune starts the next pending trial)."""
    free = [0.0] * slots
    for seconds in sorted(durations, reverse=True):
        heapq.heappush(free, heapq.heappop(free) + seconds)
    return max(free)


def _baselines_seconds(spec: StudySpec, design, ranked, probed) -> float:
    """The baselines' cost when they are not cached here yet (a study reads them from the cache
    otherwise): the raw input once and a random-init encoder per seed, each about one setup and
    one evaluation of the costliest kind."""
    from trainables.baselines import baseline_key, cache_dir

    kinds = tuple(spec.baselines or ())
    if not kinds:
        return 0.0
    plans = design.representatives()
    config, seeds = plans[0].config, tuple(sorted({p.seed for p in plans}))
    cached = all((cache_dir() / f"{k}-{baseline_key(k, config, seeds)}.json").is_file()
                 for k in kinds)  # fmt: skip
    if cached:
        return 0.0
    cost = probed[id(ranked[0])]
    systems = sum(len(seeds) if kind == "random_init" else 1 for kind in kinds)
    return systems * (cost.eval_s + cost.setup_s)
