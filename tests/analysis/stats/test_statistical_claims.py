"""Statistics that must not be claimed: nothing is "found" without residual degrees of freedom,
an accuracy's interval stays within [0, 1], and a metric that did not vary is said to have
nothing to plan from (not an AttributeError)."""

from __future__ import annotations

import math

import pytest
from resultskit import RESPONSE, planted, study
from scipy import stats

from analysis.stats.best import best_point
from analysis.study_analysis import analyse


def test_a_model_that_reproduces_every_trial_finds_nothing():
    """The smoke study's shape: 4 trials, 4 coefficients, 0 residual df. Its estimates are
    reported as untested, never as findings."""
    df = study(lambda tau, batch, r, i: 0.8 + 0.05 * (tau == 0.5) + 0.01 * (batch == 256)
               + 0.003 * i, replicates=1)  # fmt: skip
    analysis = analyse(df, (RESPONSE,))
    fit = analysis.fits[RESPONSE]
    # additive by chance: three terms reproduce the four trials, one residual df, no error
    assert fit.surface.exact and fit.surface.error_df <= 1 and not fit.findings.beats_mean
    assert fit.findings.found == ()
    assert all("not tested" in s for s in fit.findings.not_detected)
    top = analysis.headline
    assert top.found == () and not any(line.startswith("Found:") for line in top.lines())
    assert "no error to test against" in top.on_target
    assert top.next_step.startswith("replicate the design points")
    summary = analysis.to_json()["responses"][RESPONSE]
    assert summary["optimum"] is None and summary["beats_mean"] is False


@pytest.mark.parametrize(("values", "low", "high"), [
    ((0.99, 0.94, 0.97), None, 1.0),  # the t interval runs past 1
    ((0.02, 0.07, 0.01), 0.0, None),  # and below 0
])  # fmt: skip
def test_an_accuracys_interval_stays_within_its_bounds(values, low, high):
    df = study(lambda tau, batch, r, i: values[r] if (tau, batch) == (0.1, 64) else 0.5,
               replicates=3)  # fmt: skip
    mode = "max" if high else "min"
    best = best_point(df, RESPONSE, mode)
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    raw_low, raw_high = mean - half, mean + half
    assert raw_high > 1 if high else raw_low < 0  # the unbounded interval crosses the bound
    assert best.ci_low == pytest.approx(raw_low if low is None else low)
    assert best.ci_high == pytest.approx(raw_high if high is None else high)
    # a metric without bounds keeps its t interval whole
    other = df.drop(columns=["z/align"]).rename(columns={RESPONSE: "z/align"})
    other.attrs = df.attrs
    free = best_point(other, "z/align", mode)
    assert (free.ci_low, free.ci_high) == pytest.approx((raw_low, raw_high))


def test_power_of_a_metric_that_did_not_vary_says_why():
    from search_spaces.spec import StudyError
    from study.services.power_answer import surface_for

    df = planted(-0.004).assign(**{RESPONSE: 0.9})
    with pytest.raises(StudyError, match=r"nothing to plan from \(.*constant response"):
        surface_for(df, RESPONSE)
