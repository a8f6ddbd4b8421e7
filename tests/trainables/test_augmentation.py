"""Augmentation: per-sample randomness, strength, names, determinism."""

from __future__ import annotations

import pytest
import torch

from trainables.augment import COMPONENTS, parse_augmentation
from trainables.views import ViewAugment

IMAGE_COMPONENTS = [c for c in COMPONENTS]


def image_batch(b: int = 16, c: int = 3, size: int = 16) -> torch.Tensor:
    """One structured image repeated b times: identical inputs isolate per-sample randomness."""
    g = torch.Generator().manual_seed(0)
    img = torch.rand(1, c, size, size, generator=g)
    return img.repeat(b, 1, 1, 1)


def gen(seed: int = 1) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_two_images_in_one_batch_never_share_one_crop():
    out = ViewAugment(("crop",), 1.0)(image_batch(32), gen())
    flat = out.flatten(1)
    distances = torch.cdist(flat, flat)
    off_diagonal = distances[~torch.eye(32, dtype=torch.bool)]
    assert float(off_diagonal.min()) > 1e-3  # every pair of views differs


@pytest.mark.parametrize("name", ["rotate", "color", "blur", "noise", "erase"])
def test_every_random_component_draws_per_sample(name):
    out = ViewAugment((name,), 1.0)(image_batch(64), gen())
    changed = (out - image_batch(64)).flatten(1).abs().amax(dim=1) > 1e-4
    distinct = torch.unique(out.flatten(1).round(decimals=5), dim=0).shape[0]
    assert distinct > 8, name  # many different outcomes within one batch
    assert changed.any(), name


def test_flip_is_a_coin_per_sample():
    x = image_batch(200)
    out = ViewAugment(("flip",), 1.0)(x, gen())
    flipped = torch.isclose(out, x.flip(-1), atol=1e-5).flatten(1).all(dim=1)
    kept = torch.isclose(out, x, atol=1e-5).flatten(1).all(dim=1)
    assert bool((flipped | kept).all())
    assert 60 < int(flipped.sum()) < 140


def test_strength_zero_is_the_identity():
    x = image_batch(8)
    out = ViewAugment(tuple(IMAGE_COMPONENTS), 0.0)(x, gen())
    torch.testing.assert_close(out, x, atol=1e-4, rtol=0)


def test_strength_scales_the_change():
    x = image_batch(64)
    change = [
        float((ViewAugment(("crop", "color"), s)(x, gen()) - x).abs().mean()) for s in (0.2, 1.0)
    ]
    assert change[0] < change[1]


def test_same_generator_seed_same_views():
    x = image_batch(8)
    aug = ViewAugment(tuple(IMAGE_COMPONENTS), 1.0)
    torch.testing.assert_close(aug(x, gen(5)), aug(x, gen(5)))
    assert not torch.allclose(aug(x, gen(5)), aug(x, gen(6)))


def test_grayscale_channel_images_work():
    out = ViewAugment(tuple(IMAGE_COMPONENTS), 1.0)(image_batch(8, c=1, size=8), gen())
    assert out.shape == (8, 1, 8, 8) and torch.isfinite(out).all()


def test_vector_noise_is_per_sample():
    x = torch.zeros(100, 8)
    out = ViewAugment(("noise",), 1.0, kind="vector", vector_noise=0.5)(x, gen())
    assert float(out.std()) == pytest.approx(0.5, rel=0.1)
    assert torch.unique(out, dim=0).shape[0] == 100


def test_unknown_name_is_rejected_with_the_valid_names():
    with pytest.raises(ValueError) as err:
        parse_augmentation("crop+sparkle")
    text = str(err.value)
    assert "'sparkle'" in text and all(c in text for c in COMPONENTS)
    assert parse_augmentation("crop+flip+color") == ("crop", "flip", "color")
    assert parse_augmentation("none") == ()
    with pytest.raises(ValueError, match="names a component twice"):
        parse_augmentation("crop+crop")


@pytest.mark.gpu
def test_per_sample_augmentation_on_cuda():
    x = image_batch(32).cuda()
    out = ViewAugment(tuple(IMAGE_COMPONENTS), 1.0)(x, torch.Generator("cuda").manual_seed(1))
    assert out.is_cuda
    assert torch.unique(out.flatten(1).round(decimals=4), dim=0).shape[0] == 32
