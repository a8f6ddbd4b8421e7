"""An accuracy as a count over n shared held-out items (analysis.stats.measurement): the two-source
interval against a brute-force two-way ANOVA and against its coverage in planted studies;
Wilson and McNemar against statsmodels and their closed forms; paired verdicts on planted
outcome vectors with known discordant counts."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from scipy.special import expit
from statsmodels.formula.api import ols
from statsmodels.stats.anova import anova_lm
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.proportion import proportion_confint

from analysis.stats.measurement import (
    SOURCES_BOTH,
    SOURCES_ITEMS,
    at_least_one_item,
    item_se,
    mcnemar_exact,
    mean_squares,
    paired_comparison,
    seeds_only_interval,
    two_source_interval,
    wilson,
)

# ---------------------------------------------------------------------------------------------
# tier 1: brute force
# ---------------------------------------------------------------------------------------------


def test_the_mean_squares_are_a_two_way_anova_without_replication():
    rng = np.random.default_rng(0)
    x = (rng.random((3, 40)) < 0.7).astype(float)
    long = pd.DataFrame(
        [(s, i, x[s, i]) for s in range(3) for i in range(40)], columns=["seed", "item", "y"]
    )
    table = anova_lm(ols("y ~ C(seed) + C(item)", long).fit())
    ms_seed, ms_item, ms_error = mean_squares(x)
    assert ms_seed == pytest.approx(table.loc["C(seed)", "mean_sq"], rel=1e-10)
    assert ms_item == pytest.approx(table.loc["C(item)", "mean_sq"], rel=1e-10)
    assert ms_error == pytest.approx(table.loc["Residual", "mean_sq"], rel=1e-10)


def test_the_variance_is_the_seed_plus_item_minus_interaction_combination():
    rng = np.random.default_rng(1)
    x = (rng.random((2, 360)) < expit(3 + rng.normal(0, 2, 360))).astype(float)
    r, n = x.shape
    ms_seed, ms_item, ms_error = mean_squares(x)
    expected = (ms_seed + ms_item - ms_error) / (r * n)
    expected = max(expected, ms_seed / (r * n), ms_item / (r * n))
    iv = two_source_interval(x)
    assert iv.se == pytest.approx(math.sqrt(expected), rel=1e-12)
    assert iv.sources == SOURCES_BOTH and iv.replicates == 2 and iv.items == 360
    # the two single-source variances, by their own definitions
    seeds_var = x.mean(axis=1).var(ddof=1) / r
    items_var = x.mean(axis=0).var(ddof=1) / n
    assert iv.se**2 >= max(seeds_var, items_var) - 1e-15


def test_one_replicate_counts_the_items_alone():
    x = np.array([[1] * 90 + [0] * 10], dtype=float)
    iv = two_source_interval(x)
    assert iv.sources == SOURCES_ITEMS
    assert iv.se == pytest.approx(x[0].std(ddof=1) / math.sqrt(100))
    assert iv.df == 99


# ---------------------------------------------------------------------------------------------
# tier 2: closed forms and the library's own numbers
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("count", "n"), [(352, 360), (1520, 2000), (0, 50), (50, 50), (7, 9)])
def test_wilson_equals_statsmodels_and_its_closed_form(count, n):
    low, high = wilson(count, n)
    assert (low, high) == proportion_confint(count, n, alpha=0.05, method="wilson")
    z, p = stats.norm.ppf(0.975), count / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert low == pytest.approx(max(centre - half, 0), abs=1e-12)
    assert high == pytest.approx(min(centre + half, 1), abs=1e-12)


@pytest.mark.parametrize(("b", "c"), [(1, 0), (0, 0), (3, 2), (12, 2), (0, 9), (40, 25)])
def test_mcnemar_exact_equals_statsmodels_and_the_binomial(b, c):
    p = mcnemar_exact(b, c)
    assert p == mcnemar(np.array([[0, b], [c, 0]]), exact=True).pvalue
    m = b + c
    expected = 1.0 if m == 0 else min(1.0, 2 * stats.binom.cdf(min(b, c), m, 0.5))
    assert p == pytest.approx(expected, rel=1e-12)


def test_the_default_studys_zero_width_interval_has_width_now():
    """Two replicates that each got 352 of 360 right: the seeds alone give zero width; counting
    the items does not."""
    x = np.ones((2, 360))
    x[:, :8] = 0  # bit-identical replicates
    assert seeds_only_interval(list(x.mean(axis=1))).width == 0
    iv = two_source_interval(x)
    assert iv.mean == pytest.approx(352 / 360)
    assert iv.width > 0.02  # about ± 1.6 points: the item-sampling error of 352 / 360
    assert iv.low < 352 / 360 < iv.high
    assert item_se(352 / 360, 360) == pytest.approx(math.sqrt(352 / 360 * 8 / 360 / 360))


@pytest.mark.parametrize("value", [0.0, 1.0])
def test_all_right_or_all_wrong_is_the_wilson_interval_of_the_count(value):
    iv = two_source_interval(np.full((3, 200), value))
    low, high = wilson(int(value) * 200, 200)
    assert (iv.low, iv.high) == (low, high) and iv.width > 0


def test_nothing_below_one_item_is_detectable():
    assert at_least_one_item(0.0015, 360) == pytest.approx(1 / 360)
    assert at_least_one_item(0.02, 360) == 0.02
    assert at_least_one_item(0.0015, None) == 0.0015


# ---------------------------------------------------------------------------------------------
# paired verdicts on planted outcome vectors
# ---------------------------------------------------------------------------------------------


def _vectors(n: int, right: int, only_mine: int, only_theirs: int) -> tuple[np.ndarray, ...]:
    """(mine, theirs) over n items: ``right`` both right, then the discordant ones."""
    mine, theirs = np.zeros(n, np.int8), np.zeros(n, np.int8)
    mine[:right] = theirs[:right] = 1
    mine[right : right + only_mine] = 1
    theirs[right + only_mine : right + only_mine + only_theirs] = 1
    return mine, theirs


def test_bit_identical_replicates_one_image_ahead_cannot_be_told_apart():
    """The default study's case: both replicates beat the raw input on the same one image."""
    mine, raw = _vectors(360, 351, 1, 0)
    found = paired_comparison({0: mine, 1: mine.copy()}, {None: raw})
    assert [(t.b, t.c) for t in found.tests] == [(1, 0), (1, 0)]
    assert [t.p for t in found.tests] == [1.0, 1.0]
    assert found.difference.mean == pytest.approx(1 / 360)
    assert found.difference.low < 0 < found.difference.high
    assert found.verdict == "cannot be told apart"


