"""One trial, end to end: ``run_trial(config, reporter=None) -> dict``.

The loop takes exactly ``config.steps`` full batches (``budget_examples`` examples; no partial
batch), evaluates on held-out data after the steps in ``config.eval_steps`` (and before the first
step when ``eval_at_start``), and reports every metric of design.md with step = examples seen.
A checkpoint goes with every evaluation after the start. A non-finite loss ends the trial with
status ``diverged``; a collapsing projection (mean per-dimension std of normalised z below
``collapse_std`` and not rising between evaluations) ends it with status ``collapsed``. Neither
raises.

It knows nothing of Ray or MLflow: a :class:`Reporter` receives metrics and checkpoints, and may
hand back a checkpoint to resume from.
"""

from __future__ import annotations

import math
import random
import tempfile
import time
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor, nn

from trainables.config import TrialConfig
from trainables.data import (
    DataBundle,
    load_data,
    make_augment,
    step_generator,
    two_views,
    view_batches,
)
from trainables.diagnostics import pair_diagnostics
from trainables.encoders import ContrastiveModel, build_model
from trainables.objectives import NonFiniteError, align_uniform_loss, info_nce
from trainables.probes import probe_metrics

CHECKPOINT_FILE = "trial.pt"
EVAL_VIEWS_SEED = 2**31 - 1  # held-out views are the same for every trial of a study
STATUSES = ("finished", "diverged", "collapsed")


class Reporter(Protocol):
    """Where a trial's metrics and checkpoints go (Ray Tune, MLflow, a directory, a test)."""

    def report(
        self, metrics: dict[str, float], *, step: int, checkpoint_dir: str | None = None
    ) -> None:
        """Take one evaluation's metrics; ``checkpoint_dir`` is gone once this returns."""

    def latest_checkpoint(self) -> str | None:
        """A directory written by an earlier ``report`` of this trial, to resume from."""


class LocalReporter:
    """Keeps every report in memory and checkpoints under ``root`` (the Ray-free reporter)."""

    def __init__(self, root: str | Path | None = None, keep: int = 2) -> None:
        self.root = Path(root) if root is not None else None
        self.keep = keep
        self.history: list[tuple[int, dict[str, float]]] = []

    def report(
        self, metrics: dict[str, float], *, step: int, checkpoint_dir: str | None = None
    ) -> None:
        self.history.append((step, dict(metrics)))
        if checkpoint_dir is None or self.root is None:
            return
        import shutil

        target = self.root / f"checkpoint_{step:012d}"
        partial = target.with_suffix(".partial")
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(checkpoint_dir, partial)
        partial.rename(target)  # atomic: a kill never leaves a half-written checkpoint
        for old in self.checkpoints()[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)

    def checkpoints(self) -> list[Path]:
        if self.root is None or not self.root.is_dir():
            return []
        return sorted(p for p in self.root.glob("checkpoint_*") if p.suffix != ".partial")

    def latest_checkpoint(self) -> str | None:
        found = self.checkpoints()
        return str(found[-1]) if found else None


# ---------------------------------------------------------------------------------------------
# pieces
# ---------------------------------------------------------------------------------------------
def resolve_device(config: TrialConfig) -> torch.device:
    if config.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but no CUDA device is available")
    if config.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(config.device)


def make_optimizer(config: TrialConfig, model: nn.Module) -> torch.optim.Optimizer:
    params, lr, wd = model.parameters(), config.lr_effective, config.weight_decay
    if config.optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=config.momentum, weight_decay=wd)
    if config.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=wd)
    return torch.optim.Adam(params, lr=lr, weight_decay=wd)


def lr_at(config: TrialConfig, step: int) -> float:
    """Learning rate of optimiser step ``step``: linear warm-up, then constant or cosine to 0.

    A pure function of the step, so the schedule's whole state is the step count.
    """
    peak = config.lr_effective
    warm = config.warmup_steps
    if step < warm:
        return peak * (step + 1) / warm
    if config.schedule == "constant":
        return peak
    progress = (step - warm) / max(1, config.steps - warm)
    return peak * 0.5 * (1 + math.cos(math.pi * progress))


