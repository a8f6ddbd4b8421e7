"""A trial's optimiser and its learning-rate schedule (warm-up, then constant or cosine)."""

from __future__ import annotations

import math

import torch
from torch import nn

from trainables.config import TrialConfig


def make_optimizer(config: TrialConfig, model: nn.Module) -> torch.optim.Optimizer:
    params, lr, wd = model.parameters(), config.lr_effective, config.weight_decay
    if config.optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=config.momentum, weight_decay=wd)
    if config.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=wd)
    return torch.optim.Adam(params, lr=lr, weight_decay=wd)


def lr_at(config: TrialConfig, step: int) -> float:
    """Learning rate of optimiser step ``step``: linear warm-up, then constant or cosine to 0.

    A pure function of the step, so the schedule's whole state is the step count.
    """
    peak = config.lr_effective
    warm = config.warmup_steps
    if step < warm:
        return peak * (step + 1) / warm
    if config.schedule == "constant":
        return peak
    progress = (step - warm) / max(1, config.steps - warm)
    return peak * 0.5 * (1 + math.cos(math.pi * progress))
