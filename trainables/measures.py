"""A trial's evidence, measured once at its final evaluation (for the release gate and the
evidence card of ``docs/analysis.md``): conditional geometry, subgroup probes, shift tests and
source return.

Everything here reads the held-out features the final evaluation already has (two fixed
augmented views and the un-augmented rows, see ``trainables.evaluation.heldout_features``), the
probes it fit on the clean probe-train features, and, for the shift tests, the encoder run on
corrupted held-out rows. It returns numeric metrics, logged with the final evaluation's, and an
``evidence`` dict of tables, JSON-serialisable (non-finite numbers become None):

* ``per_class``: one row per space and held-out class: ``space, class, n, align, uniform,
  knn_top1, linear_top1`` (None with the linear probe off);
* ``per_group``: the same per held-out group (``group`` for ``class``), empty without groups;
* ``shift``: ``family, severity, space, probe, top1, covered`` for severities 1..5;
* ``source_return``: the hardest-negative table of :func:`source_return`;
* ``source_return_png``: its image panel, base64 PNG (None for vector data).

Groups: toy data with ``toy_photos_per_item`` > 1 (the item) and imagefolder data with
``groups.csv`` carry group ids on their held-out rows too (``DataBundle.heldout_groups``);
rows without a group (negative ids) are left out of per-group numbers. Many groups are small
(a toy item holds ``toy_photos_per_item`` rows), so a worst group's top-1 is a noisy number:
read it with its ``n``.

Source return: 8 fixed anchors (the first held-out row of each of the first 8 classes, then
the earliest other rows), each with its positive and 3 hardest negatives in z
(:func:`source_return`); image data also get a PNG panel of their views (:func:`source_panel`).

Cost: the shift tests run the encoder over every corrupted row (5 severities × 5 families of
the held-out rows for images, 5 × 2 for vectors; one pass per family), so they score a fixed,
seeded subsample of the held-out split whose size grows with the trial's budget
(:func:`shift_rows`: one row per 256 training examples, 64 to 2000): 120 of the 360 held-out
digits in the default study's trials, which keeps the whole evidence within 3% of such a
trial's wall time (``benchmarks/trial.py``). Their top-1 is a noisier estimate than
the probes' on the whole held-out split; every trial of a study scores the same rows.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from trainables.config import TrialConfig
from trainables.corruption_families import SEVERITIES, covered, families
from trainables.corruptions import corrupt
from trainables.data import DataBundle
from trainables.diagnostics import class_geometry_metrics, label_geometry
from trainables.metrics import SPACES
from trainables.objectives import unit_rows_or_zero
from trainables.probes import FittedProbes, Predictions, top1

# Held-out rows the shift tests score: one per EXAMPLES_PER_SHIFT_ROW training examples, within
# [SHIFT_MIN_ROWS, SHIFT_MAX_ROWS] (a fixed seeded subsample of the held-out split).
EXAMPLES_PER_SHIFT_ROW = 256
SHIFT_MIN_ROWS = 64
SHIFT_MAX_ROWS = 2000
RETURN_ANCHORS = 8  # source-return anchors
RETURN_NEGATIVES = 3  # hardest negatives shown per anchor
PANEL_MIN_SIDE = 48  # panel tiles are scaled up (nearest) to at least this many pixels
PANEL_TEXT = (11, 7)  # the panel's labels: font size in px, and the smallest it shrinks to
FALSE_NEGATIVE_FRAME = (1.0, 0.0, 0.0)  # red
PLAIN_FRAME = (0.75, 0.75, 0.75)  # light grey

Embedder = Callable[[Tensor], tuple[Tensor, Tensor]]  # stored rows -> (h, z)


# ---------------------------------------------------------------------------------------------
# subgroups
# ---------------------------------------------------------------------------------------------
def label_top1(pred: Tensor, y: Tensor, labels: Tensor) -> list[tuple[int, int, float]]:
    """Top-1 within each label (class or group).

    Args:
        pred, y: (N,) predicted and true classes; labels: (N,) ids, negative = no label.

    Returns:
        One ``(label, n, top1)`` per distinct non-negative label, ascending.
    """
    labels = labels.to(pred.device)
    keep = labels >= 0
    ids, inverse, counts = labels[keep].unique(return_inverse=True, return_counts=True)
    correct = (pred[keep] == y.to(pred.device)[keep].long()).double()
    hits = torch.zeros(len(ids), dtype=torch.float64, device=pred.device).index_add_(
        0, inverse, correct
    )
    return [
        (int(i), int(n), float(h) / int(n))
        for i, n, h in zip(ids.tolist(), counts.tolist(), hits.tolist(), strict=True)
    ]


def subgroup_metrics(
    predictions: Predictions, y: Tensor, labels: Tensor, unit: str
) -> tuple[dict[str, float], dict[tuple[str, str], list[tuple[int, int, float]]]]:
    """``probe/{probe}_top1_{space}_worst_{unit}`` (the lowest top-1 of any ``unit``) and
    ``probe/{probe}_top1_{space}_{unit}_gap`` (overall top-1 minus it), and the rows.

    Args:
        predictions: (probe, space) -> (N,) predicted classes of the N held-out rows.
        y: (N,) classes; labels: (N,) class or group ids (negative: in no group).
    """
    metrics, rows = {}, {}
    for (probe, space), pred in predictions.items():
        rows[probe, space] = label_top1(pred, y, labels)
        worst = min((r[2] for r in rows[probe, space]), default=math.nan)
        name = f"probe/{probe}_top1_{space}"
        metrics[f"{name}_worst_{unit}"] = worst
        metrics[f"{name}_{unit}_gap"] = top1(pred, y) - worst
    return metrics, rows


def subgroup_table(
    unit: str,
    geometry: dict[str, list[tuple[int, int, float, float]]],
    accuracy: dict[tuple[str, str], list[tuple[int, int, float]]],
) -> list[dict[str, Any]]:
    """Rows ``space, <unit>, n, align, uniform, knn_top1, linear_top1`` (None when absent)."""
    table = []
    for space in SPACES:
        by_probe = {
            p: {r[0]: r[2] for r in rows} for (p, s), rows in accuracy.items() if s == space
        }
        for label, n, align, uniform in geometry[space]:
            table.append(
                {
                    "space": space, unit: label, "n": n, "align": align, "uniform": uniform,
                    "knn_top1": by_probe.get("knn", {}).get(label),
                    "linear_top1": by_probe.get("linear", {}).get(label),
                }
            )  # fmt: skip
    return table


# ---------------------------------------------------------------------------------------------
# shift tests
# ---------------------------------------------------------------------------------------------
def shift_rows(config: TrialConfig) -> int:
    """How many held-out rows the shift tests score at most: one per
    :data:`EXAMPLES_PER_SHIFT_ROW` examples of the budget, within [:data:`SHIFT_MIN_ROWS`,
    :data:`SHIFT_MAX_ROWS`], so their cost (25 encoder passes over them for images) grows with
    the trial's own: 120 rows for the default digits trial (30,720 examples)."""
    return min(
        SHIFT_MAX_ROWS, max(SHIFT_MIN_ROWS, config.budget_examples // EXAMPLES_PER_SHIFT_ROW)
    )


def shift_index(n: int, limit: int) -> Tensor:
    """(min(n, limit),) held-out rows the shift tests score: all, or a fixed seeded subsample."""
    if n <= limit:
        return torch.arange(n)
    return torch.randperm(n, generator=torch.Generator().manual_seed(0))[:limit].sort().values


def shift_tests(
    x: Tensor,
    y: Tensor,
    embed: Embedder,
    probes: FittedProbes,
    kind: str,
    augmentation: str,
    fill: tuple[float, ...] | None = None,
) -> list[dict[str, Any]]:
    """Probes fit on clean features, scored on corrupted rows.

    Args:
        x: (N, ...) stored held-out rows; y: (N,) their classes.
        embed: stored rows -> (h (N, Dh), z (N, Dz)).
        kind: "image" or "vector" (which families apply); augmentation: the trial's, for
            ``covered``; fill: occlusion's per-channel values.

    Returns:
        One row ``family, severity, space, probe, top1, covered`` per family, severity 1..5,
        space and probe.
    """
    rows = []
    for family in families(kind):
        is_covered = covered(augmentation, family)
        # one encoder pass over the family's five severities: (5·N, ...) rows
        h, z = embed(torch.cat([corrupt(x, family, s, fill=fill) for s in SEVERITIES]))
        pred = {
            (space, probe): probes.predict(probe, space, feats).view(len(SEVERITIES), -1)
            for space, feats in (("h", h), ("z", z))
            for probe in probes.names
        }
        for k, severity in enumerate(SEVERITIES):
            for (space, probe), labels in pred.items():
                rows.append(
                    {
                        "family": family, "severity": severity, "space": space,
                        "probe": probe, "top1": top1(labels[k], y), "covered": is_covered,
                    }
                )  # fmt: skip
    return rows


def shift_metrics(rows: list[dict[str, Any]]) -> dict[str, float]:
    """``shift/<family>/s<k>/<probe>_top1_<space>``, their mean over k as
    ``shift/<family>/<probe>_top1_<space>``, and the mean of those over families as
    ``shift/mean_<probe>_top1_<space>``."""
    out: dict[str, float] = {}
    per_family: dict[tuple[str, str, str], list[float]] = {}
    for r in rows:
        out[f"shift/{r['family']}/s{r['severity']}/{r['probe']}_top1_{r['space']}"] = r["top1"]
        per_family.setdefault((r["family"], r["probe"], r["space"]), []).append(r["top1"])
    overall: dict[tuple[str, str], list[float]] = {}
    for (family, probe, space), values in per_family.items():
        mean = sum(values) / len(values)
        out[f"shift/{family}/{probe}_top1_{space}"] = mean
        overall.setdefault((probe, space), []).append(mean)
    for (probe, space), values in overall.items():
        out[f"shift/mean_{probe}_top1_{space}"] = sum(values) / len(values)
    return out


# ---------------------------------------------------------------------------------------------
# source return
# ---------------------------------------------------------------------------------------------
def return_anchors(labels: Tensor, count: int = RETURN_ANCHORS) -> list[int]:
    """``count`` fixed held-out rows: the first row of each class in ascending label order (at
    most ``count`` classes), then, with fewer classes, the earliest rows not yet chosen."""
    labels = labels.cpu().tolist()
    first: dict[int, int] = {}
    for i, label in enumerate(labels):
        first.setdefault(label, i)
    chosen = [first[label] for label in sorted(first)][:count]
    rest = [i for i in range(len(labels)) if i not in set(chosen)]
    return chosen + rest[: count - len(chosen)]


def source_return(
    z1: Tensor, z2: Tensor, labels: Tensor, anchors: list[int], negatives: int = RETURN_NEGATIVES
) -> list[dict[str, Any]]:
    """Each anchor's positive and hardest negatives in z, with cosine similarities.

    Anchor i is row i's first view z1[i]; its positive is its second view z2[i]; its candidates
    are both views of every other row (its own two views excluded), and the hardest negatives
    are the ``negatives`` most similar. A negative of the anchor's class is a false negative.

    Args:
        z1, z2: (N, D) projections of the two held-out views; labels: (N,).

    Returns:
        Per anchor, in order, rows ``anchor, anchor_label, role`` ("positive", "negative_1", ...),
        ``index`` (the held-out row), ``view`` (1 or 2), ``label``, ``similarity``,
        ``false_negative``.
    """
    n = z1.shape[0]
    u = torch.cat([unit_rows_or_zero(z1.double()), unit_rows_or_zero(z2.double())])  # (2N, D)
    y = labels.cpu().tolist()
    table = []
    for i in anchors:
        sims = u @ u[i]  # (2N,)
        positive = float(sims[n + i])
        sims[[i, n + i]] = -math.inf
        top = sims.topk(min(negatives, 2 * n - 2))
        row = {"anchor": i, "anchor_label": y[i]}
        table.append(row | {"role": "positive", "index": i, "view": 2, "label": y[i],
                            "similarity": positive, "false_negative": False})  # fmt: skip
        for rank, (s, c) in enumerate(zip(top.values.tolist(), top.indices.tolist(), strict=True)):
            j = c % n
            table.append(
                row | {"role": f"negative_{rank + 1}", "index": j, "view": c // n + 1,
                       "label": y[j], "similarity": s, "false_negative": y[j] == y[i]}
            )  # fmt: skip
    return table


def _tile(view: Tensor, mean: Tensor, std: Tensor, scale: int, frame: tuple[float, ...]) -> Tensor:
    """(C, H, W) normalised view -> (3, H·scale + 4, W·scale + 4) in [0, 1], framed 2 px."""
    img = (view.float().cpu() * std + mean).clamp(0, 1)
    img = img.expand(3, -1, -1) if img.shape[0] == 1 else img[:3]
    img = img.repeat_interleave(scale, dim=1).repeat_interleave(scale, dim=2)
    tile = torch.tensor(frame).view(3, 1, 1).repeat(1, img.shape[1] + 4, img.shape[2] + 4)
    tile[:, 2:-2, 2:-2] = img
    return tile


def tile_grid(tiles: Tensor, columns: int, gap: int = 2) -> Tensor:
    """(K, 3, T, T) tiles -> (3, R·(T + gap) + gap, columns·(T + gap) + gap) on white, row by
    row (R = ceil(K / columns)), ``gap`` px between and around tiles (torchvision's make_grid
    layout)."""
    k, _, t, _ = tiles.shape
    rows = -(-k // columns)
    grid = torch.ones(3, rows * (t + gap) + gap, columns * (t + gap) + gap)
    for i in range(k):
        top, left = gap + (i // columns) * (t + gap), gap + (i % columns) * (t + gap)
        grid[:, top : top + t, left : left + t] = tiles[i]
    return grid


def _pil_image(image: Tensor):
    """(3, H, W) float in [0, 1] -> an 8-bit RGB PIL image (PIL: torchvision's own dependency,
    far lighter to import than ``torchvision.io``)."""
    from PIL import Image

    pixels = (image.clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).contiguous()
    return Image.fromarray(pixels.numpy())


def _font(size: int):
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size)  # FreeType's scalable default font
    except (TypeError, ValueError, OSError, ImportError):
        return ImageFont.load_default()  # Pillow without FreeType: its one bitmap font


def _fitting_font(texts: list[str], width: int):
    """The largest default font, from :data:`PANEL_TEXT`'s size down to its smallest, in which
    every one of ``texts`` fits ``width`` px."""
    size, smallest = PANEL_TEXT
    font = _font(size)
    while size > smallest and max(font.getlength(t) for t in texts) > width:
        size -= 1
        font = _font(size)
    return font


def label_columns(image: Tensor, labels: list[str], legend: str, gap: int = 2) -> bytes:
    """A tile grid (:func:`tile_grid`, one column per label) as PNG bytes, with each column's
    label centred above it and ``legend`` (wrapped to the grid's width) below, in black on
    white."""
    import io
    import textwrap

    from PIL import Image, ImageDraw

    grid = _pil_image(image)
    column = (grid.width - gap) // len(labels)
    font = _fitting_font(labels, column - gap)
    words = legend.split()
    lines = [legend]
    for width in range(len(legend), 8, -4):  # the longest lines that fit the grid's width
        lines = textwrap.wrap(legend, width)
        if max(font.getlength(line) for line in lines) <= grid.width - 2 * gap:
            break
    line_h = font.getbbox("Ag")[3] + 3
    head, foot = line_h + gap, len(lines) * line_h + gap if words else 0
    panel = Image.new("RGB", (grid.width, head + grid.height + foot), "white")
    panel.paste(grid, (0, head))
    draw = ImageDraw.Draw(panel)
    for k, label in enumerate(labels):
        left = gap + k * column + (column - gap - font.getlength(label)) / 2
        draw.text((left, gap), label, fill="black", font=font)
    for k, line in enumerate(lines if words else []):
        draw.text((gap, head + grid.height + k * line_h), line, fill="black", font=font)
    buffer = io.BytesIO()
    panel.save(buffer, format="PNG")
    return buffer.getvalue()


def panel_labels(negatives: int = RETURN_NEGATIVES) -> list[str]:
    """The source-return panel's column labels, left to right."""
    return ["anchor", "positive", *(f"negative {k}" for k in range(1, negatives + 1))]


PANEL_LEGEND = (
    "Each row: an anchor's first view, its second view, then the candidates most similar to "
    "it in z. Red frame: same class as the anchor (a false negative)."
)


def source_panel(
    v1: Tensor,
    v2: Tensor,
    table: list[dict[str, Any]],
    mean: tuple[float, ...],
    std: tuple[float, ...],
    negatives: int = RETURN_NEGATIVES,
) -> bytes:
    """The source-return table as a PNG: one row per anchor (anchor view, positive view, the
    hardest negatives' views), each tile framed 2 px, red for a false negative, grey otherwise;
    tiles scaled up (nearest) to at least :data:`PANEL_MIN_SIDE` px, 2 px white between tiles;
    the columns labelled above (:func:`panel_labels`) and :data:`PANEL_LEGEND` below.

    Args:
        v1, v2: (N, C, H, W) the two normalised held-out views; mean, std: C values each.
    """
    side = min(v1.shape[-2:])
    scale = max(1, math.ceil(PANEL_MIN_SIDE / side))
    m, s = torch.tensor(mean).view(-1, 1, 1), torch.tensor(std).view(-1, 1, 1)
    views = (v1, v2)
    tiles = []
    for anchor in dict.fromkeys(r["anchor"] for r in table):
        rows = [r for r in table if r["anchor"] == anchor]
        tiles.append(_tile(v1[anchor], m, s, scale, PLAIN_FRAME))
        for r in rows:
            frame = FALSE_NEGATIVE_FRAME if r["false_negative"] else PLAIN_FRAME
            tiles.append(_tile(views[r["view"] - 1][r["index"]], m, s, scale, frame))
        tiles += [torch.ones_like(tiles[-1])] * (1 + negatives - len(rows))
    grid = tile_grid(torch.stack(tiles), 2 + negatives)
    return label_columns(grid, panel_labels(negatives), PANEL_LEGEND)


# ---------------------------------------------------------------------------------------------
# the whole
# ---------------------------------------------------------------------------------------------
def group_evidence(
    features: dict[str, Tensor], groups: Tensor, predictions: Predictions
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Per-group probe metrics and the ``per_group`` table.

    Args:
        features: as :func:`trial_evidence`'s; groups: (N,) the held-out rows' group ids
            (negative: in no group, left out); predictions: (probe, space) -> (N,) classes.
    """
    groups = groups.to(features["held_y"].device)
    metrics, accuracy = subgroup_metrics(predictions, features["held_y"], groups, "group")
    keep = (groups >= 0).nonzero().flatten()
    geometry = {
        space: label_geometry(
            features[f"{space}1"][keep], features[f"{space}2"][keep], groups[keep]
        )
        for space in SPACES
    }
    return metrics, subgroup_table("group", geometry, accuracy)


def plain(value: Any) -> Any:
    """``value`` with every number a plain int or float, non-finite floats as None (strict JSON)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return int(value)
    value = float(value)
    return value if math.isfinite(value) else None


def trial_evidence(
    config: TrialConfig,
    data: DataBundle,
    features: dict[str, Tensor],
    probes: FittedProbes,
    predictions: Predictions,
    embed: Embedder,
) -> tuple[dict[str, float], dict[str, Any]]:
    """A trial's evidence metrics (names: :func:`trainables.metrics.evidence_metrics`) and
    ``evidence`` dict.

    Args:
        features: a final evaluation's features (``trainables.evaluation.heldout_features`` with
            ``keep_inputs``): ``h1, h2, z1, z2, held_h, held_z, held_y`` and the held-out
            inputs ``held_x`` (stored rows) and ``v1, v2`` (the two normalised views).
        probes: the probes fit on the clean probe-train features.
        predictions: their labels for the un-augmented held-out rows, (probe, space) -> (N,).
        embed: stored rows -> (h, z), the trial's encoder in evaluation mode.
    """
    f, y = features, features["held_y"]
    metrics, geometry = class_geometry_metrics(f["h1"], f["h2"], f["z1"], f["z2"], y)
    class_metrics, class_accuracy = subgroup_metrics(predictions, y, y, "class")
    metrics |= class_metrics
    per_group = []
    if data.heldout_groups is not None:
        group_metrics, per_group = group_evidence(f, data.heldout_groups, predictions)
        metrics |= group_metrics
    pick = shift_index(len(y), shift_rows(config)).to(y.device)
    fill = data.mean if data.kind == "image" else None
    shift = shift_tests(
        f["held_x"][pick], y[pick], embed, probes, data.kind, config.augmentation, fill
    )
    metrics |= shift_metrics(shift)
    table = source_return(f["z1"], f["z2"], y, return_anchors(y))
    png = None
    if data.kind == "image":
        png = base64.b64encode(source_panel(f["v1"], f["v2"], table, data.mean, data.std))
    evidence = {
        "per_class": subgroup_table("class", geometry, class_accuracy),
        "per_group": per_group,
        "shift": shift,
        "source_return": table,
        "source_return_png": None if png is None else png.decode("ascii"),
    }
    return metrics, plain(evidence)
