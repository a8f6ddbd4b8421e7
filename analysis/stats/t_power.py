"""The power of a two-sided t test, and the effect it detects at a given power.

For a true |effect| / se of ``ncp``, the test statistic T = (Z + ncp) / sqrt(V / df) is
noncentral t (Z standard normal, V chi-squared on ``df``), and the test rejects when
|T| > t_crit. Its power is P(T > t_crit) + P(T < -t_crit); the second tail is the first one of
the noncentral t at ``-ncp`` (T(-ncp) = -T(ncp)), so both are upper tails and neither is ever
the NaN that scipy's lower tail returns where it underflows (``nctdtr`` at 1 df, or 1,000 df at
alpha 0.001). The upper tail is the one ``scipy.stats.nct.sf`` computes (Boost's), taken from
``scipy.special``: this module imports only that, so ``study power`` answers without loading
``scipy.stats`` (a second of a command that must answer in one).
"""

from __future__ import annotations

import functools

from analysis.internals import nct_survival


def _upper_tail(t: float, df: int, ncp: float) -> float:
    """P(T > t) for T noncentral t on ``df`` degrees of freedom with noncentrality ``ncp``,
    clipped to [0, 1] (its far tail can come out as -1e-17), as ``scipy.stats.nct.sf`` does."""
    survival = nct_survival()
    if survival is None:  # a SciPy that moved it: the public route, a second slower to import
        from scipy.stats import nct

        return float(nct.sf(t, df, ncp))
    return min(1.0, max(0.0, float(survival(t, df, ncp))))


def critical_t(df: int, alpha: float = 0.05) -> float:
    """The two-sided test's critical value: the 1 - alpha/2 quantile of Student's t."""
    from scipy.special import stdtrit

    return float(stdtrit(df, 1 - alpha / 2))


def t_test_power(ncp: float, df: int, alpha: float = 0.05) -> float:
    """The power of a two-sided t test at level ``alpha`` on ``df`` degrees of freedom when the
    true |effect| / se is ``ncp``: P(|T| > t_crit), T noncentral t."""
    crit = critical_t(df, alpha)
    return _upper_tail(crit, df, ncp) + _upper_tail(crit, df, -ncp)


@functools.lru_cache(maxsize=4096)
def noncentrality(df: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """The |effect| / se that a two-sided t test on ``df`` degrees of freedom detects at
    ``power``: the root of :func:`t_test_power` (the noncentral t, as statsmodels' TTestPower
    computes it). The bracket widens until it holds the root, because statsmodels' own solver
    stops at effect size 10 and so returns the same size (14.14 at 1 df) for every power above
    the one it reaches there; power rises with the noncentrality, so the root is unique and
    bisection finds it (to 1e-10 of it, as scipy's ``brentq`` was asked to, without importing
    ``scipy.optimize`` into a command that answers in a second).

    Raises:
        ValueError: ``df`` below 1, or ``alpha`` or ``power`` outside (0, 1) or ``power`` not
            above ``alpha`` (a test with no effect already has power ``alpha``).
    """
    if df < 1:
        raise ValueError(f"df must be at least 1, got {df}")
    if not (0 < alpha < 1 and alpha < power < 1):
        raise ValueError(f"need 0 < alpha < power < 1, got alpha {alpha} and power {power}")
    low, high = 0.0, 1.0
    while t_test_power(high, df, alpha) < power:
        low, high = high, high * 2
    while high - low > 1e-10:
        middle = (low + high) / 2
        low, high = (middle, high) if t_test_power(middle, df, alpha) < power else (low, middle)
    return (low + high) / 2
