"""Per-item outcomes (trainables.outcomes): a trial's and each baseline system's probe labels for
every held-out item reproduce the recorded probe accuracies exactly, on the same item ids."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from trainables import baselines as bl
from trainables.config import TrialConfig
from trainables.data import digits_split, load_data
from trainables.outcomes import heldout_items, outcome_json
from trainables.train import run_trial

SMALL = {"dataset": "digits", "budget_examples": 256, "batch_size": 64, "eval_marks": 1,
         "heldout_size": 80, "probe_train_size": 100, "linear_probe_iters": 5,
         "feature_dim": 32, "projection_hidden": 32, "projection_dim": 16}  # fmt: skip


def accuracy(outcomes: dict, metric: str) -> float:
    """The share of items the probe behind ``metric`` got right, as the record recomputes it."""
    labels = np.asarray(outcomes["label"])
    return float((np.asarray(outcomes["predictions"][metric]) == labels).astype(np.int8).mean())


def test_digits_held_out_rows_carry_their_ids_in_the_pool_and_toy_rows_none():
    config = TrialConfig(**SMALL)
    data = load_data(config)
    _, y, _, held = digits_split(config.data_seed)
    ids = data.heldout_ids
    assert ids is not None and ids.dtype == torch.long and len(ids) == 80
    assert set(ids.tolist()) <= set(held.tolist()) and ids.unique().numel() == 80
    assert torch.equal(data.heldout_y, torch.as_tensor(y)[ids].long())
    toy_config = {"dataset": "toy", "encoder": "mlp", "augmentation": "noise", "heldout_size": 30}
    toy = load_data(TrialConfig(**toy_config))
    assert toy.heldout_ids is None
    assert torch.equal(heldout_items(toy), torch.arange(30))


def test_outcome_json_names_the_metrics_and_keeps_the_spaces_asked():
    predictions = {("knn", "h"): torch.tensor([1, 0]), ("knn", "z"): torch.tensor([1, 1])}
    found = outcome_json(torch.tensor([7, 9]), torch.tensor([1, 1]), predictions)
    assert found == {"item": [7, 9], "label": [1, 1],
                     "predictions": {"probe/knn_top1_h": [1, 0], "probe/knn_top1_z": [1, 1]}}
    only_h = outcome_json(torch.tensor([7, 9]), torch.tensor([1, 1]), predictions, ("h",))
    assert list(only_h["predictions"]) == ["probe/knn_top1_h"]
    with pytest.raises(ValueError):
        outcome_json(torch.tensor([7]), torch.tensor([1, 1]), predictions)


def test_a_trials_outcomes_reproduce_its_probe_metrics_exactly(cache):
    config = TrialConfig(**SMALL)
    result = run_trial(config)
    outcomes = result["evidence"]["outcomes"]
    json.dumps(outcomes, allow_nan=False)  # travels as JSON text to the driver
    data = load_data(config)
    assert outcomes["item"] == data.heldout_ids.tolist()
    assert outcomes["label"] == data.heldout_y.tolist()
    top1 = sorted(k for k in result if k.startswith("probe/") and k.count("_") == 2
                  and "_top1_" in k)  # fmt: skip
    assert top1 == sorted(outcomes["predictions"]) and len(top1) == 4
    for metric in top1:
        assert accuracy(outcomes, metric) == result[metric], metric

    # the baselines of the same study score the same items
    found = bl.measure_baselines(config, ("raw", "random_init"), (1, 0))
    raw, random_init = found["raw"], found["random_init"]
    assert list(raw.outcomes) == [bl.UNSEEDED] and sorted(random_init.outcomes) == ["0", "1"]
    assert raw.systems().keys() == {None} and random_init.systems().keys() == {0, 1}
    systems = [raw.outcomes[""], *random_init.outcomes.values()]
    assert all(s["item"] == outcomes["item"] and s["label"] == outcomes["label"] for s in systems)
    assert sorted(raw.outcomes[""]["predictions"]) == sorted(raw.metrics)  # the _h names only
    for metric, value in raw.metrics.items():
        assert accuracy(raw.outcomes[""], metric) == value, metric
    for seed, metrics in random_init.per_seed.items():
        probes = {k: v for k, v in metrics.items() if k in outcomes["predictions"]}
        assert len(probes) == 4
        for metric, value in probes.items():
            assert accuracy(random_init.outcomes[str(seed)], metric) == value, (seed, metric)

    # kept in the cache, read back whole; the summary JSON may leave them out
    again = bl.measure_baselines(config, ("raw", "random_init"), (0, 1))
    assert again["random_init"].seconds == 0
    assert again["random_init"].outcomes == random_init.outcomes
    assert "outcomes" not in raw.to_json(outcomes=False)
    assert bl.Baseline.from_json(raw.to_json()).outcomes == raw.outcomes
