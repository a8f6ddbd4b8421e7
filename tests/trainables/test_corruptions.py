"""Shift tests' corruptions: identity at severity 0, strength growing with severity, dtype and
range kept, determinism, and the pieces (blur, DCT, JPEG tables) against brute force."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from sklearn.datasets import load_digits

from trainables.augment import COMPONENTS
from trainables.corruption_families import (
    COVERED_BY,
    IMAGE_FAMILIES,
    LEVELS,
    SEVERITIES,
    VECTOR_FAMILIES,
    covered,
)
from trainables.corruptions import (
    blur_sigma,
    corrupt,
    dct_matrix,
    gaussian_blur,
    occlusion_mask,
    quantisation_table,
)


def digits(n: int = 64) -> torch.Tensor:
    """(n, 1, 8, 8) float digits in [0, 1], as the digits dataset stores them."""
    x, _ = load_digits(return_X_y=True)
    return torch.tensor(x[:n], dtype=torch.float32).view(-1, 1, 8, 8) / 16


def smooth_rgb(n: int = 24, side: int = 32) -> torch.Tensor:
    """(n, 3, side, side) uint8 images with structure at several scales (not pure noise)."""
    g = torch.Generator().manual_seed(0)
    coarse = torch.rand(n, 3, side // 8, side // 8, generator=g)
    fine = torch.rand(n, 3, side, side, generator=g)
    up = torch.nn.functional.interpolate(coarse, size=(side, side), mode="bilinear")
    return ((0.8 * up + 0.2 * fine) * 255).round().to(torch.uint8)


IMAGES = {"digits_float": digits, "rgb_uint8": smooth_rgb}


def distance(a: torch.Tensor, b: torch.Tensor) -> float:
    scale = 255.0 if a.dtype == torch.uint8 else 1.0
    return float((a.double() - b.double()).abs().mean()) / scale


@pytest.mark.parametrize("family", IMAGE_FAMILIES + VECTOR_FAMILIES)
def test_severity_zero_is_the_identity(family):
    x = torch.randn(10, 8) if family in VECTOR_FAMILIES else smooth_rgb(4)
    assert torch.equal(corrupt(x, family, 0), x)


@pytest.mark.parametrize("images", IMAGES)
@pytest.mark.parametrize("family", IMAGE_FAMILIES)
def test_distance_from_clean_strictly_increases_with_severity(images, family):
    x = IMAGES[images]()
    d = [distance(corrupt(x, family, s, fill=(0.5,) * x.shape[1]), x) for s in range(6)]
    assert d[0] == 0 and all(a < b for a, b in itertools.pairwise(d)), d


@pytest.mark.parametrize("images", IMAGES)
@pytest.mark.parametrize("family", IMAGE_FAMILIES)
def test_dtype_shape_and_range_are_kept(images, family):
    x = IMAGES[images]()
    for s in SEVERITIES:
        y = corrupt(x, family, s)
        assert y.dtype == x.dtype and y.shape == x.shape and y.device == x.device
        if y.dtype != torch.uint8:
            assert float(y.min()) >= 0 and float(y.max()) <= 1


@pytest.mark.parametrize("family", IMAGE_FAMILIES + VECTOR_FAMILIES)
def test_corruptions_are_deterministic(family):
    x = torch.randn(10, 8) if family in VECTOR_FAMILIES else smooth_rgb(6)
    for s in SEVERITIES:
        assert torch.equal(corrupt(x, family, s), corrupt(x, family, s))


def test_noise_is_one_draw_scaled_by_the_level():
    x = torch.full((3, 1, 8, 8), 0.5)  # far from the clamp at levels up to 0.1
    first = corrupt(x, "gaussian_noise", 1) - x
    for s in SEVERITIES:
        scaled = first * LEVELS["gaussian_noise"][s - 1] / LEVELS["gaussian_noise"][0]
        assert torch.allclose(corrupt(x, "gaussian_noise", s) - x, scaled, atol=1e-6)


def test_contrast_by_hand():
    x = torch.tensor([[[[0.0, 1.0], [0.0, 1.0]]]])  # one image, channel mean 0.5
    y = corrupt(x, "contrast", 2)  # factor 0.5
    assert torch.allclose(y, torch.tensor([[[[0.25, 0.75], [0.25, 0.75]]]]))
    stds = [float(corrupt(smooth_rgb(), "contrast", s).float().std()) for s in range(6)]
    assert all(a > b for a, b in itertools.pairwise(stds))


def reflect(i: int, n: int) -> int:
    return -i if i < 0 else 2 * (n - 1) - i if i >= n else i


def test_blur_matches_a_brute_force_loop():
    x = torch.rand(1, 2, 7, 9, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    sigma = 0.8
    radius = min(math.ceil(3 * sigma), (7 - 1) // 2)
    k = [math.exp(-(a * a) / (2 * sigma * sigma)) for a in range(-radius, radius + 1)]
    k = [v / sum(k) for v in k]
    got = gaussian_blur(x, sigma)
    for c in range(2):
        for i in range(7):
            for j in range(9):
                want = sum(
                    k[a + radius]
                    * k[b + radius]
                    * float(x[0, c, reflect(i + a, 7), reflect(j + b, 9)])
                    for a in range(-radius, radius + 1)
                    for b in range(-radius, radius + 1)
                )
                assert float(got[0, c, i, j]) == pytest.approx(want, abs=1e-12)


def test_blur_sigma_is_not_scaled_below_32_pixels_and_smooths_more_with_severity():
    assert blur_sigma(0.5, 8) == blur_sigma(0.5, 32) == 0.5 and blur_sigma(0.5, 96) == 1.5
    x = digits()
    variation = [float((corrupt(x, "gaussian_blur", s).diff(dim=-1)).abs().sum()) for s in range(6)]
    assert all(a > b for a, b in itertools.pairwise(variation)), variation


def test_occlusion_boxes_grow_nested_and_hold_the_fill():
    shape = (20, 3, 16, 16)
    masks = [occlusion_mask(shape, side, torch.device("cpu")) for side in LEVELS["occlusion"]]
    for small, large in itertools.pairwise(masks):
        assert bool((small <= large).all()) and int(large.sum()) > int(small.sum())
    x = torch.zeros(shape)
    y = corrupt(x, "occlusion", 3, fill=(0.2, 0.4, 0.6))
    assert torch.allclose(y[:, 1][masks[2][:, 0]], torch.tensor(0.4))
    assert bool((y[~masks[2].expand_as(y)] == 0).all())


def test_dct_is_orthonormal_and_quantisation_tables_follow_ijg():
    d = dct_matrix(8)
    assert torch.allclose(d @ d.T, torch.eye(8, dtype=torch.float64), atol=1e-12)
    assert quantisation_table(50)[0].tolist() == [16, 11, 10, 16, 24, 40, 51, 61]
    assert quantisation_table(100).eq(1).all()  # quality 100: every step 1
    assert quantisation_table(25)[0, 0] == math.floor((16 * 200 + 50) / 100)


def libjpeg(image: torch.Tensor, quality: int) -> torch.Tensor:
    """(1, H, W) uint8 through PIL's JPEG encoder and decoder (libjpeg) at ``quality``."""
    import io

    import numpy as np
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image[0].numpy()).save(buffer, format="JPEG", quality=quality)
    return torch.from_numpy(np.array(Image.open(buffer)))[None]


