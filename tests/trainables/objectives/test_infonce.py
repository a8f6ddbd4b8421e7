"""InfoNCE (``trainables/objectives/infonce.py``): brute-force loops, closed forms, worked numbers,
gradcheck, refusals, ids under a gather."""

from __future__ import annotations

import math

import pytest
import torch
from objectivekit import (
    MULTI_VIEW,
    POLICIES,
    seeded,
)
from reference import circle, info_nce_loop
from torch.nn import functional as F

from trainables.objectives import (
    align_loss,
    all_gather_detached,
    all_gather_with_grad,
    candidates_per_anchor,
    info_nce,
    info_nce_dense,
    memory,
)

# tier 1: brute-force loop reference


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("tau", [0.05, 0.2, 1.0, 3.0])
@pytest.mark.parametrize("chunked", [False, True])
def test_info_nce_matches_loop_reference(policy, tau, chunked, monkeypatch):
    if chunked:
        monkeypatch.setattr(memory, "_CHUNK_ELEMENTS", 7)
    z = seeded(12, 5, seed=3)
    sources, groups = MULTI_VIEW["sources"], MULTI_VIEW["groups"]
    expected = info_nce_loop(z.tolist(), sources, tau, groups, policy)
    per_anchor = info_nce(
        z,
        torch.tensor(sources),
        tau,
        groups=torch.tensor(groups),
        group_policy=policy,
        reduction="none",
    )
    torch.testing.assert_close(per_anchor, torch.tensor(expected, dtype=torch.float64))
    mean = info_nce(z, torch.tensor(sources), tau, groups=torch.tensor(groups), group_policy=policy)
    assert float(mean) == pytest.approx(sum(expected) / len(expected), rel=1e-12)


@pytest.mark.parametrize("policy", POLICIES)
def test_chunked_info_nce_matches_dense_autograd(policy, tiny_chunks):
    z = seeded(12, 5, seed=4).requires_grad_()
    sources, groups = torch.tensor(MULTI_VIEW["sources"]), torch.tensor(MULTI_VIEW["groups"])
    chunked = info_nce(z, sources, 0.3, groups=groups, group_policy=policy)
    dense = info_nce_dense(z, sources, 0.3, groups=groups, group_policy=policy)
    (g_chunked,) = torch.autograd.grad(chunked, z)
    (g_dense,) = torch.autograd.grad(dense, z)
    torch.testing.assert_close(chunked, dense)
    torch.testing.assert_close(g_chunked, g_dense)


def test_groups_without_effect_under_negative_policy():
    z = seeded(12, 5, seed=5)
    sources, groups = torch.tensor(MULTI_VIEW["sources"]), torch.tensor(MULTI_VIEW["groups"])
    plain = info_nce(z, sources, 0.2)
    grouped = info_nce(z, sources, 0.2, groups=groups, group_policy="negative")
    masked = info_nce(z, sources, 0.2, groups=groups, group_policy="mask")
    torch.testing.assert_close(plain, grouped)
    assert not torch.allclose(plain, masked)


@pytest.mark.parametrize("views", [2, 3, 5])
def test_orthogonal_sources_closed_form(views):
    # N sources on orthogonal axes, V identical views each: s_pos = 1, s_neg = 0.
    n, tau = 4, 0.25
    z = torch.eye(n, dtype=torch.float64).repeat_interleave(views, dim=0)
    sources = torch.arange(n).repeat_interleave(views)
    expected = math.log((views - 1) * math.exp(1 / tau) + (n - 1) * views) - 1 / tau
    assert float(info_nce(z, sources, tau)) == pytest.approx(expected, rel=1e-12)


