"""Responses without the variation a test needs: nothing is computed from a zero or undefined
variance. Each case is a replicated 3 × 3 study (τ 0.05, 0.1, 0.2 and batch size 32, 64, 128, both
log scale, so coded u, v ∈ {-1, 0, 1}; 2 replicates, 18 trials) with values computed by hand.

Hand computations use the orthogonal polynomials on three levels, P0 = 1, P1(x) = x,
P2(x) = 3x² - 2 (norms² 3, 2, 6 over the levels): the full quadratic model spans P00, P10, P01,
P20, P02 and P11; lack of fit lives in P21, P12 and P22 (norms² 12, 12 and 36 over the 9 points).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analysis.findings.direction import where_next
from analysis.report.page import _fit_html, write_report
from analysis.stats.fits import fit_best_supported
from analysis.stats.surface import NoVariationError, UnsupportedDesignError, fit_response_surface
from analysis.study_analysis import analyse

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

RESPONSE = "probe/knn_top1_h"
TAUS = (0.05, 0.1, 0.2)  # coded -1, 0, 1 on the log scale
BATCHES = (32, 64, 128)


def study(value, response: str = RESPONSE) -> pd.DataFrame:
    """18 trials; ``value(u, v, replicate)`` gives the response at coded (u, v)."""
    rows = []
    for u, tau in zip((-1, 0, 1), TAUS, strict=True):
        for v, batch in zip((-1, 0, 1), BATCHES, strict=True):
            for replicate in range(2):
                rows.append({
                    "point_id": f"t{tau}-b{batch}", "replicate": replicate, "status": "finished",
                    "temperature": tau, "batch_size": batch, response: value(u, v, replicate),
                })  # fmt: skip
    frame = pd.DataFrame(rows)
    frame.attrs |= {"study": "degenerate", "factors": ["temperature", "batch_size"],
                    "scales": {"temperature": "log", "batch_size": "log"}}  # fmt: skip
    return frame


def coded_optimum(fit) -> tuple[float, float]:
    return fit.optimum_coded["temperature"], fit.optimum_coded["batch_size"]


# ---------------------------------------------------------------------------------------------
# no variation: nothing is modelled
# ---------------------------------------------------------------------------------------------
CONSTANT = "a constant response carries no information about the factors; nothing was modelled"
NOISE = [0.0, 1.0, -1.0, 2.0, 0.0, -2.0]  # multiples of one ulp, cycled over the trials


def test_a_saturated_probe_is_not_modelled():
    """The reported study: the probe is 1.0 in all 18 trials."""
    with pytest.raises(NoVariationError) as err:
        fit_response_surface(study(lambda u, v, r: 1.0), RESPONSE)
    assert str(err.value) == f"{RESPONSE} is 1.0 in all 18 trials: {CONSTANT}"
    assert err.value.response == RESPONSE
    assert isinstance(err.value, UnsupportedDesignError)  # old callers still catch it


@pytest.mark.parametrize(
    ("center", "shown"),
    [(0.7, "0.7"), (0.1, "0.1"), (-3.5, "-3.5"), (1e12, "1000000000000.0"), (1e-12, "1e-12")],
)
def test_constant_up_to_float_noise_is_constant(center, shown):
    """Trials that differ by a few ulps (about 1e-17 at 0.1, 1e-4 at 1e12) are equal: the
    tolerance is relative, RELATIVE_TOLERANCE × max |y|."""
    ulp = abs(np.spacing(center))
    frame = study(lambda u, v, r: center + NOISE[(3 * (u + 1) + v + 1 + r) % 6] * ulp)
    assert frame[RESPONSE].nunique() > 1
    with pytest.raises(NoVariationError) as err:
        fit_response_surface(frame, RESPONSE)
    spread = 4 * ulp
    assert str(err.value) == (
        f"{RESPONSE} is {shown} in all 18 trials (to within float noise: they differ by "
        f"{spread:.2g}, at most 1e-09 × max |{RESPONSE}|): {CONSTANT}"
    )


def test_all_zero_is_constant():
    with pytest.raises(NoVariationError, match=r"is 0\.0 in all 18 trials: a constant"):
        fit_response_surface(study(lambda u, v, r: 0.0), RESPONSE)


def test_a_tiny_response_that_varies_is_modelled_like_a_large_one():
    """The tolerance is relative, not absolute: 1e-12 × a response fits the same surface."""

    def value(u, v, r):
        return 0.9 - 0.1 * (u - 0.2) ** 2 - 0.05 * (v + 0.4) ** 2 + 0.01 * (-1) ** r

    big = fit_response_surface(study(value), RESPONSE)
    small = fit_response_surface(study(lambda u, v, r: 1e-12 * value(u, v, r)), RESPONSE)
    assert small.r2 == pytest.approx(big.r2, rel=1e-9)
    assert small.lack_of_fit_p == pytest.approx(big.lack_of_fit_p, rel=1e-6)
    assert coded_optimum(small) == pytest.approx(coded_optimum(big), abs=1e-6)
    assert small.predicted == pytest.approx(1e-12 * big.predicted, rel=1e-9)
    assert not small.exact and small.interval is not None


def test_missing_everywhere_or_in_all_but_one_trial():
    with pytest.raises(NoVariationError) as err:
        fit_response_surface(study(lambda u, v, r: math.nan), RESPONSE)
    assert str(err.value) == (
        f"{RESPONSE} has no value in any trial: nothing was modelled "
        f"(18 trials without {RESPONSE} were left out)"
    )

    frame = study(lambda u, v, r: 0.8 if (u, v, r) == (1, 0, 1) else math.nan)
    with pytest.raises(NoVariationError) as err:
        fit_response_surface(frame, RESPONSE)
    assert str(err.value) == (
        f"{RESPONSE} has a value in only one trial (0.8 at temperature = 0.2, batch_size = 64): "
        "one value carries no information about the factors; nothing was modelled "
        f"(17 trials without {RESPONSE} were left out)"
    )


def test_constant_among_the_trials_that_count():
    """A failed trial and two missing values are left out; the rest are all 1.0; an infinite
    value is not a value."""
    frame = study(lambda u, v, r: math.nan if (u, r) == (0, 1) and v != 1 else 1.0)
    frame.loc[0, "status"] = "failed"
    frame.loc[0, RESPONSE] = 0.3
    frame.loc[17, RESPONSE] = math.inf
    with pytest.raises(NoVariationError) as err:
        fit_response_surface(frame, RESPONSE)
    assert str(err.value) == (
        f"{RESPONSE} is 1.0 in all 14 trials: {CONSTANT} (1 trials not finished were left out; "
        f"2 trials without {RESPONSE} were left out; 1 trials with a non-finite {RESPONSE} were "
        "left out)"
    )


# ---------------------------------------------------------------------------------------------
# pure error zero: no lack-of-fit test, but a model
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ulps", [0, 1], ids=["identical", "one-ulp-apart"])
def test_replicates_that_agree_have_no_lack_of_fit_test(ulps):
    """y = 0.8 + 0.05 u²v + 0.02 u, the same in both replicates (or one ulp apart). u²v =
    P2(u)P1(v)/3 + 2v/3, so the fit is 0.8 + v/30 + 0.02 u and the residual is 0.05 P21 / 3 at
    each point: SS 2 × (0.05/3)² × 12 = 1/150 on 12 df, all of it lack of fit. Pure error is 0,
    so F would be x/0: no p. The model stands and its intervals use the residual mean square."""

    def value(u, v, r):
        y = 0.8 + 0.05 * u**2 * v + 0.02 * u
        return y + r * ulps * np.spacing(y)

    fit = fit_response_surface(study(value), RESPONSE)
    ssr = 2 * (0.05 / 3) ** 2 * 12
    assert ssr == pytest.approx(1 / 150)
    assert fit.lack_of_fit_p is None
    assert fit.lack_of_fit["f"] is None and fit.lack_of_fit["p"] is None
    assert fit.lack_of_fit["ss_pure_error"] == 0.0 and fit.lack_of_fit["df_pure_error"] == 9
    assert fit.lack_of_fit["ss_lack_of_fit"] == pytest.approx(ssr, rel=1e-9)
    assert any("replicates of every point agree exactly" in n and "residual mean square" in n
               for n in fit.notes)  # fmt: skip
    assert not fit.exact
    sst = 2 * (0.05**2 * 4 + 0.02**2 * 6)  # Σ u⁴v² = 4, Σ u³v = 0, Σ u² = 6 over the 9 points
    assert fit.r2 == pytest.approx(1 - ssr / sst, rel=1e-9)
    coef = fit.coefficients["estimate"]
    assert coef["temperature"] == pytest.approx(0.02, abs=1e-12)
    assert coef["batch_size"] == pytest.approx(0.05 * 2 / 3, abs=1e-12)
    assert fit.coefficients["p"].notna().all() and (fit.coefficients["std_err"] > 0).all()
    # the optimum is the corner (1, 1); its leverage there is (1/9+1/6+1/6+1/18+1/18+1/4)/2
    assert coded_optimum(fit) == pytest.approx((1.0, 1.0))
    assert fit.optimum == {"temperature": pytest.approx(0.2), "batch_size": 128}
    assert fit.predicted == pytest.approx(0.8 + 1 / 30 + 0.02, abs=1e-12)
    half = stats.t.ppf(0.975, 12) * math.sqrt(ssr / 12 * 29 / 72)
    assert fit.interval == pytest.approx((fit.predicted - half, fit.predicted + half), rel=1e-9)
    assert fit.to_json()["lack_of_fit_p"] is None


# ---------------------------------------------------------------------------------------------
# residual zero: an exact model, no uncertainty
# ---------------------------------------------------------------------------------------------
def test_an_exact_plane_has_no_standard_errors_intervals_or_stationary_point():
    """y = 0.5 + 0.1 u + 0.05 v in every trial: residual SS 0, so σ² = 0 and every t, p and
    interval would be b/0 or 0/0; the Hessian is 0, so there is no stationary point. The
    coefficients and the optimum (the corner u = v = 1, y = 0.65) are exact."""
    fit = fit_response_surface(study(lambda u, v, r: 0.5 + 0.1 * u + 0.05 * v), RESPONSE)
    assert fit.exact
    coef = fit.coefficients
    assert coef.loc["temperature", "estimate"] == pytest.approx(0.1, abs=1e-12)
    assert coef.loc["batch_size", "estimate"] == pytest.approx(0.05, abs=1e-12)
    assert coef.loc["I(temperature ** 2)", "estimate"] == pytest.approx(0.0, abs=1e-12)
    assert coef[["std_err", "ci_low", "ci_high", "p"]].isna().all().all()
    assert fit.anova[["F", "PR(>F)"]].isna().all().all()
    assert fit.r2 == pytest.approx(1.0) and fit.pred_r2 == pytest.approx(1.0)
    assert fit.lack_of_fit_p is None and fit.lack_of_fit["f"] is None
    assert fit.stationary_kind is None and fit.stationary_point is None
    assert any("no stationary point: the quadratic part is singular" in n for n in fit.notes)
    assert any("residual variance 0" in n for n in fit.notes)
    assert fit.optimum == {"temperature": pytest.approx(0.2), "batch_size": 128}
    assert fit.predicted == pytest.approx(0.65, abs=1e-12)
    assert fit.interval is None
    out = fit.predict(pd.DataFrame({"temperature": [0.1], "batch_size": [64]}))
    assert out["mean"].iloc[0] == pytest.approx(0.5, abs=1e-12)
    assert out[["lower", "upper"]].isna().all().all()
    data = fit.to_json()
    assert data["interval"] is None and data["lack_of_fit_p"] is None
    assert data["predicted"] == pytest.approx(0.65)
    json.dumps(data, allow_nan=False)


def test_an_exact_quadratic_has_its_stationary_point_but_no_interval():
    """y = 0.9 - 0.1 (u - 0.2)² - 0.05 (v + 0.4)²: a maximum of 0.9 at coded (0.2, -0.4),
    i.e. τ = 0.1 × 2^0.2 and B = 64 × 2^-0.4."""
    fit = fit_response_surface(
        study(lambda u, v, r: 0.9 - 0.1 * (u - 0.2) ** 2 - 0.05 * (v + 0.4) ** 2), RESPONSE
    )
    assert fit.exact and fit.interval is None
    assert fit.stationary_kind == "maximum"
    assert fit.stationary_point["temperature"] == pytest.approx(0.1 * 2**0.2, rel=1e-9)
    assert fit.stationary_point["batch_size"] == pytest.approx(64 * 2**-0.4, rel=1e-9)
    assert coded_optimum(fit) == pytest.approx((0.2, -0.4), abs=1e-4)
    # batch size is an integer factor: the optimum is rounded to B = 49 (64 × 2^-0.4 = 48.5)
    assert fit.optimum["batch_size"] == 49
    v = math.log2(49 / 64)
    assert fit.predicted == pytest.approx(0.9 - 0.05 * (v + 0.4) ** 2, abs=1e-9)
    assert fit.coefficients["p"].isna().all()


# ---------------------------------------------------------------------------------------------
# a flat fitted surface: no optimum
# ---------------------------------------------------------------------------------------------
def test_a_seed_effect_alone_gives_a_flat_surface_and_no_optimum():
    """Replicate 0 is 0.9 and replicate 1 is 1.0 at every point: every point mean is 0.95, the
    fit is flat and all 18 residuals are ±0.05. R² = 0; lack of fit SS 0 against pure error
    18 × 0.05², F = 0, p = 1. There is no best point to claim."""
    fit = fit_response_surface(study(lambda u, v, r: 0.9 + 0.1 * r), RESPONSE)
    assert fit.r2 == pytest.approx(0.0, abs=1e-12)
    assert fit.adj_r2 == pytest.approx(1 - 17 / 12, abs=1e-12)
    assert fit.lack_of_fit["ss_pure_error"] == pytest.approx(18 * 0.05**2)
    assert fit.lack_of_fit["ss_lack_of_fit"] == 0.0
    assert fit.lack_of_fit["f"] == 0.0 and fit.lack_of_fit_p == 1.0
    # leverages (Σ P²/‖P‖²)/2: corners 29/72, edges and centre 20/72
    press = 0.05**2 * (8 / (1 - 29 / 72) ** 2 + 10 / (1 - 20 / 72) ** 2)
    assert fit.press == pytest.approx(press, rel=1e-9)
    assert fit.pred_r2 == pytest.approx(1 - press / (18 * 0.05**2), rel=1e-9)
    assert fit.optimum is None and fit.optimum_coded is None
    assert fit.predicted is None and fit.interval is None
    assert fit.stationary_kind is None and fit.stationary_point is None
    assert any("the fitted surface is flat" in n and "no optimum" in n for n in fit.notes)
    data = fit.to_json()
    assert data["optimum"] is None and data["predicted"] is None and data["interval"] is None
    json.dumps(data, allow_nan=False)


# ---------------------------------------------------------------------------------------------
# constant except one trial: an ordinary fit, with the right numbers
# ---------------------------------------------------------------------------------------------
def test_constant_except_one_trial():
    """1.0 everywhere but 0.95 in one replicate at the centre: the centre mean is 1 + δ with
    δ = -0.025. Pure error SS = 2 δ²; the spike's lack-of-fit part is δ P22(0,0)/36 · P22 with
    P22(0,0) = 4, SS 2 δ² 16/36; F = (2δ² (4/9) / 3) / (2δ² / 9) = 4/3 on (3, 9) df. The fit is
    1 + δ/9 (1 - P2(u) - P2(v)): a minimum at the centre, best at a corner, 1 - δ/9."""
    frame = study(lambda u, v, r: 0.95 if (u, v, r) == (0, 0, 1) else 1.0)
    fit = fit_response_surface(frame, RESPONSE)
    delta = -0.025
    assert fit.lack_of_fit["ss_pure_error"] == pytest.approx(2 * delta**2, rel=1e-9)
    assert fit.lack_of_fit["ss_lack_of_fit"] == pytest.approx(2 * delta**2 * 4 / 9, rel=1e-9)
    assert fit.lack_of_fit["f"] == pytest.approx(4 / 3, rel=1e-9)
    assert fit.lack_of_fit_p == pytest.approx(stats.f.sf(4 / 3, 3, 9), rel=1e-9)
    ssr, sst = 2 * delta**2 * 13 / 9, 0.05**2 * 17 / 18
    assert fit.r2 == pytest.approx(1 - ssr / sst, rel=1e-9)
    assert not fit.exact
    assert fit.stationary_kind == "minimum"
    assert fit.stationary_point == {"temperature": pytest.approx(0.1),
                                    "batch_size": pytest.approx(64)}  # fmt: skip
    assert np.abs(coded_optimum(fit)) == pytest.approx([1.0, 1.0])  # a corner (four tie)
    assert fit.predicted == pytest.approx(1 - delta / 9, abs=1e-12)
    lo, hi = fit.interval
    assert lo < fit.predicted < hi


# ---------------------------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------------------------
def test_report_says_why_a_constant_response_has_no_model():
    fit = fit_best_supported(study(lambda u, v, r: 1.0), RESPONSE)
    message = f"{RESPONSE} is 1.0 in all 18 trials: {CONSTANT}"
    assert fit.status == "no variation" and fit.model is None and fit.surface is None
    assert fit.reason == message  # said once, not once per rung of the model ladder
    assert fit.to_json() == {
        "model": None, "status": "no variation", "r2": None, "adj_r2": None, "press": None,
        "pred_r2": None, "lack_of_fit_p": None, "stationary_kind": None, "optimum": None,
        "predicted": None, "interval": None, "notes": [message],
        "summary": f"Nothing modelled: {message}\nNo optimum is named: nothing was modelled.",
    }  # fmt: skip
    assert where_next(fit).to_json() == {"order": None, "why_none": "nothing was modelled"}
    page = _fit_html(fit, where_next(fit))
    assert "Nothing modelled: " + message in page


def test_report_json_and_html_of_degenerate_fits_carry_nulls_and_words():
    frame = study(lambda u, v, r: 1.0)  # constant
    # flat surface: replicates differ at each point by ±0.1, in no pattern shared across points
    # (the replicate is a block here, so a shift shared by every point would be a block effect)
    spread = np.repeat([0.1, -0.1, 0.1, -0.1, 0.1, -0.1, 0.1, -0.1, 0.0], 2)
    frame["z/align"] = 0.9 + spread * np.where(frame["replicate"] == 0, 1, -1)
    u = np.log2(frame["temperature"] / 0.1)
    frame["z/uniform"] = -3.0 + 0.1 * u  # exact plane
    frame["probe/linear_top1_h"] = math.nan  # missing everywhere
    analysis = analyse(frame)
    out = analysis.to_json()
    json.dumps(out, allow_nan=False)  # nothing undefined leaks as NaN or inf
    responses = out["responses"]
    assert responses[RESPONSE]["status"] == "no variation"
    assert responses[RESPONSE]["notes"] == [f"{RESPONSE} is 1.0 in all 18 trials: {CONSTANT}"]
    assert responses["probe/linear_top1_h"]["status"] == "no variation"
    assert "has no value in any trial" in responses["probe/linear_top1_h"]["notes"][0]
    flat = responses["z/align"]
    assert flat["status"] == "fitted" and flat["r2"] == pytest.approx(0.0, abs=1e-12)
    assert flat["optimum"] is None and flat["predicted"] is None and flat["interval"] is None
    assert flat["lack_of_fit_p"] == 1.0
    plane = responses["z/uniform"]  # any batch size is as good: the centre is shown
    assert plane["optimum"] == {"temperature": pytest.approx(0.05), "batch_size": 64}
    assert any("the optimum is not unique: batch_size" in n for n in plane["notes"])
    assert plane["interval"] is None and plane["lack_of_fit_p"] is None
    for fit in analysis.fits.values():
        # None never meets a float format; NaN reads n/a
        assert "nan" not in _fit_html(fit, where_next(fit))
    pages = {r: _fit_html(analysis.fits[r], analysis.directions[r]) for r in analysis.fits}
    assert "No optimum is named: the fitted surface is flat" in pages["z/align"]
    assert "no confidence interval: see the notes" in pages["z/uniform"]


def test_write_report_with_a_constant_and_a_flat_response(tmp_path):
    frame = study(lambda u, v, r: 1.0)
    frame["z/align"] = [0.9 + 0.1 * r for r in frame["replicate"]]
    frame["z/uniform"] = -3.0 + 0.1 * frame["replicate"] + 0.01 * np.log2(frame["batch_size"])
    written = write_report(analyse(frame, (RESPONSE, "z/align", "z/uniform")), tmp_path)
    page = written["report.html"].read_text()
    assert f"Nothing modelled: {RESPONSE} is 1.0 in all 18 trials" in page
    assert "No optimum is named: the fitted surface is flat" in page
    report = json.loads(written["report.json"].read_text())
    assert report["responses"][RESPONSE]["optimum"] is None
    assert not any("contours_z_align" in name for name in written)
    assert any("contours_z_uniform" in name for name in written)


def test_a_factor_that_does_not_matter_is_shown_at_its_centre():
    """y = 0.5 + 0.1 u exactly: every batch size is optimal, so the optimum's batch size would be
    float noise; it is the centre of the range (64) and the notes say any is as good."""
    fit = fit_response_surface(study(lambda u, v, r: 0.5 + 0.1 * u), RESPONSE)
    assert fit.optimum == {"temperature": pytest.approx(0.2), "batch_size": 64}
    assert fit.optimum_coded["batch_size"] == 0.0
    assert fit.predicted == pytest.approx(0.6, abs=1e-12)
    assert any(
        n.startswith("the optimum is not unique: batch_size does not move the prediction")
        and "any batch_size in [32, 128] is as good" in n
        for n in fit.notes
    )
