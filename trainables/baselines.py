"""Baselines: what the probes score without contrastive training, measured as a trial is.

A probe accuracy means little alone. SimCLR (Chen et al., 2020, Table 8 and App. B.7) and the papers
after it print, beside every self-supervised number, a randomly initialised encoder of the same
architecture and a supervised one; for small images the raw pixels are the first reference of
all. Three kinds, each scored by the trial's own evaluation (:func:`trainables.evaluation.evaluate`:
the same held-out split, the same k-NN and linear probes fit on the same probe rows):

- ``raw``: the input itself, flattened (pixels in [0, 1], vectors as stored), given to the
  probes as the representation; reported under the ``_h`` names (``probe/knn_top1_h`` …).
- ``random_init``: the trial's encoder and head at initialisation, once for each seed the study
  uses (the seed sets the initial weights); the probes and the ``h/`` and ``z/`` geometry.
- ``supervised``: the same encoder trained with labels (cross-entropy through a linear
  classifier on ``h``, one augmented view per example) for the trial's budget of examples, with
  its optimiser and schedule; then the same evaluation. On request only: it costs about half a
  trial.

A baseline depends on the data, the architecture and the evaluation, never on the factors the
study varies for training (temperature, batch size, λ·t): it is computed once per architecture
the study has (:data:`SHAPING_FIELDS`: a study that varies ``cnn_grid`` measures a random-init
encoder of each; the raw input once per data, :func:`depends_on`), and kept on disk by
:func:`baseline_key` so that a resumed study, or the next study on the same data and
architecture, reuses it.

Everything here runs without Ray and MLflow; the study's driver logs the result.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainables.config import TrialConfig
from trainables.sources import DATA_FIELDS, data_key

if TYPE_CHECKING:
    import torch
    from torch import nn

    from trainables.data import DataBundle

# torch, the data and the models are imported by the measures themselves: a driver whose
# baselines are cached or kept on its parent run never imports torch (seconds of CPU)

KINDS = ("raw", "random_init", "supervised")
DEFAULT_KINDS = ("raw", "random_init")
NAMES = {
    "raw": "the raw input",
    "random_init": "a random-init encoder",
    "supervised": "a supervised encoder",
}
# What a baseline reports: the probes and the geometry of both spaces. The ``sim/`` and ``loss/``
# diagnostics depend on the temperature and the batch (factors), so they are not baselines.
PREFIXES = ("probe/", "h/", "z/")
# The fields a baseline depends on besides the data (trainables.sources.DATA_FIELDS): the model's
# architecture, the evaluation's probes and views, and for a supervised encoder its training.
ARCHITECTURE_FIELDS = (
    "encoder", "mlp_hidden", "activation", "cnn_width", "cnn_grid", "feature_dim", "projection",
    "projection_hidden", "projection_dim",
)  # fmt: skip
# What shapes the encoder or its input: a study that varies any of these has one architecture per
# distinct combination, and a baseline of each (study.baselines.study_architectures)
SHAPING_FIELDS = (*DATA_FIELDS, *ARCHITECTURE_FIELDS)
EVALUATION_FIELDS = (
    "knn_k", "knn_temperature", "linear_probe", "linear_probe_iters", "augmentation",
    "aug_strength", "precision",
)  # fmt: skip
SUPERVISED_FIELDS = (
    "budget_examples", "batch_size", "optimizer", "base_lr", "lr_scaling", "momentum",
    "weight_decay", "warmup_fraction", "schedule",
)  # fmt: skip
# 2: each system's per-item outcomes kept (Baseline.outcomes); a cache without them is measured
# again
CACHE_VERSION = 2
UNSEEDED = ""  # the key of the one system of an unseeded kind (raw) in Baseline.outcomes


@dataclass(frozen=True)
class Baseline:
    """One kind's measurement: ``metrics`` (name -> value; the mean over seeds for a seeded
    kind), ``per_seed`` (seed -> metrics; empty for ``raw``, which has no seed), ``seconds`` it
    took (0 when read from the cache), ``about``: what was measured, in words, and
    ``outcomes``: each system's per-item outcomes (:func:`trainables.outcomes.outcome_json`),
    keyed ``str(seed)`` for a seeded kind and :data:`UNSEEDED` (``""``) for ``raw``."""

    kind: str
    metrics: dict[str, float]
    per_seed: dict[int, dict[str, float]] = field(default_factory=dict)
    seconds: float = 0.0
    about: str = ""
    outcomes: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self, outcomes: bool = True) -> dict[str, Any]:
        """The JSON of the measurement; without the per-item ``outcomes`` when not
        ``outcomes`` (a tag or a summary: they are lists as long as the held-out split)."""
        data = {
            "kind": self.kind, "name": NAMES[self.kind], "metrics": self.metrics,
            "per_seed": {str(s): m for s, m in self.per_seed.items()},
            "seeds": sorted(self.per_seed), "about": self.about,
        }  # fmt: skip
        if outcomes:
            data["outcomes"] = self.outcomes
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any], seconds: float = 0.0) -> Baseline:
        per_seed = {int(s): dict(m) for s, m in (data.get("per_seed") or {}).items()}
        outcomes = {str(k): dict(v) for k, v in (data.get("outcomes") or {}).items()}
        return cls(data["kind"], dict(data["metrics"]), per_seed, seconds, data.get("about", ""),
                   outcomes)  # fmt: skip

    def systems(self) -> dict[int | None, dict[str, Any]]:
        """The outcomes by system: seed -> outcomes, None for the unseeded raw input."""
        return {None if key == UNSEEDED else int(key): found
                for key, found in self.outcomes.items()}  # fmt: skip


def depends_on(kind: str) -> tuple[str, ...]:
    """The :data:`SHAPING_FIELDS` a kind's measurement depends on: the data alone for the raw
    input (it follows ``image_size`` through the data), the data and the architecture for an
    encoder."""
    return DATA_FIELDS if kind == "raw" else SHAPING_FIELDS


def cache_dir() -> Path:
    """Where measured baselines are kept: ``$CONTRASTIVE_BASELINE_CACHE``, else
    ``~/.cache/contrastive-studies/baselines``."""
    default = Path.home() / ".cache" / "contrastive-studies" / "baselines"
    return Path(os.environ.get("CONTRASTIVE_BASELINE_CACHE") or default)


def baseline_key(kind: str, config: TrialConfig, seeds: tuple[int, ...]) -> str:
    """The cache key of one kind's baseline: the data (its fields and files,
    :func:`trainables.sources.data_key`), and what the kind depends on besides."""
    fields = {"raw": EVALUATION_FIELDS[:4]}.get(kind, ARCHITECTURE_FIELDS + EVALUATION_FIELDS)
    if kind == "supervised":
        fields = fields + SUPERVISED_FIELDS
    parts = {
        "version": CACHE_VERSION, "kind": kind, "data": repr(data_key(config)),
        "fields": {name: repr(getattr(config, name)) for name in fields},
        "seeds": [] if kind == "raw" else list(seeds),
    }  # fmt: skip
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def measure_baselines(
    config: TrialConfig, kinds: tuple[str, ...], seeds: tuple[int, ...], use_cache: bool = True,
    tell=_to_stderr,
) -> dict[str, Baseline]:  # fmt: skip
    """Each of ``kinds`` for the trial ``config`` (its data, architecture and evaluation) and
    the study's ``seeds``; read from the cache when measured before (``use_cache``). A cache file
    that cannot be read (truncated, garbage) is set aside as ``<file>.unreadable`` and the kind
    measured again; ``tell`` is given one line naming it and saying so."""
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise ValueError(f"baselines: unknown kind {unknown[0]!r}; the kinds are {list(KINDS)}")
    seeds = tuple(sorted(set(seeds))) or (config.seed,)
    return {kind: _cached(kind, config, seeds, use_cache, tell) for kind in kinds}


def _cached(
    kind: str, config: TrialConfig, seeds: tuple[int, ...], use_cache: bool, tell=_to_stderr
) -> Baseline:
    path = cache_dir() / f"{kind}-{baseline_key(kind, config, seeds)}.json"
    if use_cache and path.is_file():
        try:
            return Baseline.from_json(json.loads(path.read_text()))
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            # a damaged cache file is measured again; its bytes are kept beside, never reread
            aside = path.with_name(f"{path.name}.unreadable")
            path.replace(aside)
            first = (str(err).strip().splitlines() or [""])[0][:200]
            tell(f"baselines: the cached {kind} baseline {path} cannot be read "
                 f"({type(err).__name__}: {first}); set aside as {aside.name}, measuring "
                 f"{kind} again")  # fmt: skip
    t0 = time.perf_counter()
    found = MEASURES[kind](config, seeds)
    found = Baseline(found.kind, found.metrics, found.per_seed, time.perf_counter() - t0,
                     found.about, found.outcomes)  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.partial")
    partial.write_text(json.dumps(found.to_json(), sort_keys=True))
    partial.replace(path)  # atomic: two drivers measuring at once both leave a whole file
    return found


def flat_inputs(data: DataBundle, x: torch.Tensor) -> torch.Tensor:
    """Stored rows -> the input itself, one flat row each: pixels in [0, 1] or vectors."""
    return data.prepare(x).flatten(1)


def raw_baseline(config: TrialConfig, seeds: tuple[int, ...] = ()) -> Baseline:
    """The trial's probes on the flattened input (:func:`flat_inputs`) of the probe rows and
    the held-out rows, under the ``_h`` names; its outcomes keyed :data:`UNSEEDED`."""
    from trainables.data import load_data
    from trainables.outcomes import heldout_items, outcome_json
    from trainables.probes import fit_probes, predictions_top1

    data = load_data(config)
    train_x = flat_inputs(data, data.train_x[data.probe_index])
    held_x = flat_inputs(data, data.heldout_x)
    train = {"h": train_x, "z": train_x, "y": data.train_y[data.probe_index]}
    classes = int(max(train["y"].max(), data.heldout_y.max())) + 1
    probes = fit_probes(
        train, num_classes=classes, k=config.knn_k, knn_temperature=config.knn_temperature,
        linear=config.linear_probe, max_iter=config.linear_probe_iters,
    )  # fmt: skip
    # z is h here: the _h names alone are reported, so only h is labelled
    predictions = {(probe, "h"): probes.predict(probe, "h", held_x) for probe in probes.names}
    metrics = predictions_top1(predictions, data.heldout_y)
    outcomes = {UNSEEDED: outcome_json(heldout_items(data), data.heldout_y, predictions, ("h",))}
    about = (
        f"the {data.input_shape} input flattened to {train_x.shape[1]} values, "
        f"probes fit on {len(train_x)} rows, scored on {len(held_x)} held-out rows"
    )
    return Baseline("raw", metrics, {}, 0.0, about, outcomes)


def _evaluated(
    config: TrialConfig, model: nn.Module, data: DataBundle
) -> tuple[dict[str, float], dict[str, Any]]:
    """The trial's evaluation of ``model``, less what depends on the study's factors, and
    its per-item outcomes (:func:`trainables.outcomes.outcome_json`)."""
    from trainables.device import resolve_device
    from trainables.evaluation import evaluate_predictions
    from trainables.outcomes import heldout_items, outcome_json

    device = resolve_device(config)
    metrics, predictions = evaluate_predictions(config, model.to(device), data, device)
    outcomes = outcome_json(heldout_items(data), data.heldout_y, predictions)
    return {k: float(v) for k, v in metrics.items() if k.startswith(PREFIXES)}, outcomes


def _mean(per_seed: dict[int, dict[str, float]]) -> dict[str, float]:
    names = sorted(set.intersection(*(set(m) for m in per_seed.values())))
    return {n: math.fsum(m[n] for m in per_seed.values()) / len(per_seed) for n in names}


def _listed(seeds: tuple[int, ...]) -> str:
    return ", ".join(str(s) for s in seeds)


def random_init_baseline(config: TrialConfig, seeds: tuple[int, ...]) -> Baseline:
    """The trial's model as initialised by each seed, evaluated untrained."""
    from trainables.data import load_data
    from trainables.encoders import build_model
    from trainables.seeding import seed_everything

    data = load_data(config)
    per_seed, outcomes = {}, {}
    for seed in seeds:
        seed_everything(seed)  # the initial weights of a trial with this seed
        model = build_model(config, data.input_shape)
        per_seed[seed], outcomes[str(seed)] = _evaluated(config, model, data)
    about = (
        f"{config.encoder} and its {config.projection} head at initialisation, "
        f"seeds {_listed(seeds)}"
    )
    return Baseline("random_init", _mean(per_seed), per_seed, 0.0, about, outcomes)


