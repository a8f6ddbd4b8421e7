"""What this process may use of its machine: its CPUs and its memory, not the machine's.

A batch system, a container or ``taskset`` confines a process in two ways that
``os.cpu_count()`` does not see (it counts the machine's CPUs): an **affinity mask** (the CPUs
it may run on: Slurm's cpusets, ``taskset -c 0``) and a **cgroup quota** (CPU time per period:
``docker --cpus=1.5``, Kubernetes' CPU limits, systemd's ``CPUQuota``). Every count of CPUs in
the product (a local Ray's CPUs, ``study plan --estimate``'s slots, the check of
``resources.cpu``, the threads a trial or a probe takes, the benchmarks) reads
:func:`usable_cpus`, which is both together: the affinity mask's size, capped by the quota,
**floored** (a quota of 1.5 CPUs is 1: a second thread on half a CPU is throttled for half of
every period, so it is not planned on) but at least 1 (a quota below one CPU still runs one
thread). This is what DataBiosphere/toil#4260 and SpikeInterface/spikeinterface#4723 asked of
their CPU counts: a job confined to 1 CPU of 64 planned 64 workers. (Python 3.13's
``os.process_cpu_count`` reads the affinity only, and this project runs on 3.11.)

The memory a process may use is likewise the machine's (``psutil``) capped by its cgroup's
limit (v2 ``memory.max``, v1 ``memory.limit_in_bytes``): :func:`usable_memory`.

The affinity comes from ``psutil`` (Linux, Windows, FreeBSD; ``os.cpu_count`` where it has
none); the cgroup files are read here, both versions, along the process's own cgroup path and
every folder above it (the tightest limit holds), in the mounts of ``/sys/fs/cgroup``.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import psutil

CGROUP_ROOT = Path("/sys/fs/cgroup")
MEMBERSHIP = Path("/proc/self/cgroup")
# cgroup v1's "no limit" for memory is a page-rounded 2**63 - 1; anything this large is none
UNLIMITED_BYTES = 2**62
V1_CPU_MOUNTS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")


def affinity_cpus() -> int:
    """The CPUs this process may run on (its affinity mask), or the machine's where the system
    has no affinity to read (macOS)."""
    try:
        allowed = psutil.Process().cpu_affinity()
    except (AttributeError, NotImplementedError, psutil.Error):
        allowed = None
    return len(allowed) if allowed else (os.cpu_count() or 1)


def _cgroup_paths(membership: Path) -> dict[str, str]:
    """This process's cgroup path per hierarchy: ``""`` for v2's unified one, else each v1
    controller's name (``cpu``, ``memory``)."""
    try:
        text = membership.read_text()
    except OSError:
        return {}
    paths: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        for name in controllers.split(",") if controllers else [""]:
            paths[name] = path
    return paths


