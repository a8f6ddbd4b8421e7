"""Unit rows (``trainables/objectives/rows.py``): non-finite and zero rows refused below
sqrt(finfo(dtype).tiny) in every objective, exact above it."""

from __future__ import annotations

import math

import pytest
import torch
from objectivekit import (
    seeded,
)
from reference import info_nce_loop

from trainables.objectives import (
    NonFiniteError,
    ZeroNormError,
    align_loss,
    align_uniform_loss,
    info_nce,
    info_nce_dense,
    min_row_norm,
    nt_xent,
    uniform_loss,
    unit_rows,
)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_z(bad):
    z = seeded(4, 3)
    z[2, 1] = bad
    with pytest.raises(NonFiniteError, match="z holds non-finite values in 1 of 4 rows"):
        info_nce(z, torch.tensor([0, 0, 1, 1]), 0.1)
    with pytest.raises(ValueError, match="x holds non-finite values"):
        uniform_loss(z)


# zero and near-zero rows: refused below sqrt(finfo(dtype).tiny), exact above it
DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


FLOORS = {torch.float16: 2.0**-7, torch.bfloat16: 2.0**-63, torch.float32: 2.0**-63,
          torch.float64: 2.0**-511}  # fmt: skip


# a scale well above the floor whose squared norm overflows float32 / float64 (none in float16)
LARGE = {torch.float16: 2.0**8, torch.bfloat16: 2.0**100, torch.float32: 2.0**100,
         torch.float64: 2.0**1000}  # fmt: skip


UNIT_WEIGHTS = seeded(8, 4, seed=20)


# name -> (loss of an (8, 4) z, names of the arguments that hold rows 0-3 and rows 4-7)
ROW_NORMALISERS = {
    "info_nce": (lambda z: info_nce(z, torch.arange(4).repeat(2), 0.2), ("z", "z")),
    "info_nce_dense": (lambda z: info_nce_dense(z, torch.arange(4).repeat(2), 0.2), ("z", "z")),
    "nt_xent": (lambda z: nt_xent(z[:4], z[4:], 0.2), ("z1", "z2")),
    "align_loss": (lambda z: align_loss(z[:4], z[4:], 1.0), ("x", "y")),
    "uniform_loss": (lambda z: uniform_loss(z, 2.0), ("x", "x")),
    "align_uniform_loss": (lambda z: align_uniform_loss(z[:4], z[4:], 1.0, 2.0), ("z1", "z2")),
    "unit_rows": (lambda z: (unit_rows(z) * UNIT_WEIGHTS.to(z.device)).sum(), ("x", "x")),
}


def _argument_and_row(fn: str, row: int) -> tuple[str, int]:
    """Which argument holds row ``row`` of the (8, 4) z, and at which of its rows."""
    first, second = ROW_NORMALISERS[fn][1]
    if first == second:  # one argument holds all eight rows
        return first, row
    return (first, row) if row < 4 else (second, row - 4)


def test_min_row_norm_is_the_root_of_the_smallest_normal():
    for dtype, floor in FLOORS.items():
        assert min_row_norm(dtype) == floor
        assert min_row_norm(dtype) ** 2 == torch.finfo(dtype).tiny  # the squared norm is normal


@pytest.mark.parametrize("fn", list(ROW_NORMALISERS))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("row", [2, 5])
@pytest.mark.parametrize("kind", ["zero", "half_floor", "subnormal"])
def test_short_row_raises_naming_argument_and_row(fn, dtype, row, kind):
    z = seeded(8, 4, seed=21).to(dtype)
    if kind == "zero":
        z[row] = 0.0  # a dead unit, a padded row
        expected = "has zero norm \\(no direction\\)"
    elif kind == "half_floor":
        z[row] = FLOORS[dtype] / 4  # four entries: norm floor / 2, entries still normal numbers
        expected = "has norm [0-9.e-]+, below the floor"
    else:
        z[row] = torch.finfo(dtype).tiny / 4  # subnormal entries only
        expected = "has norm [0-9.e-]+, below the floor"
    peak = float(z[row].double().abs().max())  # the test's own norm must not underflow either
    assert kind == "zero" or 0 < peak * float((z[row].double() / peak).norm()) < FLOORS[dtype]
    name, at = _argument_and_row(fn, row)
    z.requires_grad_()
    with pytest.raises(ZeroNormError, match=rf"^{name}: row {at} {expected}") as err:
        ROW_NORMALISERS[fn][0](z)
    assert isinstance(err.value, NonFiniteError)  # the training loop's diverged status
    assert f"sqrt(finfo({str(dtype).removeprefix('torch.')}).tiny)" in str(err.value)


