"""The next study after a finished one: what its target's fit says to run next, computed into a
frozen :class:`NextStep` that ``study next`` turns into a study file (sequential
experimentation: Box & Wilson 1951; Myers, Montgomery & Anderson-Cook, ch. 5-6).

From the target's fit (the study file's ``target``), in this order:

1. after a path (a ``points`` study, whose factors move together, so no surface separates
   them): **a two-level factorial around the best point observed on it** (``factorial``), half
   a path step either side, to fit a new plane where the climb stopped;
2. nothing modelled, or a fit with no error: no next design is named (``none``: widen the
   ranges of a target that did not vary; with replicates already, the seeds decide, so score
   on more held-out items or run more seeds), or more replicates when the fit reproduces every
   trial of an unreplicated design (nothing to test effects against);
3. no factor moves the target detectably: **more replicates**, as many per point as
   ``study power`` says would detect half the smallest effect detectable now (``replicates``),
   or more held-out items (``none``) when half of it is less than one item;
4. a plane (a model without curvature terms, or whose curvature is not detected) whose best
   point lies on the region's edge, whose direction of steepest ascent is established (its
   confidence cone excludes some directions) and whose interactions are not detected:
   **points along the path of steepest ascent** (``path``), one to three coded units past the
   region's edge;
5. another plane: from a two-level factorial, **a central composite** (``augment``: the axial
   and centre points ``study augment`` adds), since two levels cannot show where the surface
   bends; from a design of three levels or more, **twice the replicates**, to tell its
   curvature from the noise;
6. a second-order model whose stationary point is the optimum sought (a maximum for ``max``, a
   minimum for ``min``) inside the region: **a smaller region around it** (``zoom``: half the
   width, centred there) to confirm and sharpen it;
7. another second-order model (a saddle, a ridge, an optimum outside): **a region moved** to
   where ridge analysis finds the best predicted point at the design's edge (``move``).

This is the one place that decides: the headline's "Next:" line, ``report.html``, the parent run's
description and ``study next`` all say :attr:`NextStep.reason`
(:func:`analysis.study_analysis.analyse` decides it once per analysis). A factor's best is "on
the edge" when it lies within :data:`EDGE` of an end of its coded range.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd

from analysis.stats.best import BestPoint, replicates_per_point, target_of
from analysis.stats.measurement import at_least_one_item
from analysis.stats.power import MAX_REPLICATES, power_basis, replicates_for
from analysis.stats.units import amount, is_accuracy, level, to_typed

if TYPE_CHECKING:
    from analysis.findings.direction import Direction
    from analysis.stats.fits import ResponseFit

ALPHA = 0.05
# points along the path of steepest ascent, one coded unit apart from the region's edge on: the
# farthest then lies about 4 coded units out, inside the length of rsm's default path (5)
PATH_STEPS = 3
ZOOM = 0.5  # the zoomed region's half-width, in the finished study's coded units
# A factor whose predicted best lies within this share of the coded half-range of an end of
# its design range is "at the edge": the best may lie beyond what the study explored.
EDGE = 0.02


@dataclass(frozen=True)
class NextStep:
    """What to run next (see the module docstring). ``points`` (``path``) are the factor values
    of each new point; ``bounds`` (``zoom``, ``move``, ``factorial``) the new range (or the two
    levels) of each numeric factor;
    ``fixed`` the categorical factors' levels the new study holds (the optimum's); ``reason``
    says why, in words, for the terminal and the new file's description."""

    kind: Literal["none", "replicates", "path", "factorial", "augment", "zoom", "move", "confirm"]
    reason: str
    metric: str
    replicates: int | None = None
    points: tuple[dict[str, float], ...] = ()
    bounds: dict[str, tuple[float, float]] = field(default_factory=dict)
    fixed: dict[str, Any] = field(default_factory=dict)
    # the next study's design seed: past every seed the finished study used, so no follow-up
    # runs a (point, seed) pair that is already recorded (a bit-identical trial is no evidence)
    first_seed: int | None = None
    confirms: dict[str, Any] | None = None  # kind confirm: search_spaces.spec.Confirms' fields
    # kind confirm: why the confirmation should not be written without being asked twice (its
    # held-out set cannot resolve the gap, or it costs more than COSTLIER_THAN studies like the
    # one it follows), with what would resolve it; None when it is worth running
    caution: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "reason": self.reason, "metric": self.metric,
                "replicates": self.replicates, "points": list(self.points),
                "bounds": {k: list(v) for k, v in self.bounds.items()},
                "fixed": self.fixed, "first_seed": self.first_seed,
                "confirms": self.confirms}  # fmt: skip

    def sentence(self) -> str:
        """The reason as the headline's "Next:" line says it: one sentence."""
        return self.reason if self.reason.endswith(".") else f"{self.reason}."


