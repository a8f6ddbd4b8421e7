"""Derringer–Suich desirability (analysis.stats.desirability): the worked example of R's
``desirability`` package (vignette ``desirability.Rnw``, version 2.1: Myers and Montgomery's
conversion and activity equations, dMax(80, 97) and dTarget(55, 57.5, 60), optimised over a cube
and a sphere of radius 1.682), the tire-tread example of Derringer and Suich (1980) as the
NIST/SEMATECH e-Handbook prints it (§5.5.3.2.2), hand-computed transforms, a brute-force grid,
and a planted pair of conflicting responses on fitted surfaces."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.stats.desirability import (
    DesirabilityGoal,
    Region,
    desirability_optimum,
    maximise,
    overall,
)
from analysis.stats.surface import fit_response_surface


def conversion(x):
    x1, x2, x3 = x.T
    return (81.09 + 1.0284 * x1 + 4.043 * x2 + 6.2037 * x3 - 1.8366 * x1**2 + 2.9382 * x2**2
            - 5.1915 * x3**2 + 2.2150 * x1 * x2 + 11.375 * x1 * x3 - 3.875 * x2 * x3)  # fmt: skip


def activity(x):
    x1, x2, x3 = x.T
    return (59.85 + 3.583 * x1 + 0.2546 * x2 + 2.2298 * x3 + 0.83479 * x1**2 + 0.07484 * x2**2
            + 0.05716 * x3**2 - 0.3875 * x1 * x2 - 0.375 * x1 * x3 + 0.3125 * x2 * x3)  # fmt: skip


VIGNETTE_GOALS = (
    DesirabilityGoal("conversion", "max", 80, 97),
    DesirabilityGoal("activity", "target", 55, 60, target=57.5),
)


def vignette(x):
    return np.column_stack([conversion(x), activity(x)])


def overall_at(predict, goals, x) -> float:
    y = predict(np.atleast_2d(np.asarray(x, dtype=float)))
    ds = np.column_stack([g.d(y[:, i]) for i, g in enumerate(goals)])
    return float(overall(ds, [g.importance for g in goals])[0])


# ---- published: the desirability package's vignette
def test_the_vignettes_desirabilities_at_the_centre():
    assert VIGNETTE_GOALS[0].d(81.09) == pytest.approx(0.06411765, abs=5e-9)
    assert VIGNETTE_GOALS[1].d(59.85) == pytest.approx(0.06, abs=5e-9)


@pytest.mark.parametrize(
    ("region", "printed_point", "printed_value"),
    [
        (Region(3, box=1.682), (-0.5117132, 1.6820000, -0.5863863), 0.9425094),
        (Region(3, box=None, radius=1.682), (-0.5094851, 1.5034146, -0.5561415), 0.8581525),
    ],
    ids=["cuboidal", "spherical"],
)
def test_the_vignettes_optima_over_a_cube_and_a_sphere(region, printed_point, printed_value):
    # the printed point has the printed overall desirability under these goals
    assert overall_at(vignette, VIGNETTE_GOALS, printed_point) == pytest.approx(
        printed_value, abs=5e-8
    )
    point, value = maximise(vignette, VIGNETTE_GOALS, region)
    assert value >= printed_value - 5e-8
    assert value == pytest.approx(printed_value, abs=1e-6)
    assert point == pytest.approx(printed_point, abs=2e-3)
    assert region.holds(point).all()


# ---- published: Derringer and Suich's tire tread (NIST e-Handbook §5.5.3.2.2)
def tire_tread(x):
    x1, x2, x3 = x.T
    y1 = (139.12 + 16.49 * x1 + 17.88 * x2 + 2.21 * x3 - 4.01 * x1**2 - 3.45 * x2**2
          - 1.57 * x3**2 + 5.12 * x1 * x2 - 7.88 * x1 * x3 - 7.13 * x2 * x3)  # fmt: skip
    y2 = (1261.13 + 268.15 * x1 + 246.5 * x2 - 102.6 * x3 - 83.57 * x1**2 - 124.92 * x2**2
          + 199.2 * x3**2 + 69.37 * x1 * x2 - 104.38 * x1 * x3 - 94.13 * x2 * x3)  # fmt: skip
    y3 = 417.5 - 99.67 * x1 - 31.4 * x2 - 27.42 * x3
    y4 = (68.91 - 1.41 * x1 + 4.32 * x2 + 0.21 * x3 + 1.56 * x1**2 + 0.058 * x2**2
          - 0.32 * x3**2 - 1.62 * x1 * x2 + 0.25 * x1 * x3 - 0.12 * x2 * x3)  # fmt: skip
    return np.column_stack([y1, y2, y3, y4])


TIRE_GOALS = (  # the upper ends of Y1 and Y2 as Derringer and Suich set them (170, 1300)
    DesirabilityGoal("abrasion", "max", 120, 170),
    DesirabilityGoal("modulus", "max", 1000, 1300),
    DesirabilityGoal("elongation", "target", 400, 600, target=500),
    DesirabilityGoal("hardness", "target", 60, 75, target=67.5),
)


def test_the_tire_tread_optimum_has_the_printed_overall_desirability():
    """NIST prints the rounded equations, x* = (-0.10, 0.15, -1.0) and D = 0.596 there."""
    assert overall_at(tire_tread, TIRE_GOALS, [-0.10, 0.15, -1.0]) == pytest.approx(0.596, abs=1e-3)
    ds = [g.d(y) for g, y in zip(TIRE_GOALS, tire_tread(np.array([[-0.10, 0.15, -1.0]]))[0],
                                 strict=True)]  # fmt: skip
    assert ds[1] == 1.0  # the modulus is fully desirable there, as printed
    _, value = maximise(tire_tread, TIRE_GOALS, Region(3, box=1.63, radius=1.63))
    assert value >= 0.596 - 1e-3  # the search does at least as well as the published optimum


# ---- hand-computed transforms and the geometric mean
@pytest.mark.parametrize(
    ("goal", "y", "expected"),
    [
        (DesirabilityGoal("m", "max", 10, 20), [5, 10, 15, 20, 25], [0, 0, 0.5, 1, 1]),
        (DesirabilityGoal("m", "max", 10, 20, weight=2), [15], [0.25]),
        (DesirabilityGoal("m", "max", 10, 20, weight=0.5), [12.5], [0.5]),
        (DesirabilityGoal("m", "min", 10, 20), [5, 12.5, 20, 25], [1, 0.75, 0, 0]),
        (DesirabilityGoal("m", "target", 0, 10, target=8), [-1, 4, 8, 9, 11], [0, 0.5, 1, 0.5, 0]),
        (DesirabilityGoal("m", "target", 0, 10, target=8, weight=2), [4, 9], [0.25, 0.25]),
    ],
)
def test_each_goals_desirability_by_hand(goal, y, expected):
    assert goal.d(y) == pytest.approx(expected, abs=1e-12)


def test_the_overall_desirability_is_the_importance_weighted_geometric_mean():
    ds = np.array([[0.25, 1.0], [0.5, 0.5], [0.0, 1.0]])
    assert overall(ds, [1, 1]) == pytest.approx([0.5, 0.5, 0.0])
    assert overall(ds, [1, 3]) == pytest.approx([0.25**0.25, 0.5, 0.0])
    assert overall(ds, [1, 3])[0] == pytest.approx(math.sqrt(math.sqrt(0.25)))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"goal": "max", "low": 2, "high": 1}, "low .2. must be below high .1."),
        ({"goal": "target", "low": 0, "high": 1}, "a target goal needs low < target < high"),
        ({"goal": "target", "low": 0, "high": 1, "target": 1}, "target=1"),
        ({"goal": "max", "low": 0, "high": 1, "target": 0.5}, "target is only for goal"),
        ({"goal": "max", "low": 0, "high": 1, "weight": 0}, "weight and importance"),
        ({"goal": "most", "low": 0, "high": 1}, "goal must be max, min or target"),
    ],
)
def test_a_goal_that_cannot_be_met_or_read_is_refused_naming_it(fields, message):
    with pytest.raises(ValueError, match=f"goal for probe/knn_top1_h: .*{message}"):
        DesirabilityGoal("probe/knn_top1_h", **fields)


# ---- brute force: the search finds the grid's best, or better
def test_the_search_is_at_least_the_best_of_a_fine_grid():
    goals = (DesirabilityGoal("a", "max", 0, 1), DesirabilityGoal("b", "min", -1, 1, weight=2))

    def predict(x):
        return np.column_stack([0.5 + 0.4 * x[:, 0] - 0.3 * x[:, 1] ** 2,
                                0.2 + 0.6 * x[:, 0] + 0.5 * x[:, 1]])  # fmt: skip

    region = Region(2, box=1.0, radius=1.2)
    point, value = maximise(predict, goals, region)
    axis = np.linspace(-1, 1, 801)
    grid = np.array(np.meshgrid(axis, axis)).reshape(2, -1).T
    grid = grid[region.holds(grid)]
    ds = np.column_stack([g.d(predict(grid)[:, i]) for i, g in enumerate(goals)])
    assert value >= overall(ds, [1, 1]).max() - 1e-9
    assert region.holds(point).all()


# ---- planted: two responses that pull apart, on fitted surfaces
def two_responses() -> pd.DataFrame:
    rows = []
    noise = (0.002, -0.001, -0.002, 0.001)
    for i, u in enumerate((-1, 0, 1)):
        for j, v in enumerate((-1, 0, 1)):
            for r in range(2):
                e = noise[(r + i + 2 * j) % 4]
                rows.append({
                    "temperature": (0.05, 0.2, 0.8)[i], "batch_size": (32, 128, 512)[j],
                    "status": "finished",
                    # accuracy best at high τ; uniformity (lower is better) best at low τ
                    "probe/knn_top1_h": 0.8 + 0.05 * u - 0.02 * v**2 + e,
                    "z/uniform": -3.0 + 0.5 * u + 0.1 * v + 2 * e,
                })  # fmt: skip
    frame = pd.DataFrame(rows)
    frame.attrs |= {"factors": ["temperature", "batch_size"],
                    "scales": {"temperature": "log", "batch_size": "log"}}  # fmt: skip
    return frame


def test_two_conflicting_goals_meet_between_their_own_optima_with_their_intervals():
    frame = two_responses()
    surfaces = {m: fit_response_surface(frame, m) for m in ("probe/knn_top1_h", "z/uniform")}
    goals = (DesirabilityGoal("probe/knn_top1_h", "max", 0.75, 0.85),
             DesirabilityGoal("z/uniform", "min", -3.5, -2.5))  # fmt: skip
    found = desirability_optimum(surfaces, goals)
    # the planted truth, on a fine grid: d1 = (0.05 + 0.05u - 0.02v²)/0.1 and
    # d2 = (0.5 - 0.5u - 0.1v)/1, so D² = (0.5 + 0.5u - 0.2v²)(0.5 - 0.5u - 0.1v)
    axis = np.linspace(-1, 1, 2001)
    u, v = np.meshgrid(axis, axis)
    truth = np.clip(0.5 + 0.5 * u - 0.2 * v**2, 0, 1) * np.clip(0.5 - 0.5 * u - 0.1 * v, 0, 1)
    best = np.unravel_index(truth.argmax(), truth.shape)
    assert (u[best], v[best]) == pytest.approx((0.037, -0.25), abs=1e-3)
    assert found.coded["temperature"] == pytest.approx(u[best], abs=0.03)
    assert found.coded["batch_size"] == pytest.approx(v[best], abs=0.05)
    assert found.overall == pytest.approx(math.sqrt(truth.max()), abs=0.01)
    for metric, response in found.responses.items():
        low, high = response["interval"]
        assert low < response["predicted"] < high, metric
        assert 0 < response["d"] < 1
    assert found.edges == ()
    assert found.point["temperature"] == pytest.approx(0.2 * 4**0.037, rel=0.05)
    assert "overall desirability D = 0.50" in found.sentences()[0]


def test_an_optimum_on_the_regions_edge_is_said():
    frame = two_responses()
    surfaces = {"probe/knn_top1_h": fit_response_surface(frame, "probe/knn_top1_h")}
    found = desirability_optimum(surfaces, [DesirabilityGoal("probe/knn_top1_h", "max",
                                                             0.7, 0.95)])  # fmt: skip
    assert "temperature" in found.edges
    assert found.point["temperature"] == pytest.approx(0.8, rel=1e-3)
    assert "on the region's edge (temperature" in found.sentences()[1]


# ---- the study's goals, through the analysis and the report
def test_the_report_balances_the_study_files_goals_and_draws_d(tmp_path):
    from analysis.report.page import write_report
    from analysis.study_analysis import analyse

    frame = two_responses()
    frame["point_id"] = [f"p{i // 2}" for i in range(len(frame))]
    frame["replicate"] = [i % 2 for i in range(len(frame))]
    frame.attrs |= {"study": "goals", "goals": [
        {"metric": "probe/knn_top1_h", "goal": "max", "low": 0.75, "high": 0.85},
        {"metric": "z/uniform", "goal": "min", "low": -3.5, "high": -2.5},
    ]}  # fmt: skip
    analysis = analyse(frame, ("probe/knn_top1_h",))  # z/uniform joins as a goal's response
    assert set(analysis.fits) == {"probe/knn_top1_h", "z/uniform"}
    found = analysis.desirability
    assert found.overall == pytest.approx(0.5, abs=0.02)
    summary = analysis.to_json()["desirability"]
    assert summary["overall"] == pytest.approx(found.overall)
    assert [g["metric"] for g in summary["goals"]] == ["probe/knn_top1_h", "z/uniform"]
    written = write_report(analysis, tmp_path)
    page = (tmp_path / "report.html").read_text()
    assert "Several goals at once (desirability)" in page
    assert "Most desirable point in the design region" in page
    assert "figure:desirability_temperature_batch_size" in written
    assert page.index("Several goals at once") < page.index("Response surfaces")


def test_goals_on_a_response_no_factor_moves_give_no_overall_desirability():
    from analysis.study_analysis import analyse

    frame = two_responses()
    frame["flat"] = 0.5 + np.tile([0.001, -0.001], len(frame) // 2)
    frame.attrs |= {"goals": [{"metric": "flat", "goal": "max", "low": 0, "high": 1}]}
    found = analyse(frame, ("probe/knn_top1_h",)).desirability
    assert found == ("no overall desirability: the model of flat does not beat the mean, so its "
                     "predictions carry no information to balance")  # fmt: skip
