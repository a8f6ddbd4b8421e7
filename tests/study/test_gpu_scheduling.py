"""GPUs as a cluster schedules them, on this CPU-only machine: two real Ray nodes on 127.0.0.1
(``ray start``, token authentication on), each with one logical GPU (``--num-gpus 1``: Ray
schedules it and assigns its id; no CUDA device stands behind it, the one stand-in).

A study of eight trials asking ``resources: {gpu: 0.25, cpu: 1}`` runs on it with ``device:
cpu``: each trial records the node it ran on, the GPU id Ray gave it and the device it trained
on, in its child run and in results.parquet; no GPU held more than four trials at once, both GPUs
were used, and each recorded id is one of its node's GPUs. The same study without ``device:
cpu`` ends with every trial failed at once, saying why (a GPU share and no CUDA), and nothing
trained.
"""

from __future__ import annotations

import shutil
import subprocess

import pyarrow.parquet as pq
import pytest
from raynodes import token_cluster
from studykit import STUDY, child_runs, most_at_once, parent_runs, write_spec

NODE_GPUS = 1
PER_TRIAL = 0.25
TRIALS = 8


@pytest.fixture(scope="module")
def gpu_cluster():
    """Two nodes, each 5 CPUs and one logical GPU: CPUs would let five trials share a node, the
    GPU lets four (1 / 0.25), so only the GPU share can keep a fifth off."""
    cluster = token_cluster(nodes=[{"cpus": 5, "gpus": NODE_GPUS}] * 2)
    yield cluster
    cluster.stop()
    shutil.rmtree(cluster.root, ignore_errors=True)


def run_on(cluster, workdir, name: str, trial: dict) -> subprocess.CompletedProcess:
    spec = write_spec(
        workdir / f"{name}.yaml", name,
        factors={"temperature": {"levels": [0.1, 0.2, 0.3, 0.5], "scale": "log"}},
        replicates=2, trial={"budget_examples": 3072, "eval_marks": 2} | trial,
        resources={"gpu": PER_TRIAL, "cpu": 1}, max_concurrent=TRIALS, max_failures=0,
    )  # fmt: skip
    return subprocess.run(
        [STUDY, "run", str(spec), "--address", cluster.address, "--no-figures",
         "--tracking-uri", f"sqlite:///{workdir / 'mlflow.db'}",
         "--storage", str(workdir / "studies")],
        cwd=workdir, env=cluster.env(), capture_output=True, text=True, timeout=900,
    )  # fmt: skip


@pytest.mark.long
def test_trials_share_each_gpu_four_at_a_time_and_record_where_they_ran(gpu_cluster, tmp_path):
    done = run_on(gpu_cluster, tmp_path, "gpu-packing", {"device": "cpu"})
    assert done.returncode == 0, done.stderr[-3000:]
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    runs = child_runs(uri, "gpu-packing")
    assert len(runs) == TRIALS and {r.info.status for r in runs} == {"FINISHED"}
    nodes = {n["NodeID"]: n for n in gpu_cluster.alive_nodes()}
    by_gpu: dict[tuple[str, str], list[tuple[int, int]]] = {}
    placements = []
    for run in runs:
        tags = run.data.tags
        node, gpu_ids = tags["study.node_id"], tags["study.gpu_ids"]
        device = tags["study.torch_device"]
        assert node in nodes  # a live node of this cluster
        assert tags["study.node_ip"] == nodes[node]["NodeManagerAddress"]  # as Ray knows it
        assert device == "cpu"  # as the study said
        owned = {str(i) for i in range(int(nodes[node]["Resources"]["GPU"]))}
        assert gpu_ids and set(gpu_ids.split(",")) <= owned  # one of its node's GPUs
        window = (int(tags["study.attempt_started"]), run.info.end_time)
        by_gpu.setdefault((node, gpu_ids), []).append(window)
        placements.append((tags["study.trial_key"], node[:8], gpu_ids, device))
    print("\n".join(f"{key}: node {node} gpu {gpu} device {dev}"
                    for key, node, gpu, dev in sorted(placements)))  # fmt: skip
    assert len(by_gpu) == 2  # both nodes' GPUs were used
    held = {gpu: most_at_once(windows) for gpu, windows in by_gpu.items()}
    print("most trials at once per GPU:", held)
    assert max(held.values()) <= NODE_GPUS / PER_TRIAL  # never more than four on one GPU
    assert max(held.values()) >= 2  # and the GPU was shared: the packing was exercised
    table = pq.read_table(tmp_path / "studies" / "gpu-packing" / "results.parquet").to_pylist()
    recorded = {(r.data.tags["study.trial_key"], r.data.tags["study.node_id"],
                 r.data.tags["study.gpu_ids"], "cpu") for r in runs}  # fmt: skip
    assert {(row["trial_key"], row["node_id"], row["gpu_ids"], row["torch_device"])
            for row in table} == recorded  # fmt: skip


@pytest.mark.long
def test_a_trial_holding_a_gpu_without_cuda_fails_at_once_and_trains_nothing(
    gpu_cluster, tmp_path
):
    done = run_on(gpu_cluster, tmp_path, "gpu-no-cuda", {"device": "auto"})
    assert done.returncode == 1, done.stderr[-3000:]  # a study whose trials all failed
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    runs = child_runs(uri, "gpu-no-cuda")
    assert len(runs) == TRIALS and {r.info.status for r in runs} == {"FAILED"}
    for run in runs:
        error = run.data.tags["study.error"]
        assert "NoAcceleratorError" in error
        assert "on node " in error and "torch there is" in error
        assert "set `device: cpu`" in error
        assert not any(key.startswith("train/") for key in run.data.metrics)  # nothing trained
    trials = tmp_path / "studies" / "gpu-no-cuda" / "trials"
    assert not list(trials.glob("*/checkpoint_*"))
    assert parent_runs(uri, "gpu-no-cuda")[0].info.status != "RUNNING"
