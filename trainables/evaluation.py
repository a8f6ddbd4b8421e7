"""One evaluation of a trial: the held-out features of two fixed views and of the un-augmented
rows, the probes fit on them, and the scores (pair diagnostics, probe accuracies), all on the
trial's device. The loop (:mod:`trainables.train`) and the baselines
(:mod:`trainables.baselines`) score with it alike."""

from __future__ import annotations

import torch
from torch import Tensor

from trainables.config import TrialConfig
from trainables.data import (
    DataBundle,
    ExampleStream,
    ResidentData,
    make_augment,
    step_generator,
    two_views,
)
from trainables.device import autocast_for, uses_channels_last
from trainables.diagnostics import pair_diagnostics
from trainables.encoders import ContrastiveModel
from trainables.objectives.registry import OBJECTIVES
from trainables.probes import (
    FittedProbes,
    Predictions,
    fit_probes,
    predictions_top1,
    probe_predictions,
)

EVAL_VIEWS_SEED = 2**31 - 1  # held-out views are the same for every trial of a study


@torch.no_grad()
def embed(
    model: ContrastiveModel,
    x: Tensor,
    to_input,
    device: torch.device,
    batch: int = 1024,
    channels_last: bool = False,
):
    """(N, ...) rows -> (h, z), float32 on ``device``, ``to_input`` applied chunk by chunk (so a
    prepared copy of a large split never exists whole)."""
    outs = []
    for a in range(0, len(x), batch):
        chunk = to_input(x[a : a + batch]).to(device)
        if channels_last and chunk.dim() == 4:
            chunk = chunk.contiguous(memory_format=torch.channels_last)
        outs.append(model(chunk))
    return torch.cat([h.float() for h, _ in outs]), torch.cat([z.float() for _, z in outs])


def encode(model: ContrastiveModel, data: DataBundle, x: Tensor, device: torch.device, **kwargs):
    """Un-augmented stored rows -> (h, z) on ``device`` (``kwargs`` as :func:`embed`)."""
    return embed(model, x, lambda chunk: data.normalise(data.prepare(chunk)), device, **kwargs)


@torch.no_grad()
def heldout_features(
    config: TrialConfig,
    model: ContrastiveModel,
    data: DataBundle,
    device: torch.device,
    resident: ResidentData | None = None,
    keep_inputs: bool = False,
) -> dict[str, Tensor]:
    """What an evaluation scores, on ``device``: the encoder (``h1``, ``h2``) and head (``z1``,
    ``z2``) outputs of two fixed augmented views of the held-out split, the un-augmented
    held-out (``held_h``, ``held_z``, ``held_y``) and probe-train (``probe_h``, ``probe_z``,
    ``probe_y``) features, and the training ``groups`` of one batch (or None). With
    ``keep_inputs`` (the final evaluation's evidence), also the stored held-out rows
    (``held_x``) and the two normalised views (``v1``, ``v2``).

    ``resident`` (the data on ``device``) spares the copies; the features are the same."""
    was_training = model.training
    model.eval()
    augment = make_augment(config, data)
    if resident is None:
        heldout_x, heldout_y = data.heldout_x.to(device), data.heldout_y.to(device)
        probe_x, probe_y = data.train_x[data.probe_index], data.train_y[data.probe_index]
    else:
        heldout_x, heldout_y = resident.heldout_x, resident.heldout_y
        probe_x, probe_y = resident.probe_x, resident.probe_y
    layout = {"channels_last": uses_channels_last(config, device)}
    v1, v2 = two_views(data, augment, heldout_x, step_generator(EVAL_VIEWS_SEED, 0, device))
    same = lambda chunk: chunk  # noqa: E731
    with autocast_for(config, device):  # the training precision; features come back float32
        out = dict(zip(("h1", "z1"), embed(model, v1, same, device, **layout), strict=True))
        out |= dict(zip(("h2", "z2"), embed(model, v2, same, device, **layout), strict=True))
        out["held_h"], out["held_z"] = encode(model, data, heldout_x, device, **layout)
        out["probe_h"], out["probe_z"] = encode(model, data, probe_x, device, **layout)
    out["held_y"], out["probe_y"] = heldout_y.to(device), probe_y.to(device)
    groups = None
    if data.train_groups is not None:  # the groups of a real training batch: step 0's
        first = ExampleStream(len(data.train_x), config.batch_size, config.seed).batch(0)
        groups = data.train_groups[first].to(device)
    out["groups"] = groups
    if keep_inputs:
        out["held_x"], out["v1"], out["v2"] = heldout_x, v1, v2
    model.train(was_training)
    return out


