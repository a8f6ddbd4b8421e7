"""Frozen-feature probes: weighted cosine kNN and a linear classifier, for ``h`` and ``z``.

Both are fit on a labelled train split and scored on a disjoint held-out split; the caller owns
the split (``trainables.data`` makes a fixed, seeded one). :func:`fit_probes` fits both once, in
both spaces, and its :class:`FittedProbes` labels any features (the held-out split, one class of
it, corrupted copies of it for the shift tests).

Linear-probe protocol (fixed, so numbers compare across trials and studies):
  1. standardise each feature with the train split's mean and std (std floored at 1e-6);
  2. multinomial logistic regression with an L2 penalty of ``weight_decay · ||W||²`` (bias free);
  3. weights and bias start at zero; full-batch L-BFGS (strong Wolfe line search), at most
     ``max_iter`` iterations, in float64 — deterministic for given features;
  4. report top-1 accuracy on the held-out split.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from trainables.objectives import unit_rows_or_zero

# Elements of one (test chunk × train chunk) similarity block: 2**22 float32 = 16 MiB.
KNN_BLOCK_ELEMENTS = 2**22


def _check_split(name: str, x: Tensor, y: Tensor) -> None:
    if x.dim() != 2 or y.dim() != 1 or x.shape[0] != y.shape[0] or x.shape[0] == 0:
        raise ValueError(
            f"{name}: features must be (N, D) and labels (N,) with N > 0, "
            f"got {tuple(x.shape)} and {tuple(y.shape)}"
        )


def knn_predict(
    train_x: Tensor,
    train_y: Tensor,
    test_x: Tensor,
    *,
    k: int = 20,
    temperature: float = 0.07,
    num_classes: int | None = None,
    block_elements: int = KNN_BLOCK_ELEMENTS,
) -> Tensor:
    """Weighted cosine kNN (Wu et al. 2018): each of the k nearest votes exp(cos / temperature).

    Similarities are computed block by block (test chunk × train chunk) with a running top-k, so
    at most ``block_elements`` similarities exist at once: a 50k × 50k matrix never does.

    Args:
        train_x: (Ntr, D) features; train_y: (Ntr,) int labels; test_x: (Nte, D) features.

    Returns:
        (Nte,) predicted labels.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    train_u, test_u = unit_rows_or_zero(train_x), unit_rows_or_zero(test_x).to(train_x.device)
    train_y = train_y.to(train_u.device).long()
    k = min(k, train_u.shape[0])
    classes = num_classes or int(train_y.max()) + 1
    test_step = max(1, min(test_u.shape[0], int(block_elements**0.5)))
    train_step = max(k, block_elements // test_step)
    predictions = []
    for a in range(0, test_u.shape[0], test_step):
        query = test_u[a : a + test_step]  # (C, D)
        best_sim = query.new_full((query.shape[0], 0), -torch.inf)
        best_idx = torch.zeros((query.shape[0], 0), dtype=torch.long, device=query.device)
        for t in range(0, train_u.shape[0], train_step):
            sim = query @ train_u[t : t + train_step].T  # (C, T) — the only similarity block
            idx = torch.arange(t, t + sim.shape[1], device=query.device).expand_as(sim)
            merged_sim = torch.cat([best_sim, sim], dim=1)
            merged_idx = torch.cat([best_idx, idx], dim=1)
            best_sim, pos = merged_sim.topk(min(k, merged_sim.shape[1]), dim=1)
            best_idx = merged_idx.gather(1, pos)
        weights = (best_sim / temperature).exp()  # (C, k)
        votes = torch.zeros(query.shape[0], classes, dtype=weights.dtype, device=query.device)
        votes.scatter_add_(1, train_y[best_idx], weights)
        predictions.append(votes.argmax(dim=1))
    return torch.cat(predictions)


def knn_top1(train_x: Tensor, train_y: Tensor, test_x: Tensor, test_y: Tensor, **kwargs) -> float:
    """Top-1 accuracy of :func:`knn_predict` on the held-out split."""
    _check_split("train", train_x, train_y)
    _check_split("test", test_x, test_y)
    return top1(knn_predict(train_x, train_y, test_x, **kwargs), test_y)


def linear_probe_fit(
    train_x: Tensor,
    train_y: Tensor,
    *,
    weight_decay: float = 1e-4,
    max_iter: int = 200,
    num_classes: int | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Fit the fixed-protocol linear probe; returns (mean, std, W, b) on float64."""
    x = train_x.detach().double()
    y = train_y.to(x.device).long()
    mean, std = x.mean(dim=0), x.std(dim=0, unbiased=False).clamp_min(1e-6)
    x = (x - mean) / std
    classes = num_classes or int(y.max()) + 1
    weight = torch.zeros(x.shape[1], classes, dtype=x.dtype, device=x.device)
    bias = torch.zeros(classes, dtype=x.dtype, device=x.device)
    targets = torch.nn.functional.one_hot(y, classes).to(x.dtype)  # (N, K)
    optimizer = torch.optim.LBFGS(
        [weight, bias], lr=1.0, max_iter=max_iter, tolerance_grad=1e-9,
        tolerance_change=1e-12, history_size=20, line_search_fn="strong_wolfe",
    )  # fmt: skip

    def closure() -> Tensor:
        # closed-form gradient of mean cross-entropy + wd·||W||², no autograd graph
        logits = x @ weight + bias  # (N, K)
        log_p = logits.log_softmax(dim=1)
        loss = -(targets * log_p).sum(dim=1).mean() + weight_decay * weight.pow(2).sum()
        residual = (log_p.exp() - targets) / x.shape[0]  # (N, K)
        weight.grad = x.T @ residual + 2 * weight_decay * weight
        bias.grad = residual.sum(dim=0)
        return loss

    optimizer.step(closure)
    return mean, std, weight, bias


def linear_probe_predict(fit: tuple[Tensor, Tensor, Tensor, Tensor], x: Tensor) -> Tensor:
    """(N, D) features -> (N,) labels of a probe fit by :func:`linear_probe_fit`."""
    mean, std, weight, bias = fit
    return (((x.detach().double().to(mean.device) - mean) / std) @ weight + bias).argmax(dim=1)


def top1(pred: Tensor, y: Tensor) -> float:
    """Share of (N,) predictions equal to (N,) labels."""
    return float((pred.cpu() == y.cpu().long()).double().mean())


def linear_top1(
    train_x: Tensor, train_y: Tensor, test_x: Tensor, test_y: Tensor, **kwargs
) -> float:
    """Top-1 held-out accuracy of the fixed-protocol linear probe (see module docstring)."""
    _check_split("train", train_x, train_y)
    _check_split("test", test_x, test_y)
    return top1(linear_probe_predict(linear_probe_fit(train_x, train_y, **kwargs), test_x), test_y)


@dataclass(frozen=True)
class FittedProbes:
    """Both probes fit once on one labelled split, in both spaces, ready to label any features
    of those spaces (clean held-out, corrupted held-out, one class of it).

    ``train`` holds ``h`` (N, Dh), ``z`` (N, Dz) and ``y`` (N,): the kNN's bank. ``linear`` maps
    each space to its :func:`linear_probe_fit` result, or is None when the linear probe is off.
    """

    train: dict[str, Tensor]
    k: int
    temperature: float
    num_classes: int
    linear: dict[str, tuple[Tensor, Tensor, Tensor, Tensor]] | None

    @property
    def names(self) -> tuple[str, ...]:
        return ("knn", "linear") if self.linear is not None else ("knn",)

    def predict(self, probe: str, space: str, x: Tensor) -> Tensor:
        """(N, D) features of ``space`` -> (N,) labels by ``probe`` ("knn" or "linear")."""
        if probe == "linear":
            if self.linear is None:
                raise ValueError("the linear probe is off (linear=False)")
            return linear_probe_predict(self.linear[space], x)
        return knn_predict(
            self.train[space], self.train["y"], x,
            k=self.k, temperature=self.temperature, num_classes=self.num_classes,
        )  # fmt: skip


def fit_probes(
    train: dict[str, Tensor],
    *,
    num_classes: int,
    k: int = 20,
    knn_temperature: float = 0.07,
    linear: bool = True,
    weight_decay: float = 1e-4,
    max_iter: int = 200,
) -> FittedProbes:
    """Both probes on both spaces of ``train`` (keys ``h``, ``z``, ``y``), fit once."""
    for space in ("h", "z"):
        _check_split("train", train[space], train["y"])
    fits = None
    if linear:
        fit = lambda space: linear_probe_fit(  # noqa: E731
            train[space], train["y"], weight_decay=weight_decay, max_iter=max_iter,
            num_classes=num_classes,
        )  # fmt: skip
        fits = {space: fit(space) for space in ("h", "z")}
    return FittedProbes(dict(train), k, knn_temperature, num_classes, fits)


Predictions = dict[tuple[str, str], Tensor]  # (probe, space) -> (N,) predicted labels


def probe_predictions(probes: FittedProbes, test: dict[str, Tensor]) -> Predictions:
    """Every fitted probe's labels for ``test`` (keys ``h`` (N, Dh), ``z`` (N, Dz), ``y`` (N,))."""
    for space in ("h", "z"):
        _check_split("test", test[space], test["y"])
    return {
        (probe, space): probes.predict(probe, space, test[space])
        for space in ("h", "z")
        for probe in probes.names
    }


def predictions_top1(predictions: Predictions, y: Tensor) -> dict[str, float]:
    """``probe/{probe}_top1_{space}`` of each prediction against the (N,) labels ``y``."""
    return {f"probe/{probe}_top1_{space}": top1(p, y) for (probe, space), p in predictions.items()}


def score_probes(probes: FittedProbes, test: dict[str, Tensor]) -> dict[str, float]:
    """``probe/{knn,linear}_top1_{h,z}`` of fitted probes on ``test`` (keys ``h``, ``z``, ``y``)."""
    return predictions_top1(probe_predictions(probes, test), test["y"])


def probe_metrics(
    train: dict[str, Tensor],
    test: dict[str, Tensor],
    *,
    k: int = 20,
    knn_temperature: float = 0.07,
    linear: bool = True,
    weight_decay: float = 1e-4,
    max_iter: int = 200,
) -> dict[str, float]:
    """Both probes on both spaces: ``probe/knn_top1_{h,z}`` and ``probe/linear_top1_{h,z}``.

    Args:
        train, test: dicts with keys ``h`` (N, Dh), ``z`` (N, Dz) and ``y`` (N,) labels.
    """
    classes = int(max(train["y"].max(), test["y"].max())) + 1
    probes = fit_probes(
        train, num_classes=classes, k=k, knn_temperature=knn_temperature, linear=linear,
        weight_decay=weight_decay, max_iter=max_iter,
    )  # fmt: skip
    return score_probes(probes, test)
