"""Corruptions for the shift tests: fixed families at severities 1..5 (0 is the identity).

A trial's probes, fit on clean probe-train features, label corrupted held-out rows; how far
their top-1 falls says which shifts the representation withstands (the evidence card's "shift
tests"). Corruptions act on rows as stored (images (N, C, H, W) uint8 in 0..255 or float in
[0, 1], vectors (N, D)) and return the same dtype and range, so the trial's own ``prepare`` and
``normalise`` follow unchanged.

The families, their levels and which augmentation covers which are the torch-free catalogue
:mod:`trainables.corruption_families`; this module applies them.

``jpeg`` is JPEG-like quantisation in torch, on the device: RGB to full-range YCbCr (one
channel stays luma), 8×8 blockwise orthonormal DCT-II after a level shift of 128, coefficients
rounded to multiples of the IJG table at that quality (luma table for Y, chroma for Cb and Cr;
no chroma subsampling, no entropy coding: it is lossless), inverse DCT, back to RGB, rounded to
8-bit levels. Sides that are not multiples of 8 are padded by replication and cropped back.

Randomness (noise, box positions, the shift direction) comes from a CPU generator seeded per
family (:func:`family_generator`), drawn once and scaled by the level, so a corruption is
deterministic on every device and severity k's is severity k-1's made stronger: the noise is
the same draw scaled up, the occluding box grows around the same point and contains the last.
"""

from __future__ import annotations

import hashlib
import math

import torch
from torch import Tensor
from torch.nn import functional as F

from trainables.corruption_families import LEVELS, SEVERITIES, VECTOR_FAMILIES

_LUMA_TABLE = (
    (16, 11, 10, 16, 24, 40, 51, 61), (12, 12, 14, 19, 26, 58, 60, 55),
    (14, 13, 16, 24, 40, 57, 69, 56), (14, 17, 22, 29, 51, 87, 80, 62),
    (18, 22, 37, 56, 68, 109, 103, 77), (24, 35, 55, 64, 81, 104, 113, 92),
    (49, 64, 78, 87, 103, 121, 120, 101), (72, 92, 95, 98, 112, 100, 103, 99),
)  # fmt: skip
_CHROMA_TABLE = (
    (17, 18, 24, 47, 99, 99, 99, 99), (18, 21, 26, 66, 99, 99, 99, 99),
    (24, 26, 56, 99, 99, 99, 99, 99), (47, 66, 99, 99, 99, 99, 99, 99),
    *((99,) * 8,) * 4,
)  # fmt: skip
_TO_YCBCR = ((0.299, 0.587, 0.114), (-0.168736, -0.331264, 0.5), (0.5, -0.418688, -0.081312))


