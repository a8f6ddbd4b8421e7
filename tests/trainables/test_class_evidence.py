"""Per-class evidence says how much it covers: a class with one held-out row has an alignment
but no uniformity, a spread over one class is not measured (never 0), and the counts of
classes measured stand beside the worst class."""

from __future__ import annotations

import math

import pytest
import torch

from trainables.config import TrialConfig
from trainables.data import load_data
from trainables.diagnostics import worst_and_spread
from trainables.train import run_trial

SPARSE = {"dataset": "toy", "encoder": "mlp", "augmentation": "noise", "toy_classes": 9,
          "heldout_size": 10, "probe_train_size": 64, "toy_train_size": 256,
          "linear_probe": False, "mlp_hidden": (16,), "feature_dim": 8, "projection_dim": 4,
          "projection_hidden": 8, "batch_size": 16, "budget_examples": 64,
          "eval_marks": 1}  # fmt: skip


def test_a_spread_over_one_value_is_not_measured():
    assert worst_and_spread([0.3]) == (0.3, pytest.approx(math.nan, nan_ok=True))
    assert math.isnan(worst_and_spread([0.3, math.nan])[1])
    assert worst_and_spread([0.3, 0.1]) == (0.3, pytest.approx(0.2))


def test_sparse_classes_are_counted_beside_the_worst_class():
    config = TrialConfig(**SPARSE)
    result = run_trial(config)
    held = load_data(config).heldout_y
    counts = torch.bincount(held, minlength=9)
    with_one = int((counts >= 1).sum())
    with_two = int((counts >= 2).sum())
    assert with_two < 9  # the instance: most classes have one held-out row, some none
    for space in ("h", "z"):
        assert result[f"{space}/align_classes"] == with_one
        assert result[f"{space}/uniform_classes"] == with_two
        if with_two < 2:
            assert math.isnan(result[f"{space}/uniform_class_spread"])
        else:
            assert result[f"{space}/uniform_class_spread"] >= 0