def objective_loss(config: TrialConfig, z1: Tensor, z2: Tensor, groups: Tensor | None) -> Tensor:
    """The training objective on two projected views (B, D) of B sources."""
    if config.objective == "align_uniform":
        return align_uniform_loss(z1, z2, config.lam, config.uniform_t, config.align_alpha)
    b = z1.shape[0]
    sources = torch.arange(b, device=z1.device).repeat(2)
    view_groups = None if groups is None else groups.to(z1.device).repeat(2)
    return info_nce(
        torch.cat([z1, z2]), sources, config.temperature,
        groups=view_groups, group_policy=config.group_policy,
    )  # fmt: skip


def _rng_state() -> dict[str, Any]:
    np_state = np.random.get_state()
    py_state = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy_keys": torch.from_numpy(np_state[1].astype(np.int64)),
        "numpy_pos": int(np_state[2]),
        "numpy_gauss": [int(np_state[3]), float(np_state[4])],
        "python": torch.tensor(py_state[1], dtype=torch.int64),
        "python_gauss": py_state[2],
    }


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if torch.cuda.is_available() and state["cuda"]:
        torch.cuda.set_rng_state_all(state["cuda"])
    keys = state["numpy_keys"].numpy().astype(np.uint32)
    has_gauss, cached = state["numpy_gauss"]
    np.random.set_state(("MT19937", keys, state["numpy_pos"], has_gauss, cached))
    random.setstate((3, tuple(int(v) for v in state["python"]), state["python_gauss"]))


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@torch.no_grad()
def embed(model: ContrastiveModel, x: Tensor, to_input, device: torch.device, batch: int = 1024):
    """(N, ...) rows -> (h, z) on the CPU, ``to_input`` applied chunk by chunk (so a prepared
    copy of a large split never exists whole)."""
    outs = [model(to_input(x[a : a + batch]).to(device)) for a in range(0, len(x), batch)]
    return torch.cat([h.float().cpu() for h, _ in outs]), torch.cat(
        [z.float().cpu() for _, z in outs]
    )


def encode(model: ContrastiveModel, data: DataBundle, x: Tensor, device: torch.device):
    """Un-augmented stored rows -> (h, z) on the CPU."""
    return embed(model, x, lambda chunk: data.normalise(data.prepare(chunk)), device)


@torch.no_grad()
def evaluate(
    config: TrialConfig, model: ContrastiveModel, data: DataBundle, device: torch.device
) -> dict[str, float]:
    """Held-out diagnostics on two fixed views, and both probes on both spaces."""
    was_training = model.training
    model.eval()
    augment = make_augment(config, data)
    g = step_generator(EVAL_VIEWS_SEED, 0, device)
    v1, v2 = two_views(data, augment, data.heldout_x.to(device), g)
    h1, z1 = embed(model, v1, lambda chunk: chunk, device)
    h2, z2 = embed(model, v2, lambda chunk: chunk, device)
    groups = None if data.train_groups is None else data.train_groups[: config.batch_size]
    metrics = pair_diagnostics(
        h1, h2, z1, z2, data.heldout_y,
        batch_size=config.batch_size,
        temperature=config.temperature if config.objective == "info_nce" else None,
        groups=groups, group_policy=config.group_policy,
    )  # fmt: skip
    train_h, train_z = encode(model, data, data.train_x[data.probe_index], device)
    held_h, held_z = encode(model, data, data.heldout_x, device)
    metrics |= probe_metrics(
        {"h": train_h, "z": train_z, "y": data.train_y[data.probe_index]},
        {"h": held_h, "z": held_z, "y": data.heldout_y},
        k=config.knn_k, knn_temperature=config.knn_temperature,
        linear=config.linear_probe, max_iter=config.linear_probe_iters,
    )  # fmt: skip
    model.train(was_training)
    return metrics


