"""One trial's configuration: a frozen, validated ``TrialConfig``.

Build it with ``TrialConfig(**mapping)``: an unknown key raises. The user's values are never
rewritten; everything derived from them (steps, effective LR, λ, warm-up steps, evaluation marks)
is a read-only property, listed in :meth:`TrialConfig.derived` and logged under ``derived/*``.

Compute matching: every trial sees exactly ``budget_examples`` source examples in
``steps = budget_examples / batch_size`` full batches. A budget that is not a multiple of the
batch size is rejected as unmatchable; there is no partial last batch.

Data parallelism: ``workers`` processes (W, set by the study from its ``resources.workers``;
default 1) train one trial together. ``batch_size`` is the global batch B: each worker takes
B / W of its rows (B % W != 0 is refused), so ``steps``, ``examples_seen`` and the compute
matching do not depend on W. ``negatives`` says what the loss contrasts with: ``all`` (every
worker's views, gathered with their gradients: 2B - 2 negatives per anchor, as with W = 1) or
``local`` (the worker's own B / W sources: 2(B / W) - 2). ``sync_bn`` makes BatchNorm layers
normalise over the global batch (SyncBatchNorm) instead of each worker's share; it has no effect
with one worker.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from trainables.augment import COMPONENTS, VECTOR_COMPONENTS, parse_augmentation
from trainables.names import KnownNames
from trainables.objectives.registry import OBJECTIVE_NAMES, OBJECTIVES
from trainables.text import ReadsText

# (training pool, held-out pool) of the datasets whose sizes are fixed: a heldout_size,
# probe_train_size or knn_k beyond them would be clamped where they are used, and recorded as
# what the user asked, not what ran
POOLS = {
    "digits": (1437, 360), "fashion_mnist": (60000, 10000), "mnist_idx": (60000, 10000),
    "cifar10": (50000, 10000), "cifar100": (50000, 10000),
}  # fmt: skip
INT64 = (-(2**63), 2**63 - 1)  # Parquet's int64, MLflow's steps, torch's manual_seed
EXACT_COUNT = 2**53  # a 64-bit float (an MLflow metric) counts exactly up to here

DATASETS = (
    "digits", "toy", "cifar10", "cifar100", "stl10", "imagefolder", "fashion_mnist", "mnist_idx",
)  # fmt: skip
# read from files under data_root (the rest are generated or come with scikit-learn)
ON_DISK_DATASETS = ("cifar10", "cifar100", "stl10", "imagefolder", "fashion_mnist", "mnist_idx")
# MNIST-format folders of four IDX files (trainables/idx.py), read offline: never downloaded
IDX_DATASETS = ("fashion_mnist", "mnist_idx")
# Debian's dataset-fashion-mnist (scripts/setup_data.sh installs it) puts the files here
FASHION_MNIST_ROOT = "/usr/share/datasets/fashion-mnist"
FASHION_MNIST_PACKAGE = "dataset-fashion-mnist"
# where data_root=None points, for the datasets that have a default place; the field itself
# stays None (user values are never rewritten): trainables.data resolves it
DEFAULT_DATA_ROOTS = {"fashion_mnist": FASHION_MNIST_ROOT}
REFERENCE_BATCH = 256


class TrialConfig(ReadsText, KnownNames):
    """Every setting of one trial. Unknown keys and unknown choices (a dataset, an objective …)
    raise with the closest known names; instances are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    # data
    dataset: Literal[
        "digits", "toy", "cifar10", "cifar100", "stl10", "imagefolder", "fashion_mnist",
        "mnist_idx",
    ] = "digits"  # fmt: skip
    data_root: str | None = None
    download: bool = False
    data_checksums: bool = True
    data_seed: int = 0
    image_size: int | None = Field(None, ge=8)
    heldout_size: int | None = Field(None, ge=10)
    probe_train_size: int | None = Field(None, ge=10)
    toy_classes: int = Field(4, ge=2)
    toy_dim: int = Field(8, ge=2)
    toy_spread: float = Field(0.2, ge=0)
    toy_noise: float = Field(0.35, ge=0)
    toy_train_size: int = Field(4096, ge=16)
    toy_photos_per_item: int = Field(1, ge=1)

    # model
    encoder: Literal["mlp", "small_cnn", "resnet18"] = "small_cnn"
    # small_cnn only (as mlp_hidden is mlp's): the first block's channels (the second and third
    # have twice and four times as many) and the grid its last feature map is pooled to before
    # the linear map to h: 1 pools globally (h keeps no spatial layout); 2 or 3 keep a coarse grid
    cnn_width: int = Field(32, ge=4)
    cnn_grid: int = Field(1, ge=1, le=4)
    mlp_hidden: tuple[int, ...] = (256, 256)
    activation: Literal["relu", "tanh"] = "relu"
    feature_dim: int = Field(128, ge=1)
    projection: Literal["mlp", "linear", "none"] = "mlp"
    projection_hidden: int = Field(256, ge=1)
    projection_dim: int = Field(64, ge=1)

    # objective: one of the registry's (trainables/objectives/registry.py)
    objective: Literal[OBJECTIVE_NAMES] = "info_nce"
    temperature: float = Field(0.1, gt=0, allow_inf_nan=False)
    lam_t: float | None = Field(None, ge=0, allow_inf_nan=False)
    uniform_t: float = Field(2.0, gt=0, allow_inf_nan=False)
    align_alpha: float = Field(2.0, gt=0, allow_inf_nan=False)
    group_policy: Literal["negative", "mask", "positive"] = "negative"

    # compute and optimisation
    batch_size: int = Field(256, ge=2)
    budget_examples: int = Field(61440, ge=2)
    optimizer: Literal["sgd", "adam", "adamw"] = "adam"
    base_lr: float = Field(1e-3, gt=0, allow_inf_nan=False)
    lr_scaling: Literal["none", "linear", "sqrt"] = "none"
    momentum: float = Field(0.9, ge=0, lt=1)
    weight_decay: float = Field(1e-6, ge=0)
    warmup_fraction: float = Field(0.0, ge=0, lt=1)
    schedule: Literal["constant", "cosine"] = "cosine"

    # views
    augmentation: str = "crop+flip"
    aug_strength: float = Field(1.0, ge=0, allow_inf_nan=False)
    # the crop component only: the smallest share of the image's area a crop keeps (its scale
    # range is [crop_area_min, 1]); None: the strength's (1 - 0.92 aug_strength, at least 0.08)
    crop_area_min: float | None = Field(None, gt=0, le=1, allow_inf_nan=False)

    # evaluation and probes
    eval_marks: int = Field(4, ge=1)
    eval_at_start: bool = False
    knn_k: int = Field(20, ge=1)
    knn_temperature: float = Field(0.07, gt=0)
    linear_probe: bool = True
    linear_probe_iters: int = Field(100, ge=1)
    collapse_std: float = Field(0.01, ge=0)  # mean per-dim std of unit z; uniform is 1/sqrt(D)

    # execution
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    precision: Literal["fp32", "bf16"] = "fp32"
    num_workers: int = Field(0, ge=0)  # CPU trials only: CUDA trials index data on the device
    # torch.compile the training forward: auto = on for CUDA, off on the CPU
    compile: Literal["auto", "on", "off"] = "auto"
    # data parallelism: W processes share the global batch_size (see the module's docstring)
    workers: int = Field(1, ge=1)
    negatives: Literal["all", "local"] = "all"
    sync_bn: bool = False

    @model_validator(mode="after")
    def _check(self) -> TrialConfig:
        self._check_limits()
        self._check_used_as_recorded()
        parse_augmentation(self.augmentation)  # raises naming the unknown component
        if self.budget_examples % self.batch_size:
            raise ValueError(
                f"budget_examples={self.budget_examples} is unmatchable with "
                f"batch_size={self.batch_size}: it leaves a partial batch of "
                f"{self.budget_examples % self.batch_size} examples, and every trial must see "
                "exactly budget_examples examples in full batches; choose a budget that is a "
                "multiple of every batch size in the study"
            )
        if self.batch_size % self.workers:
            raise ValueError(
                f"batch_size={self.batch_size} cannot be split over workers={self.workers}: "
                "batch_size is the global batch and every worker takes an equal share of it; "
                f"choose a batch size that is a multiple of {self.workers}"
            )
        if self.negatives == "local" and self.batch_size // self.workers < 2:
            raise ValueError(
                f"negatives='local' with batch_size={self.batch_size} over "
                f"workers={self.workers} leaves each worker {self.batch_size // self.workers} "
                "source(s) and no negatives; use negatives='all' or a larger batch"
            )
        if self.budget_examples // self.batch_size < self.eval_marks:
            raise ValueError(
                f"eval_marks={self.eval_marks} needs at least as many steps, but "
                f"budget_examples={self.budget_examples} / batch_size={self.batch_size} "
                f"gives {self.steps}"
            )
        OBJECTIVES[self.objective].check(self)  # the settings it cannot use
        self._check_data_root()
        if self.dataset == "toy":
            images_only = set(self.augmentation_components) - set(VECTOR_COMPONENTS)
            if images_only:
                raise ValueError(
                    f"augmentation={self.augmentation!r}: {sorted(images_only)} apply to images; "
                    f"dataset='toy' holds vectors and takes {list(VECTOR_COMPONENTS)}"
                )
            if self.encoder != "mlp":
                raise ValueError(
                    f"encoder={self.encoder!r} needs images; dataset='toy' takes 'mlp'"
                )
        return self

    def _check_limits(self) -> None:
        """Every integer within what the record holds, all named at once: 64-bit integers
        (Parquet's int64, MLflow's params and steps, torch's seeds), and the budget within 2**53,
        where MLflow's metrics (64-bit floats) still count examples exactly."""
        low, high = INT64
        wrong = []
        for name in type(self).model_fields:
            value = getattr(self, name)
            for v in value if isinstance(value, tuple) else (value,):
                if isinstance(v, int) and not isinstance(v, bool) and not low <= v <= high:
                    wrong.append(
                        f"{name}={v} is beyond the 64-bit integers the record (Parquet, "
                        f"MLflow) and torch hold: {low} to {high}"
                    )
        if not wrong and self.budget_examples > EXACT_COUNT:
            wrong.append(
                f"budget_examples={self.budget_examples} is beyond 2**53 = {EXACT_COUNT}: "
                "MLflow records examples seen as 64-bit floats, exact only up to there"
            )
        if wrong:
            raise ValueError("\n".join(wrong))  # one problem a line

    def _check_used_as_recorded(self) -> None:
        """Every setting is the one a trial uses: a held-out or probe split larger than its
        pool, or a k-NN k larger than the probe rows, would be clamped silently where it is
        used while the record says otherwise; each is refused, all at once."""
        train_pool, held_pool = POOLS.get(self.dataset, (None, None))
        if self.dataset == "toy":
            train_pool = self.toy_train_size
        wrong = []
        held = self.heldout_size
        if held_pool is not None and held is not None and held > held_pool:
            wrong.append(f"heldout_size={self.heldout_size} is more than the {held_pool} held-out "
                         f"rows {self.dataset} has: at most {held_pool}")  # fmt: skip
        if train_pool is not None and (self.probe_train_size or 0) > train_pool:
            wrong.append(f"probe_train_size={self.probe_train_size} is more than the "
                         f"{train_pool} training rows {self.dataset} has: at most "
                         f"{train_pool}")  # fmt: skip
        rows = min(x for x in (self.probe_train_size, train_pool) if x is not None) if (
            self.probe_train_size or train_pool) else None  # fmt: skip
        if rows is not None and self.knn_k > rows:
            wrong.append(f"knn_k={self.knn_k} is more than the {rows} probe rows its neighbours "
                         f"are drawn from (probe_train_size): at most {rows}")  # fmt: skip
        if wrong:
            raise ValueError("\n".join(wrong))  # one problem a line

    def _check_data_root(self) -> None:
        """An on-disk dataset needs a folder unless it has a default one; IDX datasets are read
        offline, so download=True (which would write into data_root) is refused for them."""
        if (
            self.dataset in ON_DISK_DATASETS
            and not self.data_root
            and self.dataset not in DEFAULT_DATA_ROOTS
        ):
            raise ValueError(f"data_root is required for dataset={self.dataset!r}, got None")
        if self.dataset in IDX_DATASETS and self.download:
            raise ValueError(
                f"download=True: dataset={self.dataset!r} reads IDX files already on disk and "
                "downloads nothing; set download: false and point data_root at the files"
                + (
                    f" (Debian's {FASHION_MNIST_PACKAGE} puts them in {FASHION_MNIST_ROOT}; "
                    "bash scripts/setup_data.sh installs it)"
                    if self.dataset == "fashion_mnist"
                    else ""
                )
            )

    # ---- derived values: read-only, logged under derived/* ----
    @property
    def steps(self) -> int:
        """Optimiser steps: budget_examples / batch_size, exactly."""
        return self.budget_examples // self.batch_size

    @property
    def examples_seen(self) -> int:
        """Source examples a finished trial has seen: steps × batch_size == budget_examples."""
        return self.steps * self.batch_size

    @property
    def lr_effective(self) -> float:
        """base_lr scaled against a reference batch of 256 (none, linear or sqrt)."""
        ratio = self.batch_size / REFERENCE_BATCH
        scale = {"none": 1.0, "linear": ratio, "sqrt": math.sqrt(ratio)}[self.lr_scaling]
        return self.base_lr * scale

    @property
    def lam(self) -> float | None:
        """Uniformity weight λ = lam_t / uniform_t (align_uniform only)."""
        return None if self.lam_t is None else self.lam_t / self.uniform_t

    @property
    def warmup_steps(self) -> int:
        return round(self.warmup_fraction * self.steps)

    @property
    def eval_steps(self) -> tuple[int, ...]:
        """Steps after which the trial evaluates: k/eval_marks of the run, k = 1..eval_marks.

        Marks fall on step boundaries; with eval_marks dividing the step count they are at the
        same examples-seen in every trial of a study.
        """
        marks = {round(k * self.steps / self.eval_marks) for k in range(1, self.eval_marks + 1)}
        return tuple(sorted(marks | ({0} if self.eval_at_start else set())))

    @property
    def worker_batch(self) -> int:
        """Sources each of the ``workers`` processes takes from a step's batch: B / W."""
        return self.batch_size // self.workers

    @property
    def contrast_batch(self) -> int:
        """Sources whose views the loss's denominator holds: the global batch B with
        ``negatives: all``, the worker's own B / W with ``local``."""
        return self.batch_size if self.negatives == "all" else self.worker_batch

    @property
    def negatives_per_anchor(self) -> int:
        """2B - 2 negatives per anchor in a two-view batch without groups (B the global batch
        with ``negatives: all``, a worker's B / W with ``local``)."""
        return 2 * self.contrast_batch - 2

    @property
    def augmentation_components(self) -> tuple[str, ...]:
        return parse_augmentation(self.augmentation)

    def derived(self) -> dict[str, float | int | None]:
        """The derived values, under the names they are logged with."""
        return {
            "derived/steps": self.steps,
            "derived/examples_seen": self.examples_seen,
            "derived/lr_effective": self.lr_effective,
            "derived/lam": self.lam,
            "derived/warmup_steps": self.warmup_steps,
            "derived/negatives_per_anchor": self.negatives_per_anchor,
        }


__all__ = ["COMPONENTS", "DATASETS", "FASHION_MNIST_ROOT", "TrialConfig"]
