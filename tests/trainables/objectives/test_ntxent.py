"""SimCLR's NT-Xent (``trainables/objectives/ntxent.py``): the two-view index algebra,
gradcheck, low temperature, and ``checks=False``, the training loop's call that never waits for
the device."""

from __future__ import annotations

import math

import pytest
import torch
from objectivekit import (
    seeded,
)
from torch.nn import functional as F

from trainables.objectives import (
    NonFiniteError,
    align_uniform_loss,
    blocks,
    info_nce,
    memory,
    nt_xent,
)


# tier 2: closed forms and the 2-view index algebra (SimCLR's NT-Xent, Chen et al. 2020)
@pytest.mark.parametrize("b", [2, 5, 64])
@pytest.mark.parametrize("tau", [0.01, 0.1, 1.0])
def test_collinear_views_give_log_2n_minus_1(b, tau):
    # Every view is the same vector: every candidate is as likely as the partner.
    z = torch.ones(2 * b, 8, dtype=torch.float64)
    assert float(nt_xent(z[:b], z[b:], tau)) == pytest.approx(math.log(2 * b - 1), rel=1e-12)


def test_two_view_index_algebra_of_seed_001():
    # The tutorial's own code: partner of i is (i + B) mod 2B, diagonal masked, cross entropy.
    torch.manual_seed(47)
    source_embeddings = torch.randn(5, 12)
    first_views = source_embeddings + 0.04 * torch.randn_like(source_embeddings)
    second_views = source_embeddings + 0.04 * torch.randn_like(source_embeddings)
    projected = F.normalize(torch.cat((first_views, second_views), dim=0), dim=1)
    temperature = 0.23
    similarities = projected @ projected.T / temperature
    similarities = similarities.masked_fill(torch.eye(10, dtype=torch.bool), float("-inf"))
    positive_indices = (torch.arange(10) + 5) % 10
    assert positive_indices.tolist() == [5, 6, 7, 8, 9, 0, 1, 2, 3, 4]
    expected = F.cross_entropy(similarities, positive_indices)

    torch.testing.assert_close(nt_xent(first_views, second_views, temperature), expected)
    sources = torch.arange(5).repeat(2)
    torch.testing.assert_close(
        info_nce(torch.cat((first_views, second_views)), sources, temperature), expected
    )


def test_nt_xent_gradcheck():
    z1, z2 = seeded(6, 4, seed=11).requires_grad_(), seeded(6, 4, seed=12).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: nt_xent(a, b, 0.1), (z1, z2))


# low temperature and low precision
def naive_exp_then_log_nt_xent(z1: torch.Tensor, z2: torch.Tensor, tau: float) -> torch.Tensor:
    """The exp-then-log formulation (as in solo-learn) — overflows at small τ."""
    u = F.normalize(torch.cat([z1, z2]), dim=1)
    sim = torch.exp(u @ u.T / tau)
    b = z1.shape[0]
    sim = sim * (1 - torch.eye(2 * b, dtype=sim.dtype))
    pos = torch.cat([torch.diag(sim, b), torch.diag(sim, -b)])
    return -torch.log(pos / sim.sum(dim=1)).mean()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_finite_at_tau_0_01(dtype):
    base = seeded(64, 32, seed=16, dtype=torch.float64)
    z1 = (base + 0.05 * seeded(64, 32, seed=17, dtype=torch.float64)).to(dtype).requires_grad_()
    z2 = (base + 0.05 * seeded(64, 32, seed=18, dtype=torch.float64)).to(dtype).requires_grad_()
    if dtype == torch.float32:
        assert not torch.isfinite(naive_exp_then_log_nt_xent(z1, z2, 0.01))
    loss = nt_xent(z1, z2, 0.01)
    g1, g2 = torch.autograd.grad(loss, (z1, z2))
    assert torch.isfinite(loss) and torch.isfinite(g1).all() and torch.isfinite(g2).all()
    assert g1.dtype == dtype
    reference = nt_xent(z1.detach().double(), z2.detach().double(), 0.01)
    assert float(loss.detach()) == pytest.approx(float(reference), rel=1e-4)
    loss_au = align_uniform_loss(z1, z2, lam=1.0, t=50.0)
    assert torch.isfinite(loss_au).all()
    assert all(torch.isfinite(g).all() for g in torch.autograd.grad(loss_au, (z1, z2)))