# ---------------------------------------------------------------------------------------------
# the trial
# ---------------------------------------------------------------------------------------------
class _Trial:
    """Mutable state of one running trial; checkpointed whole at every evaluation."""

    def __init__(self, config: TrialConfig, reporter: Reporter | None) -> None:
        self.wall0 = time.perf_counter()  # wall_s counts setup (data load, model build) too
        self.config = config
        self.reporter = reporter
        self.device = resolve_device(config)
        seed_everything(config.seed)
        self.data = load_data(config)
        self.model = build_model(config, self.data.input_shape).to(self.device)
        self.optimizer = make_optimizer(config, self.model)
        self.step = 0  # optimiser steps taken
        self.loss_sum, self.loss_count = 0.0, 0  # since the last evaluation
        self.times = {"train_s": 0.0, "eval_s": 0.0, "data_s": 0.0, "checkpoint_s": 0.0}
        self.last_metrics: dict[str, float] = {}
        self.status = "finished"

    # -- checkpoints --
    def state(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": {"step": self.step, "lr": lr_at(self.config, max(0, self.step - 1))},
            "step": self.step,
            "examples_seen": self.step * self.config.batch_size,
            "loss_sum": self.loss_sum,
            "loss_count": self.loss_count,
            "times": dict(self.times),
            "last_metrics": dict(self.last_metrics),
            "rng": _rng_state(),
        }

    def load(self, directory: str) -> None:
        state = torch.load(
            Path(directory) / CHECKPOINT_FILE, map_location=self.device, weights_only=True
        )
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step = state["step"]
        self.loss_sum, self.loss_count = state["loss_sum"], state["loss_count"]
        self.times = dict(state["times"])
        self.last_metrics = dict(state["last_metrics"])
        _set_rng_state(
            {k: (v.cpu() if isinstance(v, Tensor) else v) for k, v in state["rng"].items()}
        )

    # -- evaluation and reporting --
    def train_metrics(self) -> dict[str, float]:
        seen = self.step * self.config.batch_size
        spent = self.times["train_s"] + self.times["data_s"]
        return {
            "train/loss": self.loss_sum / self.loss_count if self.loss_count else math.nan,
            "train/lr": lr_at(self.config, max(0, self.step - 1)),
            "train/examples_seen": float(seen),
            "train/steps": float(self.step),
            "train/examples_per_s": seen / spent if spent > 0 else 0.0,
        }

    def is_collapsing(self, std: float) -> bool:
        """z's mean per-dimension std is below ``collapse_std`` and not rising since the last
        evaluation. Freshly initialised encoders often start that low (every z nearly parallel)
        and spread out as they train, so a low value alone is not collapse."""
        previous = self.last_metrics.get("z/dim_std_mean")
        return std < self.config.collapse_std and previous is not None and std <= previous

    def evaluate_and_report(self, checkpoint: bool) -> None:
        t0 = time.perf_counter()
        metrics = self.train_metrics() | evaluate(self.config, self.model, self.data, self.device)
        self.times["eval_s"] += time.perf_counter() - t0
        self.loss_sum, self.loss_count = 0.0, 0
        if self.is_collapsing(metrics["z/dim_std_mean"]):
            self.status = "collapsed"
        self.last_metrics = metrics
        if self.reporter is None:
            return
        seen = self.step * self.config.batch_size
        if not checkpoint or self.status != "finished":
            self.reporter.report(metrics, step=seen)
            return
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="trial-ckpt-") as tmp:
            torch.save(self.state(), Path(tmp) / CHECKPOINT_FILE)
            self.times["checkpoint_s"] += time.perf_counter() - t0
            self.reporter.report(metrics, step=seen, checkpoint_dir=tmp)

    # -- the loop --
    def train_step(self, v1: Tensor, v2: Tensor, groups: Tensor | None) -> float:
        for group in self.optimizer.param_groups:
            group["lr"] = lr_at(self.config, self.step)
        b = v1.shape[0]
        autocast = self.device.type == "cuda" and self.config.precision == "bf16"
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=autocast):
            _, z = self.model(torch.cat([v1, v2]))  # one pass: BatchNorm sees both views
        loss = objective_loss(self.config, z[:b].float(), z[b:].float(), groups)
        if not torch.isfinite(loss):
            raise NonFiniteError(f"train/loss is {float(loss)} at step {self.step}")
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return float(loss.detach())

    def run(self) -> dict[str, Any]:
        resume = self.reporter.latest_checkpoint() if self.reporter is not None else None
        if resume:
            self.load(resume)
            # Report the checkpoint's own evaluation again: a reporter that died before
            # recording it gets it now; one that has it already skips the replayed step.
            if self.last_metrics and self.reporter is not None:
                self.reporter.report(self.last_metrics, step=self.step * self.config.batch_size)
        elif 0 in self.config.eval_steps:
            self.evaluate_and_report(checkpoint=False)
        marks = set(self.config.eval_steps)
        self.model.train()
        t_data = time.perf_counter()
        for step, idx, v1, v2 in view_batches(self.config, self.data, self.step, self.device):
            if self.status != "finished":
                break
            v1, v2 = v1.to(self.device, non_blocking=True), v2.to(self.device, non_blocking=True)
            groups = None if self.data.train_groups is None else self.data.train_groups[idx]
            t_step = time.perf_counter()
            self.times["data_s"] += t_step - t_data
            try:
                loss = self.train_step(v1, v2, groups)
            except NonFiniteError:
                self.status = "diverged"
                self.last_metrics |= self.train_metrics() | {"train/loss": math.nan}
                if self.reporter is not None:
                    self.reporter.report(self.last_metrics, step=self.step * self.config.batch_size)
                break
            if self.device.type == "cuda":
                torch.cuda.synchronize()
            self.step = step + 1
            self.loss_sum += loss
            self.loss_count += 1
            self.times["train_s"] += time.perf_counter() - t_step
            if self.step in marks:
                self.evaluate_and_report(checkpoint=self.step < self.config.steps)
            t_data = time.perf_counter()
        if self.status == "finished" and self.config.steps not in marks:
            self.evaluate_and_report(checkpoint=False)
        return self.result(time.perf_counter() - self.wall0)

    def result(self, wall_s: float) -> dict[str, Any]:
        return {
            **self.last_metrics,
            "status": self.status,
            "examples_seen": self.step * self.config.batch_size,
            "steps": self.step,
            "wall_s": wall_s,
            **{f"time/{k}": v for k, v in self.times.items()},
        }