def supervised_baseline(config: TrialConfig, seeds: tuple[int, ...]) -> Baseline:
    """The trial's encoder trained with labels for the trial's budget, for each seed."""
    from trainables.data import load_data

    data = load_data(config)
    per_seed, outcomes = {}, {}
    for seed in seeds:
        model = train_supervised(config.model_copy(update={"seed": seed}), data)
        per_seed[seed], outcomes[str(seed)] = _evaluated(config, model, data)
    about = (
        f"{config.encoder} trained with labels (cross-entropy, a linear classifier on h) on "
        f"{config.examples_seen:,} examples in batches of {config.batch_size}, "
        f"seeds {_listed(seeds)}"
    )
    return Baseline("supervised", _mean(per_seed), per_seed, 0.0, about, outcomes)


def train_supervised(config: TrialConfig, data: DataBundle) -> nn.Module:
    """The trial's model with its encoder trained on labels: the trial's example stream,
    one augmented view of each source, the trial's optimiser and learning-rate schedule, a
    linear classifier on ``h`` (discarded after). Unlabelled rows (label -1) are ignored."""
    from torch import nn

    from trainables.data import ExampleStream, make_augment, step_generator
    from trainables.device import resolve_device
    from trainables.encoders import build_model
    from trainables.optimisers import lr_at, make_optimizer
    from trainables.seeding import seed_everything

    device = resolve_device(config)
    seed_everything(config.seed)
    model = build_model(config, data.input_shape).to(device)
    classes = data.num_classes
    classifier = nn.Linear(model.feature_dim, classes).to(device)
    both = nn.ModuleList([model, classifier])
    optimizer = make_optimizer(config, both)
    stream = ExampleStream(len(data.train_x), config.batch_size, config.seed)
    augment = make_augment(config, data)
    loss_fn = nn.CrossEntropyLoss(ignore_index=-1)
    model.train()
    for step in range(config.steps):
        idx = stream.batch(step)
        x = data.prepare(data.train_x[idx])
        view = data.normalise(augment(x, step_generator(config.seed, step))).to(device)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(config, step)
        h, _ = model(view)
        loss = loss_fn(classifier(h), data.train_y[idx].to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return model.eval()


MEASURES = {
    "raw": raw_baseline,
    "random_init": random_init_baseline,
    "supervised": supervised_baseline,
}


def metric_name(kind: str, metric: str) -> str:
    """The name a baseline's value is logged under: ``baseline/<kind>/<the trial's name>``."""
    return f"baseline/{kind}/{metric}"
