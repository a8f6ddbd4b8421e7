"""Which effects a two-level design cannot tell apart: each factor's aliases up to two-factor
interactions, read from the design points the results hold.

In a fractional factorial of resolution III (``generators: "a b ab"``: C = AB) the column of C's
main effect equals the column of the A × B interaction, so the estimate called C's is C's effect
plus A × B's (Montgomery, *Design and Analysis of Experiments*, ch. 8). ``study plan`` prints the
alias structure of the design it builds; the analysis reads the same structure back from the
points that ran, so every finding, table row and sentence that names C's effect names its
aliases too, whatever the record's origin (MLflow or a results file).

Only two-level numeric factors are coded (±1 at their two levels); a design with a factor at
three levels or more (a central composite's axial points) estimates its terms apart and has no
aliases here.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd

INTERACTION = " × "


def coded_points(df: pd.DataFrame, factors: list[str]) -> pd.DataFrame | None:
    """The distinct design points of the finished trials, each factor coded −1/+1 at its low
    and high level; None when some factor is not numeric at exactly two levels."""
    done = df[df["status"] == "finished"] if "status" in df else df
    columns = {}
    for name in factors:
        if name not in done:
            return None
        values = pd.to_numeric(done[name], errors="coerce")
        levels = sorted(set(values.dropna()))
        if len(levels) != 2 or values.isna().any():
            return None
        columns[name] = np.where(values == levels[1], 1, -1)
    if not columns:
        return None
    return pd.DataFrame(columns).drop_duplicates().reset_index(drop=True)


def alias_map(df: pd.DataFrame) -> dict[str, tuple[str, ...]]:
    """factor -> the other main effects and two-factor interactions its main-effect column
    equals (or negates) over the design points: empty for a full factorial, and for a design
    that is not two-level."""
    factors = [f for f in df.attrs.get("factors", []) if f in df]
    coded = coded_points(df, factors)
    if coded is None or len(coded) >= 2 ** len(factors):  # every combination: no aliases
        return {}
    out: dict[str, tuple[str, ...]] = {}
    for name in factors:
        column = coded[name].to_numpy()
        others = [f for f in factors if f != name]
        found = [o for o in others if abs(column @ coded[o].to_numpy()) == len(coded)]
        found += [
            f"{a}{INTERACTION}{b}"
            for a, b in combinations(others, 2)
            if abs(column @ (coded[a].to_numpy() * coded[b].to_numpy())) == len(coded)
        ]
        if found:
            out[name] = tuple(found)
    return out


def alias_words(aliases: tuple[str, ...]) -> str:
    """' (aliased with temperature × batch_size: the estimate is their sum)' or ''."""
    if not aliases:
        return ""
    return f" (aliased with {' and '.join(aliases)}: the estimate is their sum)"


__all__ = ["alias_map", "alias_words", "coded_points"]
