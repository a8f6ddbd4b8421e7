""":func:`build_design`: a study's design, of the kind the registry names, every trial (or the
adaptive space) validated before anything runs."""

from __future__ import annotations

from search_spaces.designs.adaptive import AdaptiveDesign
from search_spaces.designs.augmented import augmented_design
from search_spaces.designs.base import FixedDesign
from search_spaces.designs.registry import KINDS, kind_module
from search_spaces.designs.trials import check_metric, fixed_design
from search_spaces.spec import StudyError, StudySpec
from trainables.metrics import evaluation_metrics


def build_design(spec: StudySpec) -> FixedDesign | AdaptiveDesign:
    """The study's design, every trial (or the adaptive space) validated before anything runs."""
    if "budget_examples" in spec.factors:
        levels = spec.factors["budget_examples"].levels or list(
            spec.factors["budget_examples"].range
        )
        raise StudyError(
            f"factors.budget_examples: the budget cannot be a factor (got {levels}): every trial "
            "of a study sees the same number of examples (run one study per budget)"
        )
    if spec.design.augments is not None:  # a second block of a finished factorial
        design: FixedDesign | AdaptiveDesign = augmented_design(spec)
    elif KINDS[spec.design.kind].adaptive:
        design = kind_module(spec.design.kind).design(spec)
    else:
        design = fixed_design(spec)
    reported = evaluation_metrics(design.sample_config())
    check_metric("target.metric", spec.target.metric, reported)
    for i, goal in enumerate(spec.goals):
        check_metric(f"goals.{i}.metric", goal.metric, reported)
    return design
