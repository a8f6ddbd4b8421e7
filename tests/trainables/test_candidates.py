"""``loss/candidates`` is measured on what it names: the negatives each anchor had in the
training denominators since the last evaluation, counted on the real training batches (not on
held-out rows, nor the first rows of the training set), beside how many steps it covers."""

from __future__ import annotations

import pytest
import torch

from trainables.config import TrialConfig
from trainables.data import ExampleStream, load_data
from trainables.train import LocalReporter, run_trial

GROUPED = {"dataset": "toy", "encoder": "mlp", "augmentation": "noise", "toy_train_size": 512,
           "toy_photos_per_item": 4, "heldout_size": 64, "probe_train_size": 64,
           "linear_probe": False, "mlp_hidden": (16,), "feature_dim": 8, "projection_dim": 4,
           "projection_hidden": 8, "eval_marks": 2}  # fmt: skip


def brute_force(groups: list[int], policy: str) -> float:
    """Mean over the 2B views of a batch of B sources (groups given per source) of the views
    that are neither the anchor, nor its positive, nor (mask) of its group."""
    b = len(groups)
    total = 0
    for i in range(2 * b):
        for j in range(2 * b):
            same_source = i % b == j % b
            same_group = groups[i % b] == groups[j % b]
            if i == j or same_source or (policy == "mask" and same_group):
                continue
            total += 1
    return total / (2 * b)


@pytest.mark.parametrize("batch", [2, 8, 16])
def test_grouped_candidates_are_counted_on_the_training_batches(batch):
    config = TrialConfig(**GROUPED, group_policy="mask", batch_size=batch,
                         budget_examples=batch * 16)  # fmt: skip
    reporter = LocalReporter()
    run_trial(config, reporter)
    data = load_data(config)
    stream = ExampleStream(len(data.train_x), batch, config.seed)
    per_step = [brute_force(data.train_groups[stream.batch(s)].tolist(), "mask")
                for s in range(config.steps)]  # fmt: skip
    half = config.steps // 2
    (first, m1), (second, m2) = reporter.history
    assert (first, second) == (half * batch, config.steps * batch)
    assert m1["loss/candidates"] == pytest.approx(sum(per_step[:half]) / half, abs=1e-9)
    assert m2["loss/candidates"] == pytest.approx(sum(per_step[half:]) / half, abs=1e-9)
    assert m1["loss/candidates_steps"] == m2["loss/candidates_steps"] == half
    # the mask took candidates out, and a batch of distinct items keeps them all
    assert m2["loss/candidates"] <= 2 * batch - 2


def test_without_groups_every_anchor_has_the_whole_pool():
    config = TrialConfig(**{**GROUPED, "toy_photos_per_item": 1}, batch_size=8,
                         budget_examples=128)  # fmt: skip
    reporter = LocalReporter()
    run_trial(config, reporter)
    assert [m["loss/candidates"] for _, m in reporter.history] == [14.0, 14.0]


def test_an_evaluation_before_training_counts_step_zeros_batch():
    config = TrialConfig(**GROUPED, group_policy="mask", batch_size=8, budget_examples=128,
                         eval_at_start=True)  # fmt: skip
    reporter = LocalReporter()
    run_trial(config, reporter)
    step, metrics = reporter.history[0]
    data = load_data(config)
    first = data.train_groups[ExampleStream(len(data.train_x), 8, config.seed).batch(0)]
    assert step == 0 and metrics["loss/candidates_steps"] == 0
    assert metrics["loss/candidates"] == pytest.approx(brute_force(first.tolist(), "mask"))
    assert torch.is_tensor(first)


# ---- the evidence card reads them as recorded ----------------------------------------------
def test_the_card_says_the_candidates_per_batch_not_the_workers():
    """The default study's card said 'B = 64: 1; B = 256: 1' (the workers column)."""
    from resultskit import frame

    from analysis.report.evidence.card import evidence_card

    text = evidence_card(frame()).to_markdown()
    assert "Candidates per anchor: B = 64: 126; B = 256: 510." in text


def test_a_masked_pool_records_fewer_candidates_and_the_gate_still_passes():
    from resultskit import frame, gate

    masked = frame(group_policy="mask", **{"loss/candidates": [120.5, 500.0, 121.0, 497.25]})
    item = gate(masked, 2)
    assert item.status == "pass", item.evidence
    over = frame(group_policy="mask", **{"loss/candidates": [127.0, 500.0, 121.0, 497.25]})
    assert gate(over, 2).status == "fail"  # more than the pool holds: wrong by construction
    exact = frame(**{"loss/candidates": [120.5, 510.0, 126.0, 510.0]})
    assert gate(exact, 2).status == "fail"  # no group policy: exactly 2B - 2 or wrong
