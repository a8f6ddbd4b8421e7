"""A study run, planned or refused by a process confined to fewer CPUs than its machine has,
as a batch system or ``taskset`` confines it: every count of CPUs is the process's own
(trainables.machine.usable_cpus), not ``os.cpu_count()``'s.

Each test starts the product as a real process under ``taskset -c 0`` (one CPU of the machine's
two or more), which replays DataBiosphere/toil#4260: its ``taskset -c 1 python3 -c '...
cpu_count()'`` printed the machine's 64, and the workflow planned 64 jobs on one CPU. Here, on
one allowed CPU, the estimate planned 2 at a time, the local Ray took 2 CPUs (so 2 trials ran at
once), and ``resources: {cpu: 2}`` was not refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from studykit import STUDY, write_spec

REPO = Path(__file__).resolve().parents[2]
TOY = {"dataset": "toy", "encoder": "mlp", "augmentation": "noise", "budget_examples": 1024,
       "eval_marks": 1}  # fmt: skip
FACTORS = {"temperature": {"levels": [0.1, 0.2, 0.4], "scale": "log"}}

pytestmark = pytest.mark.skipif(
    shutil.which("taskset") is None or (os.cpu_count() or 1) < 2,
    reason="needs taskset and a machine of 2 CPUs or more (one of them is allowed)",
)


def on_one_cpu(*argv: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["taskset", "-c", "0", *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip


def toy_spec(workdir: Path, **top) -> Path:
    """Three toy trials; no max_concurrent, so the CPUs decide how many run at once."""
    return write_spec(workdir / "toy.yaml", "confined", factors=FACTORS, trial=TOY,
                      max_concurrent=None, baselines=[], **top)  # fmt: skip


def test_a_trial_asking_more_cpus_than_the_process_may_use_is_refused_naming_why(tmp_path):
    """Both offending resources in one refusal, exit 2, nothing written."""
    spec = toy_spec(tmp_path, resources={"cpu": 2, "memory": "64TiB"})
    done = on_one_cpu(STUDY, "run", str(spec), "--tracking-uri",
                      f"sqlite:///{tmp_path / 'mlflow.db'}", "--storage",
                      str(tmp_path / "studies"), cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    said = done.stderr
    machine = os.cpu_count()
    assert ("resources.cpu: each trial asks for 2 CPU but this machine (no --address: the "
            "study runs here) has 1 on its largest node (this process may use 1 CPU: its CPU "
            f"affinity allows 1 of the machine's {machine})") in said  # fmt: skip
    assert "resources.memory: each trial asks for 64 TiB of memory but this machine" in said
    assert "Traceback" not in said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["toy.yaml"]  # nothing recorded


@pytest.mark.slow
def test_the_estimate_plans_one_trial_at_a_time_on_one_allowed_cpu(tmp_path):
    spec = toy_spec(tmp_path)
    done = on_one_cpu(STUDY, "plan", str(spec), "--estimate", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["estimate"]["slots"] == 1


@pytest.mark.slow
def test_a_local_ray_started_on_one_allowed_cpu_has_one_cpu(tmp_path, ray_tmp):
    """The local Ray a study starts gets the one CPU (so its trials run one at a time) and, as
    its memory, what the preflight checks trials' memory against."""
    spec = toy_spec(tmp_path)
    code = (
        "import ray, sys\n"
        "from search_spaces.spec import load_spec\n"
        "from study.capacity import local_capacity\n"
        "from study.local_ray import start_ray\n"
        "assert start_ray(None, load_spec(sys.argv[1]))\n"
        "found = ray.cluster_resources()\n"
        "print(found['CPU'], found['memory'] == local_capacity()['memory'])\n"
        "ray.shutdown()\n"
    )
    done = on_one_cpu(sys.executable, "-c", code, str(spec), cwd=REPO, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["1.0", "True"]