def fresh_seed(results: pd.DataFrame) -> int | None:
    """One past the largest seed the finished study recorded (None when it records none)."""
    if "seed" not in results:
        return None
    seeds = pd.to_numeric(results["seed"], errors="coerce").dropna()
    return None if seeds.empty else int(seeds.max()) + 1


def confirm_step(
    results: pd.DataFrame,
    fit: ResponseFit | None,
    best: BestPoint | None,
    items: int | None,
    replicates_now: int,
) -> NextStep:
    """A confirmation study (Montgomery, ch. 11): the best point, selected among the study's
    points, and its closest rival (the second-best mean), on fresh seeds, with as many
    replicates as detecting their observed difference takes (:func:`confirm_replicates`).
    ``fit`` is the target's."""
    target = target_of(results)
    metric, mode = target["metric"], target["mode"]
    means = _point_means(results, metric)
    if best is None or len(means) < 2:
        return NextStep("none", f"no confirmation: the study has fewer than two points with a "
                        f"finished {metric}", metric)  # fmt: skip
    ranked = means.sort_values(ascending=(mode == "min"))
    rival_id = next(p for p in ranked.index if p != best.point_id)
    factors = [f for f in results.attrs.get("factors", []) if f in results]
    row = results[results["point_id"] == rival_id].iloc[0]
    rival = {f: _plain(row[f]) for f in factors}
    chosen = {f: _plain(best.factors[f]) for f in factors if f in best.factors}
    gap = abs(best.mean - float(ranked[rival_id]))
    replicates, how = confirm_replicates(fit, gap, replicates_now, items)
    caution = confirm_caution(metric, gap, items, 2 * replicates, len(results))
    reason = (f"confirm the selected point {best.point_id} ({_where(chosen)}; mean "
              f"{level(metric, best.mean)}, chosen among {best.points} points, so its mean is "
              f"{selection_bias(mode)}) against its closest rival {rival_id} ({_where(rival)}; "
              f"{level(metric, float(ranked[rival_id]))}) on fresh seeds, {replicates} "
              f"replicates each ({how})")  # fmt: skip
    confirms = {"study": results.attrs.get("study", ""), "point_id": best.point_id,
                "point": chosen, "rival_id": rival_id, "rival": rival}  # fmt: skip
    return NextStep("confirm", reason, metric, replicates=replicates, points=(chosen, rival),
                    first_seed=fresh_seed(results), confirms=confirms,
                    caution=caution)  # fmt: skip


def selection_bias(mode: str) -> str:
    """Which way the mean of a point chosen as the best among several is off: the highest of
    noisy means lies above its truth, the lowest below (the winner's curse)."""
    return "biased upward" if mode == "max" else "biased downward"


COSTLIER_THAN = 10  # a confirmation of more than ten times the study it follows is asked twice


def confirm_caution(
    metric: str, gap: float, items: int | None, trials: int, study_trials: int
) -> str | None:
    """Why a confirmation of ``trials`` trials (the study it follows had ``study_trials``, each
    of the same budget) telling two means ``gap`` apart is not worth writing unasked, with what
    would resolve it; None when it is. An accuracy counted on ``items`` held-out items cannot
    tell apart two points at most one item apart: a larger held-out set can."""
    unresolvable = bool(items) and is_accuracy(metric) and gap * items <= 1 + 1e-9
    costly = trials > COSTLIER_THAN * study_trials
    if not (unresolvable or costly):
        return None
    size = (f"{trials} trials, {trials / study_trials:.3g}× the {study_trials} of the study it "
            "follows")  # fmt: skip
    if unresolvable:
        apart = f"{gap * items:.2g}"
        why = (f"the held-out set cannot resolve the difference: the two points' means are "
               f"{amount(metric, gap)} apart, {apart} held-out item{'s' * (apart != '1')} of "
               f"{items} (one item, {amount(metric, 1 / items)}, is the finest step an accuracy "
               f"on them takes), and the confirmation would cost {size}")  # fmt: skip
        fixes = (f"more held-out items (heldout_size, now {items}, where the dataset has more "
                 "test images), accepting either point (they are within one item of each "
                 "other)")  # fmt: skip
    else:
        why = f"the confirmation would cost {size}"
        fixes = "accepting either point, or a cheaper comparison (fewer replicates, lower power)"
    return f"{why}; what would resolve it: {fixes}, or --force to write it anyway"


