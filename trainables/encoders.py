"""Encoders and the projection head. ``h`` is the encoder output, ``z`` the head output."""

from __future__ import annotations

import itertools

import torch
from torch import Tensor, nn

from trainables.config import TrialConfig


def mlp(in_dim: int, hidden: tuple[int, ...], out_dim: int, activation: str) -> nn.Sequential:
    """in_dim -> hidden... -> out_dim, the activation after every hidden layer (none at the end)."""
    act = {"relu": nn.ReLU, "tanh": nn.Tanh}[activation]
    layers: list[nn.Module] = [nn.Flatten()]
    dims = (in_dim, *hidden)
    for a, b in itertools.pairwise(dims):
        layers += [nn.Linear(a, b), act()]
    layers.append(nn.Linear(dims[-1], out_dim))
    return nn.Sequential(*layers)


def small_cnn(in_channels: int, out_dim: int, width: int = 32, grid: int = 1) -> nn.Sequential:
    """Three conv blocks for small images (digits 8×8 up to 32×32) of ``width``, 2 ``width``
    and 4 ``width`` channels, the last feature map average-pooled to a ``grid`` × ``grid`` grid
    (1: global pooling), then linear to ``out_dim``: with a grid of 2 or 3, h keeps a coarse
    spatial layout that global pooling discards."""

    def block(a: int, b: int) -> list[nn.Module]:
        return [nn.Conv2d(a, b, 3, padding=1, bias=False), nn.BatchNorm2d(b), nn.ReLU()]

    return nn.Sequential(
        *block(in_channels, width),
        *block(width, 2 * width),
        nn.MaxPool2d(2),
        *block(2 * width, 4 * width),
        nn.AdaptiveAvgPool2d(grid),
        nn.Flatten(),
        nn.Linear(4 * width * grid * grid, out_dim),
    )


def resnet18_cifar(in_channels: int) -> nn.Module:
    """torchvision ResNet-18, CIFAR stem: 3×3 stride-1 first conv, no max-pool; h is 512-D."""
    import torchvision  # here, not at the top: importing it costs every driver ~1 s

    net = torchvision.models.resnet18(weights=None)
    net.conv1 = nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
    net.maxpool = nn.Identity()
    net.fc = nn.Identity()
    return net


def projection_head(in_dim: int, kind: str, hidden: int, out_dim: int) -> nn.Module:
    """SimCLR's head: Linear-BN-ReLU-Linear (``mlp``), a ``linear`` map, or ``none`` (z = h)."""
    if kind == "none":
        return nn.Identity()
    if kind == "linear":
        return nn.Linear(in_dim, out_dim)
    return nn.Sequential(
        nn.Linear(in_dim, hidden, bias=False),
        nn.BatchNorm1d(hidden),
        nn.ReLU(),
        nn.Linear(hidden, out_dim),
    )


class ContrastiveModel(nn.Module):
    """Encoder then projection head; ``forward`` returns (h, z)."""

    def __init__(self, encoder: nn.Module, head: nn.Module, feature_dim: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = head
        self.feature_dim = feature_dim

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x: (B, ...) inputs -> h: (B, feature_dim), z: (B, projection_dim or feature_dim)."""
        h = self.encoder(x)
        return h, self.head(h)


def build_model(config: TrialConfig, input_shape: tuple[int, ...]) -> ContrastiveModel:
    """The trial's model for inputs of ``input_shape`` (without the batch dimension)."""
    if config.encoder == "mlp":
        in_dim = int(torch.tensor(input_shape).prod())
        encoder = mlp(in_dim, config.mlp_hidden, config.feature_dim, config.activation)
        feature_dim = config.feature_dim
    elif config.encoder == "small_cnn":
        encoder = small_cnn(input_shape[0], config.feature_dim, config.cnn_width, config.cnn_grid)
        feature_dim = config.feature_dim
    else:
        encoder, feature_dim = resnet18_cifar(input_shape[0]), 512
    head = projection_head(
        feature_dim, config.projection, config.projection_hidden, config.projection_dim
    )
    return ContrastiveModel(encoder, head, feature_dim)