def evaluation_metrics(config: TrialConfig) -> tuple[str, ...]:
    """Every metric name an evaluation of this trial reports (``train/``, ``h/``, ``z/``,
    ``sim/``, ``loss/``, ``probe/``), known before the trial runs."""
    names = [
        "train/loss", "train/lr", "train/examples_seen", "train/steps", "train/examples_per_s",
    ]  # fmt: skip
    geometry = ("align", "uniform", "effective_rank", "dim_std_min", "dim_std_mean", "zero_rows")
    names += [f"{space}/{m}" for space in ("h", "z") for m in geometry]
    names += ["sim/pos_mean", "sim/neg_mean", "sim/neg_q99", "sim/false_negative_rate"]
    if config.objective == "info_nce":
        names.append("sim/hardest_neg_share")
    names.append("loss/candidates")
    probes = ("knn", "linear") if config.linear_probe else ("knn",)
    names += [f"probe/{p}_top1_{space}" for p in probes for space in ("h", "z")]
    return tuple(names)


def final_metrics(config: TrialConfig) -> tuple[str, ...]:
    """Every numeric name in the result of :func:`run_trial`: the last evaluation's metrics,
    ``examples_seen``, ``steps``, ``wall_s`` and ``time/*``."""
    times = tuple(f"time/{k}" for k in ("train_s", "eval_s", "data_s", "checkpoint_s"))
    return (*evaluation_metrics(config), "examples_seen", "steps", "wall_s", *times)


def run_trial(
    config: TrialConfig | dict[str, Any], reporter: Reporter | None = None
) -> dict[str, Any]:
    """Run one trial and return its final metrics.

    Args:
        config: a :class:`TrialConfig` or a mapping of its fields (unknown keys raise).
        reporter: receives each evaluation's metrics (step = examples seen) and checkpoints; its
            ``latest_checkpoint()``, when not None, is resumed from.

    Returns:
        The last evaluation's metrics plus ``status`` (finished | diverged | collapsed),
        ``examples_seen``, ``steps``, ``wall_s`` (this process's wall time) and ``time/*``
        (training-step, evaluation, data and checkpoint seconds, cumulative across resumes).
    """
    if not isinstance(config, TrialConfig):
        config = TrialConfig(**config)
    return _Trial(config, reporter).run()
