"""Alignment plus weighted uniformity (Wang & Isola, 2020), and the trial's loss for
``objective: align_uniform``."""

from __future__ import annotations

import math
from typing import Any

from torch import Tensor

from trainables.objectives.alignment import _align_unit
from trainables.objectives.gathers import Gather
from trainables.objectives.rows import _check_positive_finite, _check_rows, unit_rows
from trainables.objectives.uniformity import _uniform_unit


def align_uniform_loss(
    z1: Tensor,
    z2: Tensor,
    lam: float,
    t: float,
    alpha: float = 2.0,
    *,
    gather: Gather | None = None,
    checks: bool = True,
) -> Tensor:
    """``align(z1, z2; alpha) + lam * (uniform(z1; t) + uniform(z2; t)) / 2``.

    Args:
        z1, z2: (N, D) two views of N sources; rows are L2-normalised inside (once each).
        lam: uniformity weight λ >= 0 (a study sets it as λ·t / t).
        t: uniformity kernel width > 0.
        alpha: alignment exponent > 0.
        checks: False skips the checks that read values on the host, as in :func:`nt_xent`.

    Returns:
        () scalar.

    Raises:
        NonFiniteError, ZeroNormError: naming ``z1`` or ``z2`` (see :func:`unit_rows`), unless
            ``checks=False`` (a NaN result instead).
    """
    lam = float(lam)
    if not math.isfinite(lam) or lam < 0:
        raise ValueError(f"lam must be a finite number >= 0, got {lam!r}")
    alpha = _check_positive_finite("alpha", alpha)
    t = _check_positive_finite("t", t)
    _check_rows("z1", z1, values=checks)
    _check_rows("z2", z2, values=checks)
    if z1.shape != z2.shape:
        shapes = f"{tuple(z1.shape)} and {tuple(z2.shape)}"
        raise ValueError(f"z1 and z2 must have one shape, got {shapes}")
    u1 = unit_rows(z1, "z1", gather=gather, refuse=checks)
    u2 = unit_rows(z2, "z2", gather=gather, refuse=checks)
    align = _align_unit(u1, u2, alpha, gather)
    uniform = (_uniform_unit(u1, t, gather, "z1") + _uniform_unit(u2, t, gather, "z2")) / 2
    return align + lam * uniform


def trial_loss(
    config: Any, z1: Tensor, z2: Tensor, groups: Tensor | None, gather: Gather | None = None
) -> Tensor:
    """``objective: align_uniform`` on two projected views (B, D), as the loop calls it: λ =
    ``config.lam``, t = ``config.uniform_t``, α = ``config.align_alpha``; ``groups`` are ignored.
    Nothing here waits for the device: NaN, inf or a zero row gives a NaN loss."""
    return align_uniform_loss(
        z1, z2, config.lam, config.uniform_t, config.align_alpha, checks=False, gather=gather
    )
