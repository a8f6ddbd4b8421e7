"""The driver's own Ray: what its trial actors carry, so that they start in its warm workers.

End to end, ``test_worker_sigkill_is_retried_from_its_checkpoint`` (test_killed_processes.py)
checks that a study's first trial ran in a worker Ray started before the study asked for one,
with a variable in the driver's environment that Tune copies into every actor."""

from __future__ import annotations

import pytest
from ray.tune.execution import class_cache

from study import runner
from study.runner import _propagated_env_vars

PREEMPTION = "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER"  # set by start_ray before Ray starts


def test_trial_actors_carry_only_the_variables_their_workers_did_not_inherit(
    shared_ray, monkeypatch
):
    names = class_cache.ENV_VARS_TO_PROPAGATE
    assert {PREEMPTION, "AWS_SESSION_TOKEN"} <= names  # what Tune would copy
    monkeypatch.setenv("AWS_SESSION_TOKEN", "set-after-ray-started")
    with _propagated_env_vars(None):
        copied = class_cache.ENV_VARS_TO_PROPAGATE
        assert "AWS_SESSION_TOKEN" in copied  # the workers lack this value: it goes
        assert PREEMPTION not in copied  # inherited by every worker: an actor needs no env
    assert class_cache.ENV_VARS_TO_PROPAGATE is names  # as Tune had it, afterwards


@pytest.mark.parametrize("ray_is", ["a cluster's", "joined"])
def test_on_a_cluster_or_a_ray_started_elsewhere_tune_copies_them_all(
    shared_ray, monkeypatch, ray_is
):
    names = class_cache.ENV_VARS_TO_PROPAGATE
    address = "ray://head:10001" if ray_is == "a cluster's" else None
    if (
        ray_is == "joined"
    ):  # a Ray this process did not start: what its workers inherited is unknown
        monkeypatch.setattr(runner, "_LOCAL_RAY_ENV", None)
    with _propagated_env_vars(address):
        assert class_cache.ENV_VARS_TO_PROPAGATE is names