def test_many_discordant_items_one_way_beat_and_the_other_way_did_not():
    mine, theirs = _vectors(2000, 1400, 150, 40)
    found = paired_comparison({0: mine, 1: mine, 2: mine}, {None: theirs})
    assert (found.only_trained, found.only_baseline) == (450, 120)
    assert found.tests[0].p < 1e-10
    assert found.verdict == "beat" and found.difference.low > 0
    worse = paired_comparison({0: theirs, 1: theirs}, {None: mine})
    assert worse.verdict == "did not beat" and worse.difference.high < 0
    # the same outcomes for a target to minimise read the other way round
    assert paired_comparison({0: mine}, {None: theirs}, mode="min").verdict == "did not beat"


def test_seeded_baselines_pair_seed_with_seed():
    a0, b0 = _vectors(500, 400, 30, 5)
    a1, b1 = _vectors(500, 400, 5, 30)
    found = paired_comparison({0: a0, 1: a1}, {0: b0, 1: b1})
    assert [(t.seed, t.against_seed, t.b, t.c) for t in found.tests] == [
        (0, 0, 30, 5), (1, 1, 5, 30)]  # fmt: skip
    assert found.verdict == "cannot be told apart"  # the seeds disagree: no claim either way


def test_identical_systems_are_never_an_interval_of_zero_width():
    mine, _ = _vectors(360, 300, 0, 0)
    found = paired_comparison({0: mine, 1: mine}, {None: mine})
    assert found.difference.mean == 0 and found.difference.width > 0
    assert found.verdict == "cannot be told apart"


# ---------------------------------------------------------------------------------------------
# tier 3: coverage of the true accuracy in planted studies
# ---------------------------------------------------------------------------------------------


