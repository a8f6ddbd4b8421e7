"""SimCLR's NT-Xent (Chen et al., 2020): InfoNCE on two views of B distinct sources."""

from __future__ import annotations

import torch
from torch import Tensor

from trainables.objectives.blocks import _info_nce_unit
from trainables.objectives.gathers import Gather
from trainables.objectives.rows import _check_positive_finite, _check_rows, unit_rows


def nt_xent(
    z1: Tensor,
    z2: Tensor,
    temperature: float,
    *,
    gather: Gather | None = None,
    checks: bool = True,
) -> Tensor:
    """SimCLR's symmetric NT-Xent: z1, z2 (B, D) are two views of B distinct sources.

    Row i of z1 and row i of z2 are positives; rows are stacked as [z1; z2] so the partner of
    row i is (i + B) mod 2B. Under a gather the B sources of each rank are distinct from every
    other rank's. Returns a () scalar, the value of :func:`info_nce` on ``[z1; z2]``.

    ``checks=False`` (a training loop that watches its loss) skips the checks that read values
    on the host: without a gather nothing in the call then waits for the device, and NaN, inf or
    a zero row gives a NaN loss instead of raising. Shapes and arguments are checked either way.

    Raises:
        As :func:`info_nce`, naming ``z1`` or ``z2``; with ``checks=False`` only ValueError for
        arguments and shapes.
    """
    inv_tau = 1.0 / _check_positive_finite("temperature", temperature)
    _check_rows("z1", z1, values=checks)
    _check_rows("z2", z2, values=checks)
    if z1.shape != z2.shape:
        shapes = f"{tuple(z1.shape)} and {tuple(z2.shape)}"
        raise ValueError(f"z1 and z2 must have one shape, got {shapes}")
    b = z1.shape[0]
    u = torch.cat(
        [
            unit_rows(z1, "z1", gather=gather, refuse=checks),
            unit_rows(z2, "z2", gather=gather, refuse=checks),
        ]
    )
    sources = torch.arange(b, device=z1.device).repeat(2)  # local ids: rank-unique under gather
    return _info_nce_unit(
        u, sources, inv_tau, None, "negative", gather, "mean", "local", None,
        paired=gather is None,
    )  # fmt: skip
