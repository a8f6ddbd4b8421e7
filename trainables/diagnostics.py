"""Representation diagnostics on held-out positive pairs, in both spaces.

``h`` is the encoder output (what users transfer), ``z`` the projection-head output (what the loss
shapes). Alignment and uniformity use a fixed protocol (α = 2, t = 2) whatever the training t, so
values are comparable across trials. Metric names are listed in ``docs/metrics.md``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.nn import functional as F

from trainables.objectives import (
    align_loss,
    candidates_per_anchor,
    has_direction,
    pair_masks,
    rows_per_chunk,
    uniform_loss,
    unit_rows_or_zero,
)

PROTOCOL_ALPHA = 2.0
PROTOCOL_T = 2.0
# Uniformity is O(N^2) pairs; held-out sets larger than this are subsampled (fixed, seeded).
MAX_UNIFORM_POINTS = 4096
# torch.quantile refuses inputs above 2**24 elements; negatives are subsampled to this many.
MAX_QUANTILE_ELEMENTS = 2**24


def effective_rank(x: Tensor, eps: float = 1e-12) -> float:
    """RankMe effective rank: exp of the entropy of the L1-normalised singular values.

    Args:
        x: (N, D) features, used as given (no centring, no normalisation), as in RankMe.

    Returns:
        A float in [1, min(N, D)]; k orthogonal directions of equal norm give exactly k.
    """
    if x.dim() != 2 or x.shape[0] < 1:
        raise ValueError(f"x must be a non-empty 2-D tensor, got shape {tuple(x.shape)}")
    sigma = torch.linalg.svdvals(x.double())
    if float(sigma.sum()) <= 0:
        return 1.0
    p = sigma / sigma.sum() + eps
    return float(torch.exp(-(p * p.log()).sum()))


def dim_std(x: Tensor) -> Tensor:
    """(N, D) -> (D,) per-dimension standard deviation of the L2-normalised rows.

    A dimension whose std is near zero carries no information; all of them near zero is collapse.
    For features spread uniformly on the sphere each std is about 1/sqrt(D).
    """
    return unit_rows_or_zero(x).std(dim=0, unbiased=False)


def hardest_negative_share(cos: Tensor, negative: Tensor, temperature: float) -> Tensor:
    """Share of each anchor's negative softmax mass held by its hardest negative.

    The gradient of InfoNCE on negative j's similarity is proportional to its softmax weight, so
    this is the share of the anchor's repulsion that lands on that one negative (for example 64% at
    τ = 0.5, 99.9% at τ = 0.07 for negatives at 0.7, 0.2, -0.1).

    Args:
        cos: (C, M) cosines of C anchors to M candidates.
        negative: (C, M) bool, which candidates are the anchor's negatives.

    Returns:
        (C,) shares in (0, 1].
    """
    logits = (cos / temperature).masked_fill(~negative, -torch.inf)
    return (logits.max(dim=1).values - logits.logsumexp(dim=1)).exp()


def cosine_stats(
    z1: Tensor,
    z2: Tensor,
    labels: Tensor | None = None,
    *,
    temperature: float | None = None,
    q: float = 0.99,
) -> dict[str, float]:
    """Positive and negative cosine statistics of two views of B sources.

    Views are stacked as [z1; z2] (2B rows); each row's positive is its other view, its negatives
    are the 2B - 2 others. With ``labels`` (B,), also the false-negative rate: the share of anchors
    whose hardest negative (highest cosine) has the anchor's label. With ``temperature``, also
    ``sim/hardest_neg_share``, the mean of :func:`hardest_negative_share` over anchors.
    """
    u = torch.cat([unit_rows_or_zero(z1), unit_rows_or_zero(z2)]).double()  # (2B, D)
    b = z1.shape[0]
    sources = torch.arange(b, device=u.device).repeat(2)
    index = torch.arange(2 * b, device=u.device)
    full_labels = None if labels is None else labels.to(u.device).repeat(2)
    pos = (F.normalize(z1.double(), dim=1) * F.normalize(z2.double(), dim=1)).sum(dim=1)

    neg_sum, neg_count, hardest_same, share_sum, neg_samples = 0.0, 0, 0, 0.0, []
    generator = torch.Generator().manual_seed(0)
    step = rows_per_chunk(2 * b)
    budget_per_chunk = max(1, MAX_QUANTILE_ELEMENTS * step // (2 * b))
    for a in range(0, 2 * b, step):
        c = min(2 * b, a + step)
        cos = u[a:c] @ u.T  # (C, 2B)
        positive, kept = pair_masks(sources[a:c], sources, index[a:c])
        negative = kept & ~positive
        values = cos[negative]
        neg_sum += float(values.sum())
        neg_count += values.numel()
        if values.numel() > budget_per_chunk:
            pick = torch.randperm(values.numel(), generator=generator)[:budget_per_chunk]
            values = values[pick.to(values.device)]
        neg_samples.append(values)
        if temperature is not None:
            share_sum += float(hardest_negative_share(cos, negative, temperature).sum())
        if full_labels is not None:
            hardest = cos.masked_fill(~negative, -torch.inf).argmax(dim=1)
            hardest_same += int((full_labels[hardest] == full_labels[a:c]).sum())

    out = {
        "sim/pos_mean": float(pos.mean()),
        "sim/neg_mean": neg_sum / max(1, neg_count),
        "sim/neg_q99": float(torch.quantile(torch.cat(neg_samples), q)) if neg_count else 0.0,
    }
    if full_labels is not None:
        out["sim/false_negative_rate"] = hardest_same / (2 * b)
    if temperature is not None:
        out["sim/hardest_neg_share"] = share_sum / (2 * b)
    return out


def _subsample(n: int, limit: int) -> Tensor | None:
    if n <= limit:
        return None
    return torch.randperm(n, generator=torch.Generator().manual_seed(0))[:limit]


def space_metrics(x1: Tensor, x2: Tensor, space: str) -> dict[str, float]:
    """Alignment, uniformity, effective rank and dimension std of one space ("h" or "z").

    Args:
        x1, x2: (B, D) features of the two held-out views.

    Rows without a direction (zero rows: a dead unit's output) have no place on the sphere:
    alignment and uniformity are measured over the pairs whose two views both have one, and
    ``{space}/zero_rows`` is the share of pairs left out (NaN geometry when fewer than 2 remain).
    """
    both = has_direction(x1) & has_direction(x2)
    zero_share = 1.0 - float(both.double().mean()) if x1.shape[0] else 0.0
    y1, y2 = (x1, x2) if bool(both.all()) else (x1[both], x2[both])
    pick = _subsample(y1.shape[0], MAX_UNIFORM_POINTS)
    u1 = y1 if pick is None else y1[pick.to(y1.device)]
    stds = dim_std(x1)
    with torch.no_grad():
        enough = y1.shape[0] >= 2
        return {
            f"{space}/align": float(align_loss(y1, y2, PROTOCOL_ALPHA)) if enough else math.nan,
            f"{space}/uniform": float(uniform_loss(u1, PROTOCOL_T)) if enough else math.nan,
            f"{space}/effective_rank": effective_rank(x1),
            f"{space}/dim_std_min": float(stds.min()),
            f"{space}/dim_std_mean": float(stds.mean()),
            f"{space}/zero_rows": zero_share,
        }


def label_geometry(x1: Tensor, x2: Tensor, labels: Tensor) -> list[tuple[int, int, float, float]]:
    """Alignment and uniformity within each label (a class, or a group), measured as
    :func:`space_metrics` measures them over the whole held-out set.

    Args:
        x1, x2: (B, D) features of the two held-out views of B sources.
        labels: (B,) integer ids.

    Returns:
        One ``(label, n, align, uniform)`` per distinct label, ascending: ``n`` the label's rows;
        ``align`` the protocol alignment (α = 2) over its pairs whose two views both have a
        direction, NaN without such a pair; ``uniform`` the protocol uniformity (t = 2) over
        those pairs' view-1 rows (the same seeded subsample as the global value above
        :data:`MAX_UNIFORM_POINTS`), NaN with fewer than 2.
    """
    labels = labels.to(x1.device)
    both = has_direction(x1) & has_direction(x2)
    out = []
    with torch.no_grad():
        for label in labels.unique().tolist():
            mine = labels == label
            rows = (mine & both).nonzero().flatten()
            y1, y2 = x1[rows], x2[rows]
            pick = _subsample(y1.shape[0], MAX_UNIFORM_POINTS)
            u1 = y1 if pick is None else y1[pick.to(y1.device)]
            n_rows = y1.shape[0]
            align = float(align_loss(y1, y2, PROTOCOL_ALPHA)) if n_rows >= 1 else math.nan
            uniform = float(uniform_loss(u1, PROTOCOL_T)) if n_rows >= 2 else math.nan
            out.append((int(label), int(mine.sum()), align, uniform))
    return out


def worst_and_spread(values: list[float], worst: str = "max") -> tuple[float, float]:
    """(worst, max - min) of the finite ``values``; worst is their max (``"max"``: lower is
    better) or min (``"min"``). (NaN, NaN) when none is finite; the spread is NaN with one
    finite value (one measured class spreads over nothing: not 0)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return math.nan, math.nan
    spread = max(finite) - min(finite) if len(finite) > 1 else math.nan
    return (max(finite) if worst == "max" else min(finite)), spread


