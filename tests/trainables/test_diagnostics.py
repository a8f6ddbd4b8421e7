"""Diagnostics: effective rank, collapse signal, cosine statistics, false negatives, candidates."""

from __future__ import annotations

import math

import pytest
import torch
from reference import align_loop, circle, uniform_loop

from trainables.diagnostics import (
    cosine_stats,
    dim_std,
    effective_rank,
    hardest_negative_share,
    pair_diagnostics,
    training_candidates,
)

DESIGN_METRICS = {
    "z/align", "z/uniform", "h/align", "h/uniform", "z/effective_rank", "h/effective_rank",
    "z/dim_std_min", "z/dim_std_mean", "sim/pos_mean", "sim/neg_mean", "sim/neg_q99",
    "sim/false_negative_rate", "loss/candidates",
}  # fmt: skip


def seeded(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("k", [1, 3, 7])
def test_effective_rank_of_k_equal_orthogonal_directions_is_k(k):
    x = torch.zeros(10, 8, dtype=torch.float64)
    x[:k, :k] = 3.0 * torch.eye(k, dtype=torch.float64)
    assert effective_rank(x) == pytest.approx(k, rel=1e-9)


def test_effective_rank_closed_form_for_unequal_singular_values():
    x = torch.diag(torch.tensor([3.0, 1.0], dtype=torch.float64))
    p = torch.tensor([0.75, 0.25], dtype=torch.float64)
    assert effective_rank(x) == pytest.approx(float(torch.exp(-(p * p.log()).sum())), rel=1e-9)
    # rotating the rows changes nothing
    q, _ = torch.linalg.qr(seeded(2, 2, seed=1))
    assert effective_rank(x @ q) == pytest.approx(effective_rank(x), rel=1e-9)


def test_dim_std_sees_collapse():
    collapsed = torch.ones(50, 4, dtype=torch.float64) + 1e-9 * seeded(50, 4)
    assert float(dim_std(collapsed).max()) < 1e-8
    # unit vectors on the circle at evenly spaced angles: std of cos and sin is sqrt(1/2)
    ring = circle(*[360 * k / 64 for k in range(64)])
    torch.testing.assert_close(dim_std(ring), torch.full((2,), math.sqrt(0.5), dtype=torch.float64))
    # scaling rows does not change it: the std is of normalised features
    torch.testing.assert_close(dim_std(5 * ring), dim_std(ring))


def test_cosine_stats_hand_example():
    # Three sources on the circle, views 0° / 10°, 90° / 100°, 180° / 190°.
    z1, z2 = circle(0, 90, 180), circle(10, 100, 190)
    labels = torch.tensor([0, 0, 1])
    stats = cosine_stats(z1, z2, labels, q=0.5)
    cos = lambda d: math.cos(math.radians(d))  # noqa: E731
    assert stats["sim/pos_mean"] == pytest.approx(cos(10))
    # each anchor has 4 negatives; list all 24 (anchor, negative) cosines by angle difference
    angles = [0, 90, 180, 10, 100, 190]
    negatives = [
        cos(angles[i] - angles[j])
        for i in range(6)
        for j in range(6)
        if j != i and j != (i + 3) % 6
    ]
    assert len(negatives) == 24
    assert stats["sim/neg_mean"] == pytest.approx(sum(negatives) / 24)
    quantile = torch.quantile(torch.tensor(negatives, dtype=torch.float64), 0.5)
    assert stats["sim/neg_q99"] == pytest.approx(float(quantile))
    expected_rate = _brute_false_negative_rate(angles, labels.repeat(2).tolist())
    assert stats["sim/false_negative_rate"] == pytest.approx(expected_rate)


def _brute_false_negative_rate(angles: list[float], labels: list[int]) -> float:
    n = len(angles)
    same = 0
    for i in range(n):
        candidates = [j for j in range(n) if j != i and j != (i + n // 2) % n]
        hardest = max(candidates, key=lambda j: math.cos(math.radians(angles[i] - angles[j])))
        same += labels[hardest] == labels[i]
    return same / n


def test_false_negative_rate_random_against_brute_force():
    z1, z2 = seeded(20, 3, seed=2), seeded(20, 3, seed=3)
    labels = torch.randint(0, 3, (20,), generator=torch.Generator().manual_seed(4))
    u = torch.nn.functional.normalize(torch.cat([z1, z2]), dim=1)
    full = labels.repeat(2)
    same = 0
    for i in range(40):
        best, best_j = -2.0, None
        for j in range(40):
            if j in (i, (i + 20) % 40):
                continue
            c = float(u[i] @ u[j])
            if c > best:
                best, best_j = c, j
        same += int(full[best_j] == full[i])
    assert cosine_stats(z1, z2, labels)["sim/false_negative_rate"] == pytest.approx(same / 40)


def test_seed000_negative_mass_on_the_hardest_negative():
    # positive at 0.8, negatives at 0.7, 0.2, -0.1
    cos = torch.tensor([[0.8, 0.7, 0.2, -0.1]], dtype=torch.float64)
    negative = torch.tensor([[False, True, True, True]])
    assert float(hardest_negative_share(cos, negative, 0.5)) == pytest.approx(0.64, abs=0.005)
    assert float(hardest_negative_share(cos, negative, 0.07)) == pytest.approx(0.999, abs=0.0005)


def test_training_candidates():
    assert training_candidates(128) == 254.0
    groups = torch.tensor([0, 0, 1, 2])
    # sources 0 and 1 share a group: each of their views loses the mate's 2 views
    assert training_candidates(4, groups=groups, group_policy="mask") == pytest.approx(
        (4 * 4 + 4 * 6) / 8
    )


def test_pair_diagnostics_reports_every_design_metric_and_reuses_the_objectives():
    h1, h2 = seeded(30, 16, seed=5), seeded(30, 16, seed=6)
    z1, z2 = seeded(30, 4, seed=7), seeded(30, 4, seed=8)
    labels = torch.arange(30) % 3
    out = pair_diagnostics(h1, h2, z1, z2, labels, batch_size=64, temperature=0.1)
    assert set(out) >= DESIGN_METRICS
    assert out["loss/candidates"] == 126.0
    assert out["z/align"] == pytest.approx(align_loop(z1.tolist(), z2.tolist(), 2.0))
    assert out["h/uniform"] == pytest.approx(uniform_loop(h1.tolist(), 2.0))
    assert all(math.isfinite(v) for v in out.values())
