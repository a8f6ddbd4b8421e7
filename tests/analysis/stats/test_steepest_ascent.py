"""The path of steepest ascent and its confidence cone (analysis.stats.steepest): rsm's printed path
for ChemReact1 (summary(CR1.rsm) and steepest(CR1.rsm, dist = c(0, 0.5, 1)), article-JSS.html
of rsm 2.10.6), Box & Draper's cone computed by hand, and the cone's share of directions
counted against its closed form.

ChemReact1's factorial points sit at ±5 around (85, 175), so our coding is rsm's."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from rsm_examples import CHEM_REACT, linear, printed
from scipy import special, stats

from analysis.stats.steepest import in_cone, in_cone_share, steepest_path
from analysis.stats.surface import fit_response_surface


def first_order(frame, response, factors, **options):
    return fit_response_surface(frame, response, factors, scales=linear(*factors),
                                quadratic=False, interactions=False, **options)  # fmt: skip


def test_chem_react_first_block_path_matches_rsm():
    surface = first_order(CHEM_REACT.iloc[:7], "Yield", ["Time", "Temp"], goal="max")
    path = steepest_path(surface, step=0.5, steps=2)
    printed(path.direction[0], "0.8137335")
    printed(path.direction[1], "0.5812382")
    # "Corresponding increment in original units" (one coded unit along the path)
    printed(path.direction[0] * 5, "4.068667")
    printed(path.direction[1] * 5, "2.906191")
    # rsm rounds the coded path to 3 decimals, then decodes and predicts at the rounded point
    rows = [("0.000", "0.000", "85.000", "175.000", "82.814"),
            ("0.407", "0.291", "87.035", "176.455", "83.352"),
            ("0.814", "0.581", "89.070", "177.905", "83.890")]  # fmt: skip
    for (x1, x2, time, temp, yhat), (_, row) in zip(rows, path.table.iterrows(), strict=True):
        printed(row["x.Time"], x1)
        printed(row["x.Temp"], x2)
        rounded = {"Time": 85 + 5 * round(row["x.Time"], 3),
                   "Temp": 175 + 5 * round(row["x.Temp"], 3)}  # fmt: skip
        printed(rounded["Time"], time)
        printed(rounded["Temp"], temp)
        printed(surface.predict(pd.DataFrame([rounded]))["mean"].iloc[0], yhat)
    # its own table is unrounded: the natural units of the exact path
    assert path.table["Time"].iloc[2] == pytest.approx(85 + 5 * 0.8137335, abs=1e-6)


def test_chem_react_first_block_cone_holds_every_direction():
    """CR1: b = (0.875, 0.625), s_b = 0.72386 on 4 df (rsm's printed standard errors): sin²θ =
    (k-1) s_b² F(0.05; 1, 4) / |b|² = 0.524 × 7.709 / 1.156 > 1, so no direction is excluded."""
    surface = first_order(CHEM_REACT.iloc[:7], "Yield", ["Time", "Temp"], goal="max")
    path = steepest_path(surface)
    sin2 = 0.72386**2 * stats.f.isf(0.05, 1, 4) / (0.875**2 + 0.625**2)
    assert sin2 > 1
    assert path.excluded_share == 0.0 and path.cone_half_angle == 90.0
    assert any("holds every direction" in n for n in path.notes)
    assert any("leaves the design region" in n for n in path.notes)  # 5 > √2


def replicated_factorial(b, noise, k):
    """A 2^k factorial, three replicates, y = 10 + Σ b_i x_i + the given noise (one per run)."""
    corners = np.array(np.meshgrid(*[[-1.0, 1.0]] * k)).reshape(k, -1).T
    x = np.repeat(corners, 3, axis=0)
    names = [f"f{i}" for i in range(k)]
    frame = pd.DataFrame(x, columns=names)
    frame["y"] = 10 + x @ np.array(b) + np.asarray(noise)
    return frame, names, x


@pytest.mark.parametrize("k", [2, 3])
def test_the_cone_of_an_orthogonal_design_is_box_and_drapers(k):
    rng = np.random.default_rng(7)
    b_true = [1.0, -0.6, 0.3][:k]
    frame, names, x = replicated_factorial(b_true, rng.normal(0, 0.8, 3 * 2**k), k)
    surface = first_order(frame, "y", names, goal="max")
    path = steepest_path(surface)
    # by hand: least squares on the orthogonal ±1 design, s² on n - k - 1 df, s_b² = s²/n
    design = np.column_stack([np.ones(len(x)), x])
    coef, *_ = np.linalg.lstsq(design, frame["y"].to_numpy(), rcond=None)
    resid = frame["y"].to_numpy() - design @ coef
    df = len(x) - k - 1
    s_b2 = (resid @ resid / df) / len(x)
    b = coef[1:]
    sin2 = (k - 1) * s_b2 * stats.f.isf(0.05, k - 1, df) / (b @ b)
    assert sin2 < 1  # the direction is established
    assert path.direction == pytest.approx(b / np.linalg.norm(b), abs=1e-12)
    assert path.cone_half_angle == pytest.approx(math.degrees(math.asin(math.sqrt(sin2))))
    kept = 0.5 * special.betainc((k - 1) / 2, 0.5, sin2)
    assert path.excluded_share == pytest.approx(1 - kept, abs=1e-12)
    if k == 2:  # the cap of a circle: 2θ of 2π
        assert path.excluded_share == pytest.approx(1 - math.asin(math.sqrt(sin2)) / math.pi)
    # the general criterion counts the same share over many directions
    counted = in_cone_share(b, s_b2 * np.eye(k), (k - 1) * stats.f.isf(0.05, k - 1, df))
    assert counted == pytest.approx(kept, abs=0.004)


def test_the_cone_criterion_is_the_angle_to_the_gradient_when_v_is_isotropic():
    b, s2, bound = np.array([3.0, 4.0]), 1.0, 4.9646  # F(0.05; 1, 10) = 4.9646
    # |b|² - (bᵀu)² ≤ bound s²  ⇔  sin² of the angle to b ≤ bound / 25
    limit = math.asin(math.sqrt(bound / 25))
    angles = np.linspace(-math.pi, math.pi, 3601)
    towards = math.atan2(4, 3)
    u = np.column_stack([np.cos(towards + angles), np.sin(towards + angles)])
    inside = in_cone(u, b, s2 * np.eye(2), bound)
    assert np.array_equal(inside, np.abs(angles) <= limit)  # the cone of ascent only: no -b


def test_steepest_descent_goes_against_the_gradient_for_a_minimised_response():
    frame, names, _ = replicated_factorial([1.0, -0.5], np.tile([0.1, -0.1, 0.0], 4), 2)
    up = steepest_path(first_order(frame, "y", names, goal="max"))
    down = steepest_path(first_order(frame, "y", names, goal="min"))
    assert down.direction == pytest.approx([-v for v in up.direction])
    assert down.table["mean"].is_monotonic_decreasing and up.table["mean"].is_monotonic_increasing


def test_a_categorical_factor_stays_at_its_best_level_along_the_path():
    frame, names, _ = replicated_factorial([1.0, 0.5], np.tile([0.1, -0.1, 0.0], 4), 2)
    frame = pd.concat([frame.assign(optimizer="sgd"),
                       frame.assign(optimizer="adam", y=frame["y"] + 2)])  # fmt: skip
    surface = fit_response_surface(frame, "y", [*names, "optimizer"], goal="max",
                                   scales=linear(*names), quadratic=False)  # fmt: skip
    path = steepest_path(surface)
    assert set(path.table.columns) >= {"f0", "f1"} and "optimizer" not in path.factors
    assert path.direction == pytest.approx(np.array([1.0, 0.5]) / math.hypot(1.0, 0.5),
                                           abs=1e-9)  # fmt: skip
    at = surface.natural(np.zeros((1, 2)))
    assert at["optimizer"].iloc[0] == "adam"


def test_a_step_that_is_not_positive_is_refused():
    surface = first_order(CHEM_REACT.iloc[:7], "Yield", ["Time", "Temp"], goal="max")
    with pytest.raises(ValueError, match="step must be above 0"):
        steepest_path(surface, step=0)