def test_mask_and_positive_policies_closed_form():
    # Two groups of two sources; every view of a group is the same axis, groups orthogonal.
    tau = 0.5
    z = torch.tensor([[1.0, 0.0]] * 4 + [[0.0, 1.0]] * 4, dtype=torch.float64)
    sources = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    e = math.exp(1 / tau)
    # negative: 1 positive (s=1), 2 group mates (s=1) and 4 others (s=0) in the denominator
    neg = -(1 / tau - math.log(3 * e + 4))
    # mask: group mates leave the denominator
    mask = -(1 / tau - math.log(e + 4))
    # positive: group mates join P(i); all three have s = 1
    pos = -(1 / tau - math.log(3 * e + 4))
    for policy, expected in (("negative", neg), ("mask", mask), ("positive", pos)):
        got = info_nce(z, sources, tau, groups=groups, group_policy=policy)
        assert float(got) == pytest.approx(expected, rel=1e-12), policy


def test_anchor_is_never_its_own_positive_or_negative():
    # A wrong self-mask (subtracting the diagonal, lightning-bolts #695) changes this value.
    z = circle(0, 10, 90, 100)
    sources = torch.tensor([0, 0, 1, 1])
    expected = info_nce_loop(z.tolist(), sources.tolist(), 0.5)
    with_self = []
    u = F.normalize(z, dim=1)
    for i in range(4):
        logits = u[i] @ u.T / 0.5  # self included in the denominator
        p = i ^ 1
        with_self.append(float(torch.logsumexp(logits, 0) - logits[p]))
    got = info_nce(z, sources, 0.5, reduction="none")
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64))
    assert not torch.allclose(got, torch.tensor(with_self, dtype=torch.float64))


def test_candidates_per_anchor():
    sources = torch.arange(6).repeat(2)
    assert candidates_per_anchor(sources).tolist() == [10] * 12  # 2B - 2
    groups = torch.tensor([0, 0, 0, 1, 1, 2]).repeat(2)
    masked = candidates_per_anchor(sources, groups=groups, group_policy="mask")
    # an anchor loses its group mates' views (2 per mate) from the denominator
    assert masked.tolist() == [6, 6, 6, 8, 8, 10] * 2
    promoted = candidates_per_anchor(sources, groups=groups, group_policy="positive")
    assert promoted.tolist() == masked.tolist()


# worked numbers, computed by hand (points on the circle S^1; the test names number the steps)
def single_anchor_loss(anchor_deg, positive_deg, negative_degs, tau, scale=1.0):
    """One anchor's InfoNCE against exactly the listed candidates.

    Each negative needs a positive of its own to be a valid source; those twins are placed in
    the anchor's group and masked, so the anchor's denominator is exactly {positive, negatives}.
    """
    k = len(negative_degs)
    z = scale * circle(anchor_deg, positive_deg, *negative_degs, *negative_degs)
    sources = torch.tensor([0, 0, *range(1, k + 1), *range(1, k + 1)])
    groups = torch.tensor([0, 0, *range(1, k + 1), *[0] * k])
    losses = info_nce(z, sources, tau, groups=groups, group_policy="mask", reduction="none")
    return float(losses[0])


def test_seed004_ch1_normalisation_closes_the_radius_dial():
    # anchor 0°, positive 20°, negatives 80°, 150°, 200°, τ = 0.5: loss 0.2362 at r = 1.
    assert single_anchor_loss(0, 20, [80, 150, 200], 0.5) == pytest.approx(0.2362, abs=1e-4)
    # At r = 2 raw dot products give 0.0022; normalised inside, the loss does not move.
    assert single_anchor_loss(0, 20, [80, 150, 200], 0.5, scale=2.0) == pytest.approx(
        0.2362, abs=1e-4
    )


def test_seed004_ch4_finite_m_losses():
    # τ = 1, anchor 0°, positive 20°. M = 3 negatives at 90°, 180°, 270°: 0.6551.
    m3 = single_anchor_loss(0, 20, [90, 180, 270], 1.0)
    assert m3 == pytest.approx(0.6551, abs=1e-4)
    assert m3 - math.log(3) == pytest.approx(-0.4436, abs=1e-4)
    # M = 1 negative at 90°: 0.3298.
    assert single_anchor_loss(0, 20, [90], 1.0) == pytest.approx(0.3298, abs=1e-4)


