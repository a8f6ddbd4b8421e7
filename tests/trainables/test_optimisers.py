"""trainables/optimisers.py: the optimiser a trial's config names, at its effective learning
rate, and the schedule as a pure function of the step (warm-up, then constant or cosine)."""

from __future__ import annotations

import math
from itertools import pairwise

import pytest
import torch
from torch import nn

from trainables.config import TrialConfig
from trainables.optimisers import lr_at, make_optimizer


@pytest.mark.parametrize(
    ("name", "kind"), [("sgd", torch.optim.SGD), ("adam", torch.optim.Adam),
                       ("adamw", torch.optim.AdamW)],
)  # fmt: skip
def test_the_named_optimiser_at_the_effective_rate_and_weight_decay(name, kind):
    config = TrialConfig(optimizer=name, base_lr=0.1, lr_scaling="linear", batch_size=512,
                         budget_examples=5120, weight_decay=1e-4, momentum=0.5)  # fmt: skip
    model = nn.Linear(3, 2)
    optimiser = make_optimizer(config, model)
    assert type(optimiser) is kind
    group = optimiser.param_groups[0]
    assert group["lr"] == pytest.approx(0.2)  # 0.1 × 512 / 256
    assert group["weight_decay"] == 1e-4
    assert len(group["params"]) == 2  # the weight and the bias
    if name == "sgd":
        assert group["momentum"] == 0.5


def test_warm_up_rises_linearly_to_the_peak_then_cosine_falls_to_zero():
    config = TrialConfig(base_lr=0.4, budget_examples=256 * 100, warmup_fraction=0.1)
    assert (config.steps, config.warmup_steps) == (100, 10)
    assert [lr_at(config, s) for s in (0, 4, 9)] == pytest.approx([0.04, 0.2, 0.4])
    assert lr_at(config, 10) == pytest.approx(0.4)  # the cosine's start: the peak
    assert lr_at(config, 55) == pytest.approx(0.2)  # half way through the cosine
    assert lr_at(config, 100) == pytest.approx(0.0, abs=1e-12)
    falling = [lr_at(config, s) for s in range(10, 101)]
    assert all(a >= b for a, b in pairwise(falling))


def test_a_constant_schedule_holds_the_peak_after_warm_up():
    config = TrialConfig(base_lr=0.3, schedule="constant", budget_examples=256 * 20,
                         warmup_fraction=0.25)  # fmt: skip
    assert lr_at(config, 0) == pytest.approx(0.3 / 5)
    assert {lr_at(config, s) for s in range(5, 20)} == {0.3}


def test_without_warm_up_the_first_step_is_at_the_peak():
    config = TrialConfig(base_lr=0.2, budget_examples=256 * 8)
    assert config.warmup_steps == 0
    assert lr_at(config, 0) == 0.2
    assert lr_at(config, 4) == pytest.approx(0.2 * 0.5 * (1 + math.cos(math.pi * 0.5)))