def _folders(mount: Path, path: str) -> list[Path]:
    """``mount``/``path`` and every folder above it up to ``mount`` (a container sees its own
    cgroup at the mount's root while /proc/self/cgroup names the host's path: the folders that
    are not there are passed over)."""
    parts = [p for p in path.split("/") if p]
    return [mount.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cgroup_cpus(root: Path = CGROUP_ROOT, membership: Path = MEMBERSHIP) -> float | None:
    """The CPU quota of this process's cgroups, in CPUs (quota / period), the tightest along
    its path; None when none is set. Reads v2's ``cpu.max`` (``"max 100000"``: none;
    ``"150000 100000"``: 1.5) and v1's ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (a quota of
    -1: none)."""
    paths = _cgroup_paths(membership)
    found: list[float] = []
    if "" in paths:
        for folder in _folders(root, paths[""]):
            text = _read(folder / "cpu.max")
            if text and (m := re.fullmatch(r"(\d+)\s+(\d+)", text)) and int(m[2]) > 0:
                found.append(int(m[1]) / int(m[2]))
    v1 = paths.get("cpu", paths.get("cpuacct"))
    if v1 is not None:
        for mount in V1_CPU_MOUNTS:
            for folder in _folders(root / mount, v1):
                quota, period = (_read(folder / f"cpu.cfs_{k}_us") for k in ("quota", "period"))
                if quota and period and int(quota) > 0 and int(period) > 0:
                    found.append(int(quota) / int(period))
    return min(found) if found else None


def cpus_allowed(affinity: int, quota: float | None) -> int:
    """CPUs to plan on from an affinity of ``affinity`` CPUs and a quota of ``quota`` CPUs
    (None: none): the smaller, a quota floored, at least 1."""
    if quota is None:
        return max(1, affinity)
    return max(1, min(affinity, math.floor(quota)))


def usable_cpus() -> int:
    """The CPUs this process may use: its affinity mask capped by its cgroup quota (see the
    module docstring). The one count of CPUs every part of the product reads."""
    return cpus_allowed(affinity_cpus(), cgroup_cpus())


def cpus_why() -> str:
    """Why :func:`usable_cpus` says what it says, for a refusal: the affinity mask and the
    quota against the machine's count."""
    machine = os.cpu_count() or 1
    affinity, quota = affinity_cpus(), cgroup_cpus()
    said = f"this process may use {cpus_allowed(affinity, quota)} CPU"
    reasons = []
    if affinity < machine:
        reasons.append(f"its CPU affinity allows {affinity} of the machine's {machine}")
    if quota is not None:
        reasons.append(f"its cgroup's CPU quota is {quota:g} CPU (floored)")
    if not reasons:
        reasons.append(f"the machine's {machine}: no affinity mask or cgroup quota narrows it")
    return f"{said}: {'; '.join(reasons)}"


def cgroup_memory(root: Path = CGROUP_ROOT, membership: Path = MEMBERSHIP) -> int | None:
    """The memory limit of this process's cgroups in bytes, the tightest along its path; None
    when none is set. Reads v2's ``memory.max`` (``"max"``: none) and v1's
    ``memory.limit_in_bytes`` (its page-rounded 2**63: none)."""
    paths = _cgroup_paths(membership)
    found: list[int] = []
    if "" in paths:
        for folder in _folders(root, paths[""]):
            text = _read(folder / "memory.max")
            if text and text.isdigit():
                found.append(int(text))
    if "memory" in paths:
        for folder in _folders(root / "memory", paths["memory"]):
            text = _read(folder / "memory.limit_in_bytes")
            if text and text.isdigit():
                found.append(int(text))
    found = [n for n in found if n < UNLIMITED_BYTES]
    return min(found) if found else None


def usable_memory() -> int:
    """The memory this process may use, in bytes: the machine's, capped by its cgroup's limit."""
    total = int(psutil.virtual_memory().total)
    limit = cgroup_memory()
    return total if limit is None else min(total, limit)


# ---------------------------------------------------------------------------------------------
# sizes as people write them
# ---------------------------------------------------------------------------------------------
SIZE_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}  # fmt: skip
SIZE_FORMS = "bytes, or a number with B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB"


def parse_size(value: int | float | str) -> int:
    """A size in bytes from ``value``: a whole number of bytes, or a number and a unit
    (``"2GiB"``, ``"512MB"``, ``"1.5 GB"``; the units of :data:`SIZE_UNITS`, any case).

    Raises:
        ValueError: naming the value and the forms a size takes.
    """
    if isinstance(value, bool):
        raise ValueError(f"a size is {SIZE_FORMS}")
    if isinstance(value, int | float):
        number, unit = float(value), ""
    else:
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", value)
        if not match or match[2].lower() not in SIZE_UNITS:
            raise ValueError(f"a size is {SIZE_FORMS}")
        number, unit = float(match[1]), match[2].lower()
    size = number * SIZE_UNITS[unit]
    if not math.isfinite(size) or (SIZE_UNITS[unit] == 1 and size != int(size)):
        raise ValueError("a size is a whole number of bytes")
    return round(size)  # 1.1 KiB is 1126 bytes


def shown_size(size: float) -> str:
    """``size`` bytes as a reader takes it in: ``2 GiB``, ``512 MiB``, ``1.5 GiB``."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size:g} B"
