"""The Pareto frontier against literal tables: ties kept, dominated rows and missing values
left out, either direction, one objective or several."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.stats.frontier import pareto_front, pareto_frontier


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


def brute_force_front(rows: list[tuple[float, float, float]]) -> set[int]:
    """Indices of rows (max, min, max) that no other row dominates, by the definition."""

    def at_least(a, b):
        return a[0] >= b[0] and a[1] <= b[1] and a[2] >= b[2]

    beaten = {i for i, r in enumerate(rows) for o in rows if at_least(o, r) and o != r}
    return set(range(len(rows))) - beaten


def test_three_objectives_with_ties_and_missing_values_match_the_definition():
    rows = [(0.9, 1.0, 5), (0.9, 1.0, 5), (0.8, 0.5, 5), (0.95, 2.0, 1), (0.7, 0.4, 9),
            (0.7, 0.5, 9), (0.9, 1.5, 4), (0.6, 3.0, 1)]  # fmt: skip
    df = pd.DataFrame(rows, columns=["acc", "align", "rank"])
    df.loc[len(df)] = [0.99, None, 9]  # best everywhere it has a value, but one is missing
    found = pareto_frontier(df, {"acc": "max", "align": "min", "rank": "max"})
    assert set(found.index) == brute_force_front(rows) == {0, 1, 2, 3, 4}


def test_a_multi_objective_studys_front_says_how_many_trials_it_holds():
    df = pd.DataFrame({
        "point_id": ["o-1", "o-2", "o-3", "o-4", "o-5"],
        "status": ["finished", "finished", "finished", "failed", "finished"],
        "temperature": [0.1, 0.2, 0.4, 0.3, 0.15],
        "probe/knn_top1_h": [0.90, 0.93, 0.95, 0.99, None],
        "z/uniform": [-3.5, -3.4, -3.0, -4.0, -3.9],
    })  # fmt: skip
    df.attrs["factors"] = ["temperature"]
    objectives = [{"metric": "probe/knn_top1_h", "mode": "max"},
                  {"metric": "z/uniform", "mode": "min"}]  # fmt: skip
    front = pareto_front(df, objectives)
    # o-4 failed and o-5 has no accuracy: neither is placed; the three others trade off
    assert list(front.front["point_id"]) == ["o-1", "o-2", "o-3"] and front.missing == 1
    assert front.sentence().startswith("3 of 3 finished trials are on the Pareto front of "
                                       "highest probe/knn_top1_h and lowest z/uniform")  # fmt: skip
    assert front.sentence().endswith("; 1 more finished trial lacked an objective and cannot be "
                                     "placed.")  # fmt: skip
    data = front.to_json()
    assert data["front"][0] == {"point_id": "o-1", "temperature": 0.1,
                                "probe/knn_top1_h": 0.9, "z/uniform": -3.5}  # fmt: skip
    assert data["objectives"] == objectives and data["n_trials"] == 3
