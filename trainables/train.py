"""One trial, end to end: ``run_trial(config, reporter=None) -> dict``.

The loop takes exactly ``config.steps`` full batches (``budget_examples`` examples; no partial
batch), evaluates on held-out data after the steps in ``config.eval_steps`` (and before the first
step when ``eval_at_start``), and reports every metric of ``docs/metrics.md`` with step =
examples seen.
A checkpoint goes with every evaluation after the start. A non-finite loss ends the trial with
status ``diverged`` at the step where it first appeared; a collapsing projection (mean
per-dimension std of normalised z below ``collapse_std`` and not rising between evaluations)
ends it with status ``collapsed``. Neither raises.

On CUDA the data live on the device (copied once), batches are indexed and augmented there, a
step never waits for the device (the loss is summed there and read at evaluations, and a
non-finite one is noticed through :class:`DivergenceWatch`), and ``compile`` (auto: on for
CUDA) compiles the training forward. Evaluation runs on the trial's device too. Convolutional
encoders run channels_last on every device (:func:`uses_channels_last`).

The final evaluation (at the last step) also measures the trial's evidence once
(:mod:`trainables.measures`: conditional geometry, subgroup probes, shift tests, source return):
its metrics join that evaluation's, its tables are the result's ``evidence``, with
``evidence["outcomes"]``: every probe's label for each held-out item
(:func:`trainables.outcomes.outcome_json`); a trial that diverged or collapsed before its last
step has none.

It knows nothing of Ray or MLflow: a :class:`Reporter` receives metrics and checkpoints, and may
hand back a checkpoint to resume from.

Data parallelism (``workers`` W > 1): W processes, each calling :func:`run_trial` inside an
initialised ``torch.distributed`` process group of W ranks, train one trial together. Every rank
builds the global batch of a step exactly as a single process would (the same permutation
stream, the same views: both are functions of (seed, step) over the whole batch) and keeps rows
``rank·B/W .. (rank+1)·B/W``, so W = 1 and W = 2 see the same examples and views. The model runs
under DistributedDataParallel (gradients averaged over ranks; BatchNorm becomes SyncBatchNorm
with ``sync_bn``); with ``negatives: all`` the loss contrasts every rank's views, gathered with
their gradients (:func:`trainables.objectives.all_gather_with_grad`), so the step equals the
single-process step; with ``local`` each rank contrasts its own B / W sources. The logged loss is
the mean over ranks. Rank 0 alone evaluates, reports metrics and writes checkpoints (holding every
rank's RNG state; the other ranks' reporters get empty reports at the same points); on resume
rank 0 reads the checkpoint and hands it to every rank. Every rank returns rank 0's result.
"""

from __future__ import annotations

import math
import pickle
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from trainables.checkpoints import RESUME_NOTE, LocalFolder, Retention
from trainables.config import TrialConfig
from trainables.data import load_data, resident_batches, view_batches
from trainables.device import (
    autocast_for,
    claim_share,
    compiles,
    resident_data,
    resolve_device,
    uses_channels_last,
)
from trainables.encoders import build_model
from trainables.evaluation import (
    held_predictions,
    heldout_features,
    score,
    stored_embedder,
    trial_probes,
)
from trainables.measures import trial_evidence
from trainables.metrics import TIMES
from trainables.objectives import (
    Gather,
    NonFiniteError,
    all_gather_with_grad,
    candidates_per_anchor,
)
from trainables.objectives.registry import OBJECTIVES
from trainables.optimisers import lr_at, make_optimizer
from trainables.outcomes import heldout_items, outcome_json
from trainables.seeding import rng_state, seed_everything, set_rng_state

# what callers outside the loop read here (study.trainable: claim_share, resolve_device, run_trial)
__all__ = ["CHECKPOINT_FILE", "LocalReporter", "Reporter", "claim_share", "objective_loss",
           "resolve_device", "run_trial"]  # fmt: skip

