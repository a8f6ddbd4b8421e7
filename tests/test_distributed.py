"""Data-parallel negatives: two gloo processes on CPU against one process with the whole batch."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from trainables.objectives import (
    align_uniform_loss,
    all_gather_detached,
    all_gather_with_grad,
    info_nce,
    nt_xent,
    uniform_loss,
)

WORLD = 2
B_LOCAL = 6  # sources per rank


def full_batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(WORLD * B_LOCAL, 8, generator=g, dtype=torch.float64)
    z1 = base + 0.3 * torch.randn(base.shape, generator=g, dtype=torch.float64)
    z2 = base + 0.3 * torch.randn(base.shape, generator=g, dtype=torch.float64)
    return z1, z2


def objectives_under_test(z1, z2, gather):
    """name -> loss for the rows this process holds (z1, z2: (B, D) views of its sources)."""
    return {
        "nt_xent": nt_xent(z1, z2, 0.2, gather=gather),
        "info_nce_multi_view": info_nce(
            torch.cat([z1, z2, z1.flip(1)]),
            torch.arange(z1.shape[0]).repeat(3) + _offset(z1.shape[0]),
            0.5,
            gather=gather,
        ),
        "uniform": uniform_loss(z1, 2.0, gather=gather),
        "align_uniform": align_uniform_loss(z1, z2, 0.8, 2.0, gather=gather),
    }


def _offset(b: int) -> int:
    return dist.get_rank() * b if dist.is_initialized() else 0


def _worker(rank: int, port: int, out_dir: str) -> None:
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD
    )
    try:
        z1_all, z2_all = full_batch()
        rows = slice(rank * B_LOCAL, (rank + 1) * B_LOCAL)
        results = {}
        for mode, gather in (("grad", all_gather_with_grad), ("detached", all_gather_detached)):
            for name in objectives_under_test(z1_all[:2], z2_all[:2], None):
                z1 = z1_all[rows].clone().requires_grad_()
                z2 = z2_all[rows].clone().requires_grad_()
                loss = objectives_under_test(z1, z2, gather)[name]
                g1, g2 = torch.autograd.grad(loss, (z1, z2), materialize_grads=True)
                results[(mode, name)] = (loss.detach(), g1, g2)
        torch.save(results, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def two_rank_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    mp.spawn(_worker, args=(_free_port(), str(out)), nprocs=WORLD, join=True)
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]


def one_process(name: str):
    """Loss and gradients of the whole batch in one process, laid out as the ranks gather it."""
    z1_all, z2_all = full_batch()
    # Gathered order is rank 0's rows then rank 1's: [z1_0; z2_0; ...] per objective; the
    # reference reproduces that layout by concatenating each rank's own stacked rows.
    z1 = z1_all.clone().requires_grad_()
    z2 = z2_all.clone().requires_grad_()
    parts = [slice(r * B_LOCAL, (r + 1) * B_LOCAL) for r in range(WORLD)]
    if name == "nt_xent":
        z = torch.cat([torch.cat([z1[p], z2[p]]) for p in parts])
        sources = torch.cat([torch.arange(B_LOCAL).repeat(2) + r * B_LOCAL for r in range(WORLD)])
        loss = info_nce(z, sources, 0.2)
    elif name == "info_nce_multi_view":
        z = torch.cat([torch.cat([z1[p], z2[p], z1[p].flip(1)]) for p in parts])
        sources = torch.cat([torch.arange(B_LOCAL).repeat(3) + r * B_LOCAL for r in range(WORLD)])
        loss = info_nce(z, sources, 0.5)
    elif name == "uniform":
        loss = uniform_loss(z1, 2.0)
    else:
        loss = align_uniform_loss(z1, z2, 0.8, 2.0)
    g1, g2 = torch.autograd.grad(loss, (z1, z2), materialize_grads=True)
    return loss.detach(), g1, g2


NAMES = ["nt_xent", "info_nce_multi_view", "uniform", "align_uniform"]


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_gradient_keeping_gather_equals_one_process(two_rank_results, name):
    loss, g1, g2 = one_process(name)
    for rank, results in enumerate(two_rank_results):
        rows = slice(rank * B_LOCAL, (rank + 1) * B_LOCAL)
        r_loss, r_g1, r_g2 = results[("grad", name)]
        torch.testing.assert_close(r_loss, loss)
        # each rank receives world_size × its rows' gradient; DDP's mean over ranks divides it out
        torch.testing.assert_close(r_g1 / WORLD, g1[rows])
        torch.testing.assert_close(r_g2 / WORLD, g2[rows])


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_detached_gather_loses_the_cross_rank_gradient(two_rank_results, name):
    loss, g1, _ = one_process(name)
    for rank, results in enumerate(two_rank_results):
        rows = slice(rank * B_LOCAL, (rank + 1) * B_LOCAL)
        r_loss, r_g1, _ = results[("detached", name)]
        # same forward value ...
        torch.testing.assert_close(r_loss, loss)
        # ... but a different gradient, and not by a mere rescaling: the direction changes.
        expected, got = g1[rows].flatten(), r_g1.flatten()
        cosine = float(torch.nn.functional.cosine_similarity(expected, got, dim=0))
        assert cosine < 0.999, (name, cosine)
        assert not torch.allclose(got * (expected.norm() / got.norm()), expected, atol=1e-4)
