"""Alignment (Wang & Isola, 2020): the mean distance between the two views of a source."""

from __future__ import annotations

import torch
from torch import Tensor

from trainables.objectives.gathers import Gather, _global_mean
from trainables.objectives.rows import _check_positive_finite, _check_rows, unit_rows


def _safe_pow(sq: Tensor, half_alpha: float) -> Tensor:
    """sq ** half_alpha with a zero (not NaN) gradient where sq == 0."""
    if half_alpha == 1.0:
        return sq
    positive = sq > 0
    return torch.where(positive, torch.where(positive, sq, 1.0).pow(half_alpha), 0.0)


def align_loss(x: Tensor, y: Tensor, alpha: float = 2.0, *, gather: Gather | None = None) -> Tensor:
    """Alignment ``E ||f(x) - f(y)||_2^alpha`` over positive pairs.

    Args:
        x, y: (N, D) two views; row i of x and row i of y are a positive pair. Rows are
            L2-normalised inside.
        alpha: exponent > 0 (2 makes it an affine map of the positive cosine).

    Returns:
        () scalar in [0, 2**alpha].

    Raises:
        NonFiniteError, ZeroNormError: naming ``x`` or ``y`` (see :func:`unit_rows`).
    """
    alpha = _check_positive_finite("alpha", alpha)
    _check_rows("x", x)
    _check_rows("y", y)
    if x.shape != y.shape:
        raise ValueError(f"x and y must have one shape, got {tuple(x.shape)} and {tuple(y.shape)}")
    u, v = unit_rows(x, "x", gather=gather), unit_rows(y, "y", gather=gather)
    return _align_unit(u, v, alpha, gather)


def _align_unit(u: Tensor, v: Tensor, alpha: float, gather: Gather | None) -> Tensor:
    sq = (u - v).pow(2).sum(dim=1)  # (N,)
    return _global_mean(_safe_pow(sq, alpha / 2).mean(), gather)
