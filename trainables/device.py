"""Where a trial runs: its device, this process's share of the machine, the data copied there
once, compiling, the convolutional layout and the autocast precision."""

from __future__ import annotations

import contextlib

import torch

from trainables.config import TrialConfig
from trainables.data import DataBundle, ResidentData
from trainables.machine import usable_cpus

CONV_ENCODERS = ("small_cnn", "resnet18")


def resolve_device(config: TrialConfig) -> torch.device:
    if config.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but no CUDA device is available")
    if config.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(config.device)


def compiles(config: TrialConfig, device: torch.device) -> bool:
    """Whether the training forward is compiled: ``compile`` on, or auto on a CUDA device."""
    return config.compile == "on" or (config.compile == "auto" and device.type == "cuda")


def uses_channels_last(config: TrialConfig, device: torch.device) -> bool:
    """Convolutional encoders run channels_last: on CUDA it is tensor-core friendly, and on the
    CPU oneDNN's convolutions are faster so too (the default study's trial on 2 cores took 25%
    less time per training step; ``benchmarks/trial.py --layout`` compares the two)."""
    return config.encoder in CONV_ENCODERS


def autocast_for(config: TrialConfig, device: torch.device):
    """bf16 autocast on CUDA with ``precision: bf16``; otherwise nothing changes."""
    if device.type == "cuda" and config.precision == "bf16":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def trial_threads(cpu: float) -> int:
    """Threads for a trial holding ``cpu`` CPUs: its whole CPUs, at most the CPUs this process
    may use, at least one."""
    return max(1, min(int(cpu), usable_cpus()))


def claim_share(cpu: float, gpu: float = 0.0) -> None:
    """Hold this process to its share of the machine, as a study's ``resources`` gives it: at
    most ``cpu`` CPU threads (at least one, and no more than this process may use: its affinity
    and cgroup quota, :func:`trainables.machine.usable_cpus`) and, with a fractional ``gpu`` on
    CUDA, at most that fraction of the device's memory (the caching allocator raises an
    out-of-memory error beyond it), so trials that share a GPU do not starve each other."""
    torch.set_num_threads(trial_threads(cpu))
    if 0 < gpu < 1 and torch.cuda.is_available():
        torch.cuda.set_per_process_memory_fraction(gpu)


_RESIDENT: list[tuple[DataBundle, str, ResidentData]] = []  # one device copy per process


def resident_data(data: DataBundle, device: torch.device) -> ResidentData:
    """``data`` on ``device``, copied once per process: ``load_data`` hands the next trial on
    the same dataset the same bundle, so the bundle itself (held here, compared by identity) is
    the key, and its files are not read again to find it."""
    if not (_RESIDENT and _RESIDENT[0][0] is data and _RESIDENT[0][1] == str(device)):
        _RESIDENT[:] = [(data, str(device), ResidentData(data, device))]
    return _RESIDENT[0][2]