def class_geometry_metrics(
    h1: Tensor, h2: Tensor, z1: Tensor, z2: Tensor, labels: Tensor
) -> tuple[dict[str, float], dict[str, list[tuple[int, int, float, float]]]]:
    """Conditional alignment and uniformity in both spaces (release gate item 8, docs/analysis.md).

    Args:
        h1, h2: (B, Dh), z1, z2: (B, Dz) features of the two held-out views; labels: (B,).

    Returns:
        ``{h,z}/align_worst_class`` (the largest per-class alignment), ``{h,z}/align_class_spread``
        (largest minus smallest; NaN with fewer than two classes measured),
        ``{h,z}/uniform_worst_class`` and ``{h,z}/uniform_class_spread`` likewise, and
        ``{h,z}/{align,uniform}_classes``: the classes each was measured on; and each space's
        :func:`label_geometry` rows.
    """
    metrics, rows = {}, {}
    for space, (x1, x2) in (("h", (h1, h2)), ("z", (z1, z2))):
        rows[space] = label_geometry(x1, x2, labels)
        for i, name in ((2, "align"), (3, "uniform")):
            values = [row[i] for row in rows[space]]
            worst, spread = worst_and_spread(values)
            metrics[f"{space}/{name}_worst_class"] = worst
            metrics[f"{space}/{name}_class_spread"] = spread
            # how many classes the two cover (alignment needs 1 held-out row, uniformity 2)
            metrics[f"{space}/{name}_classes"] = float(sum(math.isfinite(v) for v in values))
    return metrics, rows


