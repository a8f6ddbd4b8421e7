"""An accuracy is a count over n held-out items: its intervals, its paired comparisons, and
the finest claim it supports.

Every trial and every baseline of a study is scored on the same n held-out items, so a point's
mean accuracy has two sources of error: the seeds (another seed trains another encoder) and the
items (another draw of n items from the same population). Bouthillier et al. (2021) show both
must be counted; Dietterich (1998) recommends McNemar's test for two classifiers scored on one
shared test set.

**The interval of a point** (:func:`two_source_interval`) is an equivalent variance
decomposition, not a bootstrap: the r × n matrix of outcomes (seed s got item i right, 0/1) is a
two-way layout without replication, seeds × items, both random (Montgomery, *Design and Analysis
of Experiments*, ch. 13). With the mean squares ``MS_seed`` (r − 1 df), ``MS_item`` (n − 1 df)
and ``MS_error`` ((r − 1)(n − 1) df), the variance of the grand mean is

    Var = σ²_seed / r + σ²_item / n + σ²_error / (r n) = (MS_seed + MS_item − MS_error) / (r n),

estimated by the mean squares, never below either single-source variance (``MS_seed / (r n)``,
the seeds alone, and ``MS_item / (r n)``, the items alone), and read against Student's t with
Satterthwaite's degrees of freedom. One replicate leaves the items alone. Where every outcome is
the same (all right, all wrong) the variance is zero and the Wilson interval of the count is
used instead: while n is finite, no interval has zero width.

**A comparison with a baseline** (:func:`paired_comparison`) is made item by item on the shared
items: the difference matrix ``D[s, i] = trained[s, i] − baseline[s, i]`` (the baseline's seed
paired with the trial's seed when it has it; the raw input has none) gets the same
decomposition; and for each seed, the exact McNemar test (statsmodels' ``mcnemar``) on its
discordant items (only the trained encoder right: ``b``; only the baseline right: ``c``).

**Resolution**: one item is ``1 / n`` (100 / n points). Nothing smaller than one item is called
beaten, found or detectable (:func:`at_least_one_item`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

SOURCES_BOTH = "seeds and held-out items"
SOURCES_ITEMS = "held-out items only (one replicate: the seeds' spread is unknown)"
SOURCES_SEEDS = "seeds only (no per-item outcomes in the record)"
VERDICTS = ("beat", "did not beat", "cannot be told apart")


def _t(level: float, df: float) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.5 + level / 2, df)) if math.isfinite(df) else float(
        stats.norm.ppf(0.5 + level / 2))  # fmt: skip


def wilson(count: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson's score interval of ``count`` successes in ``n`` (statsmodels)."""
    from statsmodels.stats.proportion import proportion_confint

    alpha = round(1 - level, 12)  # 1 - 0.95 is 0.050000000000000044 in binary
    low, high = proportion_confint(int(count), int(n), alpha=alpha, method="wilson")
    # statsmodels before 0.15 let rounding put the bounds just outside [0, 1]
    # (statsmodels#7386: 38 of 38 gave 1.0000000000000002, 0 of 77 gave -3.5e-18)
    return max(float(low), 0.0), min(float(high), 1.0)


def resolution(n: int) -> float:
    """The finest step an accuracy on ``n`` items can take: one item, 1 / n."""
    return 1.0 / n


def item_se(p: float, n: int) -> float:
    """The item-sampling standard error of an accuracy ``p`` on ``n`` items, √(p(1 − p) / n)."""
    return math.sqrt(max(p * (1 - p), 0.0) / n)


def at_least_one_item(size: float, n: int | None) -> float:
    """``size`` floored at one held-out item (unchanged when ``n`` is unknown)."""
    return size if not n else max(size, resolution(n))


def signed_points(value: float) -> str:
    """A difference of accuracies as a person reads it, to a hundredth of a point: '+0.28
    points', '−1.94 points', '0 points' (never '−0.00')."""
    shown = f"{abs(value) * 100:.2f}"
    if shown == "0.00":
        return "0 points"
    return f"{'+' if value > 0 else '−'}{shown} points"


def signed_items(value: float, n: int) -> str:
    """A mean difference of ``value`` (a share) as items of ``n``, to a tenth of an item:
    '+1.0 item of 360', '−15.5 items of 360', 'no item of 360'."""
    items = value * n
    if f"{abs(items):.1f}" == "0.0":
        return f"no item of {n:,}"
    word = "item" if f"{abs(items):.1f}" == "1.0" else "items"
    return f"{'+' if items > 0 else '−'}{abs(items):.1f} {word} of {n:,}"


