"""The Ray Tune trainable: one study trial, wrapping ``trainables.train.run_trial``.

Runs in a Ray worker. It never touches MLflow (the driver records), so a worker node needs no
route to the tracking server. Checkpoints go to the trial's folder in the study's storage
(``study.storage``: a local folder or a bucket, whichever ``--storage`` names), so a trial
resumes from its last evaluation both when Ray retries it after a worker died and when a new
driver re-runs the study after the old one died, on any node.

A trial with ``workers`` W > 1 runs as W data-parallel workers through Ray Train's
``TorchTrainer``, started from inside the Tune trial (Ray Train V2's way to tune distributed
runs): gloo on CPUs, NCCL on GPUs, each worker holding the study's per-worker ``cpu``/``gpu``.
Every worker runs ``run_trial``; rank 0's reports reach Tune through ``TuneReportCallback``,
its checkpoints go to the trial folder, and a retried trial resumes every worker from there.
A worker that dies fails the Ray Train run and with it the Tune trial, which Tune retries
(``max_failures``): one retry mechanism for every W.
"""

from __future__ import annotations

import json
import time
from typing import Any

from ray import tune

from study import CHECKS_KEY, EVIDENCE_KEY
from study.storage import Storage, StoredCheckpoints, open_storage, write_pid
from trainables.checkpoints import RESUME_NOTE
from trainables.config import TrialConfig

# trainables.train (torch) is imported where a trial runs: a Ray worker has it already (the
# driver's local Ray preloads it, see study.local_ray.TRIAL_MODULES), the driver never needs it
PID_FILE = "worker.pid"  # W = 1; rank r of a data-parallel trial writes worker{r}.pid


class TuneReporter:
    """Binds the trial's reporter protocol to Ray Tune and the trial's stored checkpoints."""

    def __init__(self, trial: Storage) -> None:
        self.checkpoints = StoredCheckpoints(trial, keep=2)
        self.node_id = _node_id()

    def report(
        self, metrics: dict[str, float], *, step: int, checkpoint_dir: str | None = None
    ) -> None:
        if checkpoint_dir is not None:  # stored before the evaluation reaches the record
            self.checkpoints.save(checkpoint_dir, step)
        tune.report({**metrics, "examples_seen": step, "node_id": self.node_id})

    def latest_checkpoint(self) -> str | None:
        return self.checkpoints.latest()

    def set_aside_checkpoint(self, found: str) -> tuple[str, str]:
        """Set aside the stored checkpoint ``found`` is a copy of (it cannot be loaded)."""
        return self.checkpoints.where(found), self.checkpoints.set_aside(found)


def _node_id() -> str:
    import ray

    try:
        return ray.get_runtime_context().get_node_id()
    except Exception:  # outside Ray (a unit test)
        return ""


def run_study_trial(payload: dict[str, Any]) -> None:
    """Tune's function trainable.

    ``payload["plan"]`` is a design's trial (``TrialPlan.payload()``: ``key``, ``trial`` with
    every TrialConfig field, …) plus ``trial_uri`` (its folder in the study's storage: a path or
    a URI), ``cpu`` and ``gpu`` (per worker), for fixed and adaptive designs alike.
    """
    plan = payload["plan"]
    if plan["trial"].get("workers", 1) > 1:
        _run_data_parallel(plan)  # the workers' last report is the trial's final one
        return
    from trainables.train import claim_share, run_trial

    trial = open_storage(plan["trial_uri"])
    write_pid(trial, PID_FILE)
    config = TrialConfig(**plan["trial"])
    where = placement(config, plan.get("gpu", 0.0))  # refused here: a GPU share without CUDA
    # CPU threads capped to the trial's share, and GPU memory to its fraction when trials share
    # a GPU (resources.gpu below 1), so trials on one machine do not starve each other
    claim_share(plan.get("cpu", 1), plan.get("gpu", 0.0))
    reporter = TuneReporter(trial)
    try:
        result = run_trial(config, reporter)
    finally:
        reporter.checkpoints.release()  # the local copy of the checkpoint it resumed from
    tune.report(final_report(result, reporter.node_id) | where)


