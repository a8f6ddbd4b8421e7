"""Every number the analysis reports comes from independent observations: Optuna may propose
the same point again (a categorical space of two levels certainly will), so each proposal
trains with a seed of its own; and trials recorded as exact repeats (the same factors and the
same seed) count once, said in the headline."""

from __future__ import annotations

import pandas as pd
from resultskit import RESPONSE, planted

from analysis.stats.fits import independent_trials
from analysis.study_analysis import analyse
from search_spaces.designs import PastTrial, build_design
from search_spaces.spec import load_spec, parse_spec


def optuna_spec(samples: int = 4):
    data = load_spec(None).canonical()
    data["factors"] = {"temperature": {"levels": [0.1, 0.5]}}
    data["design"] = {"kind": "optuna", "samples": samples, "metric": "probe/knn_top1_h",
                      "seed": 0}  # fmt: skip
    return parse_spec(data)


def test_repeated_proposals_train_with_seeds_of_their_own():
    spec = optuna_spec()
    schedule = build_design(spec).schedule([])
    plans = []
    for i in range(4):
        plan = schedule.next(f"t{i}")
        plans.append(plan)
        schedule.observe(plan.key, {"probe/knn_top1_h": 0.9 if plan.factors["temperature"] ==
                                    0.5 else 0.8})  # fmt: skip
    taus = [p.factors["temperature"] for p in plans]
    assert len(set(taus)) < len(taus)  # TPE proposed a point again, as the field report saw
    assert len({p.seed for p in plans}) == 4 and {p.config.seed for p in plans} == {0, 1, 2, 3}


def test_a_resumed_search_never_reuses_a_recorded_seed():
    spec = optuna_spec()
    config = build_design(spec).sample_config().model_dump()
    past = [
        PastTrial("o-a", "FINISHED", config | {"temperature": 0.5, "seed": 0},
                  {"probe/knn_top1_h": 0.9}),
        PastTrial("o-b", "KILLED", config | {"temperature": 0.1, "seed": 1}, {}),
    ]  # fmt: skip
    schedule = build_design(spec).schedule(past)
    first = schedule.next("x")  # the interrupted trial again, under its own key and seed
    assert (first.key, first.seed) == ("o-b", 1)
    new = [schedule.next(f"n{i}") for i in range(2)]
    assert {p.seed for p in new} == {2, 3}


def test_exact_repeats_count_once_and_the_headline_says_so():
    df = planted(-0.02)
    repeated = df.iloc[[0, 1]].copy()
    df2 = pd.concat([df, repeated], ignore_index=True)
    df2.attrs = df.attrs
    kept = independent_trials(df2)
    assert len(kept) == len(df) and kept.attrs["repeated_trials"] == 2
    analysis = analyse(df2, (RESPONSE,))
    alone = analyse(df, (RESPONSE,))
    assert analysis.n_trials == len(df2)
    fit, fit_alone = analysis.fits[RESPONSE].surface, alone.fits[RESPONSE].surface
    assert fit.n == fit_alone.n and fit.error_df == fit_alone.error_df
    sentence = analysis.headline.sentence
    said = f"{len(df2)} trials, {len(df2)} finished (2 repeated an earlier trial exactly"
    assert said in sentence
