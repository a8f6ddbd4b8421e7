"""Sequential studies: a finished two-level factorial becomes a central composite design.

:func:`augment_spec` turns the factorial's study file into the central composite's: the same
study name (so the same MLflow experiment), description, fixed fields, budget, factors,
resources, replicates and seed, with ``design`` set to ``central_composite`` and
``design.augments`` naming the factorial (its ``spec_sha`` and kind). The design built from it
(:func:`search_spaces.designs.build_design`) is the factorial's trials as block 1, under their
own keys and seeds (found in the record as FINISHED, never re-run), and the axial and centre
points as block 2. Nothing here reads or writes the record.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from search_spaces.designs import FixedDesign, build_design, check_augmentable
from search_spaces.spec import DEFAULT_CENTER, StudySpec, parse_spec


def augment_spec(
    spec: StudySpec,
    *,
    face: str = "ccf",
    alpha: str | float | None = None,
    center: int = DEFAULT_CENTER,
) -> tuple[StudySpec, FixedDesign]:
    """The central composite study that extends ``spec`` (a two-level factorial), and its design
    with every trial validated. StudyError (naming the field and value) for a study that is not a
    two-level factorial with a numeric factor, or a new point that is not a valid trial."""
    check_augmentable(spec)
    data = spec.canonical()
    augments: dict[str, Any] = {"spec_sha": spec.sha, "kind": spec.design.kind}
    for option in ("generators", "resolution"):
        if getattr(spec.design, option) is not None:
            augments[option] = getattr(spec.design, option)
    design: dict[str, Any] = {
        "kind": "central_composite", "face": face, "center": center,
        "replicates": spec.design.replicates, "seed": spec.design.seed, "augments": augments,
    }  # fmt: skip
    if alpha is not None:
        design["alpha"] = alpha
    data["design"] = design
    new = parse_spec(data, f"{spec.study} augmented (study augment)")
    return new, build_design(new)


def augmented_path(source: Path) -> Path:
    """Where the augmented study file goes: beside the factorial's, ``<stem>-ccd.yaml``."""
    return source.with_name(f"{source.stem}-ccd.yaml")


def augmented_yaml(spec: StudySpec, design: FixedDesign, source: str) -> str:
    """The augmented study file: a comment saying what it is, then the canonical spec."""
    blocks = design.structure["blocks"]
    augments = spec.design.augments
    header = [
        f"# {spec.study}: the {augments.kind} of {source} (spec_sha {augments.spec_sha})",
        f"# augmented to a central composite by `study augment` (face {spec.design.face}, alpha "
        f"{design.structure['alpha']:.4g}, {spec.design.center} centre runs).",
        f"# Block 1: its {blocks['1']} finished trials, kept as recorded; block 2: {blocks['2']} "
        "new axial and centre trials.",
        "# `study run` on this file runs block 2 only, as a second parent run of the same study.",
    ]
    return (
        "\n".join(header)
        + "\n"
        + yaml.safe_dump(spec.canonical(), sort_keys=False, allow_unicode=True)
    )