def confirm_replicates(fit, gap: float, replicates_now: int, items: int | None):
    """(replicates per point, how it was found) to tell two points ``gap`` apart at 80% power
    with a two-sided paired t test at 0.05, from the study's own error mean square (the error
    ``study power`` plans from): the fewest r with ncp(r − 1) · √(2 · MS_error / r) ≤ gap, the
    gap floored at one held-out item; at least 3 and at least the study's replicates."""
    from analysis.stats.t_power import noncentrality

    floor = max(3, replicates_now)
    surface = None if fit is None else fit.surface
    if surface is None or surface.exact or not surface.error_ms or surface.error_ms <= 0:
        return max(floor, 2 * replicates_now), "twice the study's: it has no error to plan from"
    if items and is_accuracy(fit.response):
        gap = at_least_one_item(gap, items)
    if gap <= 0:
        return floor, "the two points' means are equal"
    sd = float(np.sqrt(2 * surface.error_ms))
    for r in range(floor, MAX_REPLICATES + 1):
        if noncentrality(r - 1, 0.05, 0.8) * sd / np.sqrt(r) <= gap:
            return r, (f"to tell them {amount(fit.response, gap)} apart at 80% power, from the "
                       "study's error mean square: a lower bound, since the observed gap is "
                       "inflated by the selection and the items add their own error")  # fmt: skip
    return MAX_REPLICATES, f"more than {MAX_REPLICATES} would be needed: capped"


def _point_means(df, metric: str):
    done = df[df["status"] == "finished"] if "status" in df else df
    values = pd.to_numeric(done[metric], errors="coerce") if metric in done else None
    if values is None:
        return pd.Series(dtype=float)
    return values.groupby(done["point_id"]).mean().dropna()


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def next_step(
    results: pd.DataFrame,
    fit: ResponseFit | None,
    direction: Direction | None,
    best: BestPoint | None,
    items: int | None = None,
    replicates_now: int | None = None,
) -> NextStep:
    """The next study after ``results`` (see the module docstring), from its target's ``fit``
    and ``direction`` and the ``best`` point observed; ``items``: the held-out items an
    accuracy counts over (a size below one item asks for more items); ``replicates_now``: the
    finished study's replicates per point (by default the most any point has). Its seeds start
    past every recorded one."""
    now = replicates_now or replicates_per_point(results)
    step = _decide(results, fit, direction, best, items, now)
    return replace(step, first_seed=fresh_seed(results))


def _decide(results, fit, direction, best, items, replicates_now) -> NextStep:
    metric = target_of(results)["metric"]
    if results.attrs.get("design") == "points":  # a path was run: climb from its best
        return _after_path(results, best, metric)
    if fit is None or fit.surface is None:
        if fit is not None and fit.status == "no variation":
            return NextStep("none", f"{metric} did not vary over this design: widen the factor "
                            "ranges, or check that the trials trained (see the notes)",
                            metric)  # fmt: skip
        why = fit.reason if fit is not None else f"{metric} was not analysed"
        return NextStep("none", f"no next design is named: {metric} has no model ({why})",
                        metric)  # fmt: skip
    s = fit.surface
    if s.exact:
        if replicates_now >= 2:  # the design has replicates: more of them would say the same
            return NextStep("none", exact_fit_words(s, replicates_now), metric)
        more = max(2, 2 * replicates_now)
        return NextStep("replicates", f"replicate the design points ({more} per point): the "
                        f"model of {metric} reproduces every trial, so the study has no error "
                        "to test effects against", metric, replicates=more)  # fmt: skip
    if fit.findings is not None and not fit.findings.beats_mean:
        return _more_replicates(fit, results, items)
    if direction is not None and direction.order == "second":
        return _second_order(fit, direction)
    return _first_order(fit, direction, replicates_now)


def exact_fit_words(s, replicates: int) -> str:
    """Why more of the same replicates would not help a fit that reproduces every trial of a
    replicated design: with the replicate as a block, the seeds decide the outcome; without
    one, the replicates agree exactly."""
    if s.blocks is not None:
        return (f"the seeds decide the outcome: with the replicate as a block the model "
                f"reproduces every trial of the {replicates} replicates per point, so whatever "
                "the factors do is smaller than what the seed does; score on more held-out "
                "items or run more seeds per point (a larger replicate block) before reading "
                "any effect")  # fmt: skip
    return (f"the model reproduces every trial although each point has {replicates} "
            "replicates: the replicates agree exactly, so there is no error to test against; "
            "score on more held-out items, or check that the seeds differ")  # fmt: skip


