"""``study plan --estimate``: a probe of the study's costliest kinds of trial, laid out on its
slots, before anything is recorded. The layout is checked against hand-computed makespans; the
estimate's accuracy against a measured run is benchmarks/estimate.py's, not a test's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from search_spaces.designs import build_design
from search_spaces.spec import load_spec
from study.estimate import _kind, _makespan

STUDY = str(Path(sys.executable).with_name("study"))


@pytest.mark.parametrize(("durations", "slots", "makespan"), [
    ([10, 10, 10, 10], 2, 20),       # two rounds of two
    ([30, 10, 10, 10], 2, 30),       # the long one alone on its slot
    ([5, 4, 3, 3, 3], 2, 10),        # 5 | 4; 3 to 4 (7); 3 to 5 (8); 3 to 7 (10)
    ([7], 4, 7),                     # fewer trials than slots
])  # fmt: skip
def test_trials_are_laid_out_longest_first_on_the_slot_that_frees_first(durations, slots,
                                                                        makespan):  # fmt: skip
    assert _makespan(durations, slots) == pytest.approx(makespan)


def test_trials_that_differ_only_in_cost_neutral_fields_are_one_kind():
    design = build_design(load_spec(None))  # temperature x batch size, 2 replicates
    kinds = {_kind(t.config) for t in design.trials}
    assert len(kinds) == 2  # one per batch size: temperature and seed cost nothing


@pytest.mark.slow
def test_plan_estimate_says_how_long_and_records_nothing(tmp_path):
    done = subprocess.run([STUDY, "plan", "default", "--smoke", "--estimate"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    line = done.stdout.splitlines()[-1]
    assert line.startswith("estimate: about ") and "on this machine (4 trials" in line
    assert "nothing recorded" in line
    assert list(tmp_path.iterdir()) == []  # nothing written where it ran
    as_json = subprocess.run([STUDY, "plan", "default", "--smoke", "--estimate", "--json"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=300)  # fmt: skip
    found = json.loads(as_json.stdout)["estimate"]
    assert found["wall_s"] > found["fixed_s"] > 0 and found["slots"] >= 1
