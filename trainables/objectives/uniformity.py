"""Uniformity (Wang & Isola, 2020): the log of the mean Gaussian potential between rows."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from trainables.objectives.gathers import Gather, _world
from trainables.objectives.rows import _check_positive_finite, _check_rows, unit_rows


def uniform_loss(x: Tensor, t: float = 2.0, *, gather: Gather | None = None) -> Tensor:
    """Uniformity ``log E_{i<j} exp(-t ||f(x_i) - f(x_j)||^2)`` in logsumexp form.

    Args:
        x: (N, D) features; rows are L2-normalised inside. N >= 2 (over all ranks with gather).
        t: kernel width > 0.

    Returns:
        () scalar in [-4t, 0]; 0 is total collapse. Never underflows: no exp is taken outside
        the logsumexp.

    Raises:
        NonFiniteError, ZeroNormError: naming ``x`` (see :func:`unit_rows`).
    """
    t = _check_positive_finite("t", t)
    _check_rows("x", x)
    return _uniform_unit(unit_rows(x, "x", gather=gather), t, gather, "x")


def _uniform_unit(u: Tensor, t: float, gather: Gather | None, name: str) -> Tensor:
    n = u.shape[0]
    if gather is None:
        if n < 2:
            raise ValueError(f"{name}: uniformity needs at least 2 points, got {n}")
        upper = torch.ones(n, n, dtype=torch.bool, device=u.device).triu_(diagonal=1)
        sq = (2 - 2 * u @ u.T).clamp_min(0)  # (n, n) squared distances; pairs i < j count
        # masked, not indexed: a boolean index would wait for the device to count the pairs
        log_kernel = (-t * sq).masked_fill(~upper, -math.inf)
        return log_kernel.flatten().logsumexp(dim=0) - math.log(n * (n - 1) // 2)
    # Data parallel: this rank's rows against every other row, then a log-sum over ranks.
    rank, world = _world()
    if n * world < 2:
        raise ValueError(f"{name}: uniformity needs at least 2 points, got {n * world}")
    everyone = gather(u)  # (M, D)
    sq = (2 - 2 * u @ everyone.T).clamp_min(0)  # (N, M)
    cols = torch.arange(everyone.shape[0], device=u.device)
    is_self = cols[None, :] == (rank * n + torch.arange(n, device=u.device))[:, None]
    local_lse = (-t * sq).masked_fill(is_self, -math.inf).flatten().logsumexp(dim=0)
    ordered_pairs = n * world * (n * world - 1)
    return gather(local_lse.reshape(1)).logsumexp(dim=0) - math.log(ordered_pairs)
