"""TrialConfig: unknown keys, frozen values, derived properties, compute matching, bad input."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from trainables.config import TrialConfig


def test_unknown_key_raises_naming_it():
    with pytest.raises(ValidationError, match="temprature"):
        TrialConfig(temprature=0.1)


def test_frozen_and_user_values_never_rewritten():
    cfg = TrialConfig(base_lr=0.3, lr_scaling="linear", batch_size=512, budget_examples=5120)
    with pytest.raises(ValidationError):
        cfg.base_lr = 1.0
    assert cfg.base_lr == 0.3  # the user's value
    assert cfg.lr_effective == pytest.approx(0.6)  # derived, under its own name
    assert cfg.derived()["derived/lr_effective"] == pytest.approx(0.6)


@pytest.mark.parametrize(
    ("scaling", "batch", "expected"),
    [("none", 64, 0.1), ("linear", 64, 0.025), ("sqrt", 64, 0.05), ("sqrt", 1024, 0.2)],
)
def test_lr_scaling_against_batch_256(scaling, batch, expected):
    cfg = TrialConfig(base_lr=0.1, lr_scaling=scaling, batch_size=batch, budget_examples=batch * 8)
    assert cfg.lr_effective == pytest.approx(expected)


def test_lam_is_lam_t_over_uniform_t():
    cfg = TrialConfig(objective="align_uniform", lam_t=3.0, uniform_t=2.0)
    assert cfg.lam == 1.5
    assert cfg.derived()["derived/lam"] == 1.5
    assert TrialConfig().lam is None


def test_compute_matching_across_batch_sizes():
    budget = 768 * 40  # lcm(64, 96, 128, 256) = 768
    configs = [TrialConfig(batch_size=b, budget_examples=budget) for b in (64, 96, 128, 256)]
    assert {c.examples_seen for c in configs} == {budget}
    assert [c.steps for c in configs] == [480, 320, 240, 120]


def test_unmatchable_budget_is_rejected_with_the_reason():
    with pytest.raises(ValidationError) as err:
        TrialConfig(batch_size=96, budget_examples=1000)
    message = str(err.value)
    assert "budget_examples=1000 is unmatchable with batch_size=96" in message
    assert "partial batch of 40 examples" in message


def test_eval_steps_fall_on_the_same_examples_seen_when_marks_divide_steps():
    a = TrialConfig(batch_size=64, budget_examples=768 * 8, eval_marks=4)
    b = TrialConfig(batch_size=256, budget_examples=768 * 8, eval_marks=4)
    seen = lambda c: [s * c.batch_size for s in c.eval_steps]  # noqa: E731
    assert seen(a) == seen(b) == [1536, 3072, 4608, 6144]
    assert TrialConfig(eval_at_start=True, eval_marks=2).eval_steps[0] == 0


def test_workers_split_the_global_batch_and_negatives_set_the_candidates():
    one = TrialConfig(batch_size=64, budget_examples=640)
    two = TrialConfig(batch_size=64, budget_examples=640, workers=2)
    local = TrialConfig(batch_size=64, budget_examples=640, workers=2, negatives="local")
    assert (one.workers, one.negatives, one.sync_bn) == (1, "all", False)
    # the global batch: steps and examples seen do not depend on the workers
    assert one.steps == two.steps == local.steps == 10
    assert one.examples_seen == two.examples_seen == local.examples_seen == 640
    assert two.worker_batch == local.worker_batch == 32
    assert one.derived()["derived/negatives_per_anchor"] == 126
    assert two.derived()["derived/negatives_per_anchor"] == 126
    assert local.derived()["derived/negatives_per_anchor"] == 62


BAD = [
    ({"nonsense": 1}, "nonsense"),
    ({"augmentation": "crop+sparkle"}, "unknown component 'sparkle'; valid components are crop"),
    ({"temperature": 0.0}, "temperature"),
    ({"temperature": -0.5}, "temperature"),
    ({"temperature": math.nan}, "temperature"),
    ({"batch_size": 1}, "batch_size"),
    ({"dataset": "cifar10"}, "data_root is required for dataset='cifar10', got None"),
    ({"lam_t": 1.0}, "lam_t=1.0 applies to objective='align_uniform' only"),
    ({"objective": "align_uniform"}, "lam_t is required with objective='align_uniform'"),
    ({"dataset": "toy", "encoder": "mlp", "augmentation": "crop"}, "dataset='toy' holds vectors"),
    ({"dataset": "imagenet"}, "dataset"),
    ({"batch_size": 96, "budget_examples": 960, "workers": 5}, "cannot be split over workers=5"),
    ({"workers": 0}, "workers"),
    ({"negatives": "some"}, "negatives"),
]


@pytest.mark.parametrize(("fields", "message"), BAD, ids=[str(f) for f, _ in BAD])
def test_bad_config_gets_a_clear_error(fields, message):
    with pytest.raises(ValidationError) as err:
        TrialConfig(**fields)
    text = str(err.value)
    assert message in text
    key, value = next(iter(fields.items()))  # the bad field and its value are named
    assert key in text
    assert str(value) in text
