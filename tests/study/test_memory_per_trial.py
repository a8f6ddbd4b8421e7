"""``resources.memory``: the plan shows what a trial holds, and a real local Ray packs trials by
it. Ray's ``memory`` resource is logical (what trials hold, not what they touch): a Ray of 2 CPUs
and 1 GiB runs trials asking 600 MiB one at a time, though its CPUs and the study's
concurrency (2) would run two; the same study asking 400 MiB runs two at once, so the packing,
not the trials' own pace, is what kept them apart."""

from __future__ import annotations

import json
import subprocess

import pytest
from studykit import STUDY, child_runs, most_at_once, write_spec

from study.runner import run_study

TOY = {"dataset": "toy", "encoder": "mlp", "augmentation": "noise", "budget_examples": 2048,
       "eval_marks": 1}  # fmt: skip
FACTORS = {"temperature": {"levels": [0.1, 0.4], "scale": "log"}}
RAY_MEMORY = 2**30


def test_the_plan_shows_the_memory_a_trial_holds(tmp_path):
    spec = write_spec(tmp_path / "m.yaml", "memory-plan", factors=FACTORS, trial=TOY,
                      resources={"cpu": 1, "memory": "2GiB"})  # fmt: skip
    shown = subprocess.run([STUDY, "plan", str(spec)], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120)  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert (
        "resources: each trial holds 1 CPU, 2 GiB of memory (2147483648 bytes); Ray starts "
        "no more trials on a node than its memory holds"
    ) in " ".join(shown.stdout.split())
    as_json = subprocess.run([STUDY, "plan", str(spec), "--json"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)  # fmt: skip
    assert json.loads(as_json.stdout)["resources"] == {
        "workers": 1, "cpu": 1.0, "gpu": 0.0, "memory": 2 * 2**30}  # fmt: skip


@pytest.fixture
def small_ray(ray_tmp):
    """A local Ray of 2 CPUs and 1 GiB of memory, which the studies below join (run_study
    finds this process connected and uses it)."""
    import ray

    ray.init(num_cpus=2, _memory=RAY_MEMORY, object_store_memory=128 * 2**20,
             _temp_dir=f"{ray_tmp}/r", include_dashboard=False, log_to_driver=False)  # fmt: skip
    assert ray.cluster_resources()["memory"] == RAY_MEMORY
    yield
    ray.shutdown()


@pytest.mark.long
def test_a_local_ray_runs_no_more_trials_at_once_than_its_memory_holds(small_ray, workdir):
    held = {}
    for name, memory in (("memory-one", "600MiB"), ("memory-two", "400MiB")):
        spec = write_spec(workdir / f"{name}.yaml", name, factors=FACTORS, trial=TOY,
                          resources={"cpu": 1, "memory": memory}, max_concurrent=2,
                          baselines=[])  # fmt: skip
        uri = f"sqlite:///{workdir / 'mlflow.db'}"
        outcome = run_study(spec, tracking_uri=uri, storage=workdir / "studies", quiet=True,
                            figures=False)  # fmt: skip
        assert outcome.counts == {"FINISHED": 2}
        runs = child_runs(uri, name)
        held[name] = most_at_once([(int(r.data.tags["study.attempt_started"]), r.info.end_time)
                                   for r in runs])  # fmt: skip
    print("most trials at once:", held)
    assert held == {"memory-one": 1, "memory-two": 2}
