"""A confirmation study's verdict (analysis.findings.confirmation): the chosen point against its
rival,
paired seed with seed on planted per-item outcomes, said in the headline before the findings."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.reading.outcomes import Outcomes, SystemOutcomes
from analysis.study_analysis import analyse

N = 400
METRIC = "probe/knn_top1_h"


def _system(right: np.ndarray) -> SystemOutcomes:
    labels = np.zeros(N, dtype=np.int64)
    return SystemOutcomes(np.arange(N), labels, {METRIC: np.where(right == 1, 0, 1)})


def planted(chosen_right: int, rival_right: int, seeds=(5, 6, 7)) -> tuple[pd.DataFrame, Outcomes]:
    """Two points on fresh seeds: the chosen one gets its first ``chosen_right`` items right,
    the rival its first ``rival_right`` (so every discordant item goes one way); the raw
    input gets the first 300."""
    rows, trials = [], {}
    for point, temperature, right in (("p000", 0.1, chosen_right), ("p001", 0.5, rival_right)):
        for replicate, seed in enumerate(seeds):
            correct = (np.arange(N) < right).astype(np.int8)
            run_id = f"{point}-{seed}"
            trials[run_id] = _system(correct)
            rows.append({"point_id": point, "replicate": replicate, "seed": seed,
                         "status": "finished", "run_id": run_id, "temperature": temperature,
                         METRIC: float(correct.mean()), "heldout_items": N})  # fmt: skip
    df = pd.DataFrame(rows)
    df.attrs.update({
        "study": "planted-confirm", "factors": ["temperature"],
        "target": {"metric": METRIC, "mode": "max"}, "design": "points",
        "baselines": {"raw": {"metrics": {METRIC: 0.75}, "seeds": []}},
        "confirms": {"study": "planted", "point_id": "p003", "point": {"temperature": 0.1},
                     "rival_id": "p001", "rival": {"temperature": 0.5}},
    })  # fmt: skip
    raw = _system((np.arange(N) < 300).astype(np.int8))
    return df, Outcomes(trials, {("raw", None): raw})


@pytest.mark.parametrize(
    ("chosen", "rival", "verdict"),
    [(340, 320, "held"), (320, 340, "did not hold"), (331, 330, "cannot be told apart")],
)
def test_the_chosen_point_held_or_not_against_its_rival(chosen, rival, verdict):
    df, outcomes = planted(chosen, rival)
    analysis = analyse(df, (METRIC,), outcomes)
    found = analysis.confirmation
    assert found is not None and found.verdict == verdict
    assert found.chosen.point_id == "p000" and found.rival.point_id == "p001"
    assert not found.chosen.selected  # chosen before this study: among nothing here
    assert (found.paired.only_trained, found.paired.only_baseline) == (
        3 * max(chosen - rival, 0), 3 * max(rival - chosen, 0))  # fmt: skip
    assert found.difference == pytest.approx((chosen - rival) / N)
    sentence = analysis.headline.confirmation
    assert sentence.startswith("Confirmation of planted's selected point (temperature = 0.1) "
                               "on 3 fresh seeds")  # fmt: skip
    assert f"it {verdict}." in sentence
    assert "Against the baselines, it beat the raw input" in sentence
    assert analysis.headline.lines()[1] == sentence
    assert analysis.to_json()["confirmation"]["verdict"] == verdict


def test_one_item_apart_on_every_seed_is_not_a_confirmation():
    df, outcomes = planted(331, 330)
    found = analyse(df, (METRIC,), outcomes).confirmation
    assert found.paired.difference.low < 0 < found.paired.difference.high


def test_a_study_that_confirms_nothing_has_no_confirmation():
    df, outcomes = planted(340, 320)
    del df.attrs["confirms"]
    analysis = analyse(df, (METRIC,), outcomes)
    assert analysis.confirmation is None and analysis.headline.confirmation is None
