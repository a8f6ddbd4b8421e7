"""One conformance test run over every design kind in the registry (as Optuna's
conformance test, its ``test_samplers.py``, runs over every sampler): for each kind, a small valid
study builds a design whose table is valid, whose trials are compute-matched (every trial sees
``budget_examples`` examples in full batches), a bad study is refused naming the field, and
building twice gives the same trials. A new kind fails here until it has its cases below."""

from __future__ import annotations

import pytest

from search_spaces.designs import KINDS, TrialPlan, build_design
from search_spaces.spec import StudyError, parse_spec
from trainables.config import TrialConfig

BUDGET = 30720
TWO_LEVELS = {
    "temperature": {"levels": [0.1, 0.5]},
    "batch_size": {"levels": [64, 128]},
    "aug_strength": {"levels": [0.2, 0.8]},
}
RANGES = {
    "temperature": {"range": [0.05, 0.5], "scale": "log"},
    "batch_size": {"range": [32, 256], "scale": "log"},
    "aug_strength": {"range": [0.2, 0.8]},
}

# kind -> (factors, design) of a small valid study
VALID = {
    "full_factorial": (TWO_LEVELS, {"replicates": 2}),
    "fractional_factorial": (TWO_LEVELS, {"generators": "a b ab"}),
    "central_composite": ({n: RANGES[n] for n in ("temperature", "batch_size")},
                          {"face": "ccc", "center": 2}),
    "box_behnken": (RANGES, {"center": 2}),
    "latin_hypercube": (RANGES | {"augmentation": {"levels": ["crop", "crop+color"]}},
                        {"samples": 6, "seed": 3}),
    "optuna": (RANGES, {"samples": 4, "metric": "probe/knn_top1_z"}),
    "points": (RANGES, {"points": [{"temperature": 0.1, "batch_size": 100, "aug_strength": 0.5},
                                   {"temperature": 0.3, "batch_size": 64, "aug_strength": 0.2}]}),
}  # fmt: skip

# kind -> (factors, design, the field its refusal names) of a study the kind cannot build
REFUSED = {
    "full_factorial": (RANGES, {}, "factors.temperature"),
    "fractional_factorial": (TWO_LEVELS, {"generators": "a b c d"}, "design.generators"),
    "central_composite": ({"augmentation": {"levels": ["crop", "crop+color"]}}, {},
                          "design.kind"),
    "box_behnken": ({n: RANGES[n] for n in ("temperature", "batch_size")}, {}, "design.kind"),
    "latin_hypercube": (RANGES, {}, "design.samples"),
    "optuna": (RANGES, {"samples": 4, "metric": "probe/knn_top1"}, "design.metric"),
    "points": (RANGES, {"points": [{"temperature": 9.0, "batch_size": 64,
                                    "aug_strength": 0.5}]}, "design.points.0.temperature"),
}  # fmt: skip


def study(kind: str, factors: dict, design: dict):
    return parse_spec({"study": f"conformance-{kind}", "factors": factors,
                       "trial": {"budget_examples": BUDGET, "eval_marks": 2},
                       "design": {"kind": kind, **design}})  # fmt: skip


def trials_of(kind: str) -> list[TrialPlan]:
    """Every trial of the kind's valid study: a fixed design's table, or every proposal an
    adaptive design makes when each proposal's result comes back the same."""
    design = build_design(study(kind, *VALID[kind]))
    if not design.adaptive:
        return list(design.trials)
    schedule, proposed = design.schedule([]), []
    while (plan := schedule.next(f"t{len(proposed)}")) is not None:
        proposed.append(plan)
        schedule.observe(plan.key, {"probe/knn_top1_z": 0.1 * len(proposed)})
    return proposed


def test_every_registered_kind_has_its_cases():
    assert set(VALID) == set(KINDS) == set(REFUSED)


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_valid_study_builds_a_valid_table(kind):
    spec = study(kind, *VALID[kind])
    design = build_design(spec)
    trials = trials_of(kind)
    assert trials and len(trials) == design.total
    assert len({t.key for t in trials}) == len(trials)  # no two trials under one key
    for trial in trials:
        assert set(trial.factors) == set(spec.factors)
        assert TrialConfig(**trial.payload()["trial"]) == trial.config  # a valid trial
        assert TrialPlan.from_payload(trial.payload()) == trial
    table = design.to_json()
    assert (table["design"], table["spec_sha"]) == (kind, spec.sha)
    assert table["totals"]["trials"] == len(trials)
    assert len({tuple(row) for row in table["trials"]}) <= 1  # every row has the same columns


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_trial_sees_the_same_examples_in_full_batches(kind):
    for trial in trials_of(kind):
        config = trial.config
        assert config.examples_seen == BUDGET
        assert config.steps * config.batch_size == BUDGET
    assert build_design(study(kind, *VALID[kind])).totals()["examples_per_trial"] == BUDGET


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_study_the_kind_cannot_build_is_refused_naming_the_field(kind):
    factors, design, field = REFUSED[kind]
    with pytest.raises(StudyError) as refused:
        build_design(study(kind, factors, design))
    assert field in str(refused.value)


@pytest.mark.parametrize("kind", list(KINDS))
def test_building_twice_gives_the_same_trials(kind):
    first, second = trials_of(kind), trials_of(kind)
    assert [t.payload() for t in first] == [t.payload() for t in second]


def test_every_public_name_imports_from_the_package():
    import search_spaces.designs as designs

    for name in designs.__all__:
        assert getattr(designs, name) is not None, name
    assert set(designs.GENERATORS) == {n for n, k in KINDS.items() if not k.adaptive}
