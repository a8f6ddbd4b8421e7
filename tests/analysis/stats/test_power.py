"""Planning replicates: the replicates ``study power`` asks for really give
80% power, checked against the noncentral t distribution directly, on hand-built studies shaped
like the default one (temperature × batch size on log scales, common seeds)."""

from __future__ import annotations

import math

import pytest
from resultskit import RESPONSE, planted, study
from scipy import stats

from analysis.stats.power import (
    BASIS_VERSION,
    MAX_REPLICATES,
    _design,
    detectable_at,
    detectable_with,
    replicates_for,
)
from analysis.stats.surface import factor_effects, fit_response_surface, noncentrality


def t_test_power(ncp: float, df: int, alpha: float = 0.05) -> float:
    """Power of a two-sided t test at noncentrality ``ncp`` (the reference): scipy's noncentral
    t, or where its far tail is NaN (1 df) the rejection rate of 2,000,000 drawn statistics."""
    import numpy as np

    crit = stats.t.ppf(1 - alpha / 2, df)
    exact = float(stats.nct.sf(crit, df, ncp) + stats.nct.cdf(-crit, df, ncp))
    if math.isfinite(exact):
        return exact
    rng = np.random.default_rng(1)
    t = (rng.standard_normal(2_000_000) + ncp) / np.sqrt(rng.chisquare(df, 2_000_000) / df)
    return float(np.mean(np.abs(t) > crit))


# 72, 86 and 875: statsmodels' solve_power answers with a 1-element array there (its root
# finder falls back), which once broke the report of any study with that many residual df
@pytest.mark.parametrize("df", [1, 3, 10, 72, 86, 100, 875])
def test_noncentrality_gives_eighty_percent_power(df):
    assert t_test_power(noncentrality(df), df) == pytest.approx(0.8, abs=2e-3)


@pytest.mark.parametrize("blocks", [None, "replicate"])
def test_replicates_needed_are_the_fewest_with_eighty_percent_power(blocks):
    """With the returned r, the effect's t test has power >= 0.8 (noncentral t, the standard
    error scaled by 1/sqrt(r) and the residual df grown with the runs); with r - 1 it has
    less. The finished study's own replicates reproduce its detectable size."""
    df = planted(-0.004, replicates=2)
    surface = fit_response_surface(df, RESPONSE, quadratic=False, blocks=blocks)
    design = _design(surface)
    assert (design.points, design.runs) == (4, 8)
    for e in factor_effects(surface):
        assert detectable_at(e, design, 2, 0.05, 0.8) == pytest.approx(e.detectable, rel=1e-9)
    target = min(e.detectable for e in factor_effects(surface)) / 3  # about 9× the runs
    for plan in replicates_for(surface, target):
        e = next(x for x in factor_effects(surface) if x.change == plan.change)
        r = plan.replicates_needed
        assert r is not None and r > 2 and plan.detectable_then <= target

        def power_with(r: int, e=e) -> float:
            se = e.std_err * math.sqrt(design.runs / (design.points * r))
            return t_test_power(target / se, design.df(r))

        assert power_with(r) >= 0.8 - 1e-6
        if r > 1 and design.df(r - 1) >= 1:
            assert power_with(r - 1) < 0.8


def test_the_block_costs_a_degree_of_freedom_per_added_replicate():
    df = planted(-0.004, replicates=2)
    plain = _design(fit_response_surface(df, RESPONSE, quadratic=False))
    blocked = _design(fit_response_surface(df, RESPONSE, quadratic=False, blocks="replicate"))
    assert plain.df(2) == 8 - 4 and blocked.df(2) == 8 - 5  # intercept, 2 slopes, twi (+ block)
    assert plain.df(5) - plain.df(2) == 12 and blocked.df(5) - blocked.df(2) == 12 - 3


def test_planning_refuses_what_it_cannot_plan():
    df = planted(-0.004, replicates=2)
    surface = fit_response_surface(df, RESPONSE, quadratic=False)
    for bad in (0, -0.1, math.nan, math.inf, "0.1"):
        with pytest.raises(ValueError, match="effect must be a positive number"):
            replicates_for(surface, bad)
    same_twice = study(lambda tau, b, r, i: 0.9 + 0.01 * math.log2(tau / 0.1), 2)
    exact = fit_response_surface(same_twice, RESPONSE, quadratic=False)
    assert exact.exact
    with pytest.raises(ValueError, match="no error to plan from"):
        replicates_for(exact, 0.01)
    tiny = replicates_for(surface, 1e-12)
    assert all(p.replicates_needed is None for p in tiny)  # beyond MAX_REPLICATES: said, not run
    assert MAX_REPLICATES == 1000


