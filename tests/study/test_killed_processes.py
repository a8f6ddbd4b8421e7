"""Processes die; the record stays whole. Real Ray, real MLflow, real SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess

import pandas as pd
import pytest
from processkit import kill_processes_mentioning, prestarted_worker_pids
from studykit import (
    STUDY,
    checkpoints,
    child_runs,
    duplicated_metric_rows,
    metric_steps,
    parent_runs,
    start_driver,
    wait_for,
    write_spec,
)

from study.runner import run_study


@pytest.mark.long
@pytest.mark.slow
def test_a_killed_worker_then_a_killed_driver_and_a_rerun_lose_nothing(workdir, ray_tmp):
    """One study for both faults (a driver each would cost a Ray start and its trials): a
    worker SIGKILLed in the first trial is retried from its checkpoint; then the driver is
    SIGKILLed with the first trial done and the second checkpointed, and the same command run
    again runs only what is missing."""
    spec = write_spec(
        workdir / "s.yaml",
        "kills",
        factors={"temperature": {"levels": [0.1, 0.5]}},
        trial={"budget_examples": 128 * 40, "batch_size": 128, "eval_marks": 4},
        max_concurrent=1,
    )
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    # a variable Tune copies into every trial actor (as a bucket's credentials are) must not
    # keep the trial from the warm worker Ray started for it: the workers inherited it
    command, driver = start_driver(
        spec, workdir, uri, STUDY, env=os.environ | {"AWS_ACCESS_KEY_ID": "not-used"}
    )
    trials = workdir / "studies" / "kills" / "trials"
    first = trials / "p000-r0"
    wait_for(lambda: len(checkpoints(first)) >= 1, 180, "a first checkpoint", driver)
    pid = int((first / "worker.pid").read_text())
    assert pid in prestarted_worker_pids(ray_tmp)  # the first trial took a warm worker
    os.kill(pid, signal.SIGKILL)

    def one_done_one_checkpointed():
        # Touch the store only once trials run: the driver has created and migrated it by then
        # (a second process migrating a new SQLite store at the same time breaks both).
        try:
            runs = child_runs(uri, "kills")
        except Exception:
            return False
        done = {r.data.tags["study.trial_key"] for r in runs if r.info.status == "FINISHED"}
        started = [d for d in trials.glob("p*") if d.name not in done and checkpoints(d)]
        return (done, started) if done and started else False

    done_before, _ = wait_for(one_done_one_checkpointed, 240, "one trial done", driver)
    assert done_before == {"p000-r0"}
    os.killpg(driver.pid, signal.SIGKILL)  # the driver and everything in its session
    driver.wait(timeout=30)
    kill_processes_mentioning(ray_tmp)  # Ray daemons that outlive their driver
    stuck = [r for r in child_runs(uri, "kills") if r.info.status == "RUNNING"]
    assert [r.data.tags["study.trial_key"] for r in stuck] == ["p001-r0"]

    rerun = subprocess.run(command, cwd=workdir, capture_output=True, text=True, timeout=400)
    assert rerun.returncode == 0, rerun.stderr[-3000:]

    runs = {r.data.tags["study.trial_key"]: r for r in child_runs(uri, "kills")}
    assert sorted(runs) == ["p000-r0", "p001-r0"]
    assert {r.info.status for r in runs.values()} == {"FINISHED"}
    assert runs["p001-r0"].info.run_id == stuck[0].info.run_id  # continued, not a second run
    # the first trial: started, its worker killed, retried; finished before the driver's kill,
    # so never run again
    assert runs["p000-r0"].data.tags["study.attempts"] == "2"
    assert int((first / "worker.pid").read_text()) != pid  # a new worker process
    # every evaluation is in each run exactly once, up to the full budget
    for key, run in runs.items():
        assert metric_steps(uri, run.info.run_id) == [128 * 10 * k for k in range(1, 5)], key
    assert duplicated_metric_rows(workdir / "mlflow.db") == []
    (parent,) = parent_runs(uri, "kills")  # one parent, resumed, finished
    assert parent.info.status == "FINISHED"
    # the self-checks ran with the trials' code and were recorded on the parent
    assert parent.data.tags["study.check.info_nce_worked_example"] == "pass"


@pytest.mark.slow
def test_trials_land_on_both_nodes_of_a_two_node_cluster(workdir, ray_tmp):
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        spec = write_spec(
            workdir / "s.yaml",
            "two-nodes",
            factors={"temperature": {"levels": [0.1, 0.5]}},
            trial={"budget_examples": 128 * 30, "eval_marks": 3},
            max_concurrent=2,
        )
        uri = f"sqlite:///{workdir / 'mlflow.db'}"
        outcome = run_study(spec, address=cluster.address, tracking_uri=uri,
                            storage=workdir / "studies", quiet=True, figures=False)  # fmt: skip
        assert outcome.ok
        nodes = {r.data.tags["study.node_id"] for r in child_runs(uri, "two-nodes")}
        alive = {n["NodeID"] for n in ray.nodes()} if ray.is_initialized() else None
        assert len(nodes) == 2, nodes
        if alive is not None:
            assert nodes <= alive
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.mark.long
@pytest.mark.slow
def test_optuna_study_killed_mid_trial_resumes_that_trial_in_its_own_run(workdir, ray_tmp):
    """An adaptive design resumes like a fixed one."""
    spec = write_spec(
        workdir / "o.yaml",
        "adaptive-kill",
        factors={"temperature": {"range": [0.05, 1.0], "scale": "log"}},
        trial={"budget_examples": 128 * 40, "eval_marks": 4},
        design={"kind": "optuna", "samples": 2, "metric": "probe/knn_top1_h", "seed": 0},
        max_concurrent=1,
    )
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    command, driver = start_driver(spec, workdir, uri, STUDY)
    trials = workdir / "studies" / "adaptive-kill" / "trials"

    def first_trial_twice_checkpointed():
        found = [d for d in trials.glob("o-*") if len(checkpoints(d)) >= 2]
        return found[0] if found else False

    killed_dir = wait_for(first_trial_twice_checkpointed, 240, "two checkpoints", driver)
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait(timeout=30)
    kill_processes_mentioning(ray_tmp)
    before = {r.data.tags["study.trial_key"]: r for r in child_runs(uri, "adaptive-kill")}
    assert killed_dir.name in before and before[killed_dir.name].info.status == "RUNNING"
    logged_before = metric_steps(uri, before[killed_dir.name].info.run_id)
    assert 1 <= len(logged_before) < 4
    last = checkpoints(killed_dir)[-1]
    stamp = (last.stat().st_ino, last.stat().st_mtime_ns)

    rerun = subprocess.run(command, cwd=workdir, capture_output=True, text=True, timeout=400)
    assert rerun.returncode == 0, rerun.stderr[-3000:]

    runs = {r.data.tags["study.trial_key"]: r for r in child_runs(uri, "adaptive-kill")}
    assert len(runs) == 2 and {r.info.status for r in runs.values()} == {"FINISHED"}
    resumed = runs[killed_dir.name]  # the same run, continued: never a second one
    assert resumed.info.run_id == before[killed_dir.name].info.run_id
    assert resumed.data.tags["study.attempts"] == "2"
    assert resumed.data.params["temperature"] == before[killed_dir.name].data.params["temperature"]
    assert metric_steps(uri, resumed.info.run_id) == [128 * 10 * k for k in range(1, 5)]
    # it continued from its checkpoint: that checkpoint was never written again
    assert last.exists() and (last.stat().st_ino, last.stat().st_mtime_ns) == stamp
    assert all(c.name >= last.name for c in checkpoints(killed_dir))
    assert parent_runs(uri, "adaptive-kill")[0].info.status == "FINISHED"
    frame = pd.read_parquet(workdir / "studies" / "adaptive-kill" / "results.parquet")
    assert sorted(frame["status"]) == ["finished"] * 2
    assert duplicated_metric_rows(workdir / "mlflow.db") == []
