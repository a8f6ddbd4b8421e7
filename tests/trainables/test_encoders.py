"""trainables/encoders.py: the encoders and the projection head, layer by layer and parameter by
parameter against counts worked by hand, the shapes of h and z for every encoder a trial can
name, and the same seed giving the same model (h and z are returned as computed: the
objectives normalise)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from trainables.config import TrialConfig
from trainables.encoders import (
    ContrastiveModel,
    build_model,
    mlp,
    projection_head,
    resnet18_cifar,
    small_cnn,
)


def count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_mlp_has_an_activation_after_every_hidden_layer_and_none_at_the_end():
    net = mlp(8, (16, 4), 2, "tanh")
    kinds = [type(m) for m in net]
    assert kinds == [nn.Flatten, nn.Linear, nn.Tanh, nn.Linear, nn.Tanh, nn.Linear]
    assert count(net) == (8 * 16 + 16) + (16 * 4 + 4) + (4 * 2 + 2)  # 222
    assert net(torch.zeros(5, 2, 4)).shape == (5, 2)  # inputs are flattened first
    assert [type(m) for m in mlp(3, (), 2, "relu")] == [nn.Flatten, nn.Linear]
    assert isinstance(mlp(3, (5,), 2, "relu")[2], nn.ReLU)


@pytest.mark.parametrize("side", [8, 28, 32])
def test_small_cnn_pools_any_small_image_to_out_dim(side):
    net = small_cnn(3, 16)
    assert net(torch.zeros(2, 3, side, side)).shape == (2, 16)
    convs = 3 * 32 * 9 + 32 * 64 * 9 + 64 * 128 * 9  # no conv bias: batch norm follows
    norms = 2 * (32 + 64 + 128)
    assert count(net) == convs + norms + 128 * 16 + 16


def test_resnet18_cifar_has_the_cifar_stem_and_a_512_d_output():
    net = resnet18_cifar(3)
    assert net.conv1.kernel_size == (3, 3) and net.conv1.stride == (1, 1)
    assert isinstance(net.maxpool, nn.Identity) and isinstance(net.fc, nn.Identity)
    # torchvision's 11,689,512 less its 1000-way fc and 7x7 stem, plus the 3x3 stem
    assert count(net) == 11_689_512 - (512 * 1000 + 1000) - 7 * 7 * 3 * 64 + 3 * 3 * 3 * 64
    net.eval()
    with torch.no_grad():
        assert net(torch.zeros(2, 3, 32, 32)).shape == (2, 512)


def test_projection_heads():
    assert isinstance(projection_head(32, "none", 64, 16), nn.Identity)
    linear = projection_head(32, "linear", 64, 16)
    assert count(linear) == 32 * 16 + 16
    head = projection_head(32, "mlp", 64, 16)
    assert [type(m) for m in head] == [nn.Linear, nn.BatchNorm1d, nn.ReLU, nn.Linear]
    assert head[0].bias is None  # batch norm follows
    assert count(head) == 32 * 64 + 2 * 64 + 64 * 16 + 16


@pytest.mark.parametrize(
    ("settings", "shape", "h_dim", "z_dim"),
    [
        ({"dataset": "toy", "augmentation": "noise", "encoder": "mlp", "mlp_hidden": [32],
          "feature_dim": 2, "projection": "none"}, (8,), 2, 2),
        ({"encoder": "mlp", "mlp_hidden": [16, 16], "feature_dim": 12,
          "projection": "linear", "projection_dim": 6}, (1, 8, 8), 12, 6),
        ({"encoder": "small_cnn", "feature_dim": 24, "projection_dim": 10}, (1, 8, 8), 24, 10),
        ({"encoder": "resnet18", "feature_dim": 7, "projection_dim": 10}, (3, 32, 32), 512, 10),
    ],
    ids=["toy-mlp-no-head", "mlp-linear-head", "small_cnn-mlp-head", "resnet18-own-h"],
)  # fmt: skip
def test_build_model_gives_h_and_z_of_the_configured_sizes(settings, shape, h_dim, z_dim):
    model = build_model(TrialConfig(**settings), shape)
    assert isinstance(model, ContrastiveModel) and model.feature_dim == h_dim
    model.eval()
    with torch.no_grad():
        x = torch.randn(3, *shape)
        h, z = model(x)
        assert h.shape == (3, h_dim) and z.shape == (3, z_dim)
        assert torch.equal(h, model.encoder(x))
        assert torch.equal(z, model.head(h))  # z is the head of h, neither normalised


def test_the_same_seed_builds_the_same_model_and_another_seed_does_not():
    config = TrialConfig(encoder="small_cnn", feature_dim=16, projection_dim=8)

    def built(seed: int) -> ContrastiveModel:
        torch.manual_seed(seed)
        return build_model(config, (1, 8, 8)).eval()

    a, b, c = built(0), built(0), built(1)
    for (name, pa), (_, pb) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(pa, pb), name
    assert not torch.equal(a.encoder[0].weight, c.encoder[0].weight)
    x = torch.randn(4, 1, 8, 8)
    with torch.no_grad():
        assert all(torch.equal(u, v) for u, v in zip(a(x), b(x), strict=True))