def true_accuracy(theta: float, seed_sd: float, item_sd: float) -> float:
    """E over seeds u ~ N(0, seed_sd) and items v ~ N(0, item_sd) of expit(theta + u + v), by
    Gauss–Hermite quadrature (exact to ~1e-12 here)."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(120)
    weights = weights / weights.sum()
    grid = expit(theta + seed_sd * nodes[:, None] + item_sd * nodes[None, :])
    return float(weights @ grid @ weights)


def coverage(theta, seed_sd, item_sd, r, n, studies=400, seed=0) -> tuple[float, float]:
    """(two-source, seeds-only) coverage of the true accuracy at nominal 95% over ``studies``
    planted studies: each draws r seed effects and n items, then every outcome."""
    rng = np.random.default_rng(seed)
    truth = true_accuracy(theta, seed_sd, item_sd)
    both = seeds = 0
    for _ in range(studies):
        u, v = rng.normal(0, seed_sd, r), rng.normal(0, item_sd, n)
        x = (rng.random((r, n)) < expit(theta + u[:, None] + v[None, :])).astype(float)
        iv = two_source_interval(x)
        both += iv.low <= truth <= iv.high
        only = seeds_only_interval(list(x.mean(axis=1)))
        seeds += only.low <= truth <= only.high
    return both / studies, seeds / studies


@pytest.mark.parametrize(
    ("name", "theta", "seed_sd", "item_sd", "r", "n"),
    [
        # the default study: ~97.5% on 360 digits, 2 replicates ~1 item apart
        ("default", 4.5, 0.05, 2.5, 2, 360),
        # Fashion-MNIST: ~76% on 2,000 items, 3 replicates ~10 items apart
        ("fashion_mnist", 1.6, 0.05, 2.0, 3, 2000),
        # the same designs with seeds that matter more (5 items apart on digits, 25 on F-MNIST)
        ("default, noisier seeds", 4.5, 0.3, 2.5, 2, 360),
        ("fashion_mnist, noisier seeds", 1.6, 0.1, 2.0, 3, 2000),
    ],
)
def test_the_point_interval_covers_the_true_accuracy(name, theta, seed_sd, item_sd, r, n):
    both, seeds = coverage(theta, seed_sd, item_sd, r, n)
    print(f"{name}: two-source {both:.3f}, seeds-only {seeds:.3f} (nominal 0.95, 400 studies)")
    assert 0.92 <= both <= 0.98, (name, both, seeds)


def test_the_seeds_only_interval_misses_when_items_dominate():
    """Near-deterministic encoders (items decide, seeds barely): the seeds-only interval forgets
    the items and undercovers; the two-source interval does not."""
    both, seeds = coverage(3.0, 0.0, 6.0, 3, 2000, studies=400, seed=5)
    print(f"items dominate: two-source {both:.3f}, seeds-only {seeds:.3f}")
    assert 0.92 <= both <= 0.98
    assert seeds < 0.8


@pytest.mark.parametrize(("count", "n"), [(38, 38), (0, 77), (0, 1), (1, 1)])
def test_wilson_bounds_stay_within_zero_and_one(count, n):
    """statsmodels#7386 (fixed in statsmodels#10010): rounding put Wilson's bounds just outside
    [0, 1] at 0 and n successes."""
    low, high = wilson(count, n)
    assert 0.0 <= low < high <= 1.0


def test_no_discordant_items_is_p_one_not_a_division_by_zero():
    """huggingface/evaluate#795: McNemar's chi-square divides by b + c; the exact test at b = c
    = 0 is p = 1, and two identical systems are a comparison, not an error."""
    assert mcnemar_exact(0, 0) == 1.0


def test_seeds_that_disagree_item_by_item_keep_their_mean():
    """Both seeds right on half the items, the other half: no seed or item effect, all
    interaction; the mean is 0.5 with an interval around it (not the first outcome's Wilson)."""
    x = np.array([[1, 0] * 50, [0, 1] * 50], dtype=float)
    iv = two_source_interval(x)
    assert iv.mean == 0.5 and iv.low < 0.5 < iv.high and iv.width > 0


def test_non_finite_outcomes_are_refused():
    with pytest.raises(ValueError, match="finite"):
        two_source_interval(np.array([[1.0, np.nan, 0.0]]))


def paired_coverage(theta, seed_sd, item_sd, theta_raw, r, n, studies=400, seed=0) -> float:
    """Coverage of the true accuracy difference between a seeded encoder and a fixed system
    (the raw input: no seed) by the paired difference's interval, in planted studies."""
    rng = np.random.default_rng(seed)
    truth = true_accuracy(theta, seed_sd, item_sd) - true_accuracy(theta_raw, 0.0, item_sd)
    hits = 0
    for _ in range(studies):
        u, v = rng.normal(0, seed_sd, r), rng.normal(0, item_sd, n)
        x = (rng.random((r, n)) < expit(theta + u[:, None] + v[None, :])).astype(np.int8)
        raw = (rng.random(n) < expit(theta_raw + v)).astype(np.int8)
        d = paired_comparison({s: x[s] for s in range(r)}, {None: raw}).difference
        hits += d.low <= truth <= d.high
    return hits / studies


@pytest.mark.parametrize(
    ("name", "theta", "seed_sd", "item_sd", "theta_raw", "r", "n"),
    [("default", 4.5, 0.05, 2.5, 4.5, 2, 360), ("fashion_mnist", 1.6, 0.05, 2.0, 1.7, 3, 2000)],
)
def test_the_paired_difference_covers_the_true_difference(
    name, theta, seed_sd, item_sd, theta_raw, r, n
):
    found = paired_coverage(theta, seed_sd, item_sd, theta_raw, r, n)
    print(f"{name}: paired difference coverage {found:.3f} (nominal 0.95, 400 studies)")
    assert 0.92 <= found <= 0.98


def test_unmatched_seeds_take_the_baselines_remaining_seeds_in_turn():
    mine, theirs = _vectors(100, 80, 5, 1)
    found = paired_comparison({1: mine, 5: mine, 7: mine}, {1: theirs, 2: theirs})
    assert [(t.seed, t.against_seed) for t in found.tests] == [(1, 1), (5, 2), (7, 2)]


def test_replicates_without_a_seed_are_all_kept():
    mine, theirs = _vectors(100, 80, 5, 1)
    found = paired_comparison([(None, mine), (None, mine), (3, mine)], {None: theirs})
    assert len(found.tests) == 3 and found.difference.replicates == 3