class NoAcceleratorError(RuntimeError):
    """A trial holds a share of a GPU, but torch on its node sees no CUDA device."""


def placement(config: TrialConfig, gpu: float) -> dict[str, str]:
    """Where this trial runs, as its child run and results.parquet record it: the node's
    address (``node_ip``; its Ray id is ``node_id``), the accelerator ids Ray assigned to it
    (``gpu_ids``: ``ray.get_gpu_ids()``, comma-separated, empty without a GPU share) and the
    device it trains on (``torch_device``; the config's ``device`` is what the study asked
    for: ``auto`` resolves here).

    Raises:
        NoAcceleratorError: the trial holds ``gpu`` > 0 of a GPU but torch sees no CUDA device
            and the study did not say ``device: cpu``: it would train on the CPU in silence, at
            a fraction of the speed, while holding a GPU no other trial can use.
    """
    import ray
    import torch

    from trainables.train import resolve_device

    node_ip = ray.util.get_node_ip_address()
    gpu_ids = ",".join(str(i) for i in ray.get_gpu_ids())
    if gpu > 0 and config.device != "cpu" and not torch.cuda.is_available():
        raise NoAcceleratorError(no_cuda_words(gpu, gpu_ids, node_ip, _node_id()))
    device = resolve_device(config)
    if device.type == "cuda":
        index = torch.cuda.current_device() if device.index is None else device.index
        device = torch.device("cuda", index)
    return {"node_ip": node_ip, "gpu_ids": gpu_ids, "torch_device": str(device)}


def no_cuda_words(gpu: float, gpu_ids: str, node_ip: str, node_id: str) -> str:
    """Why a trial holding a GPU share refuses to train, and the fix."""
    import os

    import torch

    build = torch.__version__
    if torch.version.cuda is None:
        what = f"a build without CUDA (torch {build})"
        fix = (
            "install a CUDA build of torch on that node (scripts/setup_env.sh installs one; "
            "pip's +cpu wheels have none)"
        )
    else:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
        what = (
            f"a CUDA {torch.version.cuda} build (torch {build}) that finds no device "
            f"(CUDA_VISIBLE_DEVICES={visible}, torch.cuda.device_count() = "
            f"{torch.cuda.device_count()}: no NVIDIA driver, or a driver older than the build)"
        )
        fix = "install the node's NVIDIA driver, or a torch build that matches it"
    return (
        f"the trial holds {gpu:g} GPU (Ray's GPU ids {gpu_ids or 'none'}) on node {node_ip} "
        f"({node_id[:12] or 'outside Ray'}), but torch there is {what}, so it would train on "
        f"the CPU in silence; {fix}, or set `device: cpu` in the study's trial block to train "
        "on the CPU on purpose (and resources.gpu: 0 to leave the GPUs to others)"
    )


def final_report(result: dict[str, Any], node_id: str) -> dict[str, Any]:
    """A trial's last report: its numeric results, ``final``, its status, the evidence and the
    self-checks of the trial code.

    The evidence (tables, the source-return panel) travels to the driver, which alone writes
    to MLflow, as one JSON text: Tune flattens nested results. The self-checks run here, with
    the torch and the objectives that trained the trial (on a cluster, the worker's, not the
    driver's), and cost the driver no torch import."""
    from trainables.checks import self_checks

    summary = {k: v for k, v in result.items() if isinstance(v, int | float)}
    evidence = json.dumps(result.get("evidence") or {})
    noted = {RESUME_NOTE: result[RESUME_NOTE]} if result.get(RESUME_NOTE) else {}
    return {**summary, "final": 1, "trial_status": result["status"], "node_id": node_id,
            EVIDENCE_KEY: evidence, CHECKS_KEY: json.dumps(self_checks()), **noted}  # fmt: skip


