"""What a study found, said before any statistic: the study in one sentence, the findings with
their evidence, the best point with its interval, and what that suggests for the next study.

Computed once (:func:`headline` returns a frozen :class:`Headline`) by
:func:`analysis.study_analysis.analyse`, then said two ways: :meth:`Headline.lines` for the
terminal (at most six lines) and :meth:`Headline.html` for the top of ``report.html``; the
parent run's description in MLflow is built from its fields (``study.reporting``). Every
sentence comes from the fits' own findings (Holm-adjusted tests, detectable sizes at 80% power;
see :func:`analysis.stats.fits.findings`), from :func:`analysis.stats.best.best_point` and from the
one decision of what to run next (:func:`analysis.findings.next_step.next_step`): nothing is said
that the fits do not support.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd

from analysis.findings.baselines import standing_line
from analysis.stats.best import BestPoint, replicates_per_point, target_of
from analysis.stats.fits import ResponseFit, more_error_advice
from analysis.stats.units import amount, level

if TYPE_CHECKING:
    from analysis.findings.next_step import NextStep

TERMINAL_LINES = 6


@dataclass(frozen=True)
class Headline:
    """The words that open a study's report, its MLflow parent run and ``study run``'s last
    lines. ``found``: one sentence per detected effect (with its interval and adjusted p);
    ``not_detected``: one sentence per response whose model does not beat the mean, and one per
    undetected effect of a response whose model does (each with the smallest detectable size);
    ``missed``: the same, one short label per response ("temperature or batch_size on
    probe/linear_top1_h", "any factor on z/align") for the terminal; ``best``: the best observed
    point of the target metric with its t interval over replicates (None when no trial
    finished); ``against``: where that point stands against the study's baselines (the raw input, a
    random-init encoder …; None when none was measured, :mod:`analysis.findings.baselines`);
    ``on_target``: when no effect on the target was detected, that sentence, said before the
    other findings (the target is what the study was run for); ``next_step``: what the evidence
    suggests for the next study (None when there is nothing to say); ``unfitted``: each response
    no model could fit because too few trials have a finite value of it, with the count (said on
    the terminal's "Not detectable" line, after it); ``notes``: each file of the record that
    could not be read (``unread``, e.g. a trial's per-item outcomes) and what was done instead,
    always said, after the lines. Findings come in the order
    target, other probes, geometry (:func:`response_rank`). Accuracies are read in percent and
    their differences in points (:mod:`analysis.stats.units`)."""

    study: str
    sentence: str
    target: str
    found: tuple[str, ...]
    not_detected: tuple[str, ...]
    missed: tuple[str, ...]
    best: str | None
    next_step: str | None
    against: str | None = None
    on_target: str | None = None
    confirmation: str | None = None
    # responses no model could fit for want of finite values, each with its count
    unfitted: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    # a study whose trials are not all finished: that, said first ("study X is still running:
    # 3 of 4 trials not finished; driver pid N on HOST …"); None once they are
    unfinished: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"sentence": self.sentence, "target": self.target, "on_target": self.on_target,
                "confirmation": self.confirmation,
                "found": list(self.found), "not_detected": list(self.not_detected),
                "unfitted": list(self.unfitted),
                "best": self.best, "against_baselines": self.against,
                "next_step": self.next_step, "notes": list(self.notes),
                "unfinished": self.unfinished,
                "lines": self.lines()}  # fmt: skip

    def lines(self, limit: int = TERMINAL_LINES) -> list[str]:
        """At most ``limit`` lines for a terminal: the sentence, what was found on the target
        (or that nothing was), the other findings (the rest counted, not dropped silently), one
        line for what was not detected, the best point against the baselines, the next step."""
        best = " ".join(x for x in (self.best, self.against) if x) or None
        tail = [x for x in (best, self.next_step and f"Next: {self.next_step}") if x]
        missed = _missed_line(self.missed, self.unfitted)
        head = [self.sentence,
                *(x for x in (self.unfinished, self.confirmation, self.on_target) if x)]
        room = max(limit - len(head) - len(tail) - (1 if missed else 0), 1)
        found = [f"Found: {s}" for s in self.found]
        if len(found) > room > 1:
            found = [*found[: room - 1], f"… and {len(found) - room + 1} more findings: see "
                                         "report.html"]  # fmt: skip
        elif len(found) > room:  # one line left: the first finding, the rest counted on it
            found = [f"{found[0]} (and {len(found) - 1} more in report.html)"]
        if not found and not missed and not self.on_target:
            found = ["Found: no effect was tested (see the notes in report.html)."]
        said = [*head, *found, *([missed] if missed else []), *tail][:limit]
        return said + [f"Note: {n}" for n in self.notes]  # never cut: what was not read

    def html(self) -> str:
        """The headline as an HTML section with id ``headline``."""

        def items(sentences: tuple[str, ...]) -> str:
            return "".join(f"<li>{html.escape(s)}</li>" for s in sentences)

        found = items((*([self.on_target] if self.on_target else []), *self.found))
        found = found or "<li>No effect was detected.</li>"
        parts = [
            '<section id="headline">',
            f'<p class="lead">{html.escape(self.sentence)}</p>',
            *([f'<p class="unfinished">{html.escape(self.unfinished)}</p>']
              if self.unfinished else []),
            *(
                [f'<p class="confirmation">{html.escape(self.confirmation)}</p>']
                if self.confirmation
                else []
            ),
            f'<h2 id="findings">Findings</h2><ul class="found">{found}</ul>',
        ]
        if self.not_detected:
            parts.append(f'<p>Not detectable:</p><ul class="missed">{items(self.not_detected)}'
                         "</ul>")  # fmt: skip
        if self.unfitted:
            parts.append(f'<p>Not fitted:</p><ul class="unfitted">{items(self.unfitted)}</ul>')
        if self.best:
            parts.append(f'<h2 id="best">Best point</h2><p>{html.escape(self.best)}</p>')
        if self.against:
            parts.append(f'<p class="baselines">{html.escape(self.against)}</p>')
        if self.next_step:
            step = html.escape(_capital(self.next_step))
            parts.append(f'<p class="next"><b>Next study.</b> {step}</p>')
        if self.notes:
            parts.append(f'<p>Notes:</p><ul class="notes">{items(self.notes)}</ul>')
        return "".join(parts) + "</section>"


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def response_rank(response: str, target: str) -> int:
    """The order findings are said in: the target, the other probes, then the geometry."""
    if response == target:
        return 0
    return 1 if response.startswith("probe/") else 2


def headline(
    *,
    study: str,
    results: pd.DataFrame,
    n_trials: int,
    fits: dict[str, ResponseFit],
    best: BestPoint | None,
    standings: tuple,
    next_step: NextStep | None,
    confirmation=None,
    unread: tuple = (),
    unfinished: str | None = None,
) -> Headline:
    """The :class:`Headline` of an analysed study (see the module docstring), from the parts
    :func:`analysis.study_analysis.analyse` assembles: it decides nothing of its own (the next
    step is ``next_step``'s reason, :func:`analysis.findings.next_step.next_step`).
    ``unfinished``: why the study's findings are not final (its trials still running, or left
    unfinished by a driver that is gone): said first, and no next step is said."""
    df = results
    target = target_of(df)
    found, missed, labels = [], [], []
    on_target = None
    ranked = sorted(fits.values(), key=lambda f: response_rank(f.response, target["metric"]))
    replicated = replicates_per_point(df) > 1
    unfitted = [f"{fit.response}: {fit.short_of_values}, too few to fit"
                for fit in ranked if fit.short_of_values]  # fmt: skip
    for fit in ranked:
        words = fit.findings
        if words is None:
            continue
        found += words.found
        is_target = fit.response == target["metric"]
        if not words.beats_mean:
            if is_target:
                on_target = _nothing_detected(fit, replicated)
                continue
            missed.append(_nothing_detected(fit, replicated))
            labels.append(f"any factor on {fit.response}")
            continue
        undetected = [e for e in words.effects if e.factor not in words.detected]
        if is_target and not words.found:
            on_target = _target_undetected(fit, undetected)
            continue
        missed += [_effect_missed(e) for e in undetected]
        if undetected:
            labels.append(f"{' or '.join(e.factor for e in undetected)} on {fit.response}")
    return Headline(
        study=study,
        sentence=study_sentence(study, df, n_trials),
        target=target["metric"],
        found=tuple(found),
        not_detected=tuple(missed),
        missed=tuple(labels),
        best=None if best is None else best_sentence(best, target),
        next_step=None if next_step is None or unfinished else next_step.sentence(),
        against=None if best is None else standing_line(standings),
        on_target=on_target,
        confirmation=None if confirmation is None else confirmation.sentence(),
        unfitted=tuple(unfitted),
        notes=tuple(_capital(u.sentence()) + "." for u in unread),
        unfinished=unfinished,
    )


def _target_undetected(fit: ResponseFit, undetected: list) -> str:
    """The target's model beats the mean, yet no single effect passed the adjusted test."""
    sizes = "; ".join(
        f"{e.change} {_amount(fit.response, e.detectable)}"
        for e in undetected
        if e.detectable is not None
    )
    detectable = f" (smallest detectable at 80% power: {sizes})" if sizes else ""
    return (f"On the target {fit.response}, the model beats the mean but no single factor's "
            f"effect is detectable{detectable}.")  # fmt: skip


def study_sentence(study: str, df: pd.DataFrame, n_trials: int) -> str:
    """What the study did, in one sentence: factors and their ranges, design, trials, budget."""
    factors = [f for f in df.attrs.get("factors", []) if f in df]
    ranges = _and([_range(f, df[f]) for f in factors]) or "no factor"
    design = df.attrs.get("design") or "a"
    design = design.replace("_", " ")
    finished = int((df["status"] == "finished").sum()) if "status" in df else len(df)
    budget = ""
    if "examples_seen" in df:
        seen = df.loc[df.get("status", "finished") == "finished", "examples_seen"].dropna()
        if len(seen) and seen.nunique() == 1:
            budget = f", each trained on {int(seen.iloc[0]):,} examples"
    name = study or "The study"
    repeated = int(df.attrs.get("repeated_trials", 0))
    again = (f" ({repeated} repeated an earlier trial exactly, same factors and seed, and count "
             "once)") if repeated else ""  # fmt: skip
    finished += repeated
    left = left_out(df, target_of(df)["metric"])
    out = (f"; {len(left)} left out of the analysis of {target_of(df)['metric']}, for a missing "
           f"or non-finite value: {', '.join(left)}") if left else ""  # fmt: skip
    return (f"{name} varied {ranges} in a {design} design: {n_trials} trials, "
            f"{finished} finished{again}{budget}{out}.")  # fmt: skip


def left_out(df: pd.DataFrame, metric: str) -> list[str]:
    """The finished trials (``point_id-r<replicate>``) whose ``metric`` is missing or not
    finite: every fit and the best point leave them out, and the headline names them."""
    done = df[df["status"] == "finished"] if "status" in df else df
    if metric not in done or done.empty:
        return []
    values = pd.to_numeric(done[metric], errors="coerce")
    bad = done[~values.apply(lambda v: isinstance(v, float) and math.isfinite(v))]
    return [f"{p}-r{r}" for p, r in zip(bad.get("point_id", []), bad.get("replicate", []),
                                        strict=False)]  # fmt: skip


def _and(items: list[str]) -> str:
    return " and ".join(items) if len(items) < 3 else ", ".join(items[:-1]) + " and " + items[-1]


def _range(factor: str, values: pd.Series) -> str:
    levels = sorted(set(values.dropna()), key=lambda v: (isinstance(v, str), v))
    if not levels:
        return factor
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in levels):
        lo, hi = levels[0], levels[-1]
        return factor if lo == hi else f"{factor} ({_short(lo)} to {_short(hi)})"
    return f"{factor} ({', '.join(str(v) for v in levels)})"


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _nothing_detected(fit: ResponseFit, replicated: bool = False) -> str:
    sizes = "; ".join(
        f"{e.change} {_amount(fit.response, e.detectable)}"
        for e in fit.findings.effects
        if e.detectable is not None
    )
    detectable = f" (smallest detectable at 80% power: {sizes})" if sizes else ""
    surface = fit.surface
    if surface is not None and (not surface.error_df or (surface.exact and surface.error_df < 2)):
        detectable = (f" (the model reproduces every trial with {surface.error_df} residual "
                      "degree(s) of freedom: no error to test against; "
                      f"{more_error_advice(replicated)})")  # fmt: skip
    return f"No factor has a detectable effect on {fit.response}{detectable}."


def _effect_missed(e) -> str:
    size = (
        ""
        if e.detectable is None
        else (f" (smallest detectable at 80% power: {_amount(e.response, e.detectable)})")
    )
    return f"{e.change[0].upper() + e.change[1:]}: no detectable effect on {e.response}{size}."


def _missed_line(labels: tuple[str, ...], unfitted: tuple[str, ...] = ()) -> str | None:
    """One terminal line for everything that was not detected, and the responses that could
    not be fitted at all for want of finite values (each with its count)."""
    parts = []
    if labels:
        parts.append(f"Not detectable: {'; '.join(labels)} (the detectable sizes are in "
                     "report.html).")  # fmt: skip
    if unfitted:
        parts.append(f"Not fitted: {'; '.join(unfitted)}.")
    return " ".join(parts) or None


def _amount(response: str, value: float) -> str:
    """A size in the response's units: accuracies in percentage points (analysis.stats.units)."""
    return amount(response, value)


def best_sentence(best: BestPoint, target: dict[str, str]) -> str:
    """The best observed point of the target, its mean over replicates and its t interval."""
    where = ", ".join(f"{k} = {_short(v)}" for k, v in best.factors.items())
    metric, mode = target["metric"], target["mode"]
    reps = f"{best.n} replicate{'s' * (best.n != 1)}"
    on = f" on {best.items:,} held-out items" if best.items else ""
    if best.ci_low is None or best.ci_high is None:
        why = "one replicate" if best.n < 2 else "replicates that agree exactly"
        without = f", and {best.unread}," if best.unread else " and no per-item outcomes,"
        sure = f"{reps}{on}; {why}{without} so no interval"
    else:
        low, high = level(metric, best.ci_low), level(metric, best.ci_high)
        sure = f"{reps}{on}; 95% interval {low} to {high}, counting {best.sources}"
    mean = level(metric, best.mean)
    chosen = f", selected among {best.points} points" if best.selected else ""
    return (f"Highest {metric}" if mode == "max" else f"Lowest {metric}") + (
        f" observed at {best.point_id} ({where}){chosen}: mean {mean} ({sure}).")  # fmt: skip