def _after_path(results: pd.DataFrame, best: BestPoint | None, metric: str) -> NextStep:
    """After points along a path (Box & Wilson): a two-level factorial around the best point
    observed on it, each numeric factor half a path step either side (on its scale), so a new
    plane is fitted where the climb stopped. A path's factors move together, so no surface
    separates them: the best observed point, not a model, decides."""
    if best is None:
        return NextStep("none", f"no point along the path has a finished {metric}", metric)
    df, bounds = results, {}
    scales = df.attrs.get("scales") or {}
    for name in df.attrs.get("factors") or []:
        levels = sorted(set(df[name].dropna()))
        centre = best.factors[name]
        if len(levels) < 2 or not isinstance(centre, int | float):
            continue
        if scales.get(name) == "log":
            step = float(np.median(np.diff(np.log(levels))))
            bounds[name] = (centre * np.exp(-step / 2), centre * np.exp(step / 2))
        else:
            step = float(np.median(np.diff(levels)))
            bounds[name] = (centre - step / 2, centre + step / 2)
    where = _where({n: float(v) for n, v in best.factors.items() if n in bounds})
    return NextStep(
        "factorial",
        f"along the path, {metric} was best at {best.point_id} ({where}; mean "
        f"{level(metric, best.mean)} over {best.n} replicates): the next study is a two-level "
        "factorial around it, half a path step either side, to fit a new plane there",
        metric, bounds={n: (float(f"{lo:.4g}"), float(f"{hi:.4g}")) for n, (lo, hi) in
                        bounds.items()},
    )  # fmt: skip


def _more_replicates(fit: ResponseFit, results: pd.DataFrame, items: int | None) -> NextStep:
    """Replicates per point that would detect half the smallest effect detectable now, for the
    factor whose effect is measured best; more held-out items when half of it is less than one
    held-out item (no replicate can resolve that)."""
    metric = fit.response
    effects = [e for e in fit.findings.effects if e.detectable is not None]
    if not effects:
        return NextStep("none", f"no factor moved {metric} detectably, and this design gives "
                        "no detectable size to plan replicates from", metric)  # fmt: skip
    sharpest = min(effects, key=lambda e: e.detectable)
    effect = sharpest.detectable / 2
    size = amount(metric, effect)
    if items and is_accuracy(metric) and effect < 1 / items:
        return NextStep("none", f"no factor moved {metric} detectably, and half the smallest "
                        f"effect detectable now ({size} for {sharpest.change}) is less than one "
                        f"of the {items:,} held-out items: score on at least "
                        f"{int(np.ceil(1 / effect)):,} held-out items (heldout_size) before "
                        "adding replicates", metric)  # fmt: skip
    plan = next(p for p in replicates_for(power_basis(fit.surface, items), effect)
                if p.factor == sharpest.factor)  # fmt: skip
    study = results.attrs.get("study") or "STUDY"
    typed = to_typed(metric, effect)  # --effect takes points for an accuracy
    command = f"study power {study} --metric {metric} --effect {typed:.3g}"
    if plan.replicates_needed is None:
        return NextStep("none", f"no factor moved {metric} detectably; detecting {size} for "
                        f"{sharpest.change} would need more than {MAX_REPLICATES} replicates "
                        f"per point ({command})", metric)  # fmt: skip
    return NextStep(
        "replicates",
        f"no factor moved {metric} detectably; to detect {size} for {sharpest.change} (half "
        f"the smallest effect detectable now), run {plan.replicates_needed} replicates per "
        f"point instead of {plan.replicates_now:.3g} ({command})",
        metric, replicates=plan.replicates_needed,
    )  # fmt: skip


def _edges(s) -> list[str]:
    """Numeric factors whose predicted best sits at an end of the design range, in words."""
    out = []
    for name, coded in (s.optimum_coded or {}).items():
        coding = s.coding.get(name)
        if coding is None or coding.kind != "numeric" or not np.isfinite(coded):
            continue
        if abs(coded) >= 1 - EDGE:
            end, beyond = ("high", "above") if coded > 0 else ("low", "below")
            value = coding.high if coded > 0 else coding.low
            shown = f"{value:.4g}" if isinstance(value, float) else str(value)
            out.append(f"{name} at its {end} end, {shown}; try {beyond} it")
    return out


def _interactions_detected(s) -> list[str]:
    rows = s.coefficients[[":" in str(t) for t in s.coefficients.index]]
    return [str(t) for t, p in rows["p"].items() if p == p and p <= ALPHA]


