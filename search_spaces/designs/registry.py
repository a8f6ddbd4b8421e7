"""The design registry: every design kind a study file may name, in one table.

A row says what ``design.kind`` is called, the module of :mod:`search_spaces.designs` that makes
it, and which ``design:`` options it reads (besides ``replicates`` and ``seed``, which every kind
reads). A fixed kind's module has ``points(spec) -> (points, structure)``: its design points and
what the kind adds under the table; the runner then runs each point at every replicate
(:func:`search_spaces.designs.trials.fixed_design`). An adaptive kind's module has
``design(spec)``, an object that proposes trials as results come in
(:class:`search_spaces.designs.adaptive.AdaptiveDesign`).

The study file's schema (:mod:`search_spaces.spec`) reads the names and the options from here,
so this module imports nothing of the project: the spec imports it, and the kinds' modules
import the spec. A new kind is its module and its row (docs/extending.md, "A design kind");
tests/search_spaces/designs/test_design_kinds.py runs over every row.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class DesignKind:
    """One kind of design: its name in a study file, its module, the options it reads."""

    name: str
    module: str  # search_spaces.designs.<module>
    reads: tuple[str, ...] = ()  # design options only this kind (and others that list it) reads
    adaptive: bool = False  # trials proposed from results (module.design) or fixed (.points)
    augmentable: bool = False  # a finished one can be extended to a central composite


# In the order the schema lists them to a user who wrote an unknown kind.
KINDS: dict[str, DesignKind] = {
    kind.name: kind
    for kind in (
        DesignKind("full_factorial", "full_factorial", augmentable=True),
        DesignKind("fractional_factorial", "fractional_factorial", ("generators", "resolution"),
                   augmentable=True),
        DesignKind("central_composite", "central_composite",
                   ("face", "alpha", "center", "augments")),
        DesignKind("box_behnken", "box_behnken", ("center",)),
        DesignKind("latin_hypercube", "latin_hypercube", ("samples",)),
        DesignKind("optuna", "adaptive", ("samples", "metric", "objectives", "sampler", "mode"),
                   adaptive=True),
        DesignKind("points", "points", ("points",)),
    )
}  # fmt: skip
KIND_NAMES = tuple(KINDS)


def options_read() -> dict[str, tuple[str, ...]]:
    """Each design option that only some kinds read -> those kinds, in the table's order."""
    found: dict[str, tuple[str, ...]] = {}
    for kind in KINDS.values():
        for option in kind.reads:
            found[option] = (*found.get(option, ()), kind.name)
    return found


def augmentable_kinds() -> tuple[str, ...]:
    """The kinds whose finished study ``study augment`` extends to a central composite."""
    return tuple(name for name, kind in KINDS.items() if kind.augmentable)


def kind_module(name: str) -> ModuleType:
    """The module that makes designs of kind ``name`` (imported on first use)."""
    return importlib.import_module(f"{__package__}.{KINDS[name].module}")
