"""What a trial reports, by name: the one catalogue the training loop (:mod:`trainables.train`),
the evidence (:mod:`trainables.measures`), the designs (a target or design metric must be one
of them) and the driver read, known before a trial runs.

- :func:`evaluation_metrics`: every evaluation's (``train/``, ``h/``, ``z/``, ``sim/``,
  ``loss/``, ``probe/``);
- :func:`evidence_metrics`: what the final evaluation adds (per-class geometry, subgroup probes,
  the shift tests' ``shift/...``);
- :func:`final_metrics`: a finished trial's result (both, with ``examples_seen``, ``steps``,
  ``wall_s`` and the times ``time/*`` of :data:`TIMES`);
- :func:`probe_names`, :data:`SPACES` (h: the encoder's output, z: the projection head's) and
  :data:`STATUSES` (how a trial ends).
"""

from __future__ import annotations

import re

from trainables.config import TrialConfig
from trainables.corruption_families import SEVERITIES, families
from trainables.objectives.registry import OBJECTIVES
from trainables.sources import has_groups

STATUSES = ("finished", "diverged", "collapsed")
# metrics the catalogue knows are lower-is-better: a loss, alignment (the mean squared distance
# between the two views' embeddings) and uniformity (the log of the mean Gaussian potential),
# Wang & Isola (2020), with their per-class and worst-class variants; a probe's gap between
# all classes and the worst one; the shares of zero rows and of false negatives; and times.
# A target or objective that names one without a mode is minimised
LOWER_IS_BETTER = re.compile(
    r"(^|/)([a-z_]*loss|align|uniform)(_[a-z0-9_]+)?$"
    r"|_class_gap$|(^|/)zero_rows$|(^|/)false_negative_rate$|^time/"
)


def better(metric: str) -> str:
    """``"min"`` for a metric the catalogue knows is lower-is-better (:data:`LOWER_IS_BETTER`),
    else ``"max"`` (accuracies, and anything else higher-is-better)."""
    return "min" if LOWER_IS_BETTER.search(metric) else "max"


TIMES = ("train_s", "eval_s", "data_s", "checkpoint_s", "compile_s", "evidence_s")
SPACES = ("h", "z")


def data_kind(config: TrialConfig) -> str:
    """The kind of the trial's data: "vector" for toy data, "image" for every other dataset."""
    return "vector" if config.dataset == "toy" else "image"


def probe_names(config: TrialConfig) -> tuple[str, ...]:
    return ("knn", "linear") if config.linear_probe else ("knn",)


def evidence_metrics(config: TrialConfig) -> tuple[str, ...]:
    """Every metric name :func:`trainables.measures.trial_evidence` adds to a trial's final
    evaluation."""
    names = [
        f"{space}/{m}_{w}"
        for space in SPACES
        for m in ("align", "uniform")
        for w in ("worst_class", "class_spread", "classes")
    ]
    units = ("class", "group") if has_groups(config) else ("class",)
    for p in probe_names(config):
        for space in SPACES:
            for unit in units:
                names += [
                    f"probe/{p}_top1_{space}_worst_{unit}",
                    f"probe/{p}_top1_{space}_{unit}_gap",
                ]
    for family in families(data_kind(config)):
        for p in probe_names(config):
            for space in SPACES:
                names += [f"shift/{family}/s{k}/{p}_top1_{space}" for k in SEVERITIES]
                names.append(f"shift/{family}/{p}_top1_{space}")
    names += [f"shift/mean_{p}_top1_{space}" for p in probe_names(config) for space in SPACES]
    return tuple(names)


def evaluation_metrics(config: TrialConfig) -> tuple[str, ...]:
    """Every metric name an evaluation of this trial reports (``train/``, ``h/``, ``z/``,
    ``sim/``, ``loss/``, ``probe/``), known before the trial runs."""
    names = [
        "train/loss", "train/lr", "train/examples_seen", "train/steps", "train/examples_per_s",
    ]  # fmt: skip
    geometry = ("align", "uniform", "effective_rank", "dim_std_min", "dim_std_mean", "zero_rows")
    names += [f"{space}/{m}" for space in ("h", "z") for m in geometry]
    names += ["sim/pos_mean", "sim/neg_mean", "sim/neg_q99", "sim/false_negative_rate"]
    names += OBJECTIVES[config.objective].metrics  # what only the trial's objective reports
    names += ["loss/candidates", "loss/candidates_steps"]
    probes = ("knn", "linear") if config.linear_probe else ("knn",)
    names += [f"probe/{p}_top1_{space}" for p in probes for space in ("h", "z")]
    return tuple(names)


def final_metrics(config: TrialConfig) -> tuple[str, ...]:
    """Every numeric name in the result of a trial that reached its last step: the last
    evaluation's metrics (those of every evaluation and the evidence's,
    :func:`evidence_metrics`), ``examples_seen``, ``steps``, ``wall_s``, ``heldout_items`` and
    ``time/*``. A trial that diverged or collapsed before its last step lacks the evidence's."""
    times = tuple(f"time/{k}" for k in TIMES)
    return (
        *evaluation_metrics(config), *evidence_metrics(config),
        "examples_seen", "steps", "resumed_from", "wall_s", "heldout_items", *times,
    )  # fmt: skip