# tier 3: gradcheck in float64
@pytest.mark.parametrize("policy", POLICIES)
def test_info_nce_gradcheck(policy, tiny_chunks):
    z = seeded(12, 5, seed=10).requires_grad_()
    sources, groups = torch.tensor(MULTI_VIEW["sources"]), torch.tensor(MULTI_VIEW["groups"])
    assert torch.autograd.gradcheck(
        lambda z: info_nce(z, sources, 0.3, groups=groups, group_policy=policy), (z,)
    )
    assert torch.autograd.gradcheck(
        lambda z: info_nce(z, sources, 0.3, groups=groups, group_policy=policy, reduction="none"),
        (z,),
    )


# bad input: ValueError naming the argument and its value
@pytest.mark.parametrize("tau", [0.0, -0.1, math.nan, math.inf])
def test_bad_temperature(tau):
    with pytest.raises(ValueError, match=rf"temperature .*{tau!r}"):
        info_nce(seeded(4, 3), torch.tensor([0, 0, 1, 1]), tau)


def test_single_view_source():
    with pytest.raises(ValueError, match=r"sources: source 7 \(row 2\) has a single view"):
        info_nce(seeded(4, 3), torch.tensor([0, 0, 7, 3]), 0.1)


def test_mismatched_lengths():
    with pytest.raises(ValueError, match="sources has length 3 but z has 4 rows"):
        info_nce(seeded(4, 3), torch.tensor([0, 0, 1]), 0.1)
    with pytest.raises(ValueError, match="groups has length 2 but z has 4 rows"):
        info_nce(seeded(4, 3), torch.tensor([0, 0, 1, 1]), 0.1, groups=torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"x and y must have one shape, got \(4, 3\) and \(5, 3\)"):
        align_loss(seeded(4, 3), seeded(5, 3))


def test_unknown_policy():
    with pytest.raises(ValueError, match=r"group_policy must be one of .* got 'drop'"):
        info_nce(seeded(4, 3), torch.tensor([0, 0, 1, 1]), 0.1, group_policy="drop")


# ids under a gather (the two-process checks are in test_data_parallel_objectives.py)
@pytest.mark.parametrize("gather", [all_gather_with_grad, all_gather_detached])
def test_group_ids_must_be_stated_under_a_gather(gather):
    z, sources = seeded(12, 5, seed=19), torch.tensor(MULTI_VIEW["sources"])
    groups = torch.tensor(MULTI_VIEW["groups"])
    with pytest.raises(
        ValueError, match=r"groups: under a gather, group_ids .* got group_ids=None"
    ):
        info_nce(z, sources, 0.2, groups=groups, group_policy="mask", gather=gather)
    # stated either way, one process is the whole batch: the value of the gather-free call
    plain = info_nce(z, sources, 0.2, groups=groups, group_policy="mask")
    for scope in ("global", "local"):
        got = info_nce(z, sources, 0.2, groups=groups, group_policy="mask", gather=gather,
                       group_ids=scope)  # fmt: skip
        torch.testing.assert_close(got, plain)
    # without groups nothing needs stating
    torch.testing.assert_close(info_nce(z, sources, 0.2, gather=gather), info_nce(z, sources, 0.2))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"source_ids": "rank"}, r"source_ids must be one of \('local', 'global'\), got 'rank'"),
        (
            {"group_ids": "both"},
            r"group_ids must be one of \('local', 'global'\) or None, got 'both'",
        ),
    ],
)
def test_bad_id_scopes(kwargs, message):
    with pytest.raises(ValueError, match=message):
        info_nce(seeded(4, 3), torch.tensor([0, 0, 1, 1]), 0.1, **kwargs)