def test_detectable_with_more_replicates_is_smaller():
    surface = fit_response_surface(planted(-0.004, 2), RESPONSE, quadratic=False)
    two, eight = detectable_with(surface, 2), detectable_with(surface, 8)
    assert [c for c, _ in two] == [c for c, _ in eight] == ["doubling temperature",
                                                           "doubling batch_size"]  # fmt: skip
    assert all(b < a for (_, a), (_, b) in zip(two, eight, strict=True))


@pytest.mark.parametrize("df", [1, 2, 4])
def test_the_detectable_size_grows_with_the_power_asked_for(df):
    """statsmodels' solver stops at effect size 10, so at 1 df it gave 14.14 for 0.9 and 0.95
    alike, below the 16.33 it gives for 0.8; the noncentrality must rise with the power."""
    sizes = [noncentrality(df, 0.05, p) for p in (0.5, 0.8, 0.9, 0.95, 0.99)]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes)


@pytest.mark.parametrize(("df", "power"), [(1, 0.9), (1, 0.95), (3, 0.8)])
def test_the_noncentrality_gives_its_power_by_simulation(df, power):
    """Brute force: t statistics drawn with that noncentrality reject at that rate."""
    import numpy as np

    ncp = noncentrality(df, 0.05, power)
    rng = np.random.default_rng(0)
    n = 400_000
    t = (rng.standard_normal(n) + ncp) / np.sqrt(rng.chisquare(df, n) / df)
    rate = float(np.mean(np.abs(t) > stats.t.ppf(0.975, df)))
    assert rate == pytest.approx(power, abs=0.003)


def test_the_noncentrality_matches_statsmodels_where_its_solver_reaches():
    from statsmodels.stats.power import TTestPower

    for df in (2, 5, 30):
        d = TTestPower().solve_power(effect_size=None, nobs=df + 1, alpha=0.05, power=0.9)
        assert noncentrality(df, 0.05, 0.9) == pytest.approx(float(d) * math.sqrt(df + 1), 1e-4)


@pytest.mark.parametrize("blocks", [None, "replicate"])
def test_a_basis_through_json_plans_as_its_surface_does(blocks):
    """What ``study power`` reads back from a report's basis file gives the plans, detectable
    sizes and error of the fit itself, number for number; the effects' detectable size now is
    factor_effects' own."""
    import json

    from analysis.stats.power import PowerBasis, power_basis

    surface = fit_response_surface(planted(-0.004, 2), RESPONSE, quadratic=False, blocks=blocks)
    basis = PowerBasis.from_json(json.loads(json.dumps(power_basis(surface).to_json())))
    assert (basis.error_ms, basis.error_df, basis.blocks) == (
        surface.error_ms,
        surface.error_df,
        surface.blocks,
    )
    for effect in (0.001, 0.004, 0.02):
        assert replicates_for(basis, effect) == replicates_for(surface, effect)
        assert replicates_for(basis, effect, alpha=0.001, power=0.95) == replicates_for(
            surface, effect, alpha=0.001, power=0.95
        )
    assert detectable_with(basis, 5) == detectable_with(surface, 5)
    now = [p.detectable_now for p in replicates_for(basis, 0.01)]
    assert now == [e.detectable for e in factor_effects(surface)]


def test_a_basis_file_answers_only_for_its_trials_and_version(tmp_path):
    from analysis.stats.power import read_basis, trials_fingerprint, write_bases

    surface = fit_response_surface(planted(-0.004, 2), RESPONSE, quadratic=False)
    trials = [("p000-r0", "a1", "finished"), ("p001-r0", "b2", "finished")]
    fingerprint = trials_fingerprint(trials)
    assert trials_fingerprint(trials[::-1]) == fingerprint  # any order
    for changed in ([trials[0]], [trials[0], ("p001-r0", "b2", "failed")],
                    [trials[0], ("p001-r0", "c3", "finished")]):  # fmt: skip
        assert trials_fingerprint(changed) != fingerprint
    text = write_bases({RESPONSE: surface, "flat": None}, fingerprint, tmp_path).read_text()
    assert read_basis(text, fingerprint, RESPONSE).effects[0].std_err > 0
    assert read_basis(text, fingerprint, "flat") is None  # not fitted: the caller fits
    assert read_basis(text, trials_fingerprint(trials[:1]), RESPONSE) is None
    assert read_basis(text.replace(f'"version": {BASIS_VERSION}', '"version": 0'), fingerprint,
                      RESPONSE) is None  # fmt: skip
    assert read_basis("not json", fingerprint, RESPONSE) is None
