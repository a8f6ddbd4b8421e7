"""The runs' own descriptions (Markdown) and names: a child run's note when it is created, its
status line, its finished name and title, links between runs. The runs table's views and the
experiment's description: :mod:`study.mlflow_views`."""

from __future__ import annotations

import math
from typing import Any

from search_spaces.designs import ABBREVIATIONS, TrialPlan
from search_spaces.spec import StudySpec
from trainables.shown import in_markdown

# MLflow 3.17's UI picks its GenAI or model-training pages from a setting of the browser
# (``mlflow.workflowType``, GenAI unless changed) that this URL parameter overrides.
UI_MODE = "workflowType=machine_learning"
STATUS_LINE = "- **Status:**"


def run_link(experiment_id: str, run_id: str, tab: str = "") -> str:
    """The UI's address of a run (or of one of its tabs, e.g. ``artifacts/report/report.html``),
    relative to the UI's root: a Markdown link in a description opens it."""
    tab = f"/{tab}" if tab else ""
    return f"#/experiments/{experiment_id}/runs/{run_id}{tab}?{UI_MODE}"


def replace_line(text: str, prefix: str, line: str) -> str:
    """``text`` with its first line that starts with ``prefix`` replaced by ``line`` (appended
    when there is none)."""
    lines = text.splitlines()
    for i, old in enumerate(lines):
        if old.startswith(prefix):
            lines[i] = line
            return "\n".join(lines)
    return "\n".join([*lines, line])


def _factor_text(plan: TrialPlan) -> str:
    parts = []
    for name, value in plan.factors.items():
        short = ABBREVIATIONS.get(name)
        parts.append(f"`{name}`{f' ({short})' if short else ''} = {in_markdown(str(value))}")
    return "; ".join(parts)


def status_line(status: str, examples_seen: int | None, budget: int | str | None) -> str:
    seen = "not recorded" if examples_seen is None else f"{int(examples_seen):,}"
    of = f" of {int(budget):,}" if budget not in (None, "") else ""
    return f"{STATUS_LINE} {status} · **examples seen:** {seen}{of}"


# between a finished trial's factors and its target's value, in its run name and in the first
# line of its description: "τ=0.1 B=64 seed=0 — probe/knn_top1_h 84.5%"
TARGET_MARK = " — "
TRIAL_TITLE = "**Trial `"  # how a child run's description starts (trial_note)


def finished_name(name: str, target: str | None, value: Any) -> str:
    """A trial's run name once it finished: its factors and seed (the name it was created with,
    :attr:`search_spaces.designs.TrialPlan.run_name`), then its target's value as the headline
    reads it (97.5% for an accuracy). MLflow's run page opens on its name, its description far
    below at a laptop's width, so this is where its result is seen first. The name alone when
    there is no finite value."""
    base = name.split(TARGET_MARK, 1)[0]
    if not target or isinstance(value, bool) or not isinstance(value, int | float):
        return base
    if not math.isfinite(value):
        return base
    from analysis.stats.units import level

    return f"{base}{TARGET_MARK}{target} {level(target, float(value))}"


def finished_title(note: str, name: str, status: str) -> str:
    """A child run's description with its first line led by its finished name and status:
    "**τ=0.1 B=64 seed=0 — probe/knn_top1_h 84.5%** (finished) · **Trial `p000-r0`** of …"."""
    lines = note.splitlines() or [""]
    first = lines[0]
    start = first.find(TRIAL_TITLE)
    lines[0] = f"**{in_markdown(name)}** ({status}) · {first[start:] if start >= 0 else first}"
    return "\n".join(lines)


def trial_note(plan: TrialPlan, study: str, experiment_id: str, parent_id: str) -> str:
    """A child run's description (Markdown) when it is created: its factor values, status,
    examples seen and its parent run."""
    return "\n".join([
        f"{TRIAL_TITLE}{plan.key}`** of study `{study}`: point `{plan.point_id}`, replicate "
        f"{plan.replicate} (seed {plan.seed})",
        "",
        f"- **Factors:** {_factor_text(plan)}",
        status_line("scheduled", 0, plan.config.budget_examples),
        f"- **Parent:** [{in_markdown(study)}]({run_link(experiment_id, parent_id)})",
    ])  # fmt: skip


def parent_run_name(spec: StudySpec) -> str:
    """The name of the parent run a study file opens: the study's own, and for the block that
    ``study augment`` adds, ``<study> · block 2 (axial and centre points)``, so the MLflow UI
    tells the two parent runs of one study apart."""
    if spec.design.augments is None:
        return spec.study
    return f"{spec.study} · block 2 (axial and centre points)"