# checks=False: the training loop's call, which never waits for the device
# block layout -> _CHUNK_ELEMENTS for 2 x 9 rows: one block, blocks of 3 rows, of 1 row
PAIRED_LAYOUTS = {"one block": None, "blocks of 3": 3 * 18, "blocks of 1": 1}


@pytest.mark.parametrize("layout", ["one block", "blocks of 3", "blocks of 1"])
@pytest.mark.parametrize("sparse", [None, True, False])
def test_nt_xent_unchecked_equals_info_nce(monkeypatch, layout, sparse):
    """The known two-view layout gives info_nce's value and gradient on [z1; z2] exactly as the
    general path that reads the ids, in every block layout and positive representation."""
    monkeypatch.setattr(memory, "_CHUNK_ELEMENTS", PAIRED_LAYOUTS[layout])
    monkeypatch.setattr(blocks, "_SPARSE_POSITIVES", sparse)
    z1, z2 = seeded(9, 4, seed=5), seeded(9, 4, seed=6)
    results = []
    for fn in (
        lambda a, b: nt_xent(a, b, 0.3, checks=False),
        lambda a, b: info_nce(torch.cat([a, b]), torch.arange(9).repeat(2), 0.3),
    ):
        a, b = z1.clone().requires_grad_(), z2.clone().requires_grad_()
        loss = fn(a, b)
        loss.backward()
        results.append((loss.detach(), a.grad, b.grad))
    for got, want in zip(results[0], results[1], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("bad", ["nan", "inf", "zero row"])
@pytest.mark.parametrize("loss", ["nt_xent", "align_uniform"])
def test_unchecked_losses_turn_bad_rows_into_nan(bad, loss):
    """Unchecked, what the checked call refuses becomes a NaN loss (the loop ends the trial as
    diverged on it), never a finite number."""
    z1, z2 = seeded(6, 3, seed=1), seeded(6, 3, seed=2)
    z2[4] = {"nan": math.nan, "inf": math.inf, "zero row": 0.0}[bad]
    fn = {
        "nt_xent": lambda a, b, **kw: nt_xent(a, b, 0.2, **kw),
        "align_uniform": lambda a, b, **kw: align_uniform_loss(a, b, 1.0, 2.0, **kw),
    }[loss]
    with pytest.raises(NonFiniteError, match="z2"):
        fn(z1, z2)
    assert math.isnan(float(fn(z1, z2, checks=False)))


@pytest.mark.parametrize("layout", ["one block", "blocks of 3"])
@pytest.mark.parametrize("sparse", [True, False])
def test_unchecked_losses_never_read_values_on_the_host(monkeypatch, layout, sparse):
    """On the meta device every host read (``bool``, ``int``, ``.item()``, ``.tolist()``)
    raises, so a forward and backward that finish there never wait for a device. The checked
    calls do read (and so raise there)."""
    monkeypatch.setattr(memory, "_CHUNK_ELEMENTS", PAIRED_LAYOUTS[layout])
    monkeypatch.setattr(blocks, "_SPARSE_POSITIVES", sparse)
    z1 = torch.empty(12, 5, device="meta", requires_grad=True)
    z2 = torch.empty(12, 5, device="meta", requires_grad=True)
    for loss in (
        nt_xent(z1, z2, 0.1, checks=False),
        align_uniform_loss(z1, z2, 1.0, 2.0, checks=False),
    ):
        loss.backward()
    assert z1.grad.shape == (12, 5) and z2.grad.device.type == "meta"
    with pytest.raises(RuntimeError, match="meta"):
        nt_xent(z1, z2, 0.1)