def pair_diagnostics(
    h1: Tensor,
    h2: Tensor,
    z1: Tensor,
    z2: Tensor,
    labels: Tensor | None = None,
    *,
    batch_size: int | None = None,
    temperature: float | None = None,
    groups: Tensor | None = None,
    group_policy: str = "negative",
) -> dict[str, float]:
    """Every held-out diagnostic (docs/metrics.md) from two views of B held-out sources.

    Args:
        h1, h2: (B, Dh) encoder outputs of the two views.
        z1, z2: (B, Dz) projection outputs of the two views.
        labels: (B,) class labels, for the false-negative rate only.
        batch_size: training batch size, for ``loss/candidates`` (negatives per anchor in one
            training step's denominator). Without it, the held-out set itself is the batch.
        temperature: training τ, for ``sim/hardest_neg_share`` (InfoNCE trials only).
        groups, group_policy: as in the objective, for ``loss/candidates``.
    """
    with torch.no_grad():
        out = space_metrics(h1, h2, "h") | space_metrics(z1, z2, "z")
        out |= cosine_stats(z1, z2, labels, temperature=temperature)
        out["loss/candidates"] = training_candidates(
            batch_size or z1.shape[0], groups=groups, group_policy=group_policy
        )
    return out


def training_candidates(
    batch_size: int, *, groups: Tensor | None = None, group_policy: str = "negative"
) -> float:
    """Mean number of negatives per anchor in a two-view batch of ``batch_size`` sources.

    Without groups this is exactly 2B - 2; with groups and policy ``"mask"`` or ``"positive"`` it
    is smaller, and ``groups`` (B,) gives the sources' group ids for one representative batch.
    """
    sources = torch.arange(batch_size).repeat(2)
    view_groups = None if groups is None else groups[:batch_size].cpu().repeat(2)
    counts = candidates_per_anchor(sources, groups=view_groups, group_policy=group_policy)
    return float(counts.double().mean())