CHECKPOINT_FILE = "trial.pt"
# what reading a spoiled checkpoint raises: a truncated file (RuntimeError from the zip reader,
# EOFError, OSError), garbage (pickle's UnpicklingError, a ValueError), one that reads as
# something that is not a checkpoint (KeyError, TypeError: read_checkpoint's own check)
UNREADABLE_CHECKPOINT = (OSError, RuntimeError, EOFError, ValueError, KeyError, TypeError,
                         pickle.UnpicklingError)  # fmt: skip
COMPILE_BACKEND = "inductor"  # torch.compile's backend (tests may pick a lighter one)
COMPILED_PREFIX = "_orig_mod."  # what torch.compile's wrapper puts before every state key


class Reporter(Protocol):
    """Where a trial's metrics and checkpoints go (Ray Tune, MLflow, a directory, a test)."""

    def report(
        self, metrics: dict[str, float], *, step: int, checkpoint_dir: str | None = None
    ) -> None:
        """Take one evaluation's metrics; ``checkpoint_dir`` is gone once this returns."""

    def latest_checkpoint(self) -> str | None:
        """A directory written by an earlier ``report`` of this trial, to resume from."""

    # Optional: ``set_aside_checkpoint(found) -> (where it was, where it is now)`` sets aside
    # the checkpoint ``latest_checkpoint`` returned as ``found``, which cannot be loaded, so that
    # the next ``latest_checkpoint`` gives the one before it. A reporter without it fails the
    # trial on such a checkpoint, as before.


class LocalReporter:
    """Keeps every report in memory and checkpoints under ``root`` (the Ray-free reporter), the
    ``keep`` newest (:class:`trainables.checkpoints.Retention`)."""

    def __init__(self, root: str | Path | None = None, keep: int = 2) -> None:
        self.root = Path(root) if root is not None else None
        self.keep = keep
        self.history: list[tuple[int, dict[str, float]]] = []
        self._kept = Retention(LocalFolder(self.root), keep) if self.root is not None else None

    def report(
        self, metrics: dict[str, float], *, step: int, checkpoint_dir: str | None = None
    ) -> None:
        self.history.append((step, dict(metrics)))
        if checkpoint_dir is not None and self._kept is not None:
            self._kept.save(checkpoint_dir, step)

    def checkpoints(self) -> list[Path]:
        if self._kept is None or self.root is None:
            return []
        return [self.root / name for name in self._kept.names()]

    def latest_checkpoint(self) -> str | None:
        found = self.checkpoints()
        return str(found[-1]) if found else None

    def set_aside_checkpoint(self, found: str) -> tuple[str, str]:
        """Set aside the checkpoint folder ``found``, which cannot be loaded
        (:meth:`trainables.checkpoints.Retention.set_aside`)."""
        assert self._kept is not None  # found came from latest_checkpoint: there is a root
        return found, self._kept.set_aside(Path(found).name)


def read_checkpoint(path: Path, location) -> dict[str, Any]:
    """A checkpoint's state from ``path``, on ``location``.

    Raises:
        one of :data:`UNREADABLE_CHECKPOINT`: the file is missing, truncated or garbage, or
            holds something other than a checkpoint (no ``step``, ``model``, ``optimizer``).
    """
    state = torch.load(path, map_location=location, weights_only=True)
    if not isinstance(state, dict):
        raise TypeError(f"holds a {type(state).__name__}, not a checkpoint")
    missing = [k for k in ("step", "model", "optimizer") if k not in state]
    if missing:
        raise KeyError(f"no {', '.join(missing)} in it")
    return state


def _first_line(err: BaseException) -> str:
    """The error's first sentence (torch's zip reader adds a paragraph of advice)."""
    line = (str(err).strip().splitlines() or [type(err).__name__])[0]
    return line.split(". ", 1)[0][:300]


