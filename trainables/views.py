"""Two views of every sample, drawn per sample, so two images in one batch never share a crop.

Every random parameter (crop box, flip, angle, jitter factors, blur sigma, erase box, noise) is
drawn per sample from the component's parameters at the trial's strength
(:func:`trainables.augment.strength_parameters`). All components are vectorised torch ops on a
(B, C, H, W) batch in [0, 1], so the same code augments on a CUDA device (batches on the device)
or on the CPU (inside DataLoader workers); randomness comes from an explicit ``torch.Generator``,
which the training loop seeds from (seed, step) so a resumed trial sees the same views.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import Tensor
from torch.nn import functional as F

from trainables.augment import strength_parameters

_GEOMETRIC = ("crop", "flip", "rotate")
_LUMA = (0.299, 0.587, 0.114)
_TO_YIQ = ((0.299, 0.587, 0.114), (0.596, -0.274, -0.322), (0.211, -0.523, 0.312))


@functools.lru_cache(maxsize=64)
def constant(values: tuple, device: str, dtype: torch.dtype) -> Tensor:
    """``values`` as a tensor on ``device``, built once per (values, device, dtype).

    Built on the host and copied once: ``torch.tensor(values, device="cuda")`` at every step
    would be a blocking copy that waits for the stream. Never written into.
    """
    return torch.tensor(values, dtype=dtype).to(device)


@functools.lru_cache(maxsize=16)
def _yiq_matrices(device: str, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """(RGB -> YIQ, YIQ -> RGB) on ``device``; the inverse is taken on the host (on CUDA,
    ``linalg.inv`` checks its result on the host, a wait for the device)."""
    to_yiq = torch.tensor(_TO_YIQ, dtype=dtype)
    return to_yiq.to(device), torch.linalg.inv(to_yiq).to(device)


def _uniform(g: torch.Generator, n: int, lo: float, hi: float, device) -> Tensor:
    return torch.rand(n, generator=g, device=device) * (hi - lo) + lo


def _bernoulli(g: torch.Generator, n: int, p: float, device) -> Tensor:
    return torch.rand(n, generator=g, device=device) < p


class ViewAugment:
    """Draws one random view of every sample in a batch.

    Args:
        components: names from :data:`COMPONENTS`, applied in a fixed order.
        strength: s >= 0; 0 makes every component the identity.
        kind: ``"image"`` for (B, C, H, W) in [0, 1], ``"vector"`` for (B, D).
        vector_noise: noise std at s = 1 for vectors (the toy generator's view noise).
        fill: C values for erased pixels (the dataset mean), default 0.
        crop_area_min: the crop's smallest area share, replacing the strength's (None: keep it).
    """

    def __init__(
        self,
        components: tuple[str, ...],
        strength: float = 1.0,
        *,
        kind: str = "image",
        vector_noise: float = 0.0,
        fill: tuple[float, ...] | Tensor | None = None,
        crop_area_min: float | None = None,
    ) -> None:
        self.components = tuple(components)
        self.strength = float(strength)
        self.kind = kind
        self.vector_noise = vector_noise
        self.fill = fill
        self.crop_area_min = crop_area_min

    def __call__(self, x: Tensor, g: torch.Generator) -> Tensor:
        s = self.strength
        if self.kind == "vector":
            if "noise" in self.components and s > 0:
                noise = torch.randn(x.shape, generator=g, device=x.device, dtype=x.dtype)
                x = x + self.vector_noise * s * noise
            return x
        if any(c in self.components for c in _GEOMETRIC):
            x = self._geometric(x, g)
        if "color" in self.components:
            x = self._color(x, g)
        if "grayscale" in self.components:
            x = self._grayscale(x, g)
        if "blur" in self.components:
            x = self._blur(x, g)
        if "noise" in self.components:
            noise = torch.randn(x.shape, generator=g, device=x.device, dtype=x.dtype)
            x = (x + strength_parameters("noise", s)["std"] * noise).clamp(0, 1)
        if "erase" in self.components:
            x = self._erase(x, g)
        return x

    # -- components: each draws (B,) parameters and applies them in one batched op --
    def _geometric(self, x: Tensor, g: torch.Generator) -> Tensor:
        """Random resized crop, horizontal flip and rotation as one per-sample affine warp."""
        b, dev, s = x.shape[0], x.device, self.strength
        w = h = torch.ones(b, device=dev)
        cx = cy = torch.zeros(b, device=dev)
        if "crop" in self.components:
            crop = strength_parameters("crop", s, self.crop_area_min)
            area = _uniform(g, b, crop["area_min"], 1.0, dev)
            log_ratio = _uniform(
                g, b, math.log(crop["aspect_min"]), math.log(crop["aspect_max"]), dev
            )
            w = (area * log_ratio.exp()).sqrt().clamp(max=1.0)  # box width, fraction of side
            h = (area / log_ratio.exp()).sqrt().clamp(max=1.0)
            cx = (torch.rand(b, generator=g, device=dev) * 2 - 1) * (1 - w)
            cy = (torch.rand(b, generator=g, device=dev) * 2 - 1) * (1 - h)
        sign = torch.ones(b, device=dev)
        if "flip" in self.components:
            flip = strength_parameters("flip", s)["p"]
            sign = torch.where(_bernoulli(g, b, flip, dev), -1.0, 1.0)
        angle = torch.zeros(b, device=dev)
        if "rotate" in self.components:
            most = math.radians(strength_parameters("rotate", s)["degrees"])
            angle = _uniform(g, b, -most, most, dev)
        cos, sin = angle.cos(), angle.sin()
        # output (u, v) in [-1, 1]^2 samples input at R(angle) @ diag(sign*w, h) @ (u, v) + (cx, cy)
        theta = torch.stack(
            [
                torch.stack([cos * sign * w, -sin * h, cx], dim=1),
                torch.stack([sin * sign * w, cos * h, cy], dim=1),
            ],
            dim=1,
        ).to(x.dtype)  # (B, 2, 3)
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        return F.grid_sample(
            x, grid, mode="bilinear", padding_mode="reflection", align_corners=False
        )

    def _color(self, x: Tensor, g: torch.Generator) -> Tensor:
        """Colour jitter with probability p: brightness, contrast, saturation, hue."""
        b, dev = x.shape[0], x.device
        jitter = strength_parameters("color", self.strength)
        apply = _bernoulli(g, b, jitter["p"], dev)[:, None, None, None]
        shape = (b, 1, 1, 1)
        lo, hi = jitter["factor_min"], jitter["factor_max"]
        bright = _uniform(g, b, lo, hi, dev).view(shape)
        contrast = _uniform(g, b, lo, hi, dev).view(shape)
        saturation = _uniform(g, b, lo, hi, dev).view(shape)
        hue = _uniform(g, b, -jitter["hue"], jitter["hue"], dev)
        y = (x * bright).clamp(0, 1)
        mean = _luma(y).mean(dim=(1, 2, 3), keepdim=True)
        y = ((y - mean) * contrast + mean).clamp(0, 1)
        if x.shape[1] == 3:
            gray = _luma(y)
            y = ((y - gray) * saturation + gray).clamp(0, 1)
            y = _rotate_hue(y, hue).clamp(0, 1)
        return torch.where(apply, y, x)

    def _grayscale(self, x: Tensor, g: torch.Generator) -> Tensor:
        if x.shape[1] != 3:
            return x
        p = strength_parameters("grayscale", self.strength)["p"]
        apply = _bernoulli(g, x.shape[0], p, x.device)[:, None, None, None]
        return torch.where(apply, _luma(x).expand_as(x), x)

    def _blur(self, x: Tensor, g: torch.Generator) -> Tensor:
        """Gaussian blur with probability p and a per-sample sigma, as a grouped conv."""
        b, c, height, width = x.shape
        dev, blur = x.device, strength_parameters("blur", self.strength)
        sigma_max = max(1e-3, blur["sigma_per_32px"] * min(height, width) / 32)
        radius = max(1, min(math.ceil(2 * sigma_max), (min(height, width) - 1) // 2))
        sigma = _uniform(g, b, min(0.1, sigma_max), sigma_max, dev)
        sigma = torch.where(_bernoulli(g, b, blur["p"], dev), sigma, 1e-3)  # 1e-3: identity kernel
        taps = torch.arange(-radius, radius + 1, device=dev, dtype=x.dtype)
        kernel = torch.exp(-(taps[None, :] ** 2) / (2 * sigma[:, None] ** 2))
        kernel = (kernel / kernel.sum(dim=1, keepdim=True)).repeat_interleave(c, dim=0)  # (B*C, k)
        y = x.reshape(1, b * c, height, width)
        y = F.pad(y, (0, 0, radius, radius), mode="reflect")
        y = F.conv2d(y, kernel[:, None, :, None], groups=b * c)
        y = F.pad(y, (radius, radius, 0, 0), mode="reflect")
        y = F.conv2d(y, kernel[:, None, None, :], groups=b * c)
        return y.reshape(b, c, height, width)

    def _erase(self, x: Tensor, g: torch.Generator) -> Tensor:
        """Random erasing with probability p: one rectangle per sample set to ``fill``."""
        b, c, height, width = x.shape
        dev, erase = x.device, strength_parameters("erase", self.strength)
        area = _uniform(g, b, erase["area_min"], erase["area_max"], dev)
        log_ratio = _uniform(g, b, math.log(0.3), math.log(3.3), dev)
        eh = (area / log_ratio.exp()).sqrt().clamp(max=1.0)  # fraction of height
        ew = (area * log_ratio.exp()).sqrt().clamp(max=1.0)
        top = torch.rand(b, generator=g, device=dev) * (1 - eh)
        left = torch.rand(b, generator=g, device=dev) * (1 - ew)
        apply = _bernoulli(g, b, erase["p"], dev)
        rows = (torch.arange(height, device=dev) + 0.5) / height
        cols = (torch.arange(width, device=dev) + 0.5) / width
        in_rows = (rows[None] >= top[:, None]) & (rows[None] < (top + eh)[:, None])  # (B, H)
        in_cols = (cols[None] >= left[:, None]) & (cols[None] < (left + ew)[:, None])  # (B, W)
        mask = (in_rows[:, :, None] & in_cols[:, None, :] & apply[:, None, None])[:, None]
        values = (0.0,) * c if self.fill is None else tuple(float(v) for v in self.fill)
        return torch.where(mask, constant(values, str(dev), x.dtype).view(1, c, 1, 1), x)


def _luma(x: Tensor) -> Tensor:
    """(B, C, H, W) -> (B, 1, H, W) luminance (the channel itself when C == 1)."""
    if x.shape[1] == 1:
        return x
    weights = constant(_LUMA, str(x.device), x.dtype).view(1, 3, 1, 1)
    return (x * weights).sum(dim=1, keepdim=True)


def _rotate_hue(x: Tensor, turns: Tensor) -> Tensor:
    """Rotate chroma by ``turns`` (B,) of a full circle in YIQ space."""
    to_yiq, to_rgb = _yiq_matrices(str(x.device), x.dtype)
    angle = 2 * math.pi * turns.to(x.dtype)
    cos, sin = angle.cos(), angle.sin()
    one, zero = torch.ones_like(cos), torch.zeros_like(cos)
    rot = torch.stack(
        [
            torch.stack([one, zero, zero], dim=1),
            torch.stack([zero, cos, -sin], dim=1),
            torch.stack([zero, sin, cos], dim=1),
        ],
        dim=1,
    )  # (B, 3, 3)
    matrix = to_rgb @ rot @ to_yiq  # (B, 3, 3)
    return torch.einsum("bij,bjhw->bihw", matrix, x)
