"""Data-parallel trials in a study: ``resources.workers`` W > 1 runs each trial as W Ray Train
workers inside its Tune trial. The study file's rules (refused early, naming the field), the
preflight of W × the per-worker resources, and a real study through ``study run`` with a worker
SIGKILLed mid-trial, then the driver interrupted and the study resumed."""

from __future__ import annotations

import math
import os
import signal
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from studykit import (
    STUDY,
    checkpoints,
    child_runs,
    default_spec_data,
    duplicated_metric_rows,
    metric_steps,
    start_driver,
    wait_for,
    write_spec,
)

from analysis.report.evidence.gate import release_gate
from search_spaces.designs import batch_sizes_matching, build_design
from search_spaces.spec import StudyError, parse_spec
from study.capacity import check_resources
from study.local_ray import DIGITS_MODULES, TRIAL_MODULES, _preloaded
from trainables.data import digits_split


def spec_with(**changes):
    """The default study with top-level sections replaced (``trial`` is merged)."""
    data = default_spec_data()
    trial = changes.pop("trial", {})
    data["trial"] = data["trial"] | trial
    return parse_spec(data | changes)


# ---- the study file
def test_workers_default_to_one_and_keep_old_fingerprints():
    plain = spec_with()
    assert plain.resources.workers == 1
    assert spec_with(resources={"workers": 1, "cpu": 1}).sha == plain.sha
    assert spec_with(resources={"workers": 2, "cpu": 1}).sha != plain.sha
    assert all(t.config.workers == 1 for t in build_design(plain).trials)


def test_every_trial_gets_the_studys_workers():
    spec = spec_with(resources={"workers": 2, "cpu": 1})
    design = build_design(spec)
    assert {t.config.workers for t in design.trials} == {2}
    assert {t.config.examples_seen for t in design.trials} == {spec.trial["budget_examples"]}
    assert "workers" not in spec.trial  # the user's trial block is not rewritten
    assert spec.resources.trial_cpu == 2 and spec.resources.trial_gpu == 0


@pytest.mark.parametrize("where", ["trial", "factors"])
def test_workers_outside_resources_are_refused_naming_resources_workers(where):
    data = default_spec_data()
    if where == "trial":
        data["trial"]["workers"] = 2
    else:
        data["factors"]["workers"] = {"levels": [1, 2]}
    with pytest.raises(StudyError, match=rf"{where}\.workers: .*set resources\.workers"):
        parse_spec(data)


@pytest.mark.parametrize(
    ("changes", "field", "shown"),
    [
        # a fixed batch that does not split over the workers
        # (30 divides the budget of 30,720, as a batch must, but not over 4 workers)
        ({"trial": {"batch_size": 30}, "factors": {"temperature": {"levels": [0.1, 0.5]}}},
         "trial.batch_size", "batch_size=30"),
        # one level of a batch-size factor that does not
        ({"factors": {"batch_size": {"levels": [64, 30]}}}, "factors.batch_size",
         "batch_size=30"),
        # local negatives over 4 workers of a batch of 4: one source each, no negatives
        ({"trial": {"negatives": "local"}, "factors": {"batch_size": {"levels": [4, 8]}}},
         "factors.batch_size", "batch_size=4"),
    ],
)  # fmt: skip
def test_batches_that_do_not_split_are_refused_before_anything_runs(changes, field, shown):
    spec = spec_with(**changes, resources={"workers": 4, "cpu": 0.5})
    with pytest.raises(StudyError) as err:
        build_design(spec)
    assert str(err.value).startswith(field + ":"), err.value
    assert shown in str(err.value) and "resources.workers=4" in str(err.value)


def test_continuous_batch_sizes_snap_to_multiples_of_the_workers():
    """Every snapped or proposed batch divides the budget and splits over the workers."""
    factors = {"temperature": {"range": [0.1, 0.5], "scale": "log"},
               "batch_size": {"range": [20, 100], "scale": "log"}}  # fmt: skip
    budget = 30720  # its divisors in [20, 100]: 20, 24, 30, 32, 40, 48, 60, 64, 80, 96
    for kind in ("latin_hypercube", "central_composite"):
        design = {"kind": kind, "samples": 6} if kind == "latin_hypercube" else {"kind": kind}
        spec = spec_with(factors=factors, design=design, resources={"workers": 8, "cpu": 0.25})
        batches = {t.config.batch_size for t in build_design(spec).trials}
        assert batches and all(b % 8 == 0 and budget % b == 0 for b in batches), (kind, batches)
    spec = spec_with(factors=factors, resources={"workers": 8, "cpu": 0.25})
    assert batch_sizes_matching(spec, spec.factors["batch_size"]) == [24, 32, 40, 48, 64, 80, 96]
    one = spec_with(factors=factors)
    assert batch_sizes_matching(one, one.factors["batch_size"])[:3] == [20, 24, 30]


