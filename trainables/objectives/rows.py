"""What every objective shares: its errors, its argument checks and unit rows.

Rows are L2-normalised inside every objective, so similarity is cosine and squared distance is
``2 - 2 cos``. Half-precision inputs (float16, bfloat16) are computed in float32 and their
gradients cast back; float64 stays float64. A row below :func:`min_row_norm` is refused with
:class:`ZeroNormError` (see "Zero rows" in the package's docstring).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from trainables.objectives.gathers import Gather, _gather_plain, _world


class NonFiniteError(ValueError):
    """Raised when an objective's input holds NaN or inf (a diverged encoder)."""


class ZeroNormError(NonFiniteError):
    """Raised when a row to be L2-normalised has norm below :func:`min_row_norm` of its dtype.

    Such a row (a dead unit, a padded row) has no direction: its unit row would be 0/0 and its
    gradient unbounded. A subclass of :class:`NonFiniteError`, so whoever ends a trial on a
    non-finite input ends it on this too.
    """


def _check_positive_finite(name: str, value: float) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}") from err
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return value


def _check_rows(name: str, x: Tensor, min_rows: int = 1, *, values: bool = True) -> None:
    """Shape and dtype of ``x`` (from its metadata), and with ``values`` its entries: finite.

    Reading the entries waits for the device; ``values=False`` is for callers that check the
    result instead (see ``checks`` in :func:`nt_xent`)."""
    if not isinstance(x, Tensor) or x.dim() != 2:
        shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"{name} must be a 2-D tensor (N, D), got shape {shape}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if x.shape[0] < min_rows:
        raise ValueError(f"{name} needs at least {min_rows} rows, got {x.shape[0]}")
    if values and not bool(torch.isfinite(x).all()):
        bad = int((~torch.isfinite(x)).any(dim=1).sum())
        raise NonFiniteError(f"{name} holds non-finite values in {bad} of {x.shape[0]} rows")


def _check_labels(name: str, labels: Tensor, n: int) -> Tensor:
    if not isinstance(labels, Tensor) or labels.dim() != 1:
        shape = tuple(labels.shape) if isinstance(labels, Tensor) else type(labels).__name__
        raise ValueError(f"{name} must be a 1-D integer tensor, got shape {shape}")
    if labels.shape[0] != n:
        raise ValueError(f"{name} has length {labels.shape[0]} but z has {n} rows")
    if labels.is_floating_point() or labels.is_complex():
        raise ValueError(f"{name} must hold integers, got dtype {labels.dtype}")
    return labels


def min_row_norm(dtype: torch.dtype) -> float:
    """The least row norm that is normalised: ``sqrt(torch.finfo(dtype).tiny)``.

    2**-7 for float16, 2**-63 for float32 and bfloat16, 2**-511 for float64. The gradient that
    reaches a row is at most its unit row's gradient times 1 / norm, so above this floor it is at
    most 1 / floor times that gradient (128 in float16), finite in ``dtype`` while the unit row's
    gradient is below ``finfo(dtype).max * floor`` (512 in float16, 3.7e19 in float32).
    """
    return torch.finfo(dtype).tiny ** 0.5


def unit_rows(
    x: Tensor, name: str = "x", *, gather: Gather | None = None, refuse: bool = True
) -> Tensor:
    """(N, D) -> (N, D) unit rows, computed in float32 at least.

    Every row whose norm is at least :func:`min_row_norm` of ``x.dtype`` is normalised exactly,
    however small or large: it is divided by its largest absolute entry first, so its squared norm
    can neither underflow nor overflow. The gradient is that of ``x / ||x||``.

    Args:
        x: (N, D) rows; NaN or inf rows come back NaN (the objectives refuse them before).
        name: the argument's name in the error message.
        gather: under a data-parallel gather every rank learns of a zero row on any rank and
            raises the same error, so no rank is left waiting in a collective.
        refuse: False skips the refusal below, which reads the norms on the host (a wait for
            the device); a zero row then comes back NaN, so a loss over it is NaN.

    Raises:
        ZeroNormError: naming ``name``, the first offending row (and its rank under a gather),
            its norm and how many rows are below the floor.
    """
    floor = min_row_norm(x.dtype)
    dtype = x.dtype
    if x.dtype in (torch.float16, torch.bfloat16):
        x = x.float()
    with torch.no_grad():
        empty = x.shape[1] == 0
        scale = x.new_zeros(x.shape[0], 1) if empty else x.abs().amax(dim=1, keepdim=True)
        if refuse:
            norms = scale[:, 0] * (x / torch.where(scale > 0, scale, 1.0)).norm(dim=1)
            _refuse_short_rows(name, norms < floor, norms, dtype, floor, gather)
    y = x / scale  # entries in [-1, 1], largest |entry| is 1; scale carries no gradient
    return y / y.norm(dim=1, keepdim=True)


def has_direction(x: Tensor) -> Tensor:
    """(N, D) -> (N,) bool: rows whose norm reaches :func:`min_row_norm` (normalisable)."""
    floor = min_row_norm(x.dtype)
    with torch.no_grad():
        scale = x.abs().amax(dim=1) if x.shape[1] else x.new_zeros(x.shape[0])
        safe = torch.where(scale > 0, scale, 1.0)[:, None]
        return scale * (x / safe).norm(dim=1) >= floor


def unit_rows_or_zero(x: Tensor) -> Tensor:
    """(N, D) -> (N, D) unit rows, a row without direction (see :func:`has_direction`) as zeros.

    For measurement, not for objectives: a zero row has cosine 0 with everything, so a probe
    scores it as carrying no information. Objectives refuse such rows (:class:`ZeroNormError`).
    """
    keep = has_direction(x)
    out = torch.zeros_like(x, dtype=torch.float32 if x.dtype in (torch.float16, torch.bfloat16)
                           else x.dtype)  # fmt: skip
    if bool(keep.any()):
        out[keep] = unit_rows(x[keep])
    return out


def _refuse_short_rows(
    name: str, short: Tensor, norms: Tensor, dtype: torch.dtype, floor: float, gather: Gather | None
) -> None:
    """Raise ZeroNormError if any row is ``short``; under a gather, on every rank alike."""
    count = int(short.sum())
    first = int(short.nonzero()[0, 0]) if count else -1
    norm = float(norms[first]) if count else 0.0
    where = ""
    _, world = _world()
    if gather is not None and world > 1:
        local = torch.tensor([[count, first, norm]], dtype=torch.float64, device=norms.device)
        every = _gather_plain(local).tolist()  # (world, 3), the same on every rank
        offenders = [r for r, row in enumerate(every) if row[0] > 0]
        if offenders:
            r = offenders[0]
            count, first, norm = int(every[r][0]), int(every[r][1]), every[r][2]
            where = f" on rank {r}"
    if count == 0:
        return
    kind = str(dtype).removeprefix("torch.")
    what = (
        "zero norm (no direction)"
        if norm == 0
        else f"norm {norm:.3g}, below the floor (no usable direction)"
    )
    raise ZeroNormError(
        f"{name}: row {first}{where} has {what}; {count} of {short.shape[0]} rows have a norm "
        f"below sqrt(finfo({kind}).tiny) = {floor:.3g}, the least that is normalised "
        "(a dead unit or a padded row?)"
    )
