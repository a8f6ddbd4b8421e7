"""``box_behnken``: the midpoints of the cube's edges and centre runs (pyDOE's ``bbdesign``),
crossed with every categorical combination."""

from __future__ import annotations

import numpy as np

from search_spaces.designs.base import Point
from search_spaces.designs.coded import check_levels_kept, coded_points, numeric_split
from search_spaces.spec import StudyError, StudySpec


def bb_coded(k: int, center: int) -> tuple[np.ndarray, list[str]]:
    """Box-Behnken design in coded units (pyDOE ``bbdesign``) and each row's role.

    Rows (shape (4 * k(k-1)/2 + center, k)): for every pair of factors a 2^2 factorial (first
    of the pair slowest) with the others at 0 (midpoints of the cube's edges), then the centre
    runs. Roles: edge, center. This is Box and Behnken's construction for 3 to 5 factors; their
    designs for 6 or more cross larger blocks, pyDOE crosses pairs still. Needs k >= 3 (checked
    by the caller).
    """
    from pydoe import bbdesign

    edges = bbdesign(k, center=0)
    coded = np.vstack([edges, np.zeros((center, k))])
    return coded, ["edge"] * len(edges) + ["center"] * center


def points(spec: StudySpec) -> tuple[list[Point], dict]:
    numeric, categorical = numeric_split(spec)
    check_levels_kept(spec, numeric)
    if len(numeric) < 3:
        raise StudyError(
            f"design.kind: box_behnken needs at least 3 numeric factors, got {len(numeric)} "
            f"({', '.join(numeric)}); use central_composite"
        )
    coded, roles = bb_coded(len(numeric), spec.design.center)
    structure = {"center_runs": spec.design.center, "numeric_factors": numeric}
    return coded_points(spec, numeric, categorical, coded, roles), structure
