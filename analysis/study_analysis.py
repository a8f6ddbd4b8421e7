"""One analysis of a study, assembled once, at the top: :func:`analyse` fits every response
(:func:`analysis.stats.fits.fit_study`), reads the findings from the fits (directions, the best
point, where it stands against the baselines, a confirmation's verdict, the one decision of
what to run next, the headline) and returns them as one frozen :class:`StudyAnalysis`.

The report, its JSON, the evidence card, the notebook and the CLI read this record; nothing
below it calls up into it, so each decision is made once and shown everywhere from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from analysis.findings.baselines import (
    Standing,
    baseline_values,
    baselines_json,
    baselines_of,
    point_architectures,
    standings,
)
from analysis.findings.confirmation import Confirmation, confirmation
from analysis.findings.direction import Direction, where_next
from analysis.findings.headline import Headline, headline
from analysis.findings.next_step import NextStep, next_step
from analysis.reading.state import StudyState
from analysis.stats.best import BestPoint, best_of_target, target_of
from analysis.stats.desirability import DesirabilityOptimum, study_desirability
from analysis.stats.fits import ResponseFit, fit_study
from analysis.stats.frontier import ParetoFront, pareto_front
from analysis.stats.learning_curve import LearningCurves, learning_curves
from analysis.stats.measurement import resolution_json
from analysis.stats.units import is_accuracy


@dataclass(frozen=True)
class StudyAnalysis:
    """What a study found, computed once by :func:`analyse`.

    ``fits``: each response's fit; ``directions``: where each fit says to go next
    (:func:`analysis.findings.direction.where_next`); ``best``: the best point of the target (None
    when no trial finished); ``standings``: where it stands against each baseline (paired on the
    shared items when the record keeps them); ``confirmation``: a confirmation study's verdict
    (None for any other study); ``next_step``: what to run next, decided once
    (:func:`analysis.findings.next_step.next_step`); ``headline``: all of it in words;
    ``desirability``: the most desirable point under the study's goals, or why there is none
    (None without goals); ``pareto``: a multi-objective study's front (None otherwise);
    ``items``: the held-out items every accuracy counts over (None when the record does not
    say); ``learning``: the target's learning curves beside the baselines
    (:mod:`analysis.stats.learning_curve`; None without a history of three marks or more)."""

    study: str
    n_trials: int
    fits: dict[str, ResponseFit]
    frontier: pd.DataFrame
    results: pd.DataFrame = field(repr=False)
    outcomes: Any = field(default=None, repr=False)
    directions: dict[str, Direction] = field(default_factory=dict)
    best: BestPoint | None = None
    items: int | None = None
    standings: tuple[Standing, ...] = ()
    confirmation: Confirmation | None = None
    desirability: DesirabilityOptimum | str | None = None
    pareto: ParetoFront | None = None
    next_step: NextStep | None = None
    headline: Headline | None = None
    learning: LearningCurves | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "study": self.study,
            "headline": self.headline.to_json(),
            "next_step": None if self.next_step is None else self.next_step.to_json(),
            "baselines": baselines_json(self.results, self.best, self.standings),
            "best_point": None if self.best is None else self.best.to_json(),
            "confirmation": None if self.confirmation is None else self.confirmation.to_json(),
            "measurement": resolution_json(
                self.items,
                None if self.best is None or not is_accuracy(self.best.metric) else self.best.mean,
            ),
            "n_trials": self.n_trials,
            "responses": {name: {**fit.to_json(), "direction": self.directions[name].to_json()}
                          for name, fit in self.fits.items()},
            "desirability": _desirability_json(self.desirability),
            "pareto": None if self.pareto is None else self.pareto.to_json(),
            "frontier": sorted(set(self.frontier.get("point_id", pd.Series(dtype=str)))),
            "learning_curves": None if self.learning is None else self.learning.to_json(),
            "unread_files": [u.to_json() for u in getattr(self.outcomes, "unread", ())],
        }

    def summary(self) -> str:
        """Every response's :meth:`ResponseFit.summary`, under its name, a blank line apart."""
        return "\n\n".join(f"{name}\n{fit.summary()}" for name, fit in self.fits.items())


