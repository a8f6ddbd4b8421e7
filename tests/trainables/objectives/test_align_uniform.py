"""Alignment, uniformity and their sum (``trainables/objectives/alignment.py``, ``uniformity.py``,
``align_uniform.py``): loop references, worked numbers, gradcheck, refusals."""

from __future__ import annotations

import math

import pytest
import torch
from objectivekit import (
    seeded,
)
from reference import align_loop, circle, uniform_loop

from trainables.objectives import (
    align_loss,
    align_uniform_loss,
    uniform_loss,
)


def test_align_and_uniform_match_loop_reference():
    x, y = seeded(9, 4, seed=6), seeded(9, 4, seed=7)
    for alpha in (0.5, 1.0, 2.0, 3.0):
        assert float(align_loss(x, y, alpha)) == pytest.approx(
            align_loop(x.tolist(), y.tolist(), alpha)
        )
    for t in (0.5, 2.0, 10.0):
        assert float(uniform_loss(x, t)) == pytest.approx(uniform_loop(x.tolist(), t))


def test_seed004_ch2_alpha_table():
    # Two positive pairs at chord distances 0.2 and 1.2.
    angles = [math.degrees(2 * math.asin(d / 2)) for d in (0.2, 1.2)]
    x, y = circle(0, 90), circle(angles[0], 90 + angles[1])
    for alpha, expected in ((0.5, 0.7713), (1.0, 0.7000), (2.0, 0.7400)):
        assert float(align_loss(x, y, alpha)) == pytest.approx(expected, abs=1e-4)


def test_seed004_ch3_uniform_circle_reference():
    # Evenly spaced points on S^1 approach E[G_2] = e^-4 I_0(4) = 0.207001, ℓ = -1.5750.
    n = 1000
    z = circle(*[360 * k / n for k in range(n)])
    e_all = math.exp(-4) * 11.301922  # includes the i = j pairs; distinct pairs exclude them
    expected = math.log((n * e_all - 1) / (n - 1))
    assert float(uniform_loss(z, 2.0)) == pytest.approx(expected, abs=1e-5)
    assert math.log(e_all) == pytest.approx(-1.5750, abs=1e-4)


@pytest.mark.parametrize(
    ("degrees", "align", "uniform"),
    [
        ((0, 0, 0, 0), 0.0, 0.0),  # A: total collapse
        ((0, 0, 180, 180), 0.0, -1.0979),  # B: two antipodal atoms
        ((-45, 45, 135, 225), 2.0, -4.3963),  # C: the square
        ((-41, 41, 139, 221), 1.7217, -4.2500),  # D: δ = 41°, the optimum at λ = 1
    ],
)
def test_seed004_ch5_four_points(degrees, align, uniform):
    z = circle(*degrees)
    # positive pairs {1, 2} and {3, 4}; uniformity over all six distinct pairs
    assert float(align_loss(z[[0, 2]], z[[1, 3]])) == pytest.approx(align, abs=1e-4)
    assert float(uniform_loss(z, 2.0)) == pytest.approx(uniform, abs=1e-4)


def test_seed004_ch5_eight_points():
    p = circle(0, 0, 90, 90, 180, 180, 270, 270)
    q = circle(*[45 * k for k in range(8)])
    assert float(uniform_loss(p, 2.0)) == pytest.approx(-1.8746, abs=1e-4)
    # By hand from rounded terms it is -2.3629 (0.309867 for exp(-2 * 0.585786), which is
    # 0.309879; and ln(0.094123) is -2.36315, not -2.3629). Exact: mean 0.0941272, -2.363109.
    assert float(uniform_loss(q, 2.0)) == pytest.approx(-2.3629, abs=3e-4)
    assert math.exp(float(uniform_loss(q, 2.0))) == pytest.approx(0.0941272, abs=1e-7)
    assert float(align_loss(q[0::2], q[1::2])) == pytest.approx(0.585786, abs=1e-6)


def test_align_uniform_loss_composition():
    z1, z2 = circle(0, 180), circle(0, 180)
    # aligned: 0; each view set is two antipodal points: log exp(-2 * 4) = -8
    assert float(align_uniform_loss(z1, z2, lam=0.5, t=2.0)) == pytest.approx(-4.0, rel=1e-12)
    x, y = seeded(7, 3, seed=8), seeded(7, 3, seed=9)
    expected = (
        align_loop(x.tolist(), y.tolist(), 2.0)
        + 1.5 * (uniform_loop(x.tolist(), 3.0) + uniform_loop(y.tolist(), 3.0)) / 2
    )
    assert float(align_uniform_loss(x, y, lam=1.5, t=3.0)) == pytest.approx(expected)


def test_uniform_loss_never_underflows():
    # Antipodal points at huge t: the naive mean of exps underflows to 0 and its log to -inf.
    z = circle(0, 180)
    assert torch.log(torch.exp(torch.tensor(-4.0 * 300.0))) == -math.inf
    assert float(uniform_loss(z, 300.0)) == pytest.approx(-1200.0)


@pytest.mark.parametrize("alpha", [1.0, 2.0, 3.0])
def test_align_uniform_gradcheck(alpha):
    z1, z2 = seeded(6, 4, seed=13).requires_grad_(), seeded(6, 4, seed=14).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: align_loss(a, b, alpha), (z1, z2))
    assert torch.autograd.gradcheck(lambda a: uniform_loss(a, 2.0), (z1,))
    assert torch.autograd.gradcheck(
        lambda a, b: align_uniform_loss(a, b, 0.7, 2.0, alpha), (z1, z2)
    )


def test_align_gradient_is_zero_not_nan_at_identical_views():
    z = seeded(4, 3, seed=15).requires_grad_()
    for alpha in (1.0, 1.5, 2.0):
        (g,) = torch.autograd.grad(align_loss(z, z.detach().clone(), alpha), z)
        assert torch.isfinite(g).all(), alpha


def test_uniformity_needs_two_points():
    with pytest.raises(ValueError, match="x: uniformity needs at least 2 points, got 1"):
        uniform_loss(seeded(1, 3))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"t": 0.0}, "t must be a positive finite number, got 0.0"),
        ({"alpha": -1.0}, "alpha must be a positive finite number, got -1.0"),
        ({"lam": -0.5}, "lam must be a finite number >= 0, got -0.5"),
    ],
)
def test_bad_align_uniform_arguments(kwargs, message):
    args = {"lam": 1.0, "t": 2.0, "alpha": 2.0} | kwargs
    with pytest.raises(ValueError, match=message):
        align_uniform_loss(seeded(4, 3), seeded(4, 3, seed=1), **args)


def test_align_uniform_unchecked_equals_checked():
    z1, z2 = seeded(7, 3, seed=1), seeded(7, 3, seed=2)
    checked = align_uniform_loss(z1, z2, 0.8, 2.0)
    assert float(align_uniform_loss(z1, z2, 0.8, 2.0, checks=False)) == pytest.approx(
        float(checked), rel=1e-13
    )
    assert float(uniform_loss(z1, 2.0)) == pytest.approx(uniform_loop(z1, 2.0), rel=1e-12)
