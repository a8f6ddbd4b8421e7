"""Effects with their evidence, and the replicate as a block, on small
hand-built results frames shaped like the default study (temperature × batch size, both on a log
scale, common seeds: replicate r uses seed r at every point)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from resultskit import NOISE, RESPONSE, SEED_LUCK, planted, study
from scipy import stats
from statsmodels.stats.multitest import multipletests

from analysis.findings.direction import where_next
from analysis.report.page import _fit_html, write_report
from analysis.stats.fits import common_seed_blocks
from analysis.stats.surface import factor_effects, fit_response_surface, holm
from analysis.study_analysis import analyse


def temperature(effects):
    return next(e for e in effects if e.factor == "temperature")


def test_common_seeds_make_the_replicate_a_block():
    df = planted(-0.004)
    assert common_seed_blocks(df) == "replicate"
    assert common_seed_blocks(df[df["replicate"] < 3].iloc[:-1]) is None  # one point lacks r = 2
    assert common_seed_blocks(df.assign(seed=range(len(df)))) is None  # a seed per trial


def test_a_planted_seed_effect_is_removed_by_the_block_and_narrows_the_interval():
    """Seed luck of ±0.01 to 0.025 shared by every point, a τ effect of -0.4 points per doubling,
    noise of about 0.001: without blocks the luck is error; with them it is not."""
    df = planted(-0.004)
    options = {"quadratic": False}
    without = fit_response_surface(df, RESPONSE, **options)
    with_blocks = fit_response_surface(df, RESPONSE, blocks="replicate", **options)
    assert (
        with_blocks.anova.index[0] == "replicate" and with_blocks.anova.loc["replicate", "df"] == 3
    )
    a, b = temperature(factor_effects(without)), temperature(factor_effects(with_blocks))
    assert a.estimate == pytest.approx(b.estimate)  # balanced: the block moves no estimate
    assert b.estimate == pytest.approx(-0.004, abs=5e-4)
    width_without, width_with = a.ci_high - a.ci_low, b.ci_high - b.ci_low
    # by how much: the error mean square falls from 4.5e-4 (the seed luck's variance, 4.4e-4, plus
    # noise) to 2.7e-6 (noise alone), 99% less, so the interval is 12.5 times narrower (the t
    # quantile on 9 rather than 12 residual df takes back a little of the sqrt(168) = 13)
    assert without.error_ms == pytest.approx(4.48e-4, rel=0.01)
    assert with_blocks.error_ms == pytest.approx(2.67e-6, rel=0.01)
    assert width_without / width_with == pytest.approx(12.48, rel=0.01)
    assert a.ci_low < 0 < a.ci_high  # without the block: not detectable
    assert b.ci_high < 0 and b.p_adjusted < 0.001  # with it: detected
    words = analyse(df, (RESPONSE,)).fits[RESPONSE].findings
    assert words.block.startswith("replicate is modelled as a block")
    assert "the error mean square fell from" in words.block and "99% less" in words.block


def test_effects_carry_holm_adjusted_p_and_the_detectable_size_at_80_percent_power():
    fit = fit_response_surface(planted(-0.004), RESPONSE, blocks="replicate", quadratic=False)
    effects = factor_effects(fit)
    assert [e.change for e in effects] == ["doubling temperature", "doubling batch_size"]
    raw = [e.p for e in effects]
    assert [e.p_adjusted for e in effects] == pytest.approx(multipletests(raw, method="holm")[1])
    for e in effects:  # a true effect of the detectable size is found 80% of the time
        t = stats.t.ppf(0.975, e.df)
        ncp = e.detectable / e.std_err
        power = stats.nct.sf(t, e.df, ncp) + stats.nct.cdf(-t, e.df, ncp)
        assert power == pytest.approx(0.8, abs=1e-6)
    assert effects[0].estimate == pytest.approx(-0.004, abs=5e-4)


def test_a_linear_factor_effect_is_over_its_design_range():
    """The cake's first experiment (rsm illus.html, summary(anal1): flour coefficient 3.575 per
    0.1 cup): raising flour from 0.9 to 1.1 cups adds 2 × 3.575 = 7.15."""
    cake = pd.DataFrame({
        "flour": [1.1, 1.0, 0.9, 1.1, 0.9, 1.0, 1.0, 1.0],
        "sugar": [0.4, 0.5, 0.6, 0.6, 0.4, 0.5, 0.5, 0.5],
        "rating": [28.9, 25.5, 20.2, 27.1, 21.5, 24.7, 25.0, 24.7],
    })  # fmt: skip
    fit = fit_response_surface(cake, "rating", ["flour", "sugar"], goal="max",
                               scales={"flour": "linear", "sugar": "linear"}, quadratic=False,
                               interactions=False)  # fmt: skip
    flour = next(e for e in factor_effects(fit) if e.factor == "flour")
    assert flour.change == "flour from 0.9 to 1.1"
    assert flour.estimate == pytest.approx(7.15)


def test_a_planted_study_with_no_effect_says_so_and_names_no_optimum(tmp_path):
    """Only seed luck and noise: no factor moves the response."""
    df = study(lambda tau, batch, r, i: 0.9 + SEED_LUCK[r] + NOISE[(3 * i) % len(NOISE)])
    fit = analyse(df, (RESPONSE,)).fits[RESPONSE]
    words = fit.findings
    assert not words.beats_mean and words.optimum is None and not words.found
    assert words.headline.startswith(f"No factor has a detectable effect on {RESPONSE}")
    assert "smallest effects this study could have detected at 80% power" in words.headline
    for e in words.effects:
        assert e.detectable is not None and e.detectable > 0
        assert f"{e.change}: {e.detectable * 100:.2g} points" in words.headline
    page = _fit_html(fit, where_next(fit))
    assert "Predicted optimum" not in page and "No optimum is named" in page
    assert page.index("No factor has a detectable effect") < page.index("adjusted R² =")
    data = fit.to_json()
    assert data["beats_mean"] is False and data["findings"][0] == words.headline
    assert data["optimum"] is None and data["predicted"] is None and data["interval"] is None


def test_the_default_study_report_states_an_effect_with_its_evidence(tmp_path):
    """Hand-built default study: kNN accuracy falls by 1.5 points per doubling of τ."""
    df = study(lambda tau, batch, r, i: 0.95 - 0.015 * math.log2(tau / 0.1) + SEED_LUCK[r]
               + NOISE[i % len(NOISE)])  # fmt: skip
    analysis = analyse(df)
    words = analysis.fits[RESPONSE].findings
    assert words.beats_mean
    (found,) = [s for s in words.found if s.startswith("Doubling temperature")]
    assert found.startswith(f"Doubling temperature lowers {RESPONSE} by 1.5 points (95% CI ")
    assert "Holm-adjusted p = " in found
    assert any(s.startswith("Doubling batch_size: no detectable effect") for s in
               words.not_detected)  # fmt: skip
    assert words.optimum.startswith("Predicted optimum in the design region: temperature = 0.1")
    written = write_report(analysis, tmp_path, figures=False)  # the words, not the figures
    page = written["report.html"].read_text()
    section = page[page.index(f">{RESPONSE} (max)</h3>") :]
    assert section.index("Doubling temperature lowers") < section.index("Predicted optimum")
    assert section.index("Predicted optimum") < section.index("adjusted R² =")
    assert "replicate is modelled as a block" in section


@pytest.mark.parametrize("seed", range(20))
def test_holm_adjusted_p_values_match_statsmodels(seed):
    """analysis.stats.surface.holm against statsmodels' multipletests (the reference) on random p
    with ties, ones and tiny values; and on a hand-worked example."""
    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 12))
    p = rng.choice([rng.uniform(0, 1), 1.0, 1e-9, 0.03], size=m) if seed % 3 == 0 else (
        rng.uniform(0, 0.2, size=m))  # fmt: skip
    assert holm(p) == pytest.approx(multipletests(p, method="holm")[1], abs=1e-15)


def test_holm_worked_by_hand():
    # sorted 0.01, 0.02, 0.04 (m = 3): 3 × 0.01 = 0.03; 2 × 0.02 = 0.04; 1 × 0.04 = 0.04
    assert list(holm([0.04, 0.01, 0.02])) == pytest.approx([0.04, 0.03, 0.04])
    assert list(holm([0.5, 0.6])) == pytest.approx([1.0, 1.0])
