"""A multi-objective Optuna design (``design.objectives``): NSGA-II by default, multi-objective
TPE on request, every objective told back, failed and incomplete trials told as failures, a
resumed search warmed with every finished trial's values; and the study file refused early when
the objectives cannot be searched."""

from __future__ import annotations

import optuna
import pytest

from search_spaces.designs import PastTrial, build_design
from search_spaces.spec import StudyError, load_spec, parse_spec

OBJECTIVES = [{"metric": "probe/knn_top1_h", "mode": "max"}, {"metric": "z/uniform",
                                                              "mode": "min"}]  # fmt: skip


def spec_with(samples: int = 9, **design):
    data = load_spec(None).canonical()
    data["factors"] = {"temperature": {"range": [0.05, 0.5], "scale": "log"},
                       "batch_size": {"range": [32, 256], "scale": "log"}}  # fmt: skip
    data["design"] = {"kind": "optuna", "samples": samples, "seed": 0,
                      "objectives": OBJECTIVES} | design  # fmt: skip
    return parse_spec(data)


def truth(plan) -> dict[str, float]:
    """Accuracy rises and uniformity worsens with temperature: a trade-off."""
    tau = plan.factors["temperature"]
    return {"probe/knn_top1_h": 0.8 + tau / 2, "z/uniform": -4.0 + 2 * tau}


def run(schedule, n: int, results=truth) -> list:
    plans = []
    for i in range(n):
        plan = schedule.next(f"t{i}")
        plans.append(plan)
        schedule.observe(plan.key, results(plan))
    return plans


@pytest.mark.parametrize(("sampler", "kind"), [(None, optuna.samplers.NSGAIISampler),
                                               ("tpe", optuna.samplers.TPESampler)])  # fmt: skip
def test_every_objective_is_told_back_to_the_chosen_sampler(sampler, kind):
    options = {} if sampler is None else {"sampler": sampler}
    schedule = build_design(spec_with(**options)).schedule([])
    assert isinstance(schedule.study.sampler, kind)
    assert [d.name for d in schedule.study.directions] == ["MAXIMIZE", "MINIMIZE"]
    plans = run(schedule, 6)
    done = schedule.study.trials
    assert len(done) == 6 and all(t.state == optuna.trial.TrialState.COMPLETE for t in done)
    assert [t.values for t in done] == [list(truth(p).values()) for p in plans]
    if sampler is None:  # a third of the samples, at least 4: generations, not just random
        assert schedule.study.sampler._population_size == 4


def test_a_trial_missing_an_objective_is_a_failure_not_a_point():
    schedule = build_design(spec_with()).schedule([])
    run(schedule, 2, results=lambda plan: {"probe/knn_top1_h": 0.9})  # no uniformity
    run(schedule, 1, results=lambda plan: {"probe/knn_top1_h": 0.9, "z/uniform": float("nan")})
    states = [t.state for t in schedule.study.trials]
    assert states == [optuna.trial.TrialState.FAIL] * 3


def test_a_resumed_search_is_warmed_with_every_finished_trials_values():
    spec = spec_with()
    config = build_design(spec).sample_config().model_dump()
    past = [
        PastTrial("o-a", "FINISHED", config | {"temperature": 0.1, "seed": 0},
                  {"probe/knn_top1_h": 0.85, "z/uniform": -3.8}),
        PastTrial("o-b", "FINISHED", config | {"temperature": 0.4, "seed": 1},
                  {"probe/knn_top1_h": 0.95}),  # one objective missing: a failure
        PastTrial("o-c", "KILLED", config | {"temperature": 0.2, "seed": 2}, {}),
    ]  # fmt: skip
    schedule = build_design(spec).schedule(past)
    told = schedule.study.trials
    assert [t.state for t in told] == [optuna.trial.TrialState.COMPLETE,
                                       optuna.trial.TrialState.FAIL]  # fmt: skip
    assert told[0].values == [0.85, -3.8]
    first = schedule.next("x")  # the interrupted trial again, under its own key
    assert first.key == "o-c"
    schedule.observe("o-c", {"probe/knn_top1_h": 0.9, "z/uniform": -3.6})
    assert schedule.study.trials[-1].values == [0.9, -3.6]


@pytest.mark.parametrize(
    ("design", "message"),
    [
        ({"objectives": OBJECTIVES[:1]}, "several objectives means two or more, got 1"),
        ({"objectives": OBJECTIVES + OBJECTIVES[:1]}, "'probe/knn_top1_h' is listed twice"),
        ({"metric": "probe/knn_top1_h"}, "give metric ('probe/knn_top1_h') for one objective"),
        (
            {"objectives": None, "metric": "probe/knn_top1_h", "sampler": "nsga2"},
            "'nsga2' searches several objectives",
        ),
        (
            {"objectives": [OBJECTIVES[0], {"metric": "z/uniformity", "mode": "min"}]},
            "design.objectives.1.metric: 'z/uniformity' is not a metric",
        ),
        ({"kind": "full_factorial", "samples": None}, "design.objectives"),
    ],
)
def test_objectives_that_cannot_be_searched_are_refused_naming_the_field(design, message):
    with pytest.raises(StudyError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):  # fmt: skip
        build_design(spec_with(**design))


def test_a_single_objective_study_keeps_the_fingerprint_it_was_recorded_with():
    """objectives and sampler, unset, stay out of the fingerprint: this study's spec_sha is the
    one computed before they existed (commit a4b2eef)."""
    single = spec_with(objectives=None, metric="probe/knn_top1_h")
    assert single.sha == "a3006d6f61805e64"


def test_the_schedule_pickles_for_ray_tune_without_its_sampler():
    """Ray Tune writes its tuner (with the search algorithm) to tuner.pkl; NSGA-II's sampler
    holds a thread lock ("cannot pickle '_thread.lock' object" failed the first real run)."""
    import pickle

    schedule = build_design(spec_with()).schedule([])
    run(schedule, 2)
    again = pickle.loads(pickle.dumps(schedule))
    assert again.study is None and again.objectives == schedule.objectives
