"""``central_composite``: a two-level factorial, axial points and centre runs (face ccf, cci
or ccc; alpha rotatable, orthogonal or a number), crossed with every categorical combination.
A central composite that extends a finished factorial (``design.augments``) is
:mod:`search_spaces.designs.augmented`.
"""

from __future__ import annotations

import math

import numpy as np

from search_spaces.designs.base import Point
from search_spaces.designs.coded import check_levels_kept, coded_points, numeric_split
from search_spaces.spec import StudyError, StudySpec


# Response-surface designs: coded rows (factorial/axial/edge points, then centre runs) and the
# role of each row. Coded units: -1 and +1 are a factor's bounds, 0 its centre on its scale.
def rotatable_alpha(k: int) -> float:
    """(2^k)^(1/4): the prediction variance depends only on the distance from the centre
    (NIST e-Handbook 5.3.3.6.1, Table 3.23: 1.414 for 2 factors, 1.682 for 3)."""
    return float((2**k) ** 0.25)


def orthogonal_alpha(k: int, center: int) -> float:
    """The alpha at which the pure quadratic columns of one unblocked CCD are orthogonal.

    With F = 2^k factorial runs and N = F + 2k + center runs in all, the centred columns x_i^2
    and x_j^2 are orthogonal when (F + 2 alpha^2)^2 = F N (Myers, Montgomery and Anderson-Cook,
    Response Surface Methodology, §7.4): alpha = sqrt((sqrt(F N) - F) / 2). pyDOE's
    "orthogonal" is another thing, orthogonal blocking of a two-block design.
    """
    f = 2**k
    return float(math.sqrt((math.sqrt(f * (f + 2 * k + center)) - f) / 2))


def ccd_alpha(k: int, face: str, alpha: str | float, center: int) -> float:
    """The axial distance in coded units (ccf: 1); errors never reach here (the spec checks)."""
    if face == "ccf":
        return 1.0
    if alpha == "rotatable":
        return rotatable_alpha(k)
    if alpha == "orthogonal":
        return orthogonal_alpha(k, center)
    return float(alpha)


def ccd_coded(k: int, face: str, alpha: float, center: int) -> tuple[np.ndarray, list[str]]:
    """Central composite design in coded units and each row's role.

    Rows (shape (2^k + 2k + center, k)): the 2^k factorial points (pyDOE ``ff2n``: the first
    factor varies slowest, as in every table of this project; NIST lists the same rows in Yates
    order), the 2k axial points (-a, +a on each factor in turn), the centre runs. ccc: factorial
    at ±1, axial at ±alpha (outside the bounds); cci: the ccc scaled by 1/alpha, so axial points
    sit on the bounds; ccf: axial at ±1. Roles: factorial, axial, center.
    """
    from pydoe import ff2n

    factorial = ff2n(k)
    axial = np.zeros((2 * k, k))
    for i in range(k):
        axial[2 * i : 2 * i + 2, i] = [-1.0, 1.0]
    if face == "cci":
        factorial = factorial / alpha
    elif face == "ccc":
        axial = axial * alpha
    coded = np.vstack([factorial, axial, np.zeros((center, k))])
    roles = ["factorial"] * len(factorial) + ["axial"] * len(axial) + ["center"] * center
    return coded, roles


def points(spec: StudySpec) -> tuple[list[Point], dict]:
    numeric, categorical = numeric_split(spec)
    check_levels_kept(spec, numeric)
    design = spec.design
    k = len(numeric)
    if k == 1:  # no axial points on one axis: low, high and the centre runs
        if "alpha" in design.model_fields_set and design.face != "ccf":
            raise StudyError(
                f"design.alpha: {design.alpha!r} needs at least 2 numeric factors, got 1 "
                f"({numeric[0]}): one factor has low, high and centre runs only; remove alpha"
            )
        coded = np.array([[-1.0], [1.0]] + [[0.0]] * design.center)
        roles = ["factorial", "factorial"] + ["center"] * design.center
        alpha = 1.0
    else:
        alpha = ccd_alpha(k, design.face, design.alpha, design.center)
        coded, roles = ccd_coded(k, design.face, alpha, design.center)
    structure = {"face": design.face, "alpha": alpha, "alpha_rule": design.alpha,
                 "center_runs": design.center, "numeric_factors": numeric}  # fmt: skip
    return coded_points(spec, numeric, categorical, coded, roles), structure