# ---------------------------------------------------------------------------------------------
# several workers: Ray Train inside the Tune trial
# ---------------------------------------------------------------------------------------------
class TrainReporter:
    """Rank ``rank``'s reporter in a data-parallel trial run by Ray Train.

    ``ray.train.report`` is a barrier every worker must reach as often as the others, so every
    rank reports at the same points (``run_trial`` gives the other ranks empty reports); Ray
    Train hands rank 0's metrics to Tune (``TuneReportCallback``). Rank 0 alone keeps the
    checkpoints, in the trial's folder of the study's storage, and finds the one to resume
    from there."""

    def __init__(self, trial: Storage, rank: int) -> None:
        self.rank = rank
        self.checkpoints = StoredCheckpoints(trial, keep=2) if rank == 0 else None
        self.node_id = _node_id()

    def report(
        self, metrics: dict[str, float], *, step: int, checkpoint_dir: str | None = None
    ) -> None:
        from ray import train

        if self.checkpoints is None:
            train.report({})
            return
        if checkpoint_dir is not None:
            self.checkpoints.save(checkpoint_dir, step)
        train.report({**metrics, "examples_seen": step, "node_id": self.node_id})

    def latest_checkpoint(self) -> str | None:
        return self.checkpoints.latest() if self.checkpoints is not None else None

    def set_aside_checkpoint(self, found: str) -> tuple[str, str]:
        """Set aside the stored checkpoint ``found`` is a copy of (rank 0 alone resumes)."""
        assert self.checkpoints is not None  # only rank 0 is handed a checkpoint to read
        return self.checkpoints.where(found), self.checkpoints.set_aside(found)


def _run_data_parallel(plan: dict[str, Any]) -> None:
    """Run the trial as ``workers`` Ray Train workers from inside this Tune trial; raises
    when the Ray Train run fails (a worker died), so that Tune retries the trial."""
    from ray import train
    from ray.train.torch import TorchConfig, TorchTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    workers, cpu, gpu = plan["trial"]["workers"], plan.get("cpu", 1), plan.get("gpu", 0.0)
    trial = open_storage(plan["trial_uri"])
    memory = plan.get("memory")  # resources.memory, bytes per worker
    per_worker = {"CPU": cpu} | ({"GPU": gpu} if gpu else {})
    per_worker |= {"memory": memory} if memory else {}
    trainer = TorchTrainer(
        _data_parallel_worker,
        train_loop_config={"plan": plan},
        scaling_config=train.ScalingConfig(
            num_workers=workers, use_gpu=gpu > 0, resources_per_worker=per_worker
        ),
        torch_config=TorchConfig(backend="nccl" if gpu > 0 else "gloo"),
        run_config=train.RunConfig(
            name=f"{plan['key']}-{time.strftime('%Y%m%d-%H%M%S')}",
            storage_path=trial.path("ray-train"),
            storage_filesystem=trial.fs,
            callbacks=[TuneReportCallback()],
            # Tune retries the whole trial (its max_failures), resuming from the trial folder
            failure_config=train.FailureConfig(max_failures=0),
        ),
    )
    trainer.fit()


def _data_parallel_worker(loop_config: dict[str, Any]) -> None:
    """One Ray Train worker: ``run_trial`` as rank r of W, inside the process group Ray Train
    set up; the last report, on every rank, is the trial's final one."""
    import torch
    from ray import train

    from trainables.train import claim_share, run_trial

    plan = loop_config["plan"]
    rank = train.get_context().get_world_rank()
    trial = open_storage(plan["trial_uri"])
    write_pid(trial, f"worker{rank}.pid")
    gpu = plan.get("gpu", 0.0)
    config = TrialConfig(**plan["trial"])
    where = placement(config, gpu)
    claim_share(plan.get("cpu", 1), gpu)
    if gpu > 0:  # this worker's own device is the current one (NCCL: one device per rank)
        from ray.train.torch import get_device

        torch.cuda.set_device(get_device())
    reporter = TrainReporter(trial, rank)
    try:
        result = run_trial(config, reporter)
    finally:
        if reporter.checkpoints is not None:
            reporter.checkpoints.release()
    train.report(final_report(result, reporter.node_id) | where if rank == 0 else {})
