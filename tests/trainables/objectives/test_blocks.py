"""InfoNCE's blocks (``trainables/objectives/blocks.py``): one block or many, positives by index or
by mask, the layouts of other devices; each gives the same values and gradients."""

from __future__ import annotations

import pytest
import torch
from objectivekit import (
    BLOCK_GROUPS,
    BLOCK_SOURCES,
    LAYOUTS,
    MULTI_VIEW,
    POLICIES,
    run_layout,
    seeded,
)
from reference import info_nce_loop

from trainables.objectives import (
    blocks,
    info_nce,
    info_nce_dense,
    memory,
)

# blocks: one block or many, positives by index or by mask, the memory budget


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("sparse", [True, False])
def test_one_block_and_chunks_give_the_same_values_and_gradients(policy, sparse, monkeypatch):
    z = seeded(40, 6, seed=30).requires_grad_()
    sources, groups = torch.tensor(BLOCK_SOURCES), torch.tensor(BLOCK_GROUPS)

    def losses_and_gradient():
        losses = info_nce(z, sources, 0.2, groups=groups, group_policy=policy, reduction="none")
        weights = seeded(40, seed=31)  # a gradient that differs per anchor
        (grad,) = torch.autograd.grad((losses * weights).sum(), z)
        return losses.detach(), grad

    results = {}
    for layout in LAYOUTS:
        results[layout], plans = run_layout(monkeypatch, layout, sparse, losses_and_gradient)
        expected_blocks = {"one_block": 1, "rows_of_3": 14, "rows_of_1": 40}[layout]
        assert [len(p) for p in plans] == [expected_blocks]
        assert all(s == sparse for _, _, s in plans[0])
    one_losses, one_grad = results["one_block"]
    for layout in ("rows_of_3", "rows_of_1"):
        losses, grad = results[layout]
        torch.testing.assert_close(losses, one_losses, rtol=1e-13, atol=1e-14)
        torch.testing.assert_close(grad, one_grad, rtol=1e-12, atol=1e-14)
    # and the mean (in rows of 1) is the dense reference's
    dense = info_nce_dense(z, sources, 0.2, groups=groups, group_policy=policy)
    (g_dense,) = torch.autograd.grad(dense, z)
    monkeypatch.setattr(blocks, "_SPARSE_POSITIVES", sparse)
    mean = info_nce(z, sources, 0.2, groups=groups, group_policy=policy)
    (g_mean,) = torch.autograd.grad(mean, z)
    torch.testing.assert_close(mean, dense, rtol=1e-13, atol=0)
    torch.testing.assert_close(g_mean, g_dense, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("layout", ["one_block", "rows_of_3"])
def test_positives_by_index_and_by_mask_match_the_loop_reference(
    policy, sparse, layout, monkeypatch
):
    z = seeded(12, 5, seed=3)
    sources, groups = MULTI_VIEW["sources"], MULTI_VIEW["groups"]
    expected = info_nce_loop(z.tolist(), sources, 0.2, groups, policy)
    monkeypatch.setattr(memory, "_CHUNK_ELEMENTS", None if layout == "one_block" else 36)
    monkeypatch.setattr(blocks, "_SPARSE_POSITIVES", sparse)
    per_anchor = info_nce(
        z, torch.tensor(sources), 0.2, groups=torch.tensor(groups), group_policy=policy,
        reduction="none",
    )  # fmt: skip
    torch.testing.assert_close(per_anchor, torch.tensor(expected, dtype=torch.float64))


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("sparse", [True, False])
def test_blocks_reproduce_pair_masks(policy, sparse):
    # candidates as gathered from 3 ranks of 10 rows; the anchors are rank 1's rows; groups
    # at random, so that the two views of a source may lie in different groups
    gen = torch.Generator().manual_seed(32)
    cand_sources = torch.cat([torch.randperm(15, generator=gen) for _ in range(2)])
    cand_groups = torch.randint(0, 4, (30,), generator=gen)
    self_index = torch.arange(10, 20)
    sources, groups = cand_sources[10:20], cand_groups[10:20]
    pairs = blocks._Pairs(sources, cand_sources, self_index, groups, cand_groups, policy, sources)
    for a, b in [(0, 10), (2, 7), (9, 10)]:
        block = blocks._Block(pairs, a, b, sparse)
        positive, kept = blocks.pair_masks(
            sources[a:b],
            cand_sources,
            self_index[a:b],
            anchor_groups=groups[a:b],
            candidate_groups=cand_groups,
            group_policy=policy,
        )
        if sparse:
            assert block.positive is None
            listed = torch.zeros_like(positive)
            listed[block.positive_rows, block.positive_cols] = True
        else:
            listed = block.positive
        assert torch.equal(listed, positive)
        assert torch.equal(block.counts, positive.sum(dim=1))
        block_kept = torch.ones_like(kept)
        block_kept[torch.arange(b - a), block.self_cols] = False
        if block.dropped is not None:
            block_kept &= ~block.dropped
        assert torch.equal(block_kept, kept)
        assert (block.dropped is not None) == (policy == "mask")


def test_positives_are_listed_by_index_when_few():
    n = 64
    sources, index = torch.arange(n // 2).repeat(2), torch.arange(n)

    def formats(groups, policy, step):
        pairs = blocks._Pairs(sources, sources, index, groups, groups, policy, sources)
        return [sparse for _, _, sparse in pairs.plan(step)]

    assert formats(None, "negative", n) == [True]
    assert formats(None, "negative", 16) == [True] * 4
    # a group policy of "positive" with 2 groups: half of all pairs are positives
    assert formats(index % 2, "positive", n) == [False]
    # under "mask" the groups leave the positives alone
    assert formats(index % 2, "mask", n) == [True]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("layout", ["one_block", "rows_of_3"])
def test_info_nce_gradcheck_in_every_layout(policy, sparse, layout, monkeypatch):
    z = seeded(12, 5, seed=10).requires_grad_()
    sources, groups = torch.tensor(MULTI_VIEW["sources"]), torch.tensor(MULTI_VIEW["groups"])
    monkeypatch.setattr(memory, "_CHUNK_ELEMENTS", None if layout == "one_block" else 36)
    monkeypatch.setattr(blocks, "_SPARSE_POSITIVES", sparse)
    assert torch.autograd.gradcheck(
        lambda z: info_nce(z, sources, 0.3, groups=groups, group_policy=policy, reduction="none"),
        (z,),
    )


@pytest.mark.parametrize("dim", [4, 64])
def test_kept_block_backward_with_and_without_folding(dim, monkeypatch):
    # two views of 32 sources: K = 64 positives; K × D is small next to N × M at D = 4 only
    n = 64
    z = seeded(n, dim, seed=35).requires_grad_()
    sources = torch.arange(n // 2).repeat(2)
    pairs = blocks._Pairs(sources, sources, torch.arange(n), None, None, "negative", sources)
    assert pairs.plan(n) == [(0, n, True)]
    assert blocks._Block(pairs, 0, n, True).folds(n, dim) == (dim == 4)

    def losses_and_gradient():
        losses = info_nce(z, sources, 0.2, reduction="none")
        (grad,) = torch.autograd.grad((losses * seeded(n, seed=36)).sum(), z)
        return losses.detach(), grad

    (one_losses, one_grad), plans = run_layout(monkeypatch, "one_block", None, losses_and_gradient)
    assert plans == [[(0, n, True)]]
    (losses, grad), _ = run_layout(monkeypatch, "rows_of_3", None, losses_and_gradient)
    torch.testing.assert_close(one_losses, losses, rtol=1e-13, atol=1e-14)
    torch.testing.assert_close(one_grad, grad, rtol=1e-12, atol=1e-14)
    small = seeded(16, 2, seed=37).requires_grad_()
    pairs = torch.arange(8).repeat(2)
    assert torch.autograd.gradcheck(lambda z: info_nce(z, pairs, 0.3, reduction="none"), (small,))


@pytest.mark.parametrize("layout", ["one_block", "rows_of_3"])
def test_backward_twice_with_retained_graph(layout, monkeypatch):
    monkeypatch.setattr(memory, "_CHUNK_ELEMENTS", None if layout == "one_block" else 36)
    z = seeded(12, 5, seed=33).requires_grad_()
    loss = info_nce(z, torch.tensor(MULTI_VIEW["sources"]), 0.2)
    (first,) = torch.autograd.grad(loss, z, retain_graph=True)
    (second,) = torch.autograd.grad(loss, z)
    assert torch.equal(first, second)


@pytest.mark.parametrize("layout", ["one_block", "rows_of_3"])
@pytest.mark.parametrize("sparse", [True, False])
def test_single_view_source_in_every_layout(layout, sparse, monkeypatch):
    monkeypatch.setattr(memory, "_CHUNK_ELEMENTS", None if layout == "one_block" else 12)
    monkeypatch.setattr(blocks, "_SPARSE_POSITIVES", sparse)
    with pytest.raises(ValueError, match=r"sources: source 7 \(row 3\) has a single view"):
        info_nce(seeded(7, 3), torch.tensor([0, 0, 1, 7, 1, 2, 2]), 0.1)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("layout", ["one_block", "rows_of_3"])
def test_layouts_of_other_devices_give_the_same_values_and_gradients(policy, layout, monkeypatch):
    # on CUDA: sums by index_put_(accumulate=True), gradients in contiguous arrays; run here
    z = seeded(40, 2, seed=38).requires_grad_()
    sources, groups = torch.tensor(BLOCK_SOURCES), torch.tensor(BLOCK_GROUPS)

    def losses_and_gradient():
        losses = info_nce(z, sources, 0.2, groups=groups, group_policy=policy, reduction="none")
        (grad,) = torch.autograd.grad((losses * seeded(40, seed=39)).sum(), z)
        return losses.detach(), grad

    (cpu_losses, cpu_grad), _ = run_layout(monkeypatch, layout, True, losses_and_gradient)
    monkeypatch.setattr(blocks, "_on_cpu", lambda t: False)
    (losses, grad), _ = run_layout(monkeypatch, layout, True, losses_and_gradient)
    torch.testing.assert_close(losses, cpu_losses, rtol=1e-13, atol=1e-14)
    torch.testing.assert_close(grad, cpu_grad, rtol=1e-12, atol=1e-14)
    pairs = blocks._Pairs(sources, sources, torch.arange(40), groups, groups, policy, sources)
    pairs.plan(40)
    folded = blocks._Block(pairs, 0, 40, True).folds(40, 2)
    assert folded == (policy != "positive")  # one block: the folded backward ran, or not