def family_generator(family: str) -> torch.Generator:
    """The CPU generator of ``family``'s random draws: fixed, the same for every severity."""
    digest = hashlib.sha256(f"shift:{family}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)


def corrupt(
    x: Tensor, family: str, severity: int, *, fill: tuple[float, ...] | None = None
) -> Tensor:
    """``x`` corrupted by ``family`` at ``severity`` (0 returns ``x`` itself).

    Args:
        x: (N, C, H, W) images, uint8 in 0..255 or float in [0, 1]; or (N, D) float vectors.
        family: a key of :data:`LEVELS`.
        severity: 0..5.
        fill: C per-channel values in [0, 1] for occluded pixels (the dataset mean), default 0.

    Returns:
        A tensor of ``x``'s shape, dtype and device (images clamped to their range).
    """
    if family not in LEVELS:
        raise ValueError(f"unknown corruption family {family!r}; known: {', '.join(LEVELS)}")
    if severity not in (0, *SEVERITIES):
        raise ValueError(f"severity must be 0..5, got {severity}")
    if severity == 0:
        return x
    level = LEVELS[family][severity - 1]
    if family in VECTOR_FAMILIES:
        return _VECTOR[family](x, level)
    y = x.float() / 255 if x.dtype == torch.uint8 else x.float()
    y = _IMAGE[family](y, level, fill).clamp(0, 1)
    if x.dtype == torch.uint8:
        return (y * 255).round().to(torch.uint8)
    return y.to(x.dtype)


# -- images: (N, C, H, W) float in [0, 1] -> same --
def _draw(shape: tuple[int, ...], family: str, device: torch.device) -> Tensor:
    return torch.randn(shape, generator=family_generator(family)).to(device)


def _gaussian_noise(x: Tensor, std: float, fill) -> Tensor:
    return x + std * _draw(tuple(x.shape), "gaussian_noise", x.device)


def blur_sigma(level: float, side: int) -> float:
    """Blur sigma in pixels for an image of ``side`` px: the level, × side/32 above 32 px."""
    return level * max(1.0, side / 32)


def gaussian_blur(x: Tensor, sigma: float) -> Tensor:
    """(N, C, H, W) -> same: a separable Gaussian of ``sigma`` px (radius ceil(3 sigma), at most
    what reflection padding allows), reflected at the borders."""
    c, height, width = x.shape[1:]
    radius = max(1, min(math.ceil(3 * sigma), (min(height, width) - 1) // 2))
    taps = torch.arange(-radius, radius + 1, device=x.device, dtype=x.dtype)
    kernel = torch.exp(-(taps**2) / (2 * sigma**2))
    kernel = (kernel / kernel.sum()).repeat(c, 1)  # (C, k)
    y = F.pad(x, (0, 0, radius, radius), mode="reflect")
    y = F.conv2d(y, kernel[:, None, :, None], groups=c)
    y = F.pad(y, (radius, radius, 0, 0), mode="reflect")
    return F.conv2d(y, kernel[:, None, None, :], groups=c)


def _gaussian_blur(x: Tensor, level: float, fill) -> Tensor:
    return gaussian_blur(x, blur_sigma(level, min(x.shape[-2:])))


def _contrast(x: Tensor, factor: float, fill) -> Tensor:
    mean = x.mean(dim=(2, 3), keepdim=True)  # each image's channel means
    return (x - mean) * factor + mean


def occlusion_mask(shape: tuple[int, ...], side: float, device: torch.device) -> Tensor:
    """(N, 1, H, W) bool: one square box per image, ``side`` of the image side, whose pixel
    centres it covers. Its corner is u (1 - side) for a fixed uniform u per image and axis, so a
    larger box contains a smaller one."""
    n, _, height, width = shape
    u = torch.rand(n, 2, generator=family_generator("occlusion")).to(device)
    top, left = u[:, 0] * (1 - side), u[:, 1] * (1 - side)
    rows = (torch.arange(height, device=device) + 0.5) / height
    cols = (torch.arange(width, device=device) + 0.5) / width
    in_rows = (rows[None] >= top[:, None]) & (rows[None] < (top + side)[:, None])  # (N, H)
    in_cols = (cols[None] >= left[:, None]) & (cols[None] < (left + side)[:, None])  # (N, W)
    return (in_rows[:, :, None] & in_cols[:, None, :])[:, None]


def _occlusion(x: Tensor, side: float, fill) -> Tensor:
    c = x.shape[1]
    values = torch.tensor(fill if fill is not None else (0.0,) * c, dtype=x.dtype)
    mask = occlusion_mask(tuple(x.shape), side, x.device)
    return torch.where(mask, values.to(x.device).view(1, c, 1, 1), x)


def dct_matrix(n: int = 8, dtype: torch.dtype = torch.float64) -> Tensor:
    """(n, n) orthonormal DCT-II matrix D: D @ v is v's DCT, D.T @ D = I."""
    k = torch.arange(n, dtype=dtype)[:, None]
    i = torch.arange(n, dtype=dtype)[None, :]
    d = torch.cos(math.pi * (2 * i + 1) * k / (2 * n)) * math.sqrt(2 / n)
    d[0] /= math.sqrt(2)
    return d


def quantisation_table(quality: float, chroma: bool = False) -> Tensor:
    """(8, 8) IJG quantisation table at ``quality`` (1..100), entries in 1..255."""
    base = torch.tensor(_CHROMA_TABLE if chroma else _LUMA_TABLE, dtype=torch.float64)
    scale = 5000 / quality if quality < 50 else 200 - 2 * quality
    return ((base * scale + 50) / 100).floor().clamp(1, 255)


def _jpeg(x: Tensor, quality: float, fill) -> Tensor:
    n, c, height, width = x.shape
    pix = x.double() * 255
    colour = c == 3
    if colour:
        pix = torch.einsum(
            "ij,njhw->nihw", torch.tensor(_TO_YCBCR, dtype=pix.dtype).to(x.device), pix
        )
        pix = pix + torch.tensor((0.0, 128.0, 128.0), dtype=pix.dtype, device=x.device).view(
            1, 3, 1, 1
        )
    ph, pw = -height % 8, -width % 8
    padded = F.pad(pix, (0, pw, 0, ph), mode="replicate") if ph or pw else pix
    hb, wb = padded.shape[2] // 8, padded.shape[3] // 8
    blocks = padded.reshape(n, c, hb, 8, wb, 8).permute(0, 1, 2, 4, 3, 5) - 128  # (N,C,hb,wb,8,8)
    d = dct_matrix(8).to(x.device)
    tables = torch.stack([quantisation_table(quality, chroma=colour and ch > 0) for ch in range(c)])
    q = tables.to(x.device).view(1, c, 1, 1, 8, 8)
    coef = (d @ blocks @ d.T / q).round() * q
    back = (d.T @ coef @ d + 128).permute(0, 1, 2, 4, 3, 5).reshape(padded.shape)
    back = back[:, :, :height, :width]
    if colour:
        back = back - torch.tensor((0.0, 128.0, 128.0), dtype=back.dtype, device=x.device).view(
            1, 3, 1, 1
        )
        to_rgb = torch.linalg.inv(torch.tensor(_TO_YCBCR, dtype=back.dtype)).to(x.device)
        back = torch.einsum("ij,njhw->nihw", to_rgb, back)
    return (back.clamp(0, 255).round() / 255).to(x.dtype)


_IMAGE = {
    "gaussian_noise": _gaussian_noise,
    "gaussian_blur": _gaussian_blur,
    "contrast": _contrast,
    "jpeg": _jpeg,
    "occlusion": _occlusion,
}


# -- vectors: (N, D) -> same --
def _vector_noise(x: Tensor, std: float) -> Tensor:
    return x + std * _draw(tuple(x.shape), "noise", x.device).to(x.dtype)


def _mean_shift(x: Tensor, length: float) -> Tensor:
    direction = torch.randn(
        x.shape[1], generator=family_generator("mean_shift"), dtype=torch.float64
    )
    direction = (direction / direction.norm()).to(device=x.device, dtype=x.dtype)
    return x + length * direction


_VECTOR = {"noise": _vector_noise, "mean_shift": _mean_shift}