def _desirability_json(found) -> dict[str, Any] | None:
    if found is None or isinstance(found, str):
        return None if found is None else {"why_none": found}
    return found.to_json()


def _learning(history, metric: str, results: pd.DataFrame, items) -> LearningCurves | None:
    """The target's learning curves against the baselines; in a study of several architectures,
    each point's against its own architecture's (the curves of each architecture's points
    drawn against its baselines, then put together)."""
    by_point = point_architectures(results)
    if not by_point or history is None or "point_id" not in history:
        return learning_curves(history, metric, baseline_values(results, metric), items)
    groups: dict[int | None, list[str]] = {}
    for point, arch in by_point.items():
        groups.setdefault(arch, []).append(point)
    found = []
    for points in groups.values():
        part = history[history["point_id"].astype(str).isin(points)]
        curves = learning_curves(part, metric, baseline_values(results, metric, points[0]), items)
        if curves is not None:
            found.append(curves)
    if not found:
        return None
    table = pd.concat([c.table for c in found]).sort_values(["point_id", "step"],
                                                            ignore_index=True)  # fmt: skip
    names: dict[str, float] = {}
    for c in found:
        names |= c.baselines
    return LearningCurves(
        metric, table, names,
        tuple(sorted((s for c in found for s in c.standings), key=lambda s: s.point_id)),
        tuple(sorted((k for c in found for k in c.checks), key=lambda k: k.point_id)),
    )  # fmt: skip


def analyse(
    df: pd.DataFrame, responses: tuple[str, ...] | None = None, outcomes=None, history=None
) -> StudyAnalysis:
    """Every response surface and the alignment–uniformity frontier of a results frame, and
    everything read from them (see :class:`StudyAnalysis`). When seeds are common across points
    (:func:`analysis.stats.fits.common_seed_blocks`), the replicate is a block. The study's target
    metric (``df.attrs["target"]``) is optimised in its own direction. ``outcomes``
    (:func:`analysis.reading.load.load_outcomes`), when the record keeps them, make every accuracy's
    interval and comparison count the held-out items too. ``history``
    (:func:`analysis.reading.load.load_history`, with the target's column), when given, adds the
    target's learning curves against the baselines (:mod:`analysis.stats.learning_curve`).
    A study still running, or left unfinished by a driver that is gone (``df.attrs["state"]``,
    :mod:`analysis.reading.state`), is said so first, and no next step is decided: only its
    finished trials' values are results (a running trial's row carries none)."""
    fitted = fit_study(df, responses, outcomes)
    results, fits = fitted.results, fitted.fits
    target = target_of(results)
    directions = {name: where_next(fit) for name, fit in fits.items()}
    best = best_of_target(results, target, outcomes)
    standing = () if best is None else standings(best, baselines_of(results, best.point_id),
                                                 outcomes)  # fmt: skip
    verdict = confirmation(results, target, outcomes)
    metric = target["metric"]
    state = StudyState.from_json(results.attrs.get("state"))
    unfinished = None if state is None or state.settled else state.not_final()
    if unfinished:  # the next step waits for the trials it would rest on
        step = NextStep("none", f"not decided yet: {state.words()}", metric)
    else:
        step = next_step(results, fits.get(metric), directions.get(metric), best, fitted.items)
    objectives = results.attrs.get("objectives") or []
    learning = _learning(history, metric, results, fitted.items)
    return StudyAnalysis(
        study=fitted.study,
        n_trials=fitted.n_trials,
        fits=fits,
        frontier=fitted.frontier,
        results=results,
        outcomes=outcomes,
        directions=directions,
        best=best,
        items=fitted.items,
        standings=standing,
        confirmation=verdict,
        desirability=study_desirability(results, fits),
        pareto=pareto_front(results, objectives) if objectives else None,
        next_step=step,
        headline=headline(study=fitted.study, results=results, n_trials=fitted.n_trials,
                          fits=fits, best=best, standings=standing, next_step=step,
                          confirmation=verdict, unread=getattr(outcomes, "unread", ()),
                          unfinished=unfinished),
        learning=learning,
    )
