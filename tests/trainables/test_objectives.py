"""InfoNCE, alignment and uniformity: brute-force loops, closed forms, worked numbers, gradcheck."""

from __future__ import annotations

import math

import pytest
import torch
from reference import align_loop, circle, info_nce_loop, uniform_loop
from torch.nn import functional as F

from trainables import objectives
from trainables.objectives import (
    NonFiniteError,
    ZeroNormError,
    align_loss,
    align_uniform_loss,
    all_gather_detached,
    all_gather_with_grad,
    candidates_per_anchor,
    info_nce,
    info_nce_dense,
    min_row_norm,
    nt_xent,
    rows_per_chunk,
    uniform_loss,
    unit_rows,
)

POLICIES = ["negative", "mask", "positive"]


def seeded(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


@pytest.fixture
def tiny_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Force the chunked path to split every batch into many anchor chunks."""
    monkeypatch.setattr(objectives, "_CHUNK_ELEMENTS", 7)


# ---------------------------------------------------------------------------------------------
# tier 1: brute-force loop reference
# ---------------------------------------------------------------------------------------------
MULTI_VIEW = {
    # sources with 2, 3 and 4 views, interleaved; groups join sources 0 and 2
    "sources": [0, 1, 0, 2, 1, 2, 2, 0, 1, 2, 3, 3],
    "groups": [0, 1, 0, 0, 1, 0, 0, 0, 1, 0, 1, 1],
}


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("tau", [0.05, 0.2, 1.0, 3.0])
@pytest.mark.parametrize("chunked", [False, True])
def test_info_nce_matches_loop_reference(policy, tau, chunked, monkeypatch):
    if chunked:
        monkeypatch.setattr(objectives, "_CHUNK_ELEMENTS", 7)
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


def test_align_and_uniform_match_loop_reference():
    x, y = seeded(9, 4, seed=6), seeded(9, 4, seed=7)
    for alpha in (0.5, 1.0, 2.0, 3.0):
        assert float(align_loss(x, y, alpha)) == pytest.approx(
            align_loop(x.tolist(), y.tolist(), alpha)
        )
    for t in (0.5, 2.0, 10.0):
        assert float(uniform_loss(x, t)) == pytest.approx(uniform_loop(x.tolist(), t))


# ---------------------------------------------------------------------------------------------
# tier 2: closed forms and the 2-view index algebra (SimCLR's NT-Xent, Chen et al. 2020)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("b", [2, 5, 64])
@pytest.mark.parametrize("tau", [0.01, 0.1, 1.0])
def test_collinear_views_give_log_2n_minus_1(b, tau):
    # Every view is the same vector: every candidate is as likely as the partner.
    z = torch.ones(2 * b, 8, dtype=torch.float64)
    assert float(nt_xent(z[:b], z[b:], tau)) == pytest.approx(math.log(2 * b - 1), rel=1e-12)


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


# ---------------------------------------------------------------------------------------------
# worked numbers, computed by hand (points on the circle S^1; the test names number the steps)
# ---------------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------------
# tier 3: gradcheck in float64
# ---------------------------------------------------------------------------------------------
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


def test_nt_xent_gradcheck():
    z1, z2 = seeded(6, 4, seed=11).requires_grad_(), seeded(6, 4, seed=12).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: nt_xent(a, b, 0.1), (z1, z2))


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


# ---------------------------------------------------------------------------------------------
# low temperature and low precision
# ---------------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------------
# bad input: ValueError naming the argument and its value
# ---------------------------------------------------------------------------------------------
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


def test_uniformity_needs_two_points():
    with pytest.raises(ValueError, match="x: uniformity needs at least 2 points, got 1"):
        uniform_loss(seeded(1, 3))


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_z(bad):
    z = seeded(4, 3)
    z[2, 1] = bad
    with pytest.raises(NonFiniteError, match="z holds non-finite values in 1 of 4 rows"):
        info_nce(z, torch.tensor([0, 0, 1, 1]), 0.1)
    with pytest.raises(ValueError, match="x holds non-finite values"):
        uniform_loss(z)


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


# ---------------------------------------------------------------------------------------------
# ids under a gather (the two-process checks are in test_data_parallel_objectives.py)
# ---------------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------------
# zero and near-zero rows: refused below sqrt(finfo(dtype).tiny), exact above it
# ---------------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------------
# blocks: one block or many, positives by index or by mask, the memory budget
# ---------------------------------------------------------------------------------------------
# 40 rows: sources with 2, 3 and 4 views, interleaved; 4 groups by row, so that groups join
# several sources and the views of one source often lie in different groups
BLOCK_SOURCES = [s % 13 for s in range(26)] + [0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 6, 7, 8, 9]
BLOCK_GROUPS = [i % 4 for i in range(40)]
# layout -> _CHUNK_ELEMENTS: the budget (one block), blocks of 3 rows, blocks of one row
LAYOUTS = {"one_block": None, "rows_of_3": 3 * 40, "rows_of_1": 1}


def _run_layout(monkeypatch, layout, sparse, fn):
    """fn() under a forced layout and positive format; returns (its value, blocks per call)."""
    monkeypatch.setattr(objectives, "_CHUNK_ELEMENTS", LAYOUTS[layout])
    monkeypatch.setattr(objectives, "_SPARSE_POSITIVES", sparse)
    blocks = []
    plan = objectives._Pairs.plan

    def spy(self, step):
        out = plan(self, step)
        blocks.append(out)
        return out

    monkeypatch.setattr(objectives._Pairs, "plan", spy)
    try:
        return fn(), blocks
    finally:
        monkeypatch.setattr(objectives._Pairs, "plan", plan)


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
        results[layout], plans = _run_layout(monkeypatch, layout, sparse, losses_and_gradient)
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
    monkeypatch.setattr(objectives, "_SPARSE_POSITIVES", sparse)
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
    monkeypatch.setattr(objectives, "_CHUNK_ELEMENTS", None if layout == "one_block" else 36)
    monkeypatch.setattr(objectives, "_SPARSE_POSITIVES", sparse)
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
    pairs = objectives._Pairs(
        sources, cand_sources, self_index, groups, cand_groups, policy, sources
    )
    for a, b in [(0, 10), (2, 7), (9, 10)]:
        block = objectives._Block(pairs, a, b, sparse)
        positive, kept = objectives.pair_masks(
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
        pairs = objectives._Pairs(sources, sources, index, groups, groups, policy, sources)
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
    monkeypatch.setattr(objectives, "_CHUNK_ELEMENTS", None if layout == "one_block" else 36)
    monkeypatch.setattr(objectives, "_SPARSE_POSITIVES", sparse)
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
    pairs = objectives._Pairs(sources, sources, torch.arange(n), None, None, "negative", sources)
    assert pairs.plan(n) == [(0, n, True)]
    assert objectives._Block(pairs, 0, n, True).folds(n, dim) == (dim == 4)

    def losses_and_gradient():
        losses = info_nce(z, sources, 0.2, reduction="none")
        (grad,) = torch.autograd.grad((losses * seeded(n, seed=36)).sum(), z)
        return losses.detach(), grad

    (one_losses, one_grad), plans = _run_layout(monkeypatch, "one_block", None, losses_and_gradient)
    assert plans == [[(0, n, True)]]
    (losses, grad), _ = _run_layout(monkeypatch, "rows_of_3", None, losses_and_gradient)
    torch.testing.assert_close(one_losses, losses, rtol=1e-13, atol=1e-14)
    torch.testing.assert_close(one_grad, grad, rtol=1e-12, atol=1e-14)
    small = seeded(16, 2, seed=37).requires_grad_()
    pairs = torch.arange(8).repeat(2)
    assert torch.autograd.gradcheck(lambda z: info_nce(z, pairs, 0.3, reduction="none"), (small,))


@pytest.mark.parametrize("layout", ["one_block", "rows_of_3"])
def test_backward_twice_with_retained_graph(layout, monkeypatch):
    monkeypatch.setattr(objectives, "_CHUNK_ELEMENTS", None if layout == "one_block" else 36)
    z = seeded(12, 5, seed=33).requires_grad_()
    loss = info_nce(z, torch.tensor(MULTI_VIEW["sources"]), 0.2)
    (first,) = torch.autograd.grad(loss, z, retain_graph=True)
    (second,) = torch.autograd.grad(loss, z)
    assert torch.equal(first, second)


@pytest.mark.parametrize("layout", ["one_block", "rows_of_3"])
@pytest.mark.parametrize("sparse", [True, False])
def test_single_view_source_in_every_layout(layout, sparse, monkeypatch):
    monkeypatch.setattr(objectives, "_CHUNK_ELEMENTS", None if layout == "one_block" else 12)
    monkeypatch.setattr(objectives, "_SPARSE_POSITIVES", sparse)
    with pytest.raises(ValueError, match=r"sources: source 7 \(row 3\) has a single view"):
        info_nce(seeded(7, 3), torch.tensor([0, 0, 1, 7, 1, 2, 2]), 0.1)


def test_rows_per_chunk_follows_the_budget():
    per_pair = objectives.block_bytes_per_pair(torch.float32)
    assert per_pair == 12 and objectives.block_bytes_per_pair(torch.float64) == 20
    # one block exactly when the whole (N, M) block fits
    assert rows_per_chunk(1000, 1000, budget=1000 * 1000 * 12, bytes_per_element=12) == 1000
    assert rows_per_chunk(1000, 1000, budget=1000 * 1000 * 12 - 1, bytes_per_element=12) == 500
    assert rows_per_chunk(1000, 1000, budget=400 * 1000 * 12, bytes_per_element=12) == 334
    # N = 16384 on CUDA's cap: several blocks, each within the budget
    rows = rows_per_chunk(16384, 16384, budget=2**29, bytes_per_element=per_pair)
    blocks = -(-16384 // rows)
    assert blocks == 7 and rows == 2341  # 2730 rows fit: 7 blocks, made equal
    assert rows * 16384 * per_pair <= 2**29
    assert rows_per_chunk(10, 10, budget=1, bytes_per_element=12) == 1  # at least one row
    assert rows_per_chunk(2**20) == 4  # without a budget: blocks of 2**22 elements, as before
    assert rows_per_chunk(12, 12, budget=2**30) == 12


def test_memory_budget(monkeypatch):
    budget = objectives.memory_budget("cpu")
    assert 0 < budget <= objectives._CPU_BUDGET_BYTES
    assert objectives.memory_budget() == budget
    monkeypatch.setattr(objectives, "_CPU_BUDGET_BYTES", 12345)
    assert objectives.memory_budget(torch.device("cpu")) == 12345


def test_cuda_budget_follows_free_memory(monkeypatch):
    free, reserved, allocated, fraction = 6 * 2**30, 2**30, 2**29, 1.0
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, 80 * 2**30))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: reserved)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: allocated)
    monkeypatch.setattr(
        torch.cuda, "get_per_process_memory_fraction", lambda device=None: fraction, raising=False
    )
    assert objectives.memory_budget("cuda") == objectives._CUDA_BUDGET_BYTES == 2**30
    free = 2**30  # short of memory: a quarter of free + cached unused
    assert objectives.memory_budget(torch.device("cuda", 0)) == (2**30 + 2**29) // 4
    # a trial capped at a quarter of an 80 GiB device (20 GiB), 19.75 GiB reserved of which
    # 19.5 allocated: the driver's 60 GiB free are not this process's to take, only what its
    # cap leaves (0.25 GiB) and its unused cache (0.25 GiB)
    free, reserved, allocated = 60 * 2**30, 79 * 2**28, 78 * 2**28
    assert objectives.memory_budget("cuda") == objectives._CUDA_BUDGET_BYTES
    fraction = 0.25
    assert objectives.memory_budget("cuda") == (2**28 + 2**28) // 4


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

    (cpu_losses, cpu_grad), _ = _run_layout(monkeypatch, layout, True, losses_and_gradient)
    monkeypatch.setattr(objectives, "_on_cpu", lambda t: False)
    (losses, grad), _ = _run_layout(monkeypatch, layout, True, losses_and_gradient)
    torch.testing.assert_close(losses, cpu_losses, rtol=1e-13, atol=1e-14)
    torch.testing.assert_close(grad, cpu_grad, rtol=1e-12, atol=1e-14)
    pairs = objectives._Pairs(sources, sources, torch.arange(40), groups, groups, policy, sources)
    pairs.plan(40)
    folded = objectives._Block(pairs, 0, 40, True).folds(40, 2)
    assert folded == (policy != "positive")  # one block: the folded backward ran, or not


def _largest_tensor_bytes(fn) -> int:
    """The largest tensor any aten op makes while fn() runs (forward and backward)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Largest(TorchDispatchMode):
        most = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor):
                    Largest.most = max(Largest.most, t.numel() * t.element_size())
            return out

    with Largest():
        fn()
    return Largest.most