def resolution_words(items: int, p: float | None = None) -> str:
    """'Accuracies count 360 held-out items: one item is 0.28 points, and at 97.8% the
    item-sampling standard error is 0.78 points.'"""
    words = (f"Accuracies count {items:,} held-out items: one item is {100 / items:.2g} points, "
             "the finest difference any accuracy here resolves")  # fmt: skip
    if p is not None:
        words += (f"; at {100 * p:.1f}% the item-sampling standard error is "
                  f"{100 * item_se(p, items):.2g} points")  # fmt: skip
    return words + "."


def resolution_json(items: int | None, p: float | None = None) -> dict[str, Any] | None:
    """``report.json``'s ``measurement``: the held-out items, one item in points, and the
    item-sampling standard error at ``p`` (points); None when the items are unknown."""
    if not items:
        return None
    return {"items": items, "one_item_points": 100 / items,
            "item_se_points": None if p is None else 100 * item_se(p, items),
            "at": p, "sentence": resolution_words(items, p)}  # fmt: skip


@dataclass(frozen=True)
class Interval:
    """A mean with its interval: ``mean``, ``low``, ``high`` at ``level``, its standard error
    ``se`` and degrees of freedom ``df`` (inf for a normal quantile), the ``sources`` of error it
    counts (words), ``replicates`` (r) and ``items`` (n), and the variance ``parts`` it was
    made of (``seeds``, ``items``, ``interaction``: each source's share of Var, before flooring)."""

    mean: float
    low: float
    high: float
    se: float
    df: float
    sources: str
    replicates: int
    items: int
    level: float = 0.95
    parts: tuple[tuple[str, float], ...] = ()

    @property
    def width(self) -> float:
        return self.high - self.low

    def to_json(self) -> dict[str, Any]:
        return {"mean": self.mean, "low": self.low, "high": self.high, "se": self.se,
                "df": self.df if math.isfinite(self.df) else None, "level": self.level,
                "sources": self.sources, "replicates": self.replicates, "items": self.items,
                "variance_parts": dict(self.parts)}  # fmt: skip


def mean_squares(x: np.ndarray) -> tuple[float, float, float]:
    """(MS_seed, MS_item, MS_error) of an r × n two-way layout without replication."""
    r, n = x.shape
    grand = x.mean()
    rows, cols = x.mean(axis=1), x.mean(axis=0)
    ss_seed = n * float(((rows - grand) ** 2).sum())
    ss_item = r * float(((cols - grand) ** 2).sum())
    resid = x - rows[:, None] - cols[None, :] + grand
    ss_error = float((resid**2).sum())
    ms_seed = ss_seed / (r - 1) if r > 1 else math.nan
    ms_item = ss_item / (n - 1) if n > 1 else math.nan
    ms_error = ss_error / ((r - 1) * (n - 1)) if r > 1 and n > 1 else math.nan
    return ms_seed, ms_item, ms_error


def _variance(x: np.ndarray) -> tuple[float, float, tuple[tuple[str, float], ...]]:
    """(Var of the grand mean, its Satterthwaite df, the parts) of the r × n matrix ``x``.

    Each variance component is estimated by the mean squares and truncated at zero (a negative
    estimate of a variance is zero): Var = (a − e)⁺ + (b − e)⁺ + e, with a = MS_seed / (r n),
    b = MS_item / (r n) and e = MS_error / (r n)."""
    r, n = x.shape
    if n < 2:
        raise ValueError("an interval over items needs at least two items")
    ms_seed, ms_item, ms_error = mean_squares(x)
    if r == 1:
        var = ms_item / n
        return var, float(n - 1), (("items", var),)
    a, b, e = ms_seed / (r * n), ms_item / (r * n), ms_error / (r * n)
    df_a, df_b, df_e = r - 1, n - 1, (r - 1) * (n - 1)
    seeds, items = max(a - e, 0.0), max(b - e, 0.0)
    parts = (("seeds", seeds), ("items", items), ("interaction", e))
    var = seeds + items + e
    if var <= 0:
        return 0.0, math.inf, parts
    # Satterthwaite over the mean squares Var is made of: a + b − e, a, b or e alone
    coefficients = {"a": (a, df_a) if seeds > 0 else None, "b": (b, df_b) if items > 0 else None}
    used = [c for c in coefficients.values() if c is not None]
    e_sign = len(used) - 1  # a + b − e: −1; a alone or b alone: 0; e alone: +1
    terms = sum(m * m / d for m, d in used)
    if not used or e_sign:
        terms += e * e / df_e
    df = var * var / terms if terms > 0 else math.inf
    return var, df, parts


