"""kNN and linear probes against brute-force and scikit-learn references."""

from __future__ import annotations

import math

import pytest
import torch
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split

from trainables.probes import knn_predict, knn_top1, linear_top1, probe_metrics


def seeded(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def knn_loop(train_x, train_y, test_x, k, temperature):
    """Weighted vote written out: the k highest cosines each vote exp(cos / T)."""
    tr = torch.nn.functional.normalize(train_x.double(), dim=1)
    te = torch.nn.functional.normalize(test_x.double(), dim=1)
    preds = []
    for q in te:
        sims = [(float(q @ tr[j]), int(train_y[j])) for j in range(len(tr))]
        sims.sort(key=lambda s: -s[0])
        votes: dict[int, float] = {}
        for s, y in sims[:k]:
            votes[y] = votes.get(y, 0.0) + math.exp(s / temperature)
        preds.append(max(votes, key=votes.get))
    return torch.tensor(preds)


@pytest.mark.parametrize("k", [1, 5, 20])
def test_knn_matches_loop(k):
    train_x, test_x = seeded(120, 6, seed=1), seeded(40, 6, seed=2)
    train_y = torch.randint(0, 4, (120,), generator=torch.Generator().manual_seed(3))
    expected = knn_loop(train_x, train_y, test_x, k, 0.1)
    got = knn_predict(train_x, train_y, test_x, k=k, temperature=0.1)
    assert got.tolist() == expected.tolist()


def test_knn_blocks_give_the_same_answer_as_one_block():
    train_x, test_x = seeded(500, 8, seed=4), seeded(130, 8, seed=5)
    train_y = torch.randint(0, 7, (500,), generator=torch.Generator().manual_seed(6))
    whole = knn_predict(train_x, train_y, test_x, k=10, block_elements=10**8)
    tiny = knn_predict(train_x, train_y, test_x, k=10, block_elements=300)
    assert whole.tolist() == tiny.tolist()


def test_knn_weighted_vote_beats_majority_when_it_should():
    # 3 neighbours: one very close of class 1, two far of class 0 -> weighted vote picks 1.
    train_x = torch.tensor([[1.0, 0.01], [0.0, 1.0], [-0.05, 1.0]])
    train_y = torch.tensor([1, 0, 0])
    pred = knn_predict(train_x, train_y, torch.tensor([[1.0, 0.0]]), k=3, temperature=0.07)
    assert pred.tolist() == [1]


def _digits_split():
    x, y = load_digits(return_X_y=True)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.3, random_state=0, stratify=y)
    t = lambda a: torch.tensor(a, dtype=torch.float32)  # noqa: E731
    return t(xtr), torch.tensor(ytr), t(xte), torch.tensor(yte)


def test_linear_probe_on_separable_data_is_perfect():
    centers = 6 * torch.eye(3, 5)
    y = torch.arange(90) % 3
    x = centers[y] + 0.3 * seeded(90, 5, seed=7)
    assert linear_top1(x[:60], y[:60], x[60:], y[60:]) == 1.0


def test_linear_probe_agrees_with_sklearn_on_digits():
    xtr, ytr, xte, yte = _digits_split()
    ours = linear_top1(xtr, ytr, xte, yte)
    mean, std = xtr.mean(0), xtr.std(0, unbiased=False).clamp_min(1e-6)
    sk = LogisticRegression(max_iter=2000).fit(((xtr - mean) / std).numpy(), ytr.numpy())
    theirs = sk.score(((xte - mean) / std).numpy(), yte.numpy())
    assert ours > 0.93
    assert abs(ours - theirs) < 0.03


def test_linear_probe_is_deterministic():
    xtr, ytr, xte, yte = _digits_split()
    assert linear_top1(xtr, ytr, xte, yte) == linear_top1(xtr, ytr, xte, yte)


def test_knn_on_digits_pixels():
    xtr, ytr, xte, yte = _digits_split()
    assert knn_top1(xtr, ytr, xte, yte, k=10) > 0.95


def test_probe_metrics_names_both_spaces():
    xtr, ytr, xte, yte = _digits_split()
    train = {"h": xtr, "z": xtr[:, :16], "y": ytr}
    test = {"h": xte, "z": xte[:, :16], "y": yte}
    out = probe_metrics(train, test, k=10)
    assert set(out) == {
        "probe/knn_top1_h",
        "probe/knn_top1_z",
        "probe/linear_top1_h",
        "probe/linear_top1_z",
    }
    assert out["probe/knn_top1_h"] > out["probe/knn_top1_z"]  # 16 pixel columns hold less


def test_probe_input_errors():
    with pytest.raises(ValueError, match="k must be >= 1, got 0"):
        knn_predict(seeded(4, 2), torch.tensor([0, 1, 0, 1]), seeded(2, 2), k=0)
    with pytest.raises(ValueError, match=r"train: features must be \(N, D\)"):
        knn_top1(seeded(4, 2), torch.tensor([0, 1, 0]), seeded(2, 2), torch.tensor([0, 1]))
