"""What one trial asks of a machine and what a machine has to give: the local capacity a
study's own Ray is started with, how many trials it holds at once, and the refusal of a trial
that fits no node; and, once the driver's Ray is up, what its cluster holds
(:func:`cluster_capacity`, :func:`cluster_total`, :func:`trial_slots`: Ray imported there only).

Light on purpose (no Ray, no MLflow, no torch unless a GPU driver is there): ``study plan
--estimate`` reads it as well as the runner. Every CPU count comes from
:func:`trainables.machine.usable_cpus` (the process's affinity mask and cgroup quota), every
memory size from :func:`trainables.machine.usable_memory`.
"""

from __future__ import annotations

import os
import sys

from search_spaces.spec import StudyError, StudySpec
from trainables.machine import shown_size, usable_cpus, usable_memory

# the object store a local Ray is given (bytes); what it holds is not trials' memory
LOCAL_OBJECT_STORE = 256 * 2**20


def local_capacity() -> dict[str, float]:
    """What a local Ray has to give trials: the CPUs this process may use (its affinity mask
    and cgroup quota: :func:`trainables.machine.usable_cpus`, not the machine's count), the
    GPUs torch sees, and the memory this process may use less the object store's share
    (``memory``, bytes, Ray's name for it; the local Ray is started with exactly this much)."""
    memory = usable_memory() - LOCAL_OBJECT_STORE
    return {"CPU": float(usable_cpus()), "GPU": float(local_gpus()), "memory": float(memory)}


GPU_DRIVER_FILES = ("/dev/nvidiactl", "/dev/kfd")  # NVIDIA's driver, ROCm's (AMD)


def local_gpus() -> int:
    """The GPUs torch sees on this machine. On Linux without a GPU driver's device file torch
    sees none, and is not imported to say so (seconds of CPU for every driver on a CPU-only
    machine)."""
    if sys.platform.startswith("linux") and not any(map(os.path.exists, GPU_DRIVER_FILES)):
        return 0
    import torch

    return torch.cuda.device_count()


def check_resources(
    spec: StudySpec,
    capacity: dict[str, float],
    where: str,
    total: dict[str, float] | None = None,
    why: str = "",
) -> None:
    """Every worker of a trial must fit on one node (compare its ask with the largest node's
    ``capacity``), and a trial's W workers together must fit ``where`` (``total``: the whole
    cluster's resources; this machine's own capacity when None). ``why`` says where this
    machine's CPU count comes from (its affinity and quota), added to a refusal of CPUs.

    Raises:
        StudyError: naming every resource that does not fit, its value and what there is.
    """
    res = spec.resources
    total = capacity if total is None else total
    each = "each trial" if res.workers == 1 else "each of a trial's workers"
    problems = []
    asks = [("cpu", "CPU", res.cpu), ("gpu", "GPU", res.gpu)]
    if res.memory:
        asks.append(("memory", "memory", res.memory))
    for name, key, ask in asks:
        amount = _amount(name, ask)
        have = capacity.get(key, 0.0)
        reason = f" ({why})" if name == "cpu" and why else ""
        if ask > have:
            problems.append(
                f"resources.{name}: {each} asks for {amount} but {where} has "
                f"{_amount(name, have, unit=name == 'memory')} on its largest node{reason}"
            )
            continue
        have = total.get(key, 0.0)
        if res.workers > 1 and res.workers * ask > have:
            problems.append(
                f"resources.workers: a trial of workers={res.workers} × {name}="
                f"{_amount(name, ask, unit=False)} needs {_amount(name, res.workers * ask)} at "
                f"once but {where} has {_amount(name, have, unit=name == 'memory')}{reason}; "
                f"ask for fewer workers or less {name} per worker"
            )
    if problems:
        raise StudyError("; ".join(problems))


def _amount(name: str, value: float, unit: bool = True) -> str:
    """``value`` of resource ``name`` as the refusals say it: ``2 CPU``, ``0.5 GPU``, ``2 GiB``
    of memory (without its resource's name when not ``unit``)."""
    if name == "memory":
        return shown_size(value) + (" of memory" if unit else "")
    return f"{value:g}" + (f" {name.upper()}" if unit else "")


def fitting_trials(spec: StudySpec, capacity: dict[str, float]) -> int:
    """Trials of ``spec`` that ``capacity`` (Ray's resource names: ``CPU``, ``memory`` in
    bytes) holds at once, by their CPUs and, when they ask for it, their memory; at least 1."""
    res = spec.resources
    fit = int(capacity.get("CPU", 1.0) // res.trial_cpu)
    if res.trial_memory:
        fit = min(fit, int(capacity.get("memory", 0.0) // res.trial_memory))
    return max(1, fit)


def cluster_capacity() -> dict[str, float]:
    """The largest live node's CPUs, GPUs and memory (each the largest of any node)."""
    import ray

    best: dict[str, float] = {}
    for node in ray.nodes():
        if node.get("Alive"):
            for key in ("CPU", "GPU", "memory"):
                best[key] = max(best.get(key, 0.0), float(node["Resources"].get(key, 0.0)))
    return best


def cluster_total() -> dict[str, float]:
    """Every live node's CPUs, GPUs and memory together."""
    import ray

    found = ray.cluster_resources()
    return {key: float(found.get(key, 0.0)) for key in ("CPU", "GPU", "memory")}


def trial_slots(spec: StudySpec, concurrency: int | None) -> int:
    """Trials that can run at once: the concurrency asked for, else as the cluster's CPUs allow.
    A data-parallel trial (whose Ray Train workers Tune does not count) is also held to as many
    at once as the cluster's CPUs and GPUs hold whole trials."""
    import ray

    found = ray.cluster_resources()
    res = spec.resources
    fit = fitting_trials(spec, found)
    if res.workers > 1 and res.gpu > 0:
        fit = max(1, min(fit, int(found.get("GPU", 0.0) // res.trial_gpu)))
    if concurrency:
        return min(concurrency, fit) if res.workers > 1 else concurrency
    return fit
