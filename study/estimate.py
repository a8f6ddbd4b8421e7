"""``study plan --estimate``: how long a study would take on this machine, before anything runs.

Measured, not guessed: the design's trials are grouped into kinds (trials that differ only in
fields that do not change their cost, such as the temperature or the seed, are one kind), and a
short probe runs here, in this process, with the trial's own CPU share: a few training steps and
one evaluation, read from the trial's own timers (``time/train_s``, ``time/data_s``,
``time/eval_s``, ``time/evidence_s``). Every kind that differs from the others in a field the
cost model cannot scale (the encoder, its width, the data, the objective …: anything but the
batch size and the budget-derived fields of :data:`SCALED`) is probed, since a probe is seconds
and the step time of a width-64 encoder says nothing of a width-8 one's; of kinds equal in every
such field (a cost class: kinds that differ only in batch size, budget or evaluation marks) the
costliest is probed, then the kinds farthest in batch size from those probed, up to
:data:`MAX_KINDS` probes in all, and the rest are scaled from the probed kind of their class
nearest in batch size: its seconds per step times the ratio of batch sizes, its own steps and
evaluations counted (:func:`plan_probes`). The estimate's text names the fields the kinds differ
in and which kinds were scaled from which, by what. A trial then costs its setup, its steps at
the measured seconds per step, its evaluations at the measured seconds per evaluation, and the
final evaluation's evidence once.

The trials are laid out on the study's slots (its concurrency, else the CPUs this process may
use over a trial's share: its affinity and cgroup quota, not the machine's count) longest first,
and the study's fixed costs are added: the driver's start (imports, Ray), the baselines when
they are not cached, a worker's start per slot, and the export and report at the end
(:data:`FIXED_S`, measured on this project's 2-core machine; see ``docs/running.md``). Nothing
is recorded and nothing is written.
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
# fields the cost model scales (the seconds per step by the batch size; the steps and the
# evaluations counted from the config): kinds differing only in these may be scaled, not probed
SCALED = frozenset({"batch_size", "budget_examples", "eval_marks", "eval_at_start"})
MAX_KINDS = 4  # probes at most, beyond the one every cost class gets (see plan_probes)
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
    scaled: tuple[tuple[str, str, float], ...] = ()  # (kind, the probed kind, × per step)

    @property
    def probed(self) -> int:
        return len(self.per_kind) - len(self.scaled)

    def lines(self) -> list[str]:
        kinds = "; ".join(f"{n} × {kind} at ~{duration(s)} each" for kind, n, s in self.per_kind)
        lines = [
            f"estimate: about {duration(self.wall_s)} on this machine ({self.trials} trials, "
            f"{self.slots} at a time: {kinds}; plus ~{duration(self.fixed_s)} of fixed costs: "
            f"start, baselines, report); measured from a probe of {self.probe_s:.0f} s, "
            "nothing recorded",
        ]
        if self.scaled:
            each = "; ".join(f"{kind} from {source} (× {factor:.3g} per step, its batch size)"
                             for kind, source, factor in self.scaled)  # fmt: skip
            lines.append(f"estimate: {self.probed} of {len(self.per_kind)} kinds probed; "
                         "scaled from the probed kind equal in every other cost field: "
                         f"{each}")  # fmt: skip
        return lines


def _kind(config) -> tuple:
    data = config.model_dump()
    return tuple(sorted((k, repr(v)) for k, v in data.items() if k not in COST_NEUTRAL))


def _cost_class(config) -> tuple:
    """The kind less the fields the cost model scales: kinds of one class may be scaled."""
    return tuple((k, v) for k, v in _kind(config) if k not in SCALED)


def _differing(configs) -> list[str]:
    """The cost fields (other than the scaled ones) whose values differ between ``configs``."""
    values: dict[str, set] = {}
    for config in configs:
        for k, v in _cost_class(config):
            values.setdefault(k, set()).add(v)
    return sorted(k for k, v in values.items() if len(v) > 1)


def _kind_words(config, differing=()) -> str:
    named = "".join(f"{k}={_short(getattr(config, k))} " for k in differing)
    return f"{named}B={config.batch_size} ({config.steps} steps, {config.eval_marks} evaluations)"


def _short(value) -> str:
    if isinstance(value, tuple | list):
        return "x".join(str(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def _work(config) -> tuple[int, int]:
    """Within a cost class, what a trial's cost grows with: its examples (steps × batch), then,
    at the same examples (a compute-matched design), its steps (each pays its overhead)."""
    return config.steps * config.batch_size, config.steps


def plan_probes(groups: list[list], max_kinds: int = MAX_KINDS) -> tuple[list[int], dict]:
    """Which kinds to probe and which to scale from which: (indices of ``groups`` to probe,
    {index scaled: index of the probed kind it is scaled from}). ``groups``: each kind's trials'
    configs. Every cost class (kinds equal in every cost field but the :data:`SCALED` ones)
    gets its costliest kind probed (the most examples, then the most steps), however many
    classes there are; then, up to ``max_kinds`` probes in all, the kind whose batch size lies
    farthest from those probed in its class (so that the scaled kinds lie between probed ones;
    the costlier first on a tie); every other kind is scaled from the probed kind of its own
    class nearest in batch size (never across classes)."""
    order = sorted(range(len(groups)), key=lambda i: _work(groups[i][0]), reverse=True)
    classes: dict[tuple, list[int]] = {}
    for i in order:
        classes.setdefault(_cost_class(groups[i][0]), []).append(i)
    probed = [members[0] for members in classes.values()]

    def gap(i: int) -> float:  # how far its batch size lies from its class's probed ones
        batch = groups[i][0].batch_size
        return min(abs(math.log(batch / groups[j][0].batch_size)) for j in probed
                   if _cost_class(groups[j][0]) == _cost_class(groups[i][0]))  # fmt: skip

    while len(probed) < max_kinds and len(probed) < len(groups):
        probed.append(max((i for i in order if i not in probed), key=gap))  # the first: ties
    scaled = {}
    for members in classes.values():
        sources = [i for i in members if i in probed]
        for i in members:
            if i not in probed:
                batch = groups[i][0].batch_size
                scaled[i] = min(sources, key=lambda j: (
                    abs(math.log(groups[j][0].batch_size / batch)), j))  # fmt: skip
    return probed, scaled


def estimate(spec: StudySpec, design, concurrency: int | None = None, probe=None) -> Estimate:
    """The study's wall time here (see the module docstring). ``probe(config, cpu)``: what
    measures a kind (:func:`_probe` by default)."""
    t0 = time.perf_counter()
    probe = probe or _probe
    configs = _trial_configs(design)
    kinds: dict[tuple, list] = {}
    for config in configs:
        kinds.setdefault(_kind(config), []).append(config)
    groups = list(kinds.values())
    to_probe, scaled_from = plan_probes(groups)
    costs = {i: probe(groups[i][0], spec.resources.trial_cpu) for i in to_probe}
    differing = _differing(g[0] for g in groups)
    per_trial: list[float] = []
    per_kind, scaled = [], []
    for i, group in enumerate(groups):
        if i in scaled_from:
            source = groups[scaled_from[i]][0]
            factor = group[0].batch_size / source.batch_size
            costs[i] = _scaled(costs[scaled_from[i]], factor)
            scaled.append((_kind_words(group[0], differing), _kind_words(source, differing),
                           factor))  # fmt: skip
        seconds = _trial_seconds(group[0], costs[i])
        per_trial += [seconds] * len(group)
        per_kind.append((_kind_words(group[0], differing), len(group), seconds))
    per_kind.sort(key=lambda kind: -kind[2])
    slots = _slots(spec, concurrency, len(per_trial))
    fixed = FIXED_S["driver"] + FIXED_S["report"] + FIXED_S["worker"] * slots
    fixed += _baselines_seconds(spec, design, [costs[i] for i in to_probe])
    wall = _makespan(per_trial, slots) + fixed
    return Estimate(wall, len(per_trial), slots, tuple(per_kind), fixed,
                    time.perf_counter() - t0, tuple(scaled))  # fmt: skip


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


def _scaled(cost: _Cost, factor: float) -> _Cost:
    """A probed kind's cost for a kind of its class whose batch is ``factor`` times its own: the
    seconds per step scaled by it (per example alike); setup and evaluation as measured."""
    return _Cost(cost.setup_s, cost.step_s * factor, cost.eval_s, cost.evidence_s)


def _trial_seconds(config, cost: _Cost) -> float:
    evaluations = config.eval_marks + int(config.eval_at_start)
    return cost.setup_s + config.steps * cost.step_s + evaluations * cost.eval_s + cost.evidence_s


def _makespan(durations: list[float], slots: int) -> float:
    """Longest first onto the slot that frees first (as Tune starts the next pending trial)."""
    free = [0.0] * slots
    for seconds in sorted(durations, reverse=True):
        heapq.heappush(free, heapq.heappop(free) + seconds)
    return max(free)


def _baselines_seconds(spec: StudySpec, design, probed: list[_Cost]) -> float:
    """The baselines' cost when they are not cached here yet (a study reads them from the cache
    otherwise): the raw input once and a random-init encoder per seed, each about one setup and
    one evaluation of the costliest probed kind."""
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
    cost = max(probed, key=lambda c: c.eval_s + c.setup_s)
    systems = sum(len(seeds) if kind == "random_init" else 1 for kind in kinds)
    return systems * (cost.eval_s + cost.setup_s)
