"""Augmentation classification: what each augmentation component preserves and destroys and
its magnitude at a strength (:data:`AUGMENTATION_INFO`), and the card's Augmentations section."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import pandas as pd

from analysis.report.evidence.cells import NOT_MEASURED, _distinct, _fmt, _num, _range
from analysis.report.evidence.table import Table
from trainables.augment import strength_parameters


@dataclass(frozen=True)
class AugmentationInfo:
    """What one augmentation component keeps and removes; ``magnitude(s)`` at strength s (the
    formulas of :mod:`trainables.augment`)."""

    preserves: str
    destroys: str
    magnitude: Callable[[float], str]


def _magnitude_words(component: str, s: float, crop_area_min: float | None = None) -> str:
    """One component's parameters at strength s, in words (the table is
    :func:`trainables.augment.strength_parameters`; ``crop_area_min``: a trial's own crop
    scale)."""
    p = strength_parameters(component, s, crop_area_min)
    if component == "crop":
        return (
            f"area {p['area_min']:.2f}-1 of the image, aspect "
            f"{p['aspect_min']:.2f}-{p['aspect_max']:.2f}"
        )
    if component == "flip":
        return f"horizontal, p = {p['p']:.2f}"
    if component == "grayscale":
        return f"p = {p['p']:.2f} (RGB only)"
    if component == "rotate":
        return f"angle uniform in ±{p['degrees']:.1f}°"
    if component == "color":
        return (
            f"p = {p['p']:.1f}; brightness, contrast, saturation x[{p['factor_min']:.2f}, "
            f"{p['factor_max']:.2f}], hue ±{p['hue']:.2f} turn"
        )
    if component == "blur":
        return (
            f"p = {p['p']:.1f}, Gaussian sigma up to {p['sigma_per_32px']:.2f} px per 32 px of side"
        )
    if component == "noise":
        return f"additive Gaussian, std {p['std']:.3g} on [0, 1] pixels (images)"
    return (
        f"p = {p['p']:.1f}, one box of {p['area_min']:.2f}-{p['area_max']:.2f} of the area, "
        "filled with the dataset mean"
    )


_WORDS = {
    "crop": (
        "local shape and texture inside the kept box; identity when the box covers the object",
        "absolute position and scale, and everything outside the box (global layout)",
    ),
    "flip": (
        "shape up to mirroring, texture, colour, scale",
        "left-right orientation (handedness, reading direction)",
    ),
    "rotate": (
        "shape up to a small rotation, texture, colour, scale",
        "absolute orientation and slant within the angle range",
    ),
    "color": (
        "spatial structure: shape, edges, layout",
        "absolute brightness and contrast, and (RGB only) hue and saturation statistics",
    ),
    "grayscale": (
        "luminance, shape, texture",
        "chroma: hue and saturation (identity on 1-channel images)",
    ),
    "blur": (
        "low spatial frequencies: coarse shape, layout, colour",
        "high spatial frequencies: fine texture, sharp edges, small details",
    ),
    "noise": (
        "shape, layout and mean intensities (vectors: position beyond the noise scale)",
        "exact pixel values and low-amplitude fine detail (vectors: exact position)",
    ),
    "erase": (
        "the rest of the image and its global layout",
        "the content of one occluded rectangle (any single local part)",
    ),
}
AUGMENTATION_INFO: Mapping[str, AugmentationInfo] = MappingProxyType(
    {
        name: AugmentationInfo(keeps, removes, functools.partial(_magnitude_words, name))
        for name, (keeps, removes) in _WORDS.items()
    }
)


def _components(df: pd.DataFrame) -> list[str]:
    names = []
    for spec in df["augmentation"].dropna().unique() if "augmentation" in df.columns else []:
        parts = [] if str(spec).strip() in ("", "none") else str(spec).split("+")
        names += [p.strip() for p in parts if p.strip() not in names]
    return names


def augmentations(df: pd.DataFrame, attrs: dict) -> str | Table:
    if "augmentation" not in df.columns:
        return f"{NOT_MEASURED}: no augmentation column in the record."
    strength = "aug_strength" if "aug_strength" in df.columns else None
    keys = ["augmentation"] + ([strength] if strength else [])
    used = df.groupby(keys, dropna=False).size()
    rows = tuple(
        (_fmt(k[0]), _fmt(k[1]) if strength else "not recorded", str(n))
        for k, n in ((k if isinstance(k, tuple) else (k,), n) for k, n in used.items())
    )
    lines = []
    for name in _components(df):
        info = AUGMENTATION_INFO.get(name)
        if info is None:
            lines.append(f"- {name}: UNCLASSIFIED (no AUGMENTATION_INFO entry)")
            continue
        mags = "; ".join(f"s = {_fmt(s)}: {_magnitude(df, name, s)}" for s in _strengths(df))
        lines.append(f"- {name}: destroys {info.destroys}; preserves {info.preserves}. {mags}")
    per = "\n".join(lines) or "- none: the two views are identical"
    head = "Per component used: what it destroys and preserves, and its magnitude at strength s."
    caption = "Compositions used (each view drawn independently, parameters per sample):"
    return Table(("composition", "strength s", "trials"), rows, f"{head}\n\n{per}\n\n{caption}")


def _magnitude(df: pd.DataFrame, name: str, s: float) -> str:
    noise = _num(df, "toy_noise")
    if name == "noise" and "toy" in _distinct(df, "dataset") and noise is not None:
        return f"additive Gaussian on toy vectors, std toy_noise x s = {_range(noise * s)}"
    areas = _num(df, "crop_area_min")
    areas = [] if areas is None else sorted(set(areas.dropna()))
    if name == "crop" and areas:  # the trials' own crop scale, not the strength's
        return "; ".join(_magnitude_words("crop", s, float(a)) for a in areas)
    return AUGMENTATION_INFO[name].magnitude(s)


def _strengths(df: pd.DataFrame) -> list[float]:
    s = _num(df, "aug_strength")
    return sorted(s.dropna().unique().tolist()) if s is not None else []