def _half_width(x: np.ndarray, var: float, df: float, level: float) -> float:
    """t(df) · √Var, never less than the items' own exact t interval (b over n − 1 df): an
    interval that counts both sources is never narrower than one that counts the items alone.
    (The seeds' own t interval is not a floor: on two replicates it rests on one degree of
    freedom, t = 12.7, and would cover far more than asked; in planted studies where the seeds
    dominate, two replicates then cover about 0.89 to 0.92 instead of 0.95.)"""
    r, n = x.shape
    half = _t(level, df) * math.sqrt(var)
    if r > 1:
        _, ms_item, _ = mean_squares(x)
        half = max(half, _t(level, n - 1) * math.sqrt(ms_item / (r * n)))
    return half


def two_source_interval(
    outcomes: np.ndarray, level: float = 0.95, limits: tuple[float, float] | None = (0.0, 1.0)
) -> Interval:
    """The interval of the mean of an r × n matrix of per-item outcomes (0/1 for an accuracy;
    −1/0/1 for a paired difference), counting seeds and items (see the module).

    Args:
        outcomes: (r, n): one row per replicate seed, one column per held-out item, shared.
        level: the coverage, 0 < level < 1.
        limits: the values the mean can take (the interval is cut to them).
    """
    x = np.asarray(outcomes, dtype=float)
    if x.ndim != 2 or x.shape[0] < 1:
        raise ValueError(f"outcomes must be (replicates, items), got shape {x.shape}")
    r, n = x.shape
    if not np.isfinite(x).all():
        raise ValueError("outcomes must be finite (0/1, or −1/0/1 for a difference)")
    mean = float(x.mean())
    sources = SOURCES_BOTH if r > 1 else SOURCES_ITEMS
    if np.ptp(x) == 0:  # every outcome the same: the count's own (Wilson) interval
        return _degenerate(x, level, limits, sources)
    var, df, parts = _variance(x)
    se = math.sqrt(var)
    half = _half_width(x, var, df, level)
    low, high = mean - half, mean + half
    if limits is not None:
        low, high = max(low, limits[0]), min(high, limits[1])
    return Interval(mean, low, high, se, df, sources, r, n, level, parts)


def _degenerate(x: np.ndarray, level: float, limits, sources: str) -> Interval:
    """All r × n outcomes equal to ``v``: for 0/1 the Wilson interval of n of n (or 0 of n);
    for a difference, ``v`` ± the Wilson bound of no discordant item in n."""
    r, n = x.shape
    value = float(x.flat[0])
    if value in (0.0, 1.0) and limits == (0.0, 1.0):
        low, high = wilson(int(value) * n, n, level)
    else:
        bound = wilson(0, n, level)[1]
        low, high = value - bound, value + bound
        if limits is not None:
            low, high = max(low, limits[0]), min(high, limits[1])
    se = (high - low) / (2 * _t(level, math.inf))
    return Interval(value, low, high, se, math.inf, sources, r, n, level)


def seeds_only_interval(values: list[float], level: float = 0.95) -> Interval | None:
    """Student's t interval over the replicates' accuracies alone (items not counted): what a
    record without per-item outcomes allows; None for fewer than two replicates."""
    r = len(values)
    if r < 2:
        return None
    v = np.asarray(values, dtype=float)
    se = float(v.std(ddof=1)) / math.sqrt(r)
    half = _t(level, r - 1) * se
    mean = float(v.mean())
    return Interval(mean, mean - half, mean + half, se, float(r - 1), SOURCES_SEEDS, r, 0, level)


@dataclass(frozen=True)
class SeedTest:
    """One replicate against the baseline on the shared items: ``seed`` (the trial's), the
    baseline's ``against_seed`` (None for an unseeded baseline), the discordant counts ``b``
    (only the trained encoder right) and ``c`` (only the baseline right), and the exact McNemar
    ``p``."""

    seed: int | None
    against_seed: int | None
    b: int
    c: int
    p: float

    def to_json(self) -> dict[str, Any]:
        return {"seed": self.seed, "baseline_seed": self.against_seed,
                "only_trained": self.b, "only_baseline": self.c, "mcnemar_p": self.p}  # fmt: skip