def _first_order(fit: ResponseFit, direction: Direction | None, replicates_now: int) -> NextStep:
    s, metric = fit.surface, fit.response
    path = None if direction is None else direction.steepest
    edges, bent = _edges(s), _interactions_detected(s)
    on_edge = f"its best point lies on the edge of the region ({'; '.join(edges)})"
    if path is not None and path.excluded_share > 0 and edges and not bent:
        direction = np.array(path.direction)
        leaves = 1.0 / float(np.abs(direction).max())  # where the path crosses the box's face
        distances = leaves + np.arange(1, PATH_STEPS + 1, dtype=float)
        coded = distances[:, None] * direction[None, :]
        natural = s.natural(coded)
        # four digits: a person reads and may edit the file
        points = tuple({n: float(f"{natural[n].iloc[i]:.4g}") for n in s.numeric}
                       for i in range(len(distances)))  # fmt: skip
        way = "ascent" if s.goal == "max" else "descent"
        return NextStep(
            "path",
            f"a plane fits {metric} and {on_edge}; the path of steepest {way}"
            f" is established (its 95% cone leaves out {path.excluded_share:.0%} of directions), "
            f"so the next study runs {len(points)} points along it, 1 to {PATH_STEPS} coded units "
            "past the region's edge",
            metric, points=points, fixed=s.levels_at_optimum(),
        )  # fmt: skip
    if any(" ** 2)" in t for t in s.terms):  # three levels or more: curvature could show
        more = 2 * replicates_now
        return NextStep(
            "replicates",
            f"the design could show curvature in {metric} but none is detected, and "
            + ("its best point lies inside the region" if not edges else
               f"{on_edge}, but the direction of steepest ascent is not established") +
            f": run the design again with {more} replicates per point (instead of "
            f"{replicates_now}) to tell the curvature from the noise",
            metric, replicates=more,
        )  # fmt: skip
    if bent:
        why = f"its interactions are detected ({', '.join(bent)}), so the surface bends"
        if edges:
            why += f", and {on_edge}"
    elif not edges:
        why = "its best point lies inside the region, where a plane cannot place an optimum"
    else:
        why = (f"{on_edge}, and the direction of steepest ascent is not established (its cone "
               "holds every direction)")  # fmt: skip
    return NextStep(
        "augment",
        f"a model without curvature terms fits {metric}, but {why}: add the axial and centre "
        "points of a central composite (study augment) to estimate the curvature",
        metric,
    )  # fmt: skip


def _second_order(fit: ResponseFit, direction: Direction) -> NextStep:
    s, metric = fit.surface, fit.response
    canonical, ridge = direction.canonical, direction.ridge
    sought = "maximum" if s.goal == "max" else "minimum"
    if canonical is not None and canonical.kind == sought and canonical.inside:
        centre = np.array([canonical.stationary_coded[n] for n in s.numeric])
        bounds = _bounds(s, centre, ZOOM)
        return NextStep(
            "zoom",
            f"the fitted {metric} has a {sought} inside the region, at "
            f"{_where(canonical.stationary)}: the next study is a central composite of half the "
            "width around it, to confirm and sharpen it",
            metric, bounds=bounds, fixed=s.levels_at_optimum(),
        )  # fmt: skip
    edge = ridge.table.iloc[-1]
    centre = np.array([edge[f"x.{n}"] for n in s.numeric])
    shape = ("its stationary point is a " + canonical.kind if canonical is not None
             and canonical.stationary is not None else "it has no stationary point")  # fmt: skip
    where = "inside" if canonical is not None and canonical.inside else "outside the region"
    return NextStep(
        "move",
        f"the fitted {metric} has no {sought} inside the region ({shape}, {where}); ridge "
        f"analysis finds its best predicted point at the region's edge, at "
        f"{_where({n: float(edge[n]) for n in s.numeric})}: the next study is a central "
        "composite of the same width centred there",
        metric, bounds=_bounds(s, centre, 1.0), fixed=s.levels_at_optimum(),
    )  # fmt: skip


def _bounds(s, centre: np.ndarray, half_width: float) -> dict[str, tuple[float, float]]:
    out = {}
    for i, name in enumerate(s.numeric):
        coding = s.coding[name]
        out[name] = (float(coding.decode(centre[i] - half_width)),
                     float(coding.decode(centre[i] + half_width)))  # fmt: skip
    return out


def _where(point: dict[str, Any]) -> str:
    return ", ".join(f"{k} = {v:.4g}" if isinstance(v, float) else f"{k} = {v}"
                     for k, v in point.items())  # fmt: skip