@pytest.mark.parametrize("dtype", DTYPES)
def test_row_of_norm_1e_minus_30(dtype):
    # F.normalize's eps = 1e-12 would silently shrink it instead of normalising it.
    z = seeded(8, 4, seed=22)
    z[3] = z[3] / z[3].norm() * 1e-30
    sources = torch.arange(4).repeat(2)
    if dtype == torch.float64:  # above float64's floor: normalised exactly, as the loop does
        expected = info_nce_loop(z.tolist(), sources.tolist(), 0.2)
        assert float(info_nce(z, sources, 0.2)) == pytest.approx(sum(expected) / 8, rel=1e-12)
        return
    # float16 rounds 1e-30 to 0; bfloat16 to 9.99e-31
    message = r"z: row 3 has norm (1e-30|9\.99e-31), below the floor \(no usable direction\)"
    if dtype == torch.float16:
        message = r"z: row 3 has zero norm \(no direction\)"
    with pytest.raises(ZeroNormError, match=message):
        info_nce(z.to(dtype), sources, 0.2)


@pytest.mark.parametrize("fn", list(ROW_NORMALISERS))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("where", ["just_above_floor", "large"])
def test_scaled_row_gives_the_unit_rows_value_and_gradient_over_scale(fn, dtype, where):
    # Closed form of the scale dial: L(s·x) = L(x) and dL/d(s·x) = (dL/dx) / s, for a power of
    # two s that scales every entry exactly. At s = 2·floor the gradient is the bound: 1 / (2·floor)
    # times the unit row's, finite in every dtype (64 in float16).
    rows = torch.tensor([[3.0, -4.0, 12.0, 0.0]] * 8, dtype=torch.float64) / 13  # unit rows
    z = (rows + 0.2 * seeded(8, 4, seed=23)).to(dtype)
    z[5] = torch.tensor([3.0, -4.0, 12.0, 0.0]) / 13
    scale = 2 * FLOORS[dtype] if where == "just_above_floor" else LARGE[dtype]
    scaled = z.clone()
    scaled[5] = z[5] * scale
    assert torch.equal(scaled[5].double() / scale, z[5].double())  # the scaling is exact
    z.requires_grad_()
    scaled.requires_grad_()
    loss, loss_scaled = ROW_NORMALISERS[fn][0](z), ROW_NORMALISERS[fn][0](scaled)
    (g,) = torch.autograd.grad(loss, z)
    (g_scaled,) = torch.autograd.grad(loss_scaled, scaled)
    torch.testing.assert_close(loss_scaled, loss, rtol=0, atol=0)
    assert g_scaled.dtype == dtype and torch.isfinite(g_scaled).all()
    # a large scale can push the gradient into the dtype's subnormals (float16): their spacing
    subnormal = torch.finfo(dtype).tiny * torch.finfo(dtype).eps
    torch.testing.assert_close(
        g_scaled[5].double() * scale, g[5].double(), rtol=1e-7, atol=1e-7 + scale * subnormal
    )
    torch.testing.assert_close(g_scaled[torch.arange(8) != 5], g[torch.arange(8) != 5])


@pytest.mark.parametrize("fn", list(ROW_NORMALISERS))
@pytest.mark.parametrize("scale", [2.0**-509, 1e-150, 1e-30, 1e150, 2.0**1000])
def test_gradcheck_far_from_unit_scale(fn, scale):
    # float64 rows of norm ~scale: the value is the unit-scale value, and the analytic gradient
    # through normalisation (about 1/scale times the unit one, times scale here) matches the
    # numerical one.
    z = seeded(8, 4, seed=24).requires_grad_()
    loss = ROW_NORMALISERS[fn][0]
    assert float(loss(z.detach() * scale)) == pytest.approx(float(loss(z.detach())), rel=1e-12)
    assert torch.autograd.gradcheck(lambda z: loss(z * scale), (z,))