def strip_compiled_prefix(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """A model's state dict with torch.compile's wrapper prefix removed, so a checkpoint written
    from a compiled module loads into a plain one (and so into a compiled one, through it)."""
    return {k.removeprefix(COMPILED_PREFIX): v for k, v in state.items()}


def objective_loss(
    config: TrialConfig,
    z1: Tensor,
    z2: Tensor,
    groups: Tensor | None,
    gather: Gather | None = None,
) -> Tensor:
    """The training objective on two projected views (B, D) of B sources: the ``trial_loss`` of
    the objective's row in :mod:`trainables.objectives.registry`.

    Without groups nothing here waits for the device: NaN, inf or a zero row gives a NaN loss
    (the loop's :class:`DivergenceWatch` ends the trial on it) instead of raising. With groups,
    info_nce reads the ids on the host to find each anchor's positives.

    ``gather`` (data parallelism with ``negatives: all``) makes the candidates every rank's views;
    sources are numbered per rank, groups are the dataset's ids (one id is one group everywhere).
    """
    return OBJECTIVES[config.objective].trial_loss()(config, z1, z2, groups, gather)


class DivergenceWatch:
    """The first optimiser step whose loss is not finite, and the sum of the losses, kept on the
    trial's device and read without waiting for it.

    Each :meth:`add` folds one step's loss in on the device. :meth:`poll` returns the diverged
    step once the device has got that far, never waiting: on CUDA it reads a pinned copy made
    after an earlier step, whose event has completed. :meth:`settle` waits and is exact; the
    loop calls it before every evaluation and checkpoint, so none is made after divergence.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.first_bad = torch.full((), -1, dtype=torch.long, device=device)
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        self.cuda = device.type == "cuda"
        self._copy = torch.full((), -1, dtype=torch.long, pin_memory=self.cuda)
        self._event = torch.cuda.Event() if self.cuda else None
        self._in_flight = False

    def add(self, loss: Tensor, step: int) -> None:
        loss = loss.detach()
        fresh = torch.isfinite(loss).logical_not_().logical_and_(self.first_bad < 0)
        self.first_bad = torch.where(fresh, step, self.first_bad)
        self.loss_sum += loss.double()

    def poll(self) -> int | None:
        """The first diverged step if known without waiting, else None."""
        if not self.cuda:
            return self.settle()
        if self._in_flight and self._event.query():
            self._in_flight = False
            if int(self._copy) >= 0:
                return int(self._copy)
        if not self._in_flight:
            self._copy.copy_(self.first_bad, non_blocking=True)
            self._event.record()
            self._in_flight = True
        return None

    def settle(self) -> int | None:
        """The first diverged step, or None; waits for the device."""
        first = int(self.first_bad)
        return first if first >= 0 else None

    def take_loss_sum(self) -> float:
        """The losses added since the last call, summed (waits for the device)."""
        total = float(self.loss_sum)
        self.loss_sum.zero_()
        return total


# ---------------------------------------------------------------------------------------------
# the trial
# ---------------------------------------------------------------------------------------------
def worker_rank(config: TrialConfig) -> tuple[int, int]:
    """(rank, W) of this process in a trial of ``config.workers`` W processes: (0, 1) for one
    worker (any process group is left alone); otherwise the rank in the initialised default
    ``torch.distributed`` process group, which must hold exactly W ranks."""
    if config.workers == 1:
        return 0, 1
    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError(
            f"workers={config.workers} needs torch.distributed initialised with "
            f"{config.workers} ranks, one process per worker, each calling run_trial"
        )
    world = dist.get_world_size()
    if world != config.workers:
        raise ValueError(
            f"workers={config.workers} but the torch.distributed process group has {world} "
            "ranks; a trial's workers must equal its process group's size"
        )
    return dist.get_rank(), world


class _Trial:
    """Mutable state of one running trial; checkpointed whole at every evaluation."""

    rank, world = 0, 1  # this process's rank among the trial's W data-parallel workers
    gather: Gather | None = None  # the loss's gather across workers (negatives: all, W > 1)
    resumed_from = 0  # examples seen at the checkpoint this attempt resumed from (0: fresh)
    resume_note: str | None = None  # a checkpoint set aside, and where it resumed instead

    def __init__(self, config: TrialConfig, reporter: Reporter | None) -> None:
        self.wall0 = time.perf_counter()  # wall_s counts setup (data load, model build) too
        self.config = config
        self.reporter = reporter
        self.rank, self.world = worker_rank(config)
        self.device = resolve_device(config)
        seed_everything(config.seed)
        self.data = load_data(config)
        on_cuda = self.device.type == "cuda"
        self.resident = resident_data(self.data, self.device) if on_cuda else None
        self.model = build_model(config, self.data.input_shape).to(self.device)
        if self.world > 1 and config.sync_bn:
            if not on_cuda:
                raise ValueError(
                    f"sync_bn=True with workers={self.world} needs CUDA (SyncBatchNorm runs on "
                    f"GPUs only), but this trial runs on {self.device}; set sync_bn=False "
                    "(each worker's BatchNorm then normalises its own share) or use GPUs"
                )
            self.model = nn.SyncBatchNorm.convert_sync_batchnorm(self.model)
        self.channels_last = uses_channels_last(config, self.device)
        if self.channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        # Evaluation runs the plain module (shapes and BatchNorm's mode vary there); training
        # runs the compiled one (and, with several workers, the DistributedDataParallel one that
        # averages gradients over them), which shares its parameters.
        train_module: nn.Module = self.model
        if self.world > 1:
            train_module = DistributedDataParallel(self.model)  # broadcasts rank 0's weights
            self.gather = all_gather_with_grad if config.negatives == "all" else None
        self.compiled = compiles(config, self.device)
        self.forward = (
            torch.compile(train_module, backend=COMPILE_BACKEND) if self.compiled else train_module
        )
        self.optimizer = make_optimizer(config, self.model)
        self.watch = DivergenceWatch(self.device)
        self.step = 0  # optimiser steps taken
        self.loss_sum, self.loss_count = 0.0, 0  # since the last evaluation
        # negatives per anchor in the training denominators since the last evaluation (rank 0)
        self.candidates_sum: Tensor | float = 0.0
        self.candidates_steps = 0
        self.times = dict.fromkeys(TIMES, 0.0)
        self.last_metrics: dict[str, float] = {}
        self.evidence: dict[str, Any] = {}  # the final evaluation's (trainables.measures)
        self.status = "finished"

    # -- checkpoints --
    def state(self, rngs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """The checkpoint; ``rngs``: every worker's RNG state by rank (several workers)."""
        return {
            "model": self.model.state_dict(),  # the plain module's keys, compiled or not
            "optimizer": self.optimizer.state_dict(),
            "scheduler": {"step": self.step, "lr": lr_at(self.config, max(0, self.step - 1))},
            "step": self.step,
            "examples_seen": self.step * self.config.batch_size,
            "loss_sum": self.loss_sum,
            "loss_count": self.loss_count,
            "times": dict(self.times),
            "last_metrics": dict(self.last_metrics),
            "rng": rng_state(),
            "workers": self.world,
            "rng_workers": rngs if rngs is not None else [],
        }

    def resume_state(self) -> dict[str, Any] | None:
        """The checkpoint to resume from, or None: rank 0 asks its reporter for the newest one
        that loads and reads it, and hands it to every worker."""
        state = None
        if self.rank == 0 and self.reporter is not None:
            state = self.newest_readable_checkpoint()
        return self.from_rank0(state)

    def newest_readable_checkpoint(self) -> dict[str, Any] | None:
        """The newest checkpoint of the reporter's that loads. One that does not (truncated,
        garbage) is set aside by the reporter, never retried, and the one before it is tried;
        what was set aside and where the trial resumes is kept as :attr:`resume_note`, which
        every report then carries (:data:`trainables.checkpoints.RESUME_NOTE`)."""
        location = self.device if self.world == 1 else "cpu"
        set_aside = getattr(self.reporter, "set_aside_checkpoint", None)
        spoiled: list[str] = []
        while found := self.reporter.latest_checkpoint():
            try:
                state = read_checkpoint(Path(found) / CHECKPOINT_FILE, location)
            except UNREADABLE_CHECKPOINT as err:
                if set_aside is None or isinstance(err, torch.OutOfMemoryError):
                    raise  # no place to set it aside (it would be read again), or not the file
                was, now = set_aside(found)
                spoiled.append(f"checkpoint {was} cannot be loaded ({type(err).__name__}: "
                               f"{_first_line(err)}); set aside as {now}")  # fmt: skip
                continue
            if spoiled:
                seen = int(state["step"]) * self.config.batch_size
                self.resume_note = "; ".join(spoiled) + (
                    f"; resumed from the checkpoint before it ({seen} examples seen)"
                )
            return state
        if spoiled:
            self.resume_note = "; ".join(spoiled) + "; no checkpoint loads: started afresh"
        return None

    def load(self, state: dict[str, Any]) -> None:
        written = state.get("workers", 1)
        if written != self.world:
            raise ValueError(
                f"the checkpoint was written by workers={written} and resumes with "
                f"workers={written} only, not workers={self.world}"
            )
        self.model.load_state_dict(strip_compiled_prefix(state["model"]))
        self.optimizer.load_state_dict(state["optimizer"])
        self.step = state["step"]
        self.loss_sum, self.loss_count = state["loss_sum"], state["loss_count"]
        self.times = dict.fromkeys(TIMES, 0.0) | dict(state["times"])
        self.last_metrics = dict(state["last_metrics"])
        rng = state["rng_workers"][self.rank] if self.world > 1 else state["rng"]
        set_rng_state({k: (v.cpu() if isinstance(v, Tensor) else v) for k, v in rng.items()})

    # -- several workers --
    def from_rank0(self, value: Any) -> Any:
        """Rank 0's ``value`` on every worker (itself with one worker)."""
        if self.world == 1:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def worker_rngs(self) -> list[dict[str, Any]] | None:
        """Every worker's RNG state by rank, on rank 0 (None elsewhere and with one worker)."""
        if self.world == 1:
            return None
        found: list[Any] | None = [None] * self.world if self.rank == 0 else None
        dist.gather_object(rng_state(), found, dst=0)
        return found

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

    def evaluate_and_report(self, checkpoint: bool, final: bool = False) -> None:
        """Evaluate, then report (with a checkpoint when ``checkpoint``). The ``final``
        evaluation, at the last step, also measures the evidence (:func:`trial_evidence`): its
        metrics join this evaluation's, its tables are kept for the result, its seconds go to
        ``evidence_s`` (not ``eval_s``).

        With several workers every rank calls this at the same step: rank 0 evaluates, every
        rank learns its status (collapsed or not), rank 0 gathers their RNG states and writes
        and reports the checkpoint; the other ranks' reporters get an empty report (:meth:`send`).
        """
        if self.rank == 0:
            metrics = self.evaluate(final)
        else:
            self.watch.take_loss_sum()
            self.loss_sum, self.loss_count = 0.0, 0
        self.status = self.from_rank0(self.status)
        save = checkpoint and self.status == "finished"  # the same on every rank
        rngs = self.worker_rngs() if save else None  # every rank takes part
        if self.rank != 0 or self.reporter is None:
            self.send({})
            return
        seen = self.step * self.config.batch_size
        if not save:
            self.send(metrics)
            return
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="trial-ckpt-") as tmp:
            torch.save(self.state(rngs), Path(tmp) / CHECKPOINT_FILE)
            self.times["checkpoint_s"] += time.perf_counter() - t0
            self.reporter.report(self.noted(metrics), step=seen, checkpoint_dir=tmp)

    def evaluate(self, final: bool) -> dict[str, float]:
        """One evaluation's metrics (kept as ``last_metrics``); sets ``collapsed``."""
        t0 = time.perf_counter()
        self.loss_sum += self.watch.take_loss_sum()
        features = heldout_features(
            self.config, self.model, self.data, self.device, self.resident, keep_inputs=final
        )
        probes = trial_probes(self.config, features)
        predictions = held_predictions(probes, features)
        metrics = self.train_metrics() | score(self.config, features, predictions)
        metrics |= self.candidate_metrics()  # counted on the training batches themselves
        self.times["eval_s"] += time.perf_counter() - t0
        if final:
            t0 = time.perf_counter()
            embed = stored_embedder(self.config, self.model, self.data, self.device)
            found, self.evidence = trial_evidence(
                self.config, self.data, features, probes, predictions, embed
            )
            # each held-out item's label by every probe: the probe/*_top1_* metrics, per item
            items = heldout_items(self.data)
            self.evidence["outcomes"] = outcome_json(items, features["held_y"], predictions)
            metrics |= found
            self.times["evidence_s"] += time.perf_counter() - t0
        self.loss_sum, self.loss_count = 0.0, 0
        if self.is_collapsing(metrics["z/dim_std_mean"]):
            self.status = "collapsed"
        self.last_metrics = metrics
        return metrics

    def diverge(self, step: int) -> None:
        """End the trial at ``step``, the first step whose loss was not finite: the steps before
        it count (examples seen = step × batch size), nothing after it is reported."""
        self.status = "diverged"
        self.step = step
        self.last_metrics |= self.train_metrics() | {"train/loss": math.nan}
        self.send(self.last_metrics)

    def send(self, metrics: dict[str, float]) -> None:
        """Hand ``metrics`` (without a checkpoint) to the reporter. With several workers every
        rank calls this at the same points: rank 0's reporter gets the metrics, the others' an
        empty report, so a reporter whose report is a barrier every worker must reach (Ray
        Train's) sees the same number of reports on every rank."""
        if self.reporter is None:
            return
        seen = self.step * self.config.batch_size
        self.reporter.report(self.noted(metrics) if self.rank == 0 else {}, step=seen)

    def noted(self, metrics: dict[str, Any]) -> dict[str, Any]:
        """``metrics`` with the :attr:`resume_note`, when this attempt has one."""
        return metrics | {RESUME_NOTE: self.resume_note} if self.resume_note else metrics

    # -- the loop --
    def train_step(self, v1: Tensor, v2: Tensor, groups: Tensor | None) -> None:
        """One optimiser step, queued on the device: nothing here waits for it (the loss goes to
        the watch), except info_nce's reading of the ids when the data have groups."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr_at(self.config, self.step)
        b = v1.shape[0]
        x = torch.cat([v1, v2])  # one pass: BatchNorm sees both views
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with autocast_for(self.config, self.device):
            _, z = self.forward(x)
        if self.world > 1 and self.gather is None:  # local negatives: ranks' losses differ
            loss = self.local_loss(z[:b].float(), z[b:].float(), groups)
            self.watch.add(self.mean_over_workers(loss, groups is not None), self.step)
        else:  # one worker, or every worker's gathered loss (the same on every rank)
            loss = objective_loss(self.config, z[:b].float(), z[b:].float(), groups, self.gather)
            self.watch.add(loss, self.step)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()

    def count_candidates(self, pool: Tensor | None) -> None:
        """Add this step's mean negatives per anchor (what its denominator held, counted by the
        objective's own masks) to the running sum, on the device: no host sync here. Without
        groups every anchor has exactly 2B - 2 (B the sources pooled), so nothing is counted."""
        if self.rank != 0:
            return
        self.candidates_steps += 1
        if pool is None:
            self.candidates_sum += float(self.config.negatives_per_anchor)
            return
        n = pool.shape[0]
        sources = torch.arange(n, device=pool.device).repeat(2)
        counts = candidates_per_anchor(
            sources, groups=pool.repeat(2), group_policy=self.config.group_policy
        )
        self.candidates_sum = self.candidates_sum + counts.double().mean()

    def candidate_metrics(self) -> dict[str, float]:
        """``loss/candidates``: the mean negatives per anchor over the training steps since the
        last evaluation, and ``loss/candidates_steps``, how many steps that mean covers (0 at an
        evaluation before training: then the value is step 0's batch, from the evaluation)."""
        if not self.candidates_steps:
            return {"loss/candidates_steps": 0.0}
        mean = float(self.candidates_sum) / self.candidates_steps
        self.candidates_sum, steps = 0.0, self.candidates_steps
        self.candidates_steps = 0
        return {"loss/candidates": mean, "loss/candidates_steps": float(steps)}

    def local_loss(self, z1: Tensor, z2: Tensor, groups: Tensor | None) -> Tensor:
        """This worker's loss on its own sources (``negatives: local``); NaN where info_nce
        refused its rows, so that :meth:`mean_over_workers` can tell every rank."""
        try:
            return objective_loss(self.config, z1, z2, groups)
        except NonFiniteError:
            return (z1.sum() + z2.sum()) * math.nan  # keeps the graph DDP expects

    def mean_over_workers(self, loss: Tensor, raises: bool) -> Tensor:
        """The mean of every worker's loss (what the watch and ``train/loss`` see), the same on
        every rank. With ``raises`` (info_nce with groups, which refuses bad rows on the host)
        a NaN on any rank raises NonFiniteError on every rank, before any backward."""
        mean = loss.detach().double().reshape(1)
        dist.all_reduce(mean)
        mean = mean[0] / self.world
        if raises and not torch.isfinite(mean):
            raise NonFiniteError("a worker's loss refused its rows (not finite)")
        return mean

    def batches(
        self,
    ) -> Iterator[tuple[int, Tensor, Tensor, Tensor, Tensor | None, Tensor | None]]:
        """(step, indices, view 1, view 2, groups, the groups of the sources the loss's
        denominator holds: every worker's with ``negatives: all``) from the current step on;
        with several workers, this rank's rows of the global batch (rank·B/W .. (rank+1)·B/W):
        every rank builds the whole batch's views, a function of (seed, step), and keeps its
        share."""
        if self.resident is not None:
            found = resident_batches(self.config, self.data, self.resident, self.step)
            all_groups = self.resident.train_groups
        else:
            found = view_batches(self.config, self.data, self.step, self.device)
            all_groups = self.data.train_groups
        rows = self.config.worker_batch
        share = slice(self.rank * rows, (self.rank + 1) * rows)
        pooled = self.world > 1 and self.gather is not None  # every worker's views gathered
        for step, idx, v1, v2 in found:
            whole = idx
            if self.world > 1:
                idx, v1, v2 = idx[share], v1[share], v2[share]
            groups = None if all_groups is None else all_groups[idx]
            pool = groups if all_groups is None or not pooled else all_groups[whole]
            yield step, idx, v1, v2, groups, pool

    def wait(self) -> float:
        """Wait for the device's queued work; returns the seconds waited."""
        t0 = time.perf_counter()
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()  # this stream, not the device
        return time.perf_counter() - t0

    def run(self) -> dict[str, Any]:
        resume = self.resume_state()
        if resume is not None:
            self.load(resume)
            self.resumed_from = self.step * self.config.batch_size
            # Report the checkpoint's own evaluation again: a reporter that died before
            # recording it gets it now; one that has it already skips the replayed step.
            if self.last_metrics:  # every rank loaded rank 0's checkpoint, metrics included
                self.send(self.last_metrics)
        elif 0 in self.config.eval_steps:
            self.evaluate_and_report(checkpoint=False)
        marks = set(self.config.eval_steps)
        self.model.train()
        first = True
        t_data = time.perf_counter()
        for step, _, v1, v2, groups, pool in self.batches():
            t_step = time.perf_counter()
            self.times["data_s"] += t_step - t_data
            try:
                self.train_step(v1, v2, groups)
                self.count_candidates(pool)
            except NonFiniteError:  # info_nce with groups checks its input on the host
                self.diverge(step)
                break
            self.step = step + 1
            self.loss_count += 1
            if first and self.compiled:  # compiling happens in the first step; not training
                self.wait()
                self.times["compile_s"] += time.perf_counter() - t_step
            else:
                self.times["train_s"] += time.perf_counter() - t_step
            first = False
            at_mark = self.step in marks
            if at_mark:
                self.times["train_s"] += self.wait()  # the queued steps' device time
            if at_mark:
                bad = self.watch.settle()
            elif self.world > 1 and self.device.type == "cuda":
                bad = None  # a poll may see it on one rank only; every rank settles at marks
            else:
                bad = self.watch.poll()
            if bad is not None:
                self.diverge(bad)
                break
            if at_mark:
                last = self.step == self.config.steps
                self.evaluate_and_report(checkpoint=not last, final=last)
                if self.status != "finished":
                    break
            t_data = time.perf_counter()
        if self.status == "finished" and self.config.steps not in marks:
            self.times["train_s"] += self.wait()
            bad = self.watch.settle()
            if bad is not None:
                self.diverge(bad)
            else:
                self.evaluate_and_report(checkpoint=False, final=True)
        return self.from_rank0(self.result(time.perf_counter() - self.wall0))

    def result(self, wall_s: float) -> dict[str, Any]:
        return {
            **self.last_metrics,
            "status": self.status,
            "examples_seen": self.step * self.config.batch_size,
            "steps": self.step,
            "resumed_from": self.resumed_from,
            **({RESUME_NOTE: self.resume_note} if self.resume_note else {}),
            "wall_s": wall_s,
            "heldout_items": len(self.data.heldout_y),  # what every accuracy counts over
            **{f"time/{k}": v for k, v in self.times.items()},
            "evidence": self.evidence,
        }


def run_trial(
    config: TrialConfig | dict[str, Any], reporter: Reporter | None = None
) -> dict[str, Any]:
    """Run one trial and return its final metrics.

    With ``config.workers`` W > 1 this is one worker of a data-parallel trial: call it in each
    of W processes, inside an initialised ``torch.distributed`` default process group of exactly
    W ranks (any backend; gloo on the CPU, NCCL with one GPU per rank, each rank's device
    current). Rank 0's reporter gets the metrics, the checkpoints and is asked for the
    checkpoint to resume from; the others may be None, or get an empty report at each of rank
    0's reports (a reporter whose report is a barrier, as Ray Train's is). Every rank returns
    rank 0's result.

    Args:
        config: a :class:`TrialConfig` or a mapping of its fields (unknown keys raise).
        reporter: receives each evaluation's metrics (step = examples seen) and checkpoints; its
            ``latest_checkpoint()``, when not None, is resumed from.

    Returns:
        The last evaluation's metrics plus ``status`` (finished | diverged | collapsed),
        ``examples_seen``, ``steps``, ``resumed_from`` (examples seen at the checkpoint this
        attempt resumed from; 0 when it started fresh), ``wall_s`` (this process's wall
        time), ``time/*``
        (training-step, evaluation, data, checkpoint, compile and evidence seconds, cumulative
        across resumes; on CUDA the views are augmented in the training stream, so their device
        time is in ``train_s``, and the first compiled step, compiling included, is
        ``compile_s``) and ``evidence``: the tables of :func:`trainables.measures.trial_evidence`
        (a JSON-serialisable dict; empty unless the trial reached its last step).
    """
    if not isinstance(config, TrialConfig):
        config = TrialConfig(**config)
    return _Trial(config, reporter).run()