def trial_probes(config: TrialConfig, features: dict[str, Tensor]) -> FittedProbes:
    """The trial's probes, fit on the clean probe-train features of :func:`heldout_features`."""
    classes = int(max(features["probe_y"].max(), features["held_y"].max())) + 1
    return fit_probes(
        {"h": features["probe_h"], "z": features["probe_z"], "y": features["probe_y"]},
        num_classes=classes, k=config.knn_k, knn_temperature=config.knn_temperature,
        linear=config.linear_probe, max_iter=config.linear_probe_iters,
    )  # fmt: skip


def held_predictions(probes: FittedProbes, features: dict[str, Tensor]) -> Predictions:
    """The probes' labels for the un-augmented held-out features of :func:`heldout_features`."""
    held = {"h": features["held_h"], "z": features["held_z"], "y": features["held_y"]}
    return probe_predictions(probes, held)


@torch.no_grad()
def score(
    config: TrialConfig, features: dict[str, Tensor], predictions: Predictions | None = None
) -> dict[str, float]:
    """Held-out diagnostics and both probes on both spaces, computed where ``features`` are
    (see :func:`heldout_features`); the linear probe runs in float64 there. ``predictions``
    made already (:func:`held_predictions`) are scored as they are."""
    metrics = pair_diagnostics(
        features["h1"], features["h2"], features["z1"], features["z2"], features["held_y"],
        batch_size=config.contrast_batch,
        temperature=config.temperature if OBJECTIVES[config.objective].temperature else None,
        groups=features["groups"], group_policy=config.group_policy,
    )  # fmt: skip
    if predictions is None:
        predictions = held_predictions(trial_probes(config, features), features)
    return metrics | predictions_top1(predictions, features["held_y"])


def stored_embedder(config: TrialConfig, model: ContrastiveModel, data: DataBundle, device):
    """Stored rows -> (h, z) on ``device``: the model in evaluation mode, at the training
    precision, as :func:`heldout_features` encodes the un-augmented held-out rows."""
    layout = {"channels_last": uses_channels_last(config, device)}

    @torch.no_grad()
    def run(rows: Tensor) -> tuple[Tensor, Tensor]:
        was_training = model.training
        model.eval()
        with autocast_for(config, device):
            out = encode(model, data, rows, device, **layout)
        model.train(was_training)
        return out

    return run


def evaluate(
    config: TrialConfig,
    model: ContrastiveModel,
    data: DataBundle,
    device: torch.device,
    resident: ResidentData | None = None,
) -> dict[str, float]:
    """Held-out diagnostics on two fixed views, and both probes on both spaces, all on the
    trial's ``device``."""
    return evaluate_predictions(config, model, data, device, resident)[0]


def evaluate_predictions(
    config: TrialConfig,
    model: ContrastiveModel,
    data: DataBundle,
    device: torch.device,
    resident: ResidentData | None = None,
) -> tuple[dict[str, float], Predictions]:
    """:func:`evaluate`'s metrics, and the probes' labels for the held-out rows they score
    ((probe, space) -> (Nh,)), from which each ``probe/*_top1_*`` metric is recomputed exactly."""
    features = heldout_features(config, model, data, device, resident)
    predictions = held_predictions(trial_probes(config, features), features)
    return score(config, features, predictions), predictions
