"""``study augment``: a finished two-level factorial study becomes a central composite; ``study
next``: a finished study's next study file, from what its target's fit says
(:mod:`analysis.findings.next_step`).

Everything is checked before anything is written, and nothing is recorded here: the study file
(a two-level factorial with a numeric factor), the new design (every axial and centre point a
valid trial, batch sizes dividing the budget), and the record (the study exists, has not been
augmented already, and every trial of its design is FINISHED). Then the augmented study file is
written beside the old one; ``study run`` on it runs the new block only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from analysis.reading.state import RUNNING, study_state
from analysis.reading.store import store_exists
from search_spaces.designs import FixedDesign, build_design
from search_spaces.sequential import (
    augment_spec,
    augmented_path,
    augmented_yaml,
    next_spec,
    next_yaml,
)
from search_spaces.spec import StudyError, StudySpec, load_spec, read_study_text
from study.commands import duration, shell_command, tool
from study.paths import new_file
from study.record import StudyRecord, check_store
from study.tracking_store import check_tracking_uri


@dataclass(frozen=True)
class Augmented:
    spec: StudySpec
    design: FixedDesign
    path: Path
    new_trials: int


def _study_file(source: str | Path) -> Path:
    """The study file itself (a shipped study may be named without its folder or suffix)."""
    from search_spaces.spec import SPEC_DIR

    for path in (Path(source), SPEC_DIR / str(source), SPEC_DIR / f"{source}.yaml"):
        if path.is_file():
            return path.resolve()
    raise StudyError(f"study file {str(source)!r} not found")


def check_finished(spec: StudySpec, uri: str, file: Path, augmenting: bool = True) -> None:
    """``spec`` is recorded in ``uri`` with every trial of its design FINISHED (and, when
    ``augmenting``, not augmented yet); StudyError saying what is missing and the command to
    run otherwise."""
    check_tracking_uri(uri)
    run = shell_command(tool("study"), "run", str(file), "--tracking-uri", uri)
    if not store_exists(uri):
        raise StudyError(
            f"study {spec.study!r}: not in {uri} (no store there); run it first: {run}"
        )
    try:
        record = StudyRecord.existing(uri, spec.study, read_only=True)  # augment only reads
    except LookupError:
        raise StudyError(f"study {spec.study!r}: not in {uri}; run it first: {run}") from None
    parent = record.parent()
    if parent is None:
        raise StudyError(f"study {spec.study!r}: its experiment in {uri} has no parent run")
    tags = parent.data.tags
    if augmenting and tags.get("study.augments"):
        raise StudyError(
            f"study {spec.study!r} was augmented already (its parent run {parent.info.run_id} "
            f"extends spec_sha {tags['study.augments']}): run its augmented study file instead"
        )
    check_store(uri, spec.study, spec)  # a changed study file is refused with the difference
    design = build_design(spec)
    runs = record.trial_runs()
    unfinished = []
    for plan in design.trials:
        run_ = runs.get(plan.key)
        if run_ is None or run_.info.status != "FINISHED":
            unfinished.append(f"{plan.key}: {run_.info.status if run_ else 'not run'}")
    if unfinished:
        done = design.total - len(unfinished)
        shown = ", ".join(unfinished[:5]) + (" …" if len(unfinished) > 5 else "")
        state = study_state(record)  # still running, or left so by a driver that is gone
        if state.kind == RUNNING:
            then = "; wait for its driver to finish it"
        else:
            then = f"; finish it first (re-running resumes it): {run}"
        raise StudyError(
            f"study {spec.study!r} is not finished: {done} of {design.total} trials FINISHED "
            f"({shown})" + (f": {state.words()}" if state.words() else "") + then
        )


def check_augment_options(to: str, face: str) -> None:
    """``study augment``'s ``--to`` and ``--face``, refused by name (with the closest known
    word) before anything is read."""
    from trainables.names import did_you_mean

    if to != "central_composite":
        raise StudyError(
            f"--to {to!r}: a two-level factorial is augmented to central_composite only"
            f"{did_you_mean(to, ['central_composite'])}"
        )
    if face not in ("ccf", "ccc"):
        raise StudyError(
            f"--face {face!r}: ccf or ccc (cci would move the finished factorial points "
            f"inside the bounds){did_you_mean(face, ['ccf', 'ccc'])}"
        )


def augment_study(
    source: str | Path,
    *,
    tracking_uri: str,
    face: str = "ccf",
    alpha: str | float | None = None,
    center: int | None = None,
    out: Path | None = None,
) -> Augmented:
    """``study augment``: check everything, then write the central composite's study file."""
    from search_spaces.spec import DEFAULT_CENTER

    spec = load_spec(source)
    file = _study_file(source)
    new, design = augment_spec(
        spec, face=face, alpha=alpha, center=DEFAULT_CENTER if center is None else center
    )
    check_finished(spec, tracking_uri, file)
    target = out or augmented_path(file)
    text = augmented_yaml(new, design, file.name, read_study_text(file))
    new_file("--out", target)  # the default too: beside a study file this user cannot write
    if target.exists() and target.read_text() != text:
        raise StudyError(
            f"--out {str(target)!r} exists with other content; remove it or give another --out"
        )
    target.write_text(text)
    new_trials = sum(1 for t in design.trials if t.block == 2)
    return Augmented(new, design, target, new_trials)


@dataclass(frozen=True)
class Next:
    """What ``study next`` wrote: the new study, its design, where, why, and what it costs."""

    spec: StudySpec
    design: FixedDesign
    path: Path
    kind: str
    reason: str
    cost: str = ""