def test_jpeg_agrees_with_libjpeg_on_grayscale():
    """libjpeg on one channel uses the same IJG tables and no subsampling, so its output
    differs from ours by rounding only."""
    x = smooth_rgb(12)[:, :1].contiguous()
    for s in SEVERITIES:
        quality = int(LEVELS["jpeg"][s - 1])
        ours = corrupt(x, "jpeg", s)
        theirs = torch.stack([libjpeg(im, quality) for im in x])
        assert distance(ours, theirs) * 255 < 0.5 < distance(theirs, x) * 255


def test_vector_corruptions():
    x = torch.randn(50, 6, generator=torch.Generator().manual_seed(2))
    steps = [(corrupt(x, "noise", s) - x).norm(dim=1) for s in range(6)]
    assert all(bool((a < b).all()) for a, b in itertools.pairwise(steps))
    for s in SEVERITIES:
        moved = corrupt(x, "mean_shift", s) - x
        assert torch.allclose(moved.norm(dim=1), torch.tensor(LEVELS["mean_shift"][s - 1]))
        assert torch.allclose(moved, moved[:1].expand_as(moved))  # one direction for all rows


def test_coverage_table():
    assert set(COVERED_BY) == set(IMAGE_FAMILIES + VECTOR_FAMILIES) == set(LEVELS)
    assert all(set(v) <= set(COMPONENTS) for v in COVERED_BY.values())
    assert covered("crop+noise+erase", "gaussian_noise") and covered(
        "crop+noise+erase", "occlusion"
    )
    assert not covered("crop+noise+erase", "gaussian_blur") and not covered("crop+flip", "contrast")
    assert covered("color", "contrast") and covered("blur", "gaussian_blur")
    assert not any(covered("+".join(COMPONENTS), f) for f in ("jpeg", "mean_shift"))
    assert covered("noise", "noise") and not covered("none", "noise")
    with pytest.raises(ValueError, match="unknown corruption family"):
        covered("noise", "fog")
    with pytest.raises(ValueError, match=r"severity must be 0\.\.5"):
        corrupt(torch.zeros(2, 3), "noise", 6)
