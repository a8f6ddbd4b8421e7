"""Per-item outcomes of one system (a trial, or one seed of a baseline): what every probe
predicted for each held-out item, kept as plain JSON-able lists.

A trial's result carries them as ``evidence["outcomes"]``; a baseline as
``Baseline.outcomes``. The driver writes them as one compact Parquet table per system
(``analysis.reading.outcomes``), from which each recorded ``probe/*_top1_*`` metric is recomputed
exactly: the share of items whose prediction equals the label.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

if TYPE_CHECKING:
    from trainables.data import DataBundle
    from trainables.probes import Predictions


def heldout_items(data: DataBundle) -> Tensor:
    """(Nh,) int64 ids of the held-out rows: ``data.heldout_ids`` (each row's index in the
    dataset's held-out pool), else their positions ``0 .. Nh - 1``. The same for every trial
    and baseline of a study, which all load the same split."""
    if data.heldout_ids is not None:
        return data.heldout_ids.long().cpu()
    return torch.arange(len(data.heldout_y), dtype=torch.long)


def outcome_json(
    items: Tensor, labels: Tensor, predictions: Predictions, spaces: tuple[str, ...] = ("h", "z")
) -> dict[str, Any]:
    """One system's outcomes as JSON-able lists.

    Args:
        items: (N,) held-out item ids (:func:`heldout_items`).
        labels: (N,) their true classes.
        predictions: (probe, space) -> (N,) predicted labels
            (:func:`trainables.probes.probe_predictions`); only the ``spaces`` given are kept.

    Returns:
        ``{"item": [N ints], "label": [N ints], "predictions": {metric: [N ints]}}``, each
        metric named as :func:`trainables.probes.predictions_top1` names its accuracy
        (``probe/knn_top1_h`` …), so that the share of ``predictions[metric] == label`` is that
        metric exactly.
    """
    n = len(labels)
    if len(items) != n:
        raise ValueError(f"outcomes: {len(items)} item ids for {n} labels")
    kept = {}
    for (probe, space), predicted in sorted(predictions.items()):
        if space not in spaces:
            continue
        if len(predicted) != n:
            raise ValueError(f"outcomes: {probe} on {space} predicted {len(predicted)} of {n}")
        kept[f"probe/{probe}_top1_{space}"] = predicted.detach().long().cpu().tolist()
    return {
        "item": items.detach().long().cpu().tolist(),
        "label": labels.detach().long().cpu().tolist(),
        "predictions": kept,
    }
