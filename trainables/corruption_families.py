"""The shift tests' corruption catalogue, without torch: the families, their severities and
levels, and which augmentation components cover which family. :mod:`trainables.corruptions`
applies them to data; the analysis reads this table without loading torch.

Severity table (level k = 1..5; image levels are CIFAR-10-C's, Hendrycks & Dietterich 2019, the
32-px version of ImageNet-C, except occlusion, which is ours):

================  =========================  ==========================================
family            levels 1..5                meaning
================  =========================  ==========================================
gaussian_noise    0.04 0.06 0.08 0.09 0.10   std of additive noise, in [0, 1] pixel units
gaussian_blur     0.4  0.6  0.7  0.8  1.0    sigma in pixels up to 32 px, × side/32 above
contrast          0.75 0.5  0.4  0.3  0.15   factor towards each image's channel means
jpeg              80   65   58   50   40     JPEG quality (IJG quantisation tables)
occlusion         0.2  0.3  0.4  0.5  0.6    side of a square box, fraction of the side
noise (vectors)   0.1  0.2  0.35 0.5  0.7    std of additive noise, in data units
mean_shift (vec)  0.25 0.5  1.0  1.5  2.0    length of one fixed shift of every row
================  =========================  ==========================================

Blur is not scaled below 32 px: on a pixel grid a sigma under ~0.4 px is the identity, so the
8-px digits get the 32-px sigmas (heavy at level 5). Vector levels are in the toy generator's
units (class centres N(0, I), within-class spread 0.2, view noise 0.35 by default).
"""

from __future__ import annotations

from trainables.augment import parse_augmentation

IMAGE_FAMILIES: tuple[str, ...] = (
    "gaussian_noise",
    "gaussian_blur",
    "contrast",
    "jpeg",
    "occlusion",
)
VECTOR_FAMILIES: tuple[str, ...] = ("noise", "mean_shift")
SEVERITIES: tuple[int, ...] = (1, 2, 3, 4, 5)
LEVELS: dict[str, tuple[float, ...]] = {
    "gaussian_noise": (0.04, 0.06, 0.08, 0.09, 0.10),
    "gaussian_blur": (0.4, 0.6, 0.7, 0.8, 1.0),
    "contrast": (0.75, 0.5, 0.4, 0.3, 0.15),
    "jpeg": (80, 65, 58, 50, 40),
    "occlusion": (0.2, 0.3, 0.4, 0.5, 0.6),
    "noise": (0.1, 0.2, 0.35, 0.5, 0.7),
    "mean_shift": (0.25, 0.5, 1.0, 1.5, 2.0),
}
# The augmentation components (trainables.augment.COMPONENTS) whose training covers a family.
COVERED_BY: dict[str, tuple[str, ...]] = {
    "gaussian_noise": ("noise",),
    "gaussian_blur": ("blur",),
    "contrast": ("color",),
    "jpeg": (),
    "occlusion": ("erase",),
    "noise": ("noise",),
    "mean_shift": (),
}


def families(kind: str) -> tuple[str, ...]:
    """The families that apply to a dataset of ``kind`` ("image" or "vector")."""
    return IMAGE_FAMILIES if kind == "image" else VECTOR_FAMILIES


def covered(augmentation: str, family: str) -> bool:
    """Whether training with ``augmentation`` (e.g. ``"crop+noise+erase"``) includes a component
    that covers ``family`` (see :data:`COVERED_BY`); its strength is not considered."""
    if family not in COVERED_BY:
        raise ValueError(f"unknown corruption family {family!r}; known: {', '.join(COVERED_BY)}")
    components = parse_augmentation(augmentation)
    return any(c in components for c in COVERED_BY[family])
