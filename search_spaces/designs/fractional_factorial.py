"""``fractional_factorial``: a two-level fraction (pyDOE's ``fracfact`` from generators, or
``fracfact_by_res`` from a resolution), with its defining relation, resolution and aliases.
"""

from __future__ import annotations

import itertools
import string
from typing import Any

import numpy as np

from search_spaces.designs.base import INTEGER_FIELDS, Point
from search_spaces.designs.levels import every_factor
from search_spaces.spec import Factor, StudyError, StudySpec


def _two_levels(name: str, factor: Factor) -> tuple[Any, Any]:
    if factor.levels is not None:
        if len(factor.levels) != 2:
            raise StudyError(
                f"factors.{name}: fractional_factorial needs exactly 2 levels, "
                f"got {len(factor.levels)} ({factor.levels})"
            )
        return factor.levels[0], factor.levels[1]
    lo, hi = factor.range
    return (int(lo), int(hi)) if name in INTEGER_FIELDS else (lo, hi)


def _main_letters(n: int) -> str:
    return string.ascii_lowercase[:n]


def check_generators(text: str, names: list[str]) -> list[str]:
    """Validate a fractional-factorial generator string for these factors; returns its words.

    Every word is one column: a single letter is a main factor (``a``, ``b``, …, one each), a
    longer word the product of main factors (``ab``, ``-abc``). A word whose letters cancel to
    a main factor (``aab`` is ``b``) or repeat another column would confound two factors: refused.
    """
    words = text.lower().split()
    where = f"design.generators: {text!r}"
    if len(words) != len(names):
        raise StudyError(
            f"{where} defines {len(words)} columns but the study has {len(names)} factors "
            f"({', '.join(names)}): give one word per factor"
        )
    columns: dict[frozenset, str] = {}
    for word in words:
        bare = word.lstrip("+-")
        if not bare.isalpha() or not bare.isascii():
            raise StudyError(f"{where}: word {word!r} is not made of letters (a, b, ab, -abc)")
    mains = [w.lstrip("+-") for w in words if len(w.lstrip("+-")) == 1]
    if mains != list(_main_letters(len(mains))):
        raise StudyError(
            f"{where}: the main factors (single letters) must be "
            f"{' '.join(_main_letters(len(mains))) or 'a b c …'}, once each and in that order; "
            f"got {' '.join(mains) or 'none'}"
        )
    for word in words:
        bare = word.lstrip("+-")
        strange = sorted(set(bare) - set(mains))
        if strange:
            raise StudyError(
                f"{where}: word {word!r} uses {', '.join(strange)}, which "
                f"{'is not a main factor' if len(strange) == 1 else 'are not main factors'} "
                f"(the main factors are the single letters: {', '.join(mains) or 'none'})"
            )
        # letters that appear twice cancel (x·x = 1 for ±1 columns)
        product = frozenset(c for c in set(bare) if bare.count(c) % 2)
        if not product:
            raise StudyError(f"{where}: word {word!r} cancels to a constant column")
        if product in columns:
            raise StudyError(
                f"{where}: column {word!r} equals column {columns[product]!r}, so two factors "
                "would be confounded with each other; every column must differ"
            )
        columns[product] = word
    return words


# Alias analysis enumerates every word of the 2^k candidates; beyond this many factors it is
# skipped (a study of learned models with more two-level factors is not one we expect).
MAX_ALIAS_FACTORS = 16


def alias_structure(coded: np.ndarray, names: list[str]) -> dict[str, Any]:
    """The defining relation, the aliases up to two-factor interactions and the resolution of a
    two-level fraction, read from its ±1 design matrix (shape (runs, k)).

    Factors are lettered A, B, C, … in study order (``letters``). A word (a product of factor
    columns) is in the defining relation when its column is constant: ``I = ABD = -ACE`` (+1 or
    -1). The resolution is the length of the shortest word (None for a full factorial). Alias
    chains list the main effects and two-factor interactions whose columns coincide (``-``:
    opposite sign), every main effect's chain and each two-factor chain with more than one
    member, as in Montgomery, Design and Analysis of Experiments, §8.4.
    """
    k = len(names)
    letters = {string.ascii_uppercase[i]: name for i, name in enumerate(names)}
    if k > MAX_ALIAS_FACTORS:
        return {"letters": letters, "defining_relation": None, "resolution": None,
                "aliases": None,
                "note": f"alias analysis skipped beyond {MAX_ALIAS_FACTORS} factors"}  # fmt: skip
    signs = np.sign(np.asarray(coded, dtype=float))
    runs = len(signs)

    def column(word: tuple[int, ...]) -> np.ndarray:
        return np.prod(signs[:, list(word)], axis=1) if word else np.ones(runs)

    def text(word: tuple[int, ...]) -> str:
        return "".join(string.ascii_uppercase[i] for i in word)

    words = []
    for size in range(1, k + 1):
        for word in itertools.combinations(range(k), size):
            col = column(word)
            if np.all(col == col[0]):
                words.append(("" if col[0] > 0 else "-") + text(word))
    effects = [(i,) for i in range(k)] + list(itertools.combinations(range(k), 2))
    chains, placed = [], set()
    for effect in effects:
        if effect in placed:
            continue
        col = column(effect)
        chain = [text(effect)]
        for other in effects:
            if other != effect and other not in placed:
                dot = float(col @ column(other))
                if abs(dot) == runs:  # identical or opposite columns
                    chain.append(("" if dot > 0 else "-") + text(other))
                    placed.add(other)
        placed.add(effect)
        if len(effect) == 1 or len(chain) > 1:
            chains.append(" = ".join(chain))
    resolution = min((len(w.lstrip("-")) for w in words), default=None)
    return {"letters": letters, "defining_relation": ["I", *words], "resolution": resolution,
            "aliases": chains}  # fmt: skip


def points(spec: StudySpec) -> tuple[list[Point], dict]:
    names = list(spec.factors)
    design = spec.design
    if len(names) < 3:
        raise StudyError(
            f"design.kind: fractional_factorial needs at least 3 two-level factors, got "
            f"{len(names)} ({', '.join(names)}); use full_factorial"
        )
    lows_highs = every_factor(names, lambda n: _two_levels(n, spec.factors[n]))
    if design.generators:
        check_generators(design.generators, names)
        try:
            from pydoe import fracfact

            coded = fracfact(design.generators.lower())
        except ValueError as err:  # anything our check did not foresee still names the field
            raise StudyError(f"design.generators: {design.generators!r}: {err}") from None
    else:
        try:
            from pydoe import fracfact_by_res

            coded = fracfact_by_res(len(names), design.resolution or 3)
        except ValueError as err:
            raise StudyError(
                f"design.resolution: {design.resolution}: no two-level fractional factorial of "
                f"that resolution for {len(names)} factors ({err})"
            ) from None
    found = [
        Point({n: lows_highs[n][int(c > 0)] for n, c in zip(names, row, strict=True)})
        for row in coded
    ]
    return found, alias_structure(coded, names)
