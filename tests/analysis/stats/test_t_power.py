"""The two-sided t test's power and the noncentrality it detects (analysis.stats.t_power): against a
brute-force integral, closed forms and the normal limit. The points where scipy's lower tail is
NaN (it underflows) are the ones once answered wrongly: at alpha 0.001 and power 0.95, 1,000
residual df gave a detectable size of 8.0 standard errors instead of 4.94."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import integrate, stats

from analysis.stats.t_power import critical_t, noncentrality, t_test_power


def power_by_integration(ncp: float, df: int, alpha: float) -> float:
    """P(|Z + ncp| > t_crit · S) with S = sqrt(V / df), V chi-squared on df: the normal's two
    tails integrated over S's density, in log space, split at S = 1 where S concentrates."""
    crit = stats.t.ppf(1 - alpha / 2, df)

    def rejects(s: float) -> float:
        density = math.exp(stats.chi2.logpdf(df * s * s, df) + math.log(2 * df * s))
        return (stats.norm.sf(crit * s - ncp) + stats.norm.cdf(-crit * s - ncp)) * density

    spread = 40 / math.sqrt(2 * df)
    low, high = max(0.0, 1 - spread), 1 + spread + (10 if df < 5 else 0)
    core, _ = integrate.quad(rejects, low, high, points=[1], limit=1000, epsabs=1e-13)
    far, _ = integrate.quad(rejects, high, np.inf, limit=200)
    return core + far


@pytest.mark.parametrize(
    ("ncp", "df", "alpha"),
    [
        (2.8, 20, 0.05), (16.33, 1, 0.05), (8, 1, 0.05), (12, 3, 0.001),
        # scipy's lower tail underflows to NaN here
        (5, 1000, 0.001), (5.6, 200, 0.001), (5.6, 30000, 0.001), (40, 300, 0.001),
        (3, 5000, 0.05), (0.5, 2, 0.2),
        # scipy's own reports of its noncentral t: a NaN cdf at 36,949 df (scipy#25106), a step
        # in nctdtr at 3,000 df between -1 and 1 (scipy#8344), wrong far tails (scipy#7104)
        (38.56, 36949, 0.05), (3, 3000, 0.8), (3, 3000, 0.3), (8.27, 8, 0.05), (8.27, 8, 0.001),
    ],
)  # fmt: skip
def test_power_equals_the_integral(ncp, df, alpha):
    assert t_test_power(ncp, df, alpha) == pytest.approx(
        power_by_integration(ncp, df, alpha), abs=1e-9
    )


@pytest.mark.parametrize("df", [1, 4, 30, 1000])
@pytest.mark.parametrize("alpha", [0.001, 0.05, 0.2])
def test_no_effect_has_power_alpha_and_the_critical_value_is_students(df, alpha):
    assert t_test_power(0.0, df, alpha) == pytest.approx(alpha, rel=1e-9)
    assert critical_t(df, alpha) == pytest.approx(stats.t.ppf(1 - alpha / 2, df), rel=1e-12)


@pytest.mark.parametrize(("alpha", "power"), [(0.05, 0.8), (0.001, 0.95), (0.01, 0.99)])
def test_many_df_reach_the_normal_limit(alpha, power):
    """As df grows, t becomes normal: the noncentrality tends to z_(1-alpha/2) + z_power (the
    far tail's share, P(Z < -z - ncp), is below 1e-6 at these alphas)."""
    limit = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)
    assert noncentrality(30000, alpha, power) == pytest.approx(limit, rel=2e-4)
    assert noncentrality(1000, alpha, power) == pytest.approx(limit, rel=1e-2)


@pytest.mark.parametrize(("alpha", "power"), [(0.05, 0.8), (0.001, 0.95), (0.01, 0.99)])
def test_more_df_never_need_a_larger_effect(alpha, power):
    sizes = [noncentrality(df, alpha, power) for df in [*range(1, 40), 100, 170, 172, 500, 2000]]
    assert all(a > b for a, b in itertools.pairwise(sizes)), sizes


@pytest.mark.parametrize(("df", "alpha", "power"), [(1, 0.05, 0.8), (172, 0.001, 0.95),
                                                    (1000, 0.01, 0.99), (7, 0.1, 0.5)])  # fmt: skip
def test_the_noncentrality_is_the_root_of_the_power(df, alpha, power):
    ncp = noncentrality(df, alpha, power)
    assert power_by_integration(ncp, df, alpha) == pytest.approx(power, abs=1e-8)
    assert (
        t_test_power(ncp * (1 - 1e-6), df, alpha)
        < power
        < t_test_power(ncp * (1 + 1e-6), df, alpha)
    )


@pytest.mark.parametrize(
    ("df", "alpha", "power"), [(0, 0.05, 0.8), (3, 0.0, 0.8), (3, 0.05, 0.05), (3, 0.05, 1.0)]
)
def test_impossible_asks_are_refused(df, alpha, power):
    with pytest.raises(ValueError):
        noncentrality(df, alpha, power)