def follow_up_cost(record: StudyRecord, spec: StudySpec, design: FixedDesign) -> str:
    """How long ``design`` would take on this machine, from the finished study ``spec``'s own
    record, and how it compares with that study; empty when the record lacks the times.

    - Its examples: each trial's from the study files (``design`` and the finished study's own
      design: the examples every trial of each is planned to see), never a run's
      ``trial/examples_seen``, which a trial that diverged and stopped early cuts short.
    - The rate: the finished trials' own wall time (``trial/wall_s``, their setup included) over
      the examples they themselves saw (``trial/examples_seen`` less ``trial/resumed_from``),
      pooled, so a trial that stopped early weighs by the little it ran.
    - At once: the trials' summed wall time over the time at least one of them ran (the union of
      their attempts, :func:`study.session_time.busy_seconds`): the idle time between the
      sessions of a resumed study is not a slot's.
    - Fixed costs: one session's, as the follow-up runs in one: the median of the sessions'
      own ``study/session_fixed_s`` on the parent run (:mod:`study.session_time`). A study
      recorded before sessions logged it: its parent's span less the trials' busy time, at most
      ``study plan --estimate``'s fixed costs (:data:`study.estimate.FIXED_S`: driver, report
      and a worker per slot), so an idle gap between sessions is not counted as one.
    - The finished study's time: its trials' busy time plus every recorded session's fixed
      costs (or the fallback above)."""
    from statistics import median

    from study.estimate import FIXED_S
    from study.session_time import SESSION_FIXED_S, busy_seconds, trial_intervals

    runs = [r for r in record.trial_runs().values() if r.info.status == "FINISHED"]
    walls = [r.data.metrics.get("trial/wall_s") for r in runs]
    parent = record.parent()
    if not runs or None in walls or parent is None:
        return ""
    own = [float(r.data.metrics.get("trial/examples_seen") or 0)
           - float(r.data.metrics.get("trial/resumed_from") or 0) for r in runs]  # fmt: skip
    busy = busy_seconds(trial_intervals(runs))
    if busy <= 0 or sum(own) <= 0:
        return ""
    rate = sum(walls) / sum(own)  # seconds per example a trial itself saw
    at_once = max(1.0, sum(walls) / busy)
    steps: dict[int, float] = {}  # a session's step logged twice counts once, its last value
    for m in sorted(record.client.get_metric_history(parent.info.run_id, SESSION_FIXED_S),
                    key=lambda m: m.timestamp):  # fmt: skip
        steps[m.step] = float(m.value)
    if steps:
        fixed, paid = median(steps.values()), sum(steps.values())
    elif parent.info.end_time:  # recorded before sessions logged their own time
        span = (parent.info.end_time - parent.info.start_time) / 1000
        cap = FIXED_S["driver"] + FIXED_S["report"] + FIXED_S["worker"] * round(at_once)
        fixed = paid = min(max(0.0, span - busy), cap)
    else:
        return ""
    study_s = busy + paid
    totals = design.totals()
    old_examples = build_design(spec).totals()["examples"]
    new_s = totals["examples"] * rate / at_once + fixed
    size = totals["examples"] / old_examples
    return (f"about {duration(new_s)} on this machine ({totals['trials']} trials at the "
            f"{at_once:.2g} at once the finished study ran; from its recorded trial times), "
            f"{size:.2g}× the compute of {spec.study}, which ran {len(runs)} trials in "
            f"{duration(study_s)}")  # fmt: skip


def next_study(
    source: str | Path, *, tracking_uri: str, out: Path | None = None, confirm: bool = False,
    force: bool = False,
) -> Next:  # fmt: skip
    """``study next``: read the finished study, take its next step (the one its analysis
    decided, :func:`analysis.findings.next_step.next_step`, which the headline's "Next:" line says
    too;
    with ``confirm``, the confirmation study of its selected point,
    :func:`analysis.findings.next_step.confirm_step`) and write that study file beside
    the old one (a central composite through ``study augment``'s own writer); nothing is
    recorded. Every follow-up's seeds start past the finished study's."""
    from analysis.findings.next_step import confirm_step
    from analysis.reading.load import load_study
    from analysis.study_analysis import analyse
    from study.reporting import study_outcomes

    spec = load_spec(source)
    file = _study_file(source)
    check_finished(spec, tracking_uri, file, augmenting=False)
    record = StudyRecord.existing(tracking_uri, spec.study, read_only=True)
    outcomes = study_outcomes(record, tracking_uri)
    analysis = analyse(load_study(spec.study, tracking_uri), outcomes=outcomes)
    if confirm and analysis.next_step.kind == "none":  # one decision: what next refuses
        raise StudyError(f"study {spec.study!r}: no confirmation: {analysis.next_step.reason}")
    if confirm:
        target = analysis.headline.target
        step = confirm_step(analysis.results, analysis.fits.get(target), analysis.best,
                            analysis.items, spec.design.replicates)  # fmt: skip
    else:
        step = analysis.next_step
    if step.kind == "none":
        raise StudyError(f"study {spec.study!r}: {step.reason}")
    if step.caution and not force:  # not written silently: asked twice
        raise StudyError(f"study {spec.study!r}: the confirmation was not written: "
                         f"{step.caution}")  # fmt: skip
    if step.kind == "augment":
        new, design = augment_spec(spec)
        target = out or augmented_path(file)
        text = augmented_yaml(new, design, file.name, read_study_text(file))
    else:
        new, design = next_spec(spec, step.to_json())
        target = out or file.with_name(f"{new.study}.yaml")
        text = next_yaml(new, f"{spec.study} ({file.name})", step.reason)
    new_file("--out", target)  # the default too: beside a study file this user cannot write
    if target.exists() and target.read_text() != text:
        raise StudyError(
            f"--out {str(target)!r} exists with other content; remove it or give another --out"
        )
    target.write_text(text)
    return Next(new, design, target, step.kind, step.reason, follow_up_cost(record, spec, design))
