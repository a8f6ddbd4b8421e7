"""Augmentation by name: the components a study file composes (``crop+flip+color``), and each
one's parameters at a strength (:func:`strength_parameters`, the one table: the views draw from it
and the evidence card describes it). At strength 1 they are SimCLR's settings (Chen et al. 2020),
and strength 0 makes each component the identity.

A composition is a ``+``-joined list of component names, e.g. ``crop+flip+color``, or ``none``.
The transform that draws the views is :mod:`trainables.views`; this module needs no torch, so a
study file is validated without loading it.
"""

from __future__ import annotations

from trainables.names import did_you_mean

COMPONENTS: tuple[str, ...] = (
    "crop", "flip", "rotate", "color", "grayscale", "blur", "noise", "erase",
)  # fmt: skip
VECTOR_COMPONENTS: tuple[str, ...] = ("noise",)


def parse_augmentation(spec: str) -> tuple[str, ...]:
    """``"crop+flip+color"`` -> ("crop", "flip", "color"); ``"none"`` -> (). Unknown names raise."""
    if not isinstance(spec, str):
        raise ValueError(f"augmentation must be a string such as 'crop+flip', got {spec!r}")
    if spec.strip() in ("", "none"):
        return ()
    names = tuple(part.strip() for part in spec.split("+"))
    for name in names:
        if name not in COMPONENTS:
            hint = did_you_mean(name, COMPONENTS)
            raise ValueError(
                f"augmentation={spec!r}: unknown component {name!r}{hint}"
                f"{' V' if hint else '; v'}alid components are {', '.join(COMPONENTS)} "
                "(joined with '+', or 'none')"
            )
    if len(set(names)) != len(names):
        raise ValueError(f"augmentation={spec!r} names a component twice")
    return names


def strength_parameters(
    component: str, strength: float, crop_area_min: float | None = None
) -> dict[str, float]:
    """The parameters of one component at strength s (``strength``, >= 0; 0: the identity).

    crop: box area uniform in [``area_min``, 1] (1 - 0.92 s, at least 0.08), aspect ratio
    log-uniform in [``aspect_min``, ``aspect_max``] ((3/4)^s, (4/3)^s); flip: probability ``p``
    (0.5 min(s, 1)); rotate: angle uniform in ±``degrees`` (30 s); color: with probability ``p``
    (0.8), brightness, contrast and saturation factors uniform in [``factor_min``,
    ``factor_max``] (1 ∓ 0.8 s) and hue ±``hue`` turns (0.2 s); grayscale: probability ``p``
    (0.2 min(s, 1)); blur: with probability ``p`` (0.5), sigma up to ``sigma_per_32px`` (2 s) per
    32 px of side; noise: Gaussian ``std`` (0.1 s) on [0, 1] pixels (vectors: ``vector_noise``
    s instead); erase: with probability ``p`` (0.5), one box of area uniform in [``area_min``,
    ``area_max``] (0.02 min(s, 1), 0.33 s) of the image. ``crop_area_min`` (a trial's own,
    when set) replaces the crop's ``area_min``.
    """
    s = float(strength)
    if component == "crop":
        area = min(1.0, max(0.08, 1 - 0.92 * s)) if crop_area_min is None else crop_area_min
        return {"area_min": area, "aspect_min": (3 / 4) ** s, "aspect_max": (4 / 3) ** s}
    if component == "flip":
        return {"p": 0.5 * min(1.0, s)}
    if component == "rotate":
        return {"degrees": 30 * s}
    if component == "color":
        return {"p": 0.8, "factor_min": max(0.0, 1 - 0.8 * s), "factor_max": 1 + 0.8 * s,
                "hue": 0.2 * s}  # fmt: skip
    if component == "grayscale":
        return {"p": 0.2 * min(1.0, s)}
    if component == "blur":
        return {"p": 0.5, "sigma_per_32px": 2.0 * s}
    if component == "noise":
        return {"std": 0.1 * s}
    if component == "erase":
        return {"p": 0.5, "area_min": 0.02 * min(1.0, s), "area_max": 0.33 * s}
    raise ValueError(f"augmentation component {component!r}: expected one of {COMPONENTS}")