@pytest.mark.parametrize("policy", POLICIES)
def test_memory_stays_within_a_small_budget(policy, monkeypatch):
    n, d = 256, 8
    z = seeded(n, d, seed=34).requires_grad_()
    sources, groups = torch.arange(n // 2).repeat(2), torch.arange(n) % 16

    def step():
        info_nce(z, sources, 0.2, groups=groups, group_policy=policy).backward()

    whole = _largest_tensor_bytes(step)
    assert whole >= n * n * 8  # the default budget takes all (N, N) float64 logits at once
    budget = 16 * n * objectives.block_bytes_per_pair(torch.float64)  # 16 rows of 256
    monkeypatch.setattr(objectives, "_CPU_BUDGET_BYTES", budget)
    assert rows_per_chunk(n, n, budget=objectives.memory_budget("cpu"), bytes_per_element=20) == 16
    chunked = _largest_tensor_bytes(step)
    assert chunked <= 16 * n * 8  # no tensor beyond one (16, N) float64 block
    assert chunked <= budget
    z.grad = None
    monkeypatch.setattr(objectives, "_CPU_BUDGET_BYTES", budget)
    _, plans = _run_layout(monkeypatch, "one_block", None, step)
    assert len(plans[0]) == n // 16


# ---------------------------------------------------------------------------------------------
# checks=False: the training loop's call, which never waits for the device
# ---------------------------------------------------------------------------------------------
# block layout -> _CHUNK_ELEMENTS for 2 x 9 rows: one block, blocks of 3 rows, of 1 row
PAIRED_LAYOUTS = {"one block": None, "blocks of 3": 3 * 18, "blocks of 1": 1}


@pytest.mark.parametrize("layout", ["one block", "blocks of 3", "blocks of 1"])
@pytest.mark.parametrize("sparse", [None, True, False])
def test_nt_xent_unchecked_equals_info_nce(monkeypatch, layout, sparse):
    """The known two-view layout gives info_nce's value and gradient on [z1; z2] exactly as the
    general path that reads the ids, in every block layout and positive representation."""
    monkeypatch.setattr(objectives, "_CHUNK_ELEMENTS", PAIRED_LAYOUTS[layout])
    monkeypatch.setattr(objectives, "_SPARSE_POSITIVES", sparse)
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


def test_align_uniform_unchecked_equals_checked():
    z1, z2 = seeded(7, 3, seed=1), seeded(7, 3, seed=2)
    checked = align_uniform_loss(z1, z2, 0.8, 2.0)
    assert float(align_uniform_loss(z1, z2, 0.8, 2.0, checks=False)) == pytest.approx(
        float(checked), rel=1e-13
    )
    assert float(uniform_loss(z1, 2.0)) == pytest.approx(uniform_loop(z1, 2.0), rel=1e-12)


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
    monkeypatch.setattr(objectives, "_CHUNK_ELEMENTS", PAIRED_LAYOUTS[layout])
    monkeypatch.setattr(objectives, "_SPARSE_POSITIVES", sparse)
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
