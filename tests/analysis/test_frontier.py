"""The Pareto frontier against literal tables: ties kept, dominated rows and missing values
left out, either direction, one objective or several."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.frontier import pareto_frontier


def test_frontier_min_min_with_ties_and_dominated_rows():
    df = pd.DataFrame({
        "point_id": ["a", "b", "c", "d", "e", "f", "g"],
        "z/align":   [0.2, 0.5, 0.2, 0.9, 0.5, 0.4, None],
        "z/uniform": [-2.0, -3.0, -2.0, -3.5, -2.9, -2.5, -9.0],
    })  # fmt: skip
    front = pareto_frontier(df, {"z/align": "min", "z/uniform": "min"})
    # a and c tie (both kept); b beats e; f is dominated by nobody: 0.4 < 0.5 and -2.5 < -2.0;
    # d has the best uniformity; g has no alignment
    assert list(front["point_id"]) == ["a", "b", "c", "d", "f"]


def test_frontier_max_and_single_objective():
    df = pd.DataFrame({"acc": [0.9, 0.95, 0.95, 0.7], "cost": [1.0, 3.0, 2.0, 0.5]})
    assert list(pareto_frontier(df, {"acc": "max", "cost": "min"}).index) == [0, 2, 3]
    assert list(pareto_frontier(df, {"acc": "max"}).index) == [1, 2]
    with pytest.raises(ValueError, match="direction must be 'min' or 'max', got 'up'"):
        pareto_frontier(df, {"acc": "up"})