def test_no_batch_that_splits_is_refused_naming_the_rule():
    factors = {"batch_size": {"range": [20, 23]}, "temperature": {"levels": [0.1, 0.5]}}
    spec = spec_with(factors=factors, design={"kind": "latin_hypercube", "samples": 3},
                     resources={"workers": 8, "cpu": 0.25})  # fmt: skip
    with pytest.raises(
        StudyError, match=r"factors\.batch_size: .*multiple of resources\.workers=8"
    ):
        build_design(spec)


def test_a_gpu_fraction_per_worker_is_refused():
    with pytest.raises(StudyError, match=r"resources\.gpu: .*workers=2.*got gpu=0\.5"):
        spec_with(resources={"workers": 2, "gpu": 0.5})
    assert spec_with(resources={"workers": 2, "gpu": 1}).resources.trial_gpu == 2


# ---- preflight: W × the per-worker resources
@pytest.mark.parametrize(
    ("resources", "capacity", "total", "message"),
    [
        # 3 workers × 1 CPU on a 2-CPU machine
        ({"workers": 3, "cpu": 1}, {"CPU": 2}, None,
         r"resources\.workers: a trial of workers=3 × cpu=1 needs 3 CPU at once but this "
         r"machine has 2"),
        # 2 workers × 1 GPU on a machine with one
        ({"workers": 2, "cpu": 1, "gpu": 1}, {"CPU": 16, "GPU": 1}, None,
         r"resources\.workers: .*needs 2 GPU at once but this machine has 1"),
        # one worker's ask larger than the largest node of a cluster
        ({"workers": 2, "cpu": 8}, {"CPU": 4}, {"CPU": 64},
         r"resources\.cpu: each of a trial's workers asks for 8 CPU but this machine has 4 on "
         r"its largest node"),
        # fits on no node together, but in the cluster: fine; more than the cluster: refused
        ({"workers": 16, "cpu": 4}, {"CPU": 8}, {"CPU": 32},
         r"resources\.workers: .*needs 64 CPU at once but this machine has 32"),
    ],
)  # fmt: skip
def test_preflight_refuses_workers_that_do_not_fit(resources, capacity, total, message):
    spec = spec_with(resources=resources)
    with pytest.raises(StudyError, match=message):
        check_resources(spec, capacity, "this machine", total)


def test_preflight_passes_workers_spread_over_nodes():
    spec = spec_with(resources={"workers": 4, "cpu": 4, "gpu": 1})
    check_resources(spec, {"CPU": 8, "GPU": 2}, "the cluster", {"CPU": 16, "GPU": 4})


def test_the_trial_module_is_preloaded_into_ray_workers_only_for_one_worker_trials(
    tmp_path, monkeypatch
):
    """Ray Train's helper actors of a data-parallel trial would each import torch for nothing;
    scikit-learn is loaded ahead only where trials read digits that this node has not cached."""
    monkeypatch.setenv("CONTRASTIVE_DATA_CACHE", str(tmp_path))  # a node that made none yet
    assert _preloaded(spec_with(resources={"workers": 2, "cpu": 1})) == []
    one = {"resources": {"workers": 1, "cpu": 1}}
    assert _preloaded(spec_with(**one)) == TRIAL_MODULES + DIGITS_MODULES  # digits
    toy = {"dataset": "toy", "encoder": "mlp", "augmentation": "noise"}
    assert _preloaded(spec_with(trial=toy, **one)) == TRIAL_MODULES
    data = default_spec_data()
    data["trial"].pop("dataset")
    data["factors"] = {"dataset": {"levels": ["toy", "digits"]}}
    assert _preloaded(parse_spec(data)) == TRIAL_MODULES + DIGITS_MODULES
    assert _preloaded(None) == TRIAL_MODULES + DIGITS_MODULES  # a worker of any study
    digits_split(0)  # the node's first digits trial made data seed 0's arrays
    assert _preloaded(spec_with(**one)) == TRIAL_MODULES
    data["factors"] = {"data_seed": {"levels": [0, 1]}}
    assert _preloaded(parse_spec(data)) == TRIAL_MODULES + DIGITS_MODULES  # seed 1 to make


# ---- a real study: Ray Tune, Ray Train (gloo), MLflow, a worker SIGKILLed
BATCH = 64
MARKS = 4  # an evaluation and a checkpoint every 30 steps
BUDGET = BATCH * 120  # 7,680 examples: 90 steps and 3 evaluations left to kill a worker in