def mcnemar_exact(b: int, c: int) -> float:
    """The exact McNemar p-value of ``b`` and ``c`` discordant items (statsmodels)."""
    from statsmodels.stats.contingency_tables import mcnemar

    return float(mcnemar(np.array([[0, b], [c, 0]]), exact=True).pvalue)


@dataclass(frozen=True)
class PairedComparison:
    """A system (the best point's replicates) against a baseline on the same items: the
    per-seed McNemar tests, the mean paired difference with its two-source interval, and the
    ``verdict`` (:data:`VERDICTS`) that interval gives for a target to ``mode``."""

    tests: tuple[SeedTest, ...]
    difference: Interval
    verdict: str

    @property
    def only_trained(self) -> int:
        return sum(t.b for t in self.tests)

    @property
    def only_baseline(self) -> int:
        return sum(t.c for t in self.tests)

    @property
    def items(self) -> int:
        return self.difference.items

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "difference": self.difference.to_json(),
                "per_seed": [t.to_json() for t in self.tests],
                "only_trained": self.only_trained, "only_baseline": self.only_baseline,
                "items": self.items}  # fmt: skip


def paired_verdict(diff: Interval, mode: str = "max") -> str:
    """What a paired difference's interval says: ``beat`` when it lies wholly on the better
    side of zero and the mean difference is at least one item; ``did not beat`` when wholly on
    the worse side by at least one item; else ``cannot be told apart``."""
    one = resolution(diff.items) * (1 - 1e-9)
    better = diff.mean if mode == "max" else -diff.mean
    low, high = (diff.low, diff.high) if mode == "max" else (-diff.high, -diff.low)
    if low > 0 and better >= one:
        return "beat"
    if high < 0 and -better >= one:
        return "did not beat"
    return "cannot be told apart"


def paired_comparison(
    trained: dict[int | None, np.ndarray] | list[tuple[int | None, np.ndarray]],
    baseline: dict[int | None, np.ndarray],
    mode: str = "max",
    level: float = 0.95,
) -> PairedComparison:
    """The best point's replicates against one baseline, item by item (see the module).

    Args:
        trained: the trial's seed -> (n,) 0/1 outcomes of each replicate, on the shared items
            (or a list of (seed, outcomes) pairs: two replicates may lack a seed).
        baseline: the baseline's seed (None for an unseeded one) -> (n,) 0/1 outcomes.
        mode: ``max`` (higher is better) or ``min``.
    """
    if not trained or not baseline:
        raise ValueError("a paired comparison needs outcomes on both sides")
    order = lambda s: (s is None, isinstance(s, str), s if isinstance(s, int) else str(s))  # noqa: E731
    replicates = sorted(trained.items() if isinstance(trained, dict) else trained,
                        key=lambda pair: order(pair[0]))  # fmt: skip
    mine_seeds = {seed for seed, _ in replicates}
    # a trial seed the baseline has is paired with it; the others take the baseline's
    # remaining seeds in turn (all of them when none remains)
    spare = sorted((s for s in baseline if s not in mine_seeds), key=order) or sorted(
        baseline, key=order)  # fmt: skip
    rows, tests, turn = [], [], 0
    for seed, outcomes in replicates:
        if seed in baseline:
            other = seed
        else:
            other, turn = spare[turn % len(spare)], turn + 1
        mine = np.asarray(outcomes, dtype=np.int8)
        theirs = np.asarray(baseline[other], dtype=np.int8)
        if mine.shape != theirs.shape:
            raise ValueError("the two systems were scored on different numbers of items")
        b = int(((mine == 1) & (theirs == 0)).sum())
        c = int(((mine == 0) & (theirs == 1)).sum())
        tests.append(SeedTest(seed, other, b, c, mcnemar_exact(b, c)))
        rows.append(mine.astype(float) - theirs)
    diff = two_source_interval(np.vstack(rows), level, limits=(-1.0, 1.0))
    return PairedComparison(tuple(tests), diff, paired_verdict(diff, mode))


__all__ = [
    "SOURCES_BOTH",
    "SOURCES_ITEMS",
    "SOURCES_SEEDS",
    "VERDICTS",
    "Interval",
    "PairedComparison",
    "SeedTest",
    "at_least_one_item",
    "item_se",
    "mcnemar_exact",
    "mean_squares",
    "paired_comparison",
    "paired_verdict",
    "resolution",
    "seeds_only_interval",
    "two_source_interval",
    "wilson",
]  # fmt: skip
