"""Canonical and ridge analysis of second-order surfaces (analysis.stats.canonical): rsm's printed
numbers (summary(CR2.rsm), summary(heli.rsm), canonical.path(heli.rsm), canonical(CO.rsm,
threshold = 0); article-JSS.html of rsm 2.10.6), a brute-force search on the sphere, and the
closed forms of the trust-region problem.

Coding: rsm codes x_rsm = (natural - centre) / step; ours codes the observed range to [-1, 1],
so x_rsm = a x_ours with a = half range / step (√2 × 5 / 5 for ChemReact's axial points at
±7.07, 2 for heli's at ±2 steps), eigenvalues of B scale as λ_rsm = λ_ours / a², distances as
d_rsm = a d_ours; eigenvectors are the same when every factor has the same a, as here.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from rsm_examples import CHEM_REACT, HELI_CODING, heli_frame, linear, printed

from analysis.stats.canonical import (
    canonical_analysis,
    canonical_path,
    ridge_analysis,
    sphere_optimum,
)
from analysis.stats.surface import fit_response_surface

CHEM_A = 7.07 / 5
HELI_A = 2.0


def chem_react():
    return fit_response_surface(CHEM_REACT, "Yield", ["Time", "Temp"], goal="max",
                                scales=linear("Time", "Temp"), blocks="Block")  # fmt: skip


def heli():
    return fit_response_surface(heli_frame(), "ave", list(HELI_CODING), goal="max",
                                scales=linear(*HELI_CODING), blocks="block")  # fmt: skip


def same_up_to_sign(ours, printed_vector, digits: int = 7) -> None:
    ours = np.asarray(ours)
    theirs = np.asarray([float(v) for v in printed_vector])
    sign = 1.0 if ours @ theirs > 0 else -1.0
    assert np.abs(sign * ours - theirs).max() <= 0.5 * 10.0**-digits * (1 + 1e-6), (ours, theirs)


# ---- published: rsm's canonical analyses
def test_chem_react_canonical_analysis_matches_rsm():
    found = canonical_analysis(chem_react())
    printed(found.eigenvalues[0] / CHEM_A**2, "-0.9233027")
    printed(found.eigenvalues[1] / CHEM_A**2, "-1.3186949")
    vectors = np.array(found.eigenvectors)
    same_up_to_sign(vectors[:, 0], ["-0.1601375", "-0.9870947"])
    same_up_to_sign(vectors[:, 1], ["-0.9870947", "0.1601375"])
    assert found.kind == "maximum" and found.inside
    printed(found.stationary["Time"], "86.86148")
    printed(found.stationary["Temp"], "176.67190")
    printed(found.stationary_coded["Time"] * CHEM_A, "0.3722954")
    printed(found.stationary_coded["Temp"] * CHEM_A, "0.3343802")
    # the fitted value there from the printed coefficients (the average block)
    expected = 84.095427 - 4.457530 / 2 + (0.932541 * 0.3722954 + 0.577712 * 0.3343802) / 2
    assert found.predicted == pytest.approx(expected, abs=5e-6)
    low, high = found.interval
    assert low < found.predicted < high


def test_paper_helicopter_canonical_analysis_matches_rsm():
    found = canonical_analysis(heli())
    for value, text in zip(found.eigenvalues, ["3.258222", "-1.198324", "-3.807935",
                                               "-4.651963"], strict=True):  # fmt: skip
        printed(value / HELI_A**2, text)
    vectors = np.array(found.eigenvectors)
    for column, text in enumerate([
        ["0.5177048", "-0.4504231", "-0.4517232", "0.5701289"],
        ["0.04099358", "0.58176202", "0.37582195", "0.72015994"],
        ["-0.7608371", "-0.5056034", "0.1219894", "0.3880860"],
        ["-0.38913772", "0.45059647", "-0.79988915", "0.07557783"],
    ]):  # fmt: skip
        same_up_to_sign(vectors[:, column], text, digits=7)
    assert found.kind == "saddle"
    for name, text in {"A": "12.916426", "R": "2.434015", "W": "1.040128",
                       "L": "1.941927"}.items():  # fmt: skip
        printed(found.stationary[name], text)


# canonical.path(heli.rsm, dist = seq(-5, 5, by = 0.5)): rsm rounds the coded path to 3 decimals,
# decodes the rounded point and predicts at block 1 (its first level): rows (dist, x1..x4, yhat)
HELI_PATH = [
    (-5.0, "-1.728", "1.921", "1.419", "-2.967", "453.627"),
    (-2.5, "-0.434", "0.795", "0.290", "-1.541", "392.534"),
    (-1.0, "0.343", "0.120", "-0.388", "-0.686", "375.429"),
    (0.0, "0.861", "-0.331", "-0.839", "-0.116", "372.172"),
    (0.5, "1.120", "-0.556", "-1.065", "0.169", "372.987"),
    (3.0, "2.414", "-1.682", "-2.195", "1.594", "401.498"),
    (5.0, "3.449", "-2.583", "-3.098", "2.734", "453.615"),
]


def test_paper_helicopter_canonical_path_matches_rsm():
    surface = heli()
    distances = np.array([row[0] for row in HELI_PATH])
    # an eigenvector's sign is arbitrary: orient ours as rsm's (its first entry positive)
    sign = 1.0 if canonical_analysis(surface).eigenvectors[0][0] > 0 else -1.0
    path = canonical_path(surface, which=0, distances=sign * distances / HELI_A)
    block_one = surface.coefficients.loc["block[1]", "estimate"]  # block 1 - the average
    steps = {n: s for n, (_, _, s) in HELI_CODING.items()}
    centres = {n: c for n, (_, c, _) in HELI_CODING.items()}
    for (_, *coded, yhat), (_, row) in zip(HELI_PATH, path.iterrows(), strict=True):
        ours = [row[f"x.{n}"] * HELI_A for n in HELI_CODING]
        for value, text in zip(ours, coded, strict=True):
            printed(value, text)
        rounded = {n: centres[n] + steps[n] * round(v, 3)
                   for n, v in zip(HELI_CODING, ours, strict=True)}  # fmt: skip
        at = surface.predict(pd.DataFrame([rounded]))["mean"].iloc[0] + block_one
        printed(at, yhat)


def codata():
    x1 = [-1, -1, 0, 0, 1, 1, -1, -1, 0, 0, 1, 1, -1, -1, 0, 0, 1, 1]
    x2 = [-1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1]
    y = [61.9, 65.6, 80.9, 78, 89.7, 93.8, 72.1, 67.3, 80.1, 81.4, 77.8, 74.8, 66.4, 68.2, 68.9,
         66, 60.2, 57.9]  # fmt: skip
    frame = pd.DataFrame({"x1": x1, "x2": x2, "CO": y})
    return fit_response_surface(frame, "CO", ["x1", "x2"], scales=linear("x1", "x2"))


def test_a_ridge_is_named_and_its_stationary_point_taken_on_it_as_rsm_does():
    """codata (rsm's R/datasets.R; coded as rsm codes it): canonical(CO.rsm) finds one
    eigenvalue under a tenth of the largest, prints it as 0 and moves the stationary point onto
    the ridge ("Near-stationary-ridge situation detected -- stationary point altered")."""
    found = canonical_analysis(codata())
    assert found.kind == "ridge" and found.flat_directions == (0,)
    printed(found.stationary_coded["x1"], "-0.06302658")
    printed(found.stationary_coded["x2"], "-0.05997463")
    printed(found.eigenvalues[1], "-8.886833")
    same_up_to_sign(np.array(found.eigenvectors)[:, 0], ["0.6893497", "-0.7244288"])
    same_up_to_sign(np.array(found.eigenvectors)[:, 1], ["-0.7244288", "-0.6893497"])
    assert found.inside
    assert any("a ridge, along which the response hardly changes, and a maximum across it" in n
               for n in found.notes)  # fmt: skip


def test_without_a_threshold_the_far_stationary_point_matches_rsm():
    """canonical(CO.rsm, threshold = 0): the exact stationary point, far outside the region."""
    found = canonical_analysis(codata(), threshold=0)
    printed(found.eigenvalues[0], "0.1868328")
    printed(found.eigenvalues[1], "-8.8868328")
    printed(found.stationary_coded["x1"], "-14.81387")
    printed(found.stationary_coded["x2"], "15.44149")
    assert found.kind == "saddle" and not found.inside
    assert any("outside the design region" in n for n in found.notes)


# ---- brute force and closed forms: ridge analysis
def brute_force_on_sphere(b, quadratic, radius, n=200_000):
    rng = np.random.default_rng(1)
    u = rng.standard_normal((n, len(b)))
    x = radius * u / np.linalg.norm(u, axis=1, keepdims=True)
    values = x @ b + np.einsum("ni,ij,nj->n", x, quadratic, x)
    return float(values.max())


@pytest.mark.parametrize(
    ("b", "quadratic"),
    [
        ([0.9, 0.6], [[-1.3, 0.06], [0.06, -0.93]]),  # a maximum (ChemReact's shape)
        ([1.0, -2.0], [[0.5, 0.2], [0.2, -1.5]]),  # a saddle
        ([0.3, 0.1, -0.4], [[1.0, 0.1, 0.0], [0.1, 0.5, 0.2], [0.0, 0.2, -0.7]]),
    ],
)
@pytest.mark.parametrize("radius", [0.25, 1.0, 2.5])
def test_the_ridge_point_is_the_best_on_its_sphere(b, quadratic, radius):
    b, quadratic = np.array(b), np.array(quadratic)
    x, mu = sphere_optimum(b, quadratic, radius)
    assert np.linalg.norm(x) == pytest.approx(radius, rel=1e-10)
    # the Lagrange condition (B - μI) x = -b/2 with μ above every eigenvalue
    assert (quadratic - mu * np.eye(len(b))) @ x == pytest.approx(-b / 2, abs=1e-9)
    assert mu >= np.linalg.eigvalsh(quadratic).max() - 1e-12
    value = x @ b + x @ quadratic @ x
    best_sampled = brute_force_on_sphere(b, quadratic, radius)
    assert value >= best_sampled - 1e-9
    assert value - best_sampled < 1e-3 * radius * (1 + np.abs(b).sum())


def test_the_hard_case_takes_the_rest_of_the_radius_along_the_top_eigenvector():
    """b with no part along the top eigenvector: B = diag(-1, -3), b = (0, 2). Inside radius
    0.5 the path runs along x2; beyond it μ stays at -1 and x = (±√(R² - ¼), ½), where
    ŷ = bᵀx + xᵀBx = 1 - (R² - ¼) - ¾ = ½ - R²."""
    b, quadratic = np.array([0.0, 2.0]), np.diag([-1.0, -3.0])
    x, mu = sphere_optimum(b, quadratic, 0.25)
    assert x == pytest.approx([0.0, 0.25]) and mu == pytest.approx(1.0)  # 2/(2(μ+3)) = 0.25
    for radius in (0.75, 2.0):
        x, mu = sphere_optimum(b, quadratic, radius)
        assert mu == pytest.approx(-1.0)
        assert abs(x[0]) == pytest.approx(math.sqrt(radius**2 - 0.25)) and x[1] == 0.5
        assert x @ b + x @ quadratic @ x == pytest.approx(0.5 - radius**2)
        assert x @ b + x @ quadratic @ x >= brute_force_on_sphere(b, quadratic, radius) - 1e-9


def test_with_no_curvature_the_ridge_is_the_straight_steepest_path():
    b = np.array([0.875, 0.625])  # ChemReact1's first-order coefficients (rsm)
    x, _ = sphere_optimum(b, np.zeros((2, 2)), 1.0)
    printed(x[0], "0.8137335")
    printed(x[1], "0.5812382")


def test_ridge_analysis_of_chem_react_climbs_to_its_maximum_and_says_its_intervals():
    surface = chem_react()
    found = canonical_analysis(surface)
    ridge = ridge_analysis(surface)
    table = ridge.table
    assert table["radius"].iloc[-1] == pytest.approx(min(surface.design_radius, 1.0))
    assert surface.design_radius == pytest.approx(1.0, abs=1e-3)  # the axial points (and corners)
    # at the stationary point's distance the ridge's best is the maximum itself
    at = ridge_analysis(surface, radii=[found.distance]).table.iloc[0]
    assert [at["Time"], at["Temp"]] == pytest.approx(
        [found.stationary["Time"], found.stationary["Temp"]], abs=1e-6
    )
    assert table["mean"].max() <= found.predicted + 1e-9
    assert (table["lower"] < table["mean"]).all() and (table["mean"] < table["upper"]).all()
    inside = table[table["radius"] <= found.distance]
    assert inside["mean"].is_monotonic_increasing
    for _, row in table.iterrows():
        coded = np.array([row["x.Time"], row["x.Temp"]])
        assert np.linalg.norm(coded) == pytest.approx(row["radius"], abs=1e-9)
    assert ridge.to_json()["path"][0]["mu"] is None  # μ is infinite at radius 0


def test_ridge_analysis_for_a_minimum_runs_downhill():
    surface = chem_react()
    down = ridge_analysis(surface, goal="min")
    assert down.table["mean"].is_monotonic_decreasing
    lowest = brute_force_on_sphere(*_factor_quadratic(surface, -1), 1.0)
    drop = surface.quadratic()[0] - down.table["mean"].iloc[-1]
    assert drop == pytest.approx(lowest, abs=1e-3)


def _factor_quadratic(surface, sign):
    _, b, hessian = surface.quadratic()
    return sign * b, sign * hessian / 2


def test_a_first_order_surface_has_no_canonical_analysis():
    first = fit_response_surface(CHEM_REACT.iloc[:7], "Yield", ["Time", "Temp"],
                                 scales=linear("Time", "Temp"), quadratic=False)  # fmt: skip
    with pytest.raises(ValueError, match=r"not a second-order surface \(no quadratic term"):
        canonical_analysis(first)


def test_a_surface_with_a_categorical_factor_is_analysed_at_the_optimums_level_and_to_json():
    """The stationary point in natural units holds the categorical level the analysis is taken
    at; report.json once failed on it ("could not convert string to float: 'crop+noise'")."""
    import json

    better = CHEM_REACT.assign(catalyst="b", Yield=CHEM_REACT["Yield"] + 1.0)
    frame = pd.concat([CHEM_REACT.assign(catalyst="a"), better])
    surface = fit_response_surface(frame, "Yield", ["Time", "Temp", "catalyst"], goal="max",
                                   scales=linear("Time", "Temp"), blocks="Block")  # fmt: skip
    found = canonical_analysis(surface)
    assert found.stationary["catalyst"] == "b"  # the better level, where the optimum is
    assert found.stationary["Time"] == pytest.approx(86.86148, abs=1e-4)
    data = json.loads(json.dumps(found.to_json()))
    assert data["stationary"]["catalyst"] == "b"
    ridge = ridge_analysis(surface)
    assert json.loads(json.dumps(ridge.to_json()))["path"][-1]["mean"] > 0