def write_workers_spec(path):
    return write_spec(
        path, "dp-two",
        factors={"temperature": {"levels": [0.2, 0.5], "scale": "log"}},
        # no BatchNorm (BatchNorm over a worker's share differs from the whole batch's on CPU,
        # where SyncBatchNorm does not run)
        trial={"encoder": "mlp", "mlp_hidden": [64], "feature_dim": 32, "projection": "linear",
               "projection_dim": 16, "batch_size": BATCH, "budget_examples": BUDGET,
               "eval_marks": MARKS, "negatives": "all", "device": "cpu", "compile": "off"},
        resources={"workers": 2, "cpu": 1}, max_concurrent=1,
    )  # fmt: skip


@pytest.mark.long
@pytest.mark.slow
def test_two_worker_study_with_a_worker_killed_then_interrupted_then_resumed(workdir, ray_tmp):
    """One 2-worker study through ``study run``: rank 1 of the first trial SIGKILLed (the trial
    is retried from its checkpoint), then Ctrl-C (SIGINT to the driver's group) during the
    second trial (its run ends KILLED, exit 130, the resume command printed, nothing partial),
    then the same command again, which resumes the second trial from its checkpoint. One study
    for both faults: each of its trials costs seconds of Ray Train's actors starting."""
    spec = write_workers_spec(workdir / "dp.yaml")
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    command, driver = start_driver(spec, workdir, uri, STUDY)
    trial_dir = workdir / "studies" / "dp-two" / "trials" / "p000-r0"
    wait_for(lambda: len(checkpoints(trial_dir)) >= 1, 300, "a first checkpoint", driver)
    killed = int((trial_dir / "worker1.pid").read_text())  # rank 1: not the one that reports
    rank0 = int((trial_dir / "worker0.pid").read_text())
    os.kill(killed, signal.SIGKILL)
    second = workdir / "studies" / "dp-two" / "trials" / "p001-r0"
    wait_for(lambda: len(checkpoints(second)) >= 1, 600, "the second trial's checkpoint", driver)
    os.killpg(driver.pid, signal.SIGINT)  # the whole group, as a terminal's Ctrl-C does
    out, err = driver.communicate(timeout=180)
    assert driver.returncode == 130, err[-3000:]
    assert "interrupted: study 'dp-two' interrupted: its trials were stopped" in err
    assert f"{STUDY} run {spec} --no-figures" in err and "Tuner.restore" not in out + err
    stopped = {r.data.tags["study.trial_key"]: r.info.status for r in child_runs(uri, "dp-two")}
    assert stopped == {"p000-r0": "FINISHED", "p001-r0": "KILLED"}
    assert not (workdir / "studies" / "dp-two" / "results.parquet").exists()  # nothing partial
    assert "report:" not in out

    again = subprocess.run(command, cwd=workdir, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    runs = {r.data.tags["study.trial_key"]: r for r in child_runs(uri, "dp-two")}
    assert sorted(runs) == ["p000-r0", "p001-r0"]  # one child run per trial, whatever W
    assert {r.info.status for r in runs.values()} == {"FINISHED"}
    assert {r.data.tags["study.workers"] for r in runs.values()} == {"2"}
    run = runs["p000-r0"]
    assert run.data.tags["study.attempts"] == "2"  # started, a worker killed, retried
    # both workers are new processes, and the retry resumed from a checkpoint, not from zero
    assert int((trial_dir / "worker1.pid").read_text()) != killed
    assert int((trial_dir / "worker0.pid").read_text()) != rank0
    assert run.data.metrics["trial/resumed_from"] > 0
    assert runs["p001-r0"].data.metrics["trial/resumed_from"] > 0  # interrupted, resumed
    # every evaluation in the run exactly once, up to the full budget
    marks = [BUDGET // MARKS * k for k in range(1, MARKS + 1)]
    assert metric_steps(uri, run.info.run_id) == marks
    assert duplicated_metric_rows(workdir / "mlflow.db") == []

    df = pd.read_parquet(workdir / "studies" / "dp-two" / "results.parquet")
    assert (df["examples_seen"] == BUDGET).all()  # compute-matched: the global batch counts
    assert (df["workers"] == 2).all() and (df["negatives"] == "all").all()
    assert (df["loss/candidates"] == 2 * BATCH - 2).all()  # every worker's views gathered
    assert (df["derived.negatives_per_anchor"] == 2 * BATCH - 2).all()
    assert all(math.isfinite(v) for v in df["probe/knn_top1_h"])
    item = release_gate(df)[1]
    assert item.status == "pass" and "measured across devices" in item.evidence, item
    # this machine's Ray watches no node for preemption (an actor per trial, for nothing)
    logs = Path(ray_tmp).glob("ray/session_*/logs/worker-*.out")
    actors = {line for out in logs for line in out.read_text().splitlines()
              if line.startswith(":actor_name:")}  # fmt: skip
    assert ":actor_name:RayTrainWorker" in actors and ":actor_name:PreemptionWatcher" not in actors
