"""Brute-force references written from the papers' formulas, in plain Python floats.

Slow on purpose: loops and ``math`` only, no tensors, so they share no code with the objectives.
"""

from __future__ import annotations

import math


def _unit(row: list[float]) -> list[float]:
    # divided by the largest entry first, so a row of 1e-200 or 1e200 keeps its direction
    peak = max(abs(v) for v in row)
    scaled = [v / peak for v in row]
    norm = math.sqrt(sum(v * v for v in scaled))
    return [v / norm for v in scaled]


def _dot(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def info_nce_loop(
    z: list[list[float]],
    sources: list[int],
    tau: float,
    groups: list[int] | None = None,
    policy: str = "negative",
) -> list[float]:
    """Per-anchor loss_i = -(1/|P(i)|) Σ_{p∈P(i)} [ s_ip/τ - log Σ_{a∈K(i)} exp(s_ia/τ) ]."""
    u = [_unit(r) for r in z]
    n = len(u)
    losses = []
    for i in range(n):
        positives, kept = [], []
        for a in range(n):
            if a == i:
                continue
            same_source = sources[a] == sources[i]
            group_mate = groups is not None and groups[a] == groups[i] and not same_source
            if same_source or (group_mate and policy == "positive"):
                positives.append(a)
            if not (group_mate and policy == "mask"):
                kept.append(a)
        logits = [_dot(u[i], u[a]) / tau for a in kept]
        peak = max(logits)
        log_partition = peak + math.log(sum(math.exp(v - peak) for v in logits))
        terms = [_dot(u[i], u[p]) / tau - log_partition for p in positives]
        losses.append(-sum(terms) / len(terms))
    return losses


def across_ranks(ids_per_rank: list[list[int]], scope: str) -> list:
    """Ids of the batch that concatenates every rank's rows, in rank order.

    ``"local"``: each rank numbers its own, so the identity is the pair (rank, id) and one id on
    two ranks is two identities. ``"global"``: the ids as given.
    """
    if scope == "local":
        return [(rank, i) for rank, ids in enumerate(ids_per_rank) for i in ids]
    return [i for ids in ids_per_rank for i in ids]


def align_loop(x: list[list[float]], y: list[list[float]], alpha: float) -> float:
    """E ||u - v||^alpha over rows."""
    total = 0.0
    for a, b in zip(x, y, strict=True):
        ua, ub = _unit(a), _unit(b)
        total += math.sqrt(sum((p - q) ** 2 for p, q in zip(ua, ub, strict=True))) ** alpha
    return total / len(x)


def uniform_loop(x: list[list[float]], t: float) -> float:
    """log of the mean over distinct pairs i < j of exp(-t ||u_i - u_j||^2)."""
    u = [_unit(r) for r in x]
    values = []
    for i in range(len(u)):
        for j in range(i + 1, len(u)):
            values.append(math.exp(-t * sum((p - q) ** 2 for p, q in zip(u[i], u[j], strict=True))))
    return math.log(sum(values) / len(values))


def circle(*degrees: float, dtype=None):
    """(len(degrees), 2) float64 unit vectors at the given angles on S^1."""
    import torch

    rad = torch.tensor([math.radians(d) for d in degrees], dtype=dtype or torch.float64)
    return torch.stack([rad.cos(), rad.sin()], dim=1)
