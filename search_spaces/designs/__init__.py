"""Designs: a study file becomes compute-matched trials (design point × replicate).

A design is one object, built by :func:`build_design`: a :class:`FixedDesign` (pyDOE's
``fullfact``, ``fracfact``/``fracfact_by_res``, central composite, ``bbdesign``, ``lhs``, or a
finished factorial augmented to a central composite (:func:`augmented_design`): every trial known
before anything runs) or an :class:`AdaptiveDesign` (``optuna``: trials proposed one by one by an
Optuna sampler from the results so far). The runner asks either for a :class:`Schedule` given
the trials already in the record (:class:`PastTrial`), launches what the schedule proposes,
and reports each finished trial's value back; it never looks inside. A resumed study gets the
same trials under the same keys: a fixed design's unfinished rows, an adaptive design's
unfinished proposals (resumed from their checkpoints) before any new proposal.
Continuous values for integer fields are snapped: ``batch_size`` to the nearest divisor of
``budget_examples`` inside the factor's bounds (so compute still matches exactly), other integers
to the nearest integer; the table shows the snapped value and what it was snapped from.
Every row is validated as a :class:`TrialConfig` before anything runs.

The package, as Optuna's ``samplers/``: the registry first (:mod:`.registry`, every kind in one
table), the shared values (:mod:`.base`) and helpers (:mod:`.levels`, :mod:`.coded`,
:mod:`.trials`), one module per kind (:mod:`.full_factorial`, :mod:`.fractional_factorial`,
:mod:`.central_composite`, :mod:`.box_behnken`, :mod:`.latin_hypercube`, :mod:`.points`,
:mod:`.adaptive` for ``optuna``), the augmented design (:mod:`.augmented`), the replicate-extension
rule (:mod:`.replicates`) and :func:`build_design` (:mod:`.build`).

Every public name is importable from here, as before the split. They are found on first use
(PEP 562) rather than imported with the package: :mod:`search_spaces.spec` reads the registry,
and the kinds' modules import the spec, so importing them all here would be an import circle
the moment the spec is imported first.
"""

from __future__ import annotations

import importlib
from typing import Any

from search_spaces.designs.registry import KIND_NAMES as KIND_NAMES
from search_spaces.designs.registry import KINDS, kind_module
from search_spaces.designs.registry import DesignKind as DesignKind

# public name -> the module of this package that holds it
HOMES = {
    **dict.fromkeys(("ABBREVIATIONS", "INTEGER_FIELDS", "FINISHED", "TrialPlan", "PastTrial",
                     "Schedule", "FixedDesign", "DesignTable", "Point"), "base"),
    **dict.fromkeys(("fixed_fields", "valid_batch_sizes", "snap_integer", "every_factor",
                     "refuse_all"), "levels"),
    **dict.fromkeys(("check_generators", "MAX_ALIAS_FACTORS", "alias_structure"),
                    "fractional_factorial"),
    **dict.fromkeys(("rotatable_alpha", "orthogonal_alpha", "ccd_alpha", "ccd_coded"),
                    "central_composite"),
    "bb_coded": "box_behnken",
    **dict.fromkeys(("check_augmentable", "factorial_spec", "augment_alpha",
                     "augmented_design"), "augmented"),
    **dict.fromkeys(("trial_config", "UNMATCHABLE", "merged_budget_problems", "fitting_budgets",
                     "fixed_design"), "trials"),
    **dict.fromkeys(("AdaptiveDesign", "objectives_of", "adaptive_sample",
                     "batch_sizes_matching"), "adaptive"),
    "build_design": "build",
    "extends_replicates": "replicates",
}  # fmt: skip

__all__ = sorted([*HOMES, "GENERATORS", "KINDS", "KIND_NAMES", "DesignKind", "kind_module"])


def generators() -> dict[str, Any]:
    """Each fixed kind -> its module's ``points`` (the table the module once held by hand)."""
    return {name: kind_module(name).points for name, kind in KINDS.items() if not kind.adaptive}


def __getattr__(name: str) -> Any:
    if name == "GENERATORS":
        return generators()
    if name in HOMES:
        return getattr(importlib.import_module(f"{__name__}.{HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
