"""Data-parallel negatives: two gloo processes on CPU against one process with the whole batch."""

from __future__ import annotations

import math
import re
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from distkit import spawn_ranks
from reference import across_ranks, info_nce_loop

from trainables.objectives import (
    align_uniform_loss,
    all_gather_detached,
    all_gather_with_grad,
    info_nce,
    nt_xent,
    uniform_loss,
)

WORLD = 2
B_LOCAL = 8  # sources per rank
SCRAMBLE = torch.tensor([3, 0, 7, 5, 1, 6, 2, 4])  # a fixed permutation of B_LOCAL rows


def full_batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(WORLD * B_LOCAL, 8, generator=g, dtype=torch.float64)
    z1 = base + 0.3 * torch.randn(base.shape, generator=g, dtype=torch.float64)
    z2 = base + 0.3 * torch.randn(base.shape, generator=g, dtype=torch.float64)
    return z1, z2


def info_nce_case(name: str, z1: torch.Tensor, z2: torch.Tensor, rank: int):
    """One rank's stacked views, source ids, group ids, τ and keyword arguments for ``name``.

    Ids are what that rank's data loader would hand over: unless the case says otherwise, every
    rank numbers its own sources from 0, so the ids of the two ranks collide.
    """
    b = z1.shape[0]
    local = torch.arange(b)
    two_views = torch.cat([z1, z2])
    if name == "info_nce_multi_view":  # ids already unique over ranks: "local" must keep them so
        return torch.cat([z1, z2, z1.flip(1)]), (local + rank * b).repeat(3), None, 0.5, {}
    if name == "info_nce_local_ids":  # 0..B-1 on every rank
        return two_views, local.repeat(2), None, 0.2, {}
    if name == "info_nce_local_ids_scrambled":  # arbitrary and negative ids, views out of order
        ids = 5 * local - 9
        z = torch.cat([z1, z2[SCRAMBLE], z1.flip(1)])
        return z, torch.cat([ids, ids[SCRAMBLE], ids]), None, 0.5, {}
    if name.startswith("info_nce_groups_global"):  # item j // 2 of every rank: one identity
        policy = name.rsplit("_", 1)[1]
        kwargs = {"group_policy": policy, "group_ids": "global"}
        return two_views, local.repeat(2), (local // 2).repeat(2), 0.3, kwargs
    if name == "info_nce_groups_local_positive":  # groups numbered per rank
        kwargs = {"group_policy": "positive", "group_ids": "local"}
        return two_views, local.repeat(2), (local // 2).repeat(2), 0.3, kwargs
    if name == "info_nce_global_ids_collide":  # the old reading, now asked for by name
        return two_views, local.repeat(2), None, 0.2, {"source_ids": "global"}
    raise KeyError(name)


INFO_NCE_CASES = [
    "info_nce_multi_view",
    "info_nce_local_ids",
    "info_nce_local_ids_scrambled",
    "info_nce_groups_global_mask",
    "info_nce_groups_global_positive",
    "info_nce_groups_local_positive",
    "info_nce_global_ids_collide",
]
NAMES = ["nt_xent", *INFO_NCE_CASES, "uniform", "align_uniform"]


def objective(name: str, z1, z2, gather, rank: int):
    """The loss of ``name`` on this process's rows (z1, z2: (B, D) views of its sources)."""
    if name == "nt_xent":
        return nt_xent(z1, z2, 0.2, gather=gather)
    if name == "uniform":
        return uniform_loss(z1, 2.0, gather=gather)
    if name == "align_uniform":
        return align_uniform_loss(z1, z2, 0.8, 2.0, gather=gather)
    z, sources, groups, tau, kwargs = info_nce_case(name, z1, z2, rank)
    return info_nce(z, sources, tau, groups=groups, gather=gather, **kwargs)


def orthogonal_losses(rank: int, gather) -> dict[str, float]:
    """Each rank's B sources on their own axes of R^(WORLD·B), two identical views each."""
    axes = torch.eye(WORLD * B_LOCAL, dtype=torch.float64)[rank * B_LOCAL : (rank + 1) * B_LOCAL]
    z, sources = axes.repeat(2, 1), torch.arange(B_LOCAL).repeat(2)
    return {
        scope: float(info_nce(z, sources, 0.25, gather=gather, source_ids=scope))
        for scope in ("local", "global")
    }


def refusals(rank: int, gather) -> dict[str, str]:
    """Errors that one rank's rows cause: every rank must raise, none may be left waiting."""
    z1_all, z2_all = full_batch()
    rows = slice(rank * B_LOCAL, (rank + 1) * B_LOCAL)
    z1, z2 = z1_all[rows].clone(), z2_all[rows].clone()
    dead = z1.clone()
    if rank == 1:
        dead[3] = 0.0
    tiny = z2.clone()
    if rank == 1:
        tiny[5] = 1e-150 * tiny[5]  # above float64's floor 2^-511 = 1.5e-154: normalised
        tiny[6] = 2.0**-520  # entries 2^-520: norm 2^-518.5, below the floor
    calls = {
        "info_nce_zero_row": lambda: info_nce(
            torch.cat([dead, z2]), torch.arange(B_LOCAL).repeat(2), 0.2, gather=gather
        ),
        "nt_xent_near_zero_row": lambda: nt_xent(z1, tiny, 0.2, gather=gather),
        "uniform_zero_row": lambda: uniform_loss(dead, 2.0, gather=gather),
        "align_uniform_zero_row": lambda: align_uniform_loss(z1, dead, 1.0, 2.0, gather=gather),
        "huge_ids": lambda: info_nce(
            torch.cat([z1, z2]),
            torch.arange(B_LOCAL).repeat(2) + (2**62 if rank == 1 else 0),
            0.2,
            gather=gather,
        ),
    }
    out = {}
    for label, call in calls.items():
        try:
            call()
            out[label] = "no error"
        except ValueError as err:
            out[label] = f"{type(err).__name__}: {err}"
    return out


def _worker(rank: int, port: int, out_dir: str) -> None:
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=WORLD,
        timeout=timedelta(seconds=60),  # a rank left waiting fails the test instead of hanging it
    )
    try:
        z1_all, z2_all = full_batch()
        rows = slice(rank * B_LOCAL, (rank + 1) * B_LOCAL)
        results = {}
        for mode, gather in (("grad", all_gather_with_grad), ("detached", all_gather_detached)):
            for name in NAMES:
                z1 = z1_all[rows].clone().requires_grad_()
                z2 = z2_all[rows].clone().requires_grad_()
                loss = objective(name, z1, z2, gather, rank)
                g1, g2 = torch.autograd.grad(loss, (z1, z2), materialize_grads=True)
                results[(mode, name)] = (loss.detach(), g1, g2)
            results[(mode, "orthogonal")] = orthogonal_losses(rank, gather)
            results[(mode, "refusals")] = refusals(rank, gather)
        torch.save(results, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def two_rank_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    return spawn_ranks(_worker, out, WORLD)


def _as_ints(ids: list | None) -> torch.Tensor | None:
    """Any hashable identities -> int ids, one per distinct identity."""
    if ids is None:
        return None
    index = {key: i for i, key in enumerate(dict.fromkeys(ids))}
    return torch.tensor([index[key] for key in ids])


def one_process(name: str):
    """Loss and gradients of the whole batch in one process, laid out as the ranks gather it.

    For InfoNCE cases also the brute-force loop's value (``None`` otherwise). Ids are made
    globally unique as the pair (rank, id) where the case's ids are local.
    """
    z1_all, z2_all = full_batch()
    # Gathered order is rank 0's rows then rank 1's: [z1_0; z2_0; ...] per objective; the
    # reference reproduces that layout by concatenating each rank's own stacked rows.
    z1 = z1_all.clone().requires_grad_()
    z2 = z2_all.clone().requires_grad_()
    parts = [slice(r * B_LOCAL, (r + 1) * B_LOCAL) for r in range(WORLD)]
    loop = None
    if name == "nt_xent":
        z = torch.cat([torch.cat([z1[p], z2[p]]) for p in parts])
        sources = torch.cat([torch.arange(B_LOCAL).repeat(2) + r * B_LOCAL for r in range(WORLD)])
        loss = info_nce(z, sources, 0.2)
    elif name == "uniform":
        loss = uniform_loss(z1, 2.0)
    elif name == "align_uniform":
        loss = align_uniform_loss(z1, z2, 0.8, 2.0)
    else:
        stacks = [info_nce_case(name, z1[p], z2[p], r) for r, p in enumerate(parts)]
        kwargs = stacks[0][4]
        z = torch.cat([s[0] for s in stacks])
        sources = across_ranks([s[1].tolist() for s in stacks], kwargs.get("source_ids", "local"))
        groups = None
        if stacks[0][2] is not None:
            groups = across_ranks([s[2].tolist() for s in stacks], kwargs["group_ids"])
        tau, policy = stacks[0][3], kwargs.get("group_policy", "negative")
        loss = info_nce(z, _as_ints(sources), tau, groups=_as_ints(groups), group_policy=policy)
        per_anchor = info_nce_loop(z.tolist(), sources, tau, groups, policy)
        loop = sum(per_anchor) / len(per_anchor)
    g1, g2 = torch.autograd.grad(loss, (z1, z2), materialize_grads=True)
    return loss.detach(), g1, g2, loop


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_gradient_keeping_gather_equals_one_process(two_rank_results, name):
    loss, g1, g2, loop = one_process(name)
    if loop is not None:
        assert float(loss) == pytest.approx(loop, rel=1e-12)  # tier 1: the brute-force loop
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
    loss, g1, _, _ = one_process(name)
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


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["grad", "detached"])
def test_colliding_local_ids_give_the_full_batch_value(two_rank_results, mode):
    # Every rank numbers its sources 0..7. Read as local ids they are 16 sources; read as global
    # ids (the old behaviour) the other rank's rows with the same id become positives.
    full, _, _, _ = one_process("info_nce_local_ids")
    collided, _, _, _ = one_process("info_nce_global_ids_collide")
    assert float(collided) > float(full) + 1.0
    for results in two_rank_results:
        assert float(results[(mode, "info_nce_local_ids")][0]) == pytest.approx(float(full))
        assert float(results[(mode, "info_nce_global_ids_collide")][0]) == pytest.approx(
            float(collided)
        )


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["grad", "detached"])
def test_orthogonal_sources_closed_form_across_ranks(two_rank_results, mode):
    # N = WORLD·B sources on orthogonal axes, V = 2 identical views: s_pos = 1, s_neg = 0.
    n, views, tau = WORLD * B_LOCAL, 2, 0.25
    denominator = math.log((views - 1) * math.exp(1 / tau) + (n - 1) * views)
    local = denominator - 1 / tau
    # global reading of colliding ids: the other rank's V views (s = 0) join P(i) as well
    collided = denominator - (views - 1) / (2 * views - 1) / tau
    for results in two_rank_results:
        got = results[(mode, "orthogonal")]
        assert got["local"] == pytest.approx(local, rel=1e-12)
        assert got["global"] == pytest.approx(collided, rel=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["grad", "detached"])
@pytest.mark.parametrize(
    ("label", "message"),
    [
        ("info_nce_zero_row", r"ZeroNormError: z: row 3 on rank 1 has zero norm \(no direction\)"),
        ("nt_xent_near_zero_row", r"ZeroNormError: z2: row 6 on rank 1 has norm [0-9.e-]+, below"),
        ("uniform_zero_row", r"ZeroNormError: x: row 3 on rank 1 has zero norm"),
        ("align_uniform_zero_row", r"ZeroNormError: z2: row 3 on rank 1 has zero norm"),
        ("huge_ids", r"ValueError: sources: ids from 0 to 4611686018427387911 on 2 ranks cannot"),
    ],
)
def test_one_ranks_bad_rows_raise_on_every_rank(two_rank_results, mode, label, message):
    # Only rank 1 holds the bad row or id; rank 0 must raise the same error, not wait for rank 1.
    for results in two_rank_results:
        got = results[(mode, "refusals")][label]
        assert re.match(message, got), got
