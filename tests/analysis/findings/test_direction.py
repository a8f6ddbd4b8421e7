"""Where to go next on a response's surface (analysis.findings.direction), on planted truths: a
results
frame shaped like a temperature × batch-size study (both on a log scale) whose response is a
known function of the coded factors plus small fixed noise. The direction must be the planted
one, the stationary point the planted maximum, and a response with no effect gets none."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from analysis.findings.direction import where_next
from analysis.report.page import _fit_html
from analysis.stats.fits import fit_best_supported

RESPONSE = "probe/knn_top1_h"
TAUS = {-1: 0.05, 0: 0.2, 1: 0.8}  # log-spaced: coded -1, 0, 1
BATCHES = {-1: 32, 0: 128, 1: 512}
NOISE = (0.002, -0.001, -0.002, 0.001)


def planted(value, levels=(-1, 0, 1), replicates=4) -> pd.DataFrame:
    rows = []
    for u in levels:
        for v in levels:
            for r in range(replicates):
                rows.append({
                    "point_id": f"u{u}v{v}", "replicate": r, "status": "finished",
                    "temperature": TAUS[u], "batch_size": BATCHES[v],
                    RESPONSE: value(u, v) + NOISE[(r + u + 2 * v) % len(NOISE)],
                })  # fmt: skip
    frame = pd.DataFrame(rows)
    frame.attrs |= {"study": "planted", "factors": ["temperature", "batch_size"],
                    "scales": {"temperature": "log", "batch_size": "log"}}  # fmt: skip
    return frame


def natural_tau(coded: float) -> float:
    return math.exp(math.log(0.2) + coded * math.log(4))


def test_a_planted_maximum_inside_the_region_is_found_by_canonical_analysis():
    fit = fit_best_supported(planted(lambda u, v: 0.9 - 0.05 * (u - 0.3) ** 2
                                     - 0.03 * (v + 0.2) ** 2), RESPONSE)  # fmt: skip
    direction = where_next(fit)
    assert direction.order == "second" and direction.steepest is None
    canonical = direction.canonical
    assert canonical.kind == "maximum" and canonical.inside
    assert canonical.stationary_coded["temperature"] == pytest.approx(0.3, abs=0.03)
    assert canonical.stationary_coded["batch_size"] == pytest.approx(-0.2, abs=0.05)
    assert canonical.stationary["temperature"] == pytest.approx(natural_tau(0.3), rel=0.05)
    assert sorted(canonical.eigenvalues) == pytest.approx([-0.05, -0.03], abs=0.005)
    assert canonical.predicted == pytest.approx(0.9, abs=0.003)
    # the ridge climbs to the maximum and no further
    assert direction.ridge.table["mean"].max() <= canonical.predicted + 1e-9
    data = json.loads(json.dumps(direction.to_json()))
    assert data["order"] == "second"
    assert data["canonical"]["kind"] == "maximum"
    page = _fit_html(fit, where_next(fit))
    assert "Where next" in page and "Canonical analysis: eigenvalues" in page
    assert "the ridge analysis, step by step" in page


def test_a_planted_plane_gets_the_path_of_steepest_ascent_along_its_gradient():
    fit = fit_best_supported(planted(lambda u, v: 0.8 + 0.04 * u + 0.02 * v, levels=(-1, 1),
                                     replicates=4), RESPONSE)  # fmt: skip
    direction = where_next(fit)
    assert direction.order == "first" and direction.canonical is None
    path = direction.steepest
    assert path.direction == pytest.approx(np.array([2.0, 1.0]) / math.sqrt(5), abs=0.02)
    assert path.excluded_share > 0.9  # four replicates of a clear plane fix the direction
    one_step = path.table.iloc[1]
    assert one_step["temperature"] == pytest.approx(natural_tau(path.direction[0]), rel=1e-9)
    words = " ".join(direction.sentences())
    assert "Path of steepest ascent" in words and "confidence cone leaves out" in words
    assert json.loads(json.dumps(direction.to_json()))["order"] == "first"


def test_a_minimised_response_descends():
    frame = planted(lambda u, v: 0.8 + 0.04 * u + 0.02 * v, levels=(-1, 1))
    frame = frame.rename(columns={RESPONSE: "z/align"})
    path = where_next(fit_best_supported(frame, "z/align")).steepest
    assert path.goal == "min"
    assert path.direction == pytest.approx(-np.array([2.0, 1.0]) / math.sqrt(5), abs=0.02)


def test_a_response_no_factor_moves_gets_no_direction():
    fit = fit_best_supported(planted(lambda u, v: 0.9), RESPONSE)
    assert fit.findings is not None and not fit.findings.beats_mean
    assert where_next(fit).order is None
    assert where_next(fit).why_none == "the model does not beat the mean"
    assert where_next(fit).to_json() == {
        "order": None,
        "why_none": "the model does not beat the mean",
    }
    page = _fit_html(fit, where_next(fit))
    assert "No direction is named: the model does not beat the mean." in page


def test_a_plane_on_three_levels_is_read_as_a_plane_not_as_a_noisy_bowl():
    """Its quadratic terms are fitted but none is detected: a canonical analysis of that noise
    put the stationary point thousands of coded units out (exp overflowed); the path of steepest
    ascent is what the data say."""
    from analysis.findings.direction import curvature_detected

    fit = fit_best_supported(planted(lambda u, v: 0.8 + 0.04 * u + 0.02 * v), RESPONSE)
    assert "I(temperature ** 2)" in fit.surface.terms and not curvature_detected(fit.surface)
    direction = where_next(fit)
    assert direction.order == "first" and direction.canonical is None
    assert direction.steepest.direction == pytest.approx(np.array([2.0, 1.0]) / math.sqrt(5),
                                                         abs=0.02)  # fmt: skip


def test_the_path_is_drawn_over_the_responses_contours():
    from analysis.report.page import _paths
    from analysis.report.plots import all_figures
    from analysis.study_analysis import analyse

    frame = planted(lambda u, v: 0.8 + 0.04 * u + 0.02 * v)
    analysis = analyse(frame, (RESPONSE,))
    surfaces = {r: f.surface for r, f in analysis.fits.items()}
    figures = all_figures(frame, surfaces=surfaces, paths=_paths(analysis, surfaces))
    figure = figures["contours_probe_knn_top1_h_temperature_batch_size"]
    labels = [line.get_label() for line in figure.axes[0].get_lines()]
    assert "where next (path)" in labels
    # report.json carries each response's direction beside its fit, from the one analysis
    data = json.loads(json.dumps(analysis.to_json(), default=str))
    assert data["responses"][RESPONSE]["direction"]["order"] == "first"
    assert data["responses"][RESPONSE]["direction"] == json.loads(
        json.dumps(analysis.directions[RESPONSE].to_json()))  # fmt: skip
