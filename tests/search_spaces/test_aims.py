"""search_spaces/aims.py: the target's direction (the catalogue's when not given) and a goal's
reachable bounds, refused as the study file says them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from search_spaces.aims import Goal, Target


def test_a_target_without_a_mode_takes_the_metrics_direction():
    assert Target().mode == "max"  # probe/knn_top1_h: an accuracy
    assert Target(metric="z/uniform").mode == "min"
    assert Target(metric="z/uniform", mode="max").mode == "max"


def test_a_target_and_a_goal_refuse_unknown_keys_and_changes():
    with pytest.raises(ValidationError, match="metrc"):
        Target(metrc="z/uniform")
    goal = Goal(metric="z/uniform", goal="min", low=-4, high=-2)
    with pytest.raises(ValidationError):
        goal.low = -3


@pytest.mark.parametrize(
    ("fields", "refusal"),
    [
        ({"goal": "max", "low": 1, "high": 1}, r"low \(1\) must be below high \(1\)"),
        ({"goal": "target", "low": 0, "high": 1}, "a target goal needs low < target < high"),
        ({"goal": "target", "low": 0, "high": 1, "target": 1}, "got target = 1"),
        ({"goal": "min", "low": 0, "high": 1, "target": 0.5},
         r"target is only for goal: target \(this goal is min\)"),
        ({"goal": "max", "low": 0, "high": 1, "weight": 0}, "greater than 0"),
    ],
)  # fmt: skip
def test_a_goal_that_cannot_be_reached_is_refused(fields, refusal):
    with pytest.raises(ValidationError, match=refusal):
        Goal(metric="probe/knn_top1_h", **fields)


def test_a_reachable_goal_keeps_its_defaults():
    goal = Goal(metric="probe/knn_top1_h", goal="target", low=0.8, high=0.95, target=0.9)
    assert (goal.weight, goal.importance, goal.target) == (1.0, 1.0, 0.9)
