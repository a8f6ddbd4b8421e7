"""``study plan --estimate``: a probe of the study's costliest kinds of trial, laid out on its
slots, before anything is recorded. The layout is checked against hand-computed makespans; the
estimate's accuracy against a measured run is benchmarks/estimate.py's, not a test's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from search_spaces.designs import build_design
from search_spaces.spec import load_spec, parse_spec
from study.estimate import MAX_KINDS, _Cost, _cost_class, _kind, _makespan, estimate, plan_probes

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


# --- which kinds are probed, and which scaled from which (issue 61) -------------------------
DEFAULT = yaml.safe_load((Path(__file__).resolve().parents[2] / "search_spaces" /
                          "default.yaml").read_text())  # fmt: skip


def _design(factors: dict, name: str = "kinds"):
    spec = parse_spec(DEFAULT | {"study": name, "factors": factors}, name)
    return spec, build_design(spec)


def _groups(design) -> list[list]:
    kinds: dict = {}
    for trial in design.trials:
        kinds.setdefault(_kind(trial.config), []).append(trial.config)
    return list(kinds.values())


WIDTHS = {"temperature": {"levels": [0.1, 0.5], "scale": "log"},
          "cnn_width": {"levels": [8, 64]}}  # fmt: skip
BATCHES = {"batch_size": {"levels": [32, 64, 128, 256, 512, 1024], "scale": "log"}}


def test_kinds_that_differ_in_encoder_width_are_each_probed():
    groups = _groups(_design(WIDTHS)[1])
    probed, scaled = plan_probes(groups)
    assert len(groups) == 2 and sorted(probed) == [0, 1] and scaled == {}


def test_every_cost_class_is_probed_beyond_the_cap_and_none_is_scaled_across_classes():
    """Five widths × two batch sizes, at most 2 probes: each width is still probed (five), and
    each other batch size is scaled from its own width's probe."""
    factors = {"cnn_width": {"levels": [8, 16, 32, 48, 64]},
               "batch_size": {"levels": [64, 256], "scale": "log"}}  # fmt: skip
    groups = _groups(_design(factors)[1])
    probed, scaled = plan_probes(groups, max_kinds=2)
    assert len(groups) == 10 and len(probed) == 5 and len(scaled) == 5
    assert {groups[i][0].cnn_width for i in probed} == {8, 16, 32, 48, 64}
    for i, source in scaled.items():
        assert source in probed
        assert _cost_class(groups[i][0]) == _cost_class(groups[source][0])
        assert groups[i][0].cnn_width == groups[source][0].cnn_width


def test_kinds_that_differ_only_in_batch_size_are_scaled_from_the_nearest_probed_batch():
    groups = _groups(_design(BATCHES)[1])
    probed, scaled = plan_probes(groups)
    assert len(probed) == MAX_KINDS and len(scaled) == len(groups) - MAX_KINDS
    batch = {i: g[0].batch_size for i, g in enumerate(groups)}
    # the most steps first, then the batch sizes farthest from those probed: the ends, then
    # between them, so the scaled ones lie next to a probed one
    assert [batch[i] for i in probed] == [32, 1024, 128, 64]
    assert {batch[i]: batch[j] for i, j in scaled.items()} == {256: 128, 512: 1024}


def _fake_probe(calls: list):
    def probe(config, cpu):  # a step costs its batch times its width; setup 1 s, eval 0.5 s
        calls.append(config)
        return _Cost(1.0, config.batch_size * config.cnn_width * 1e-5, 0.5, 0.1)

    return probe


def test_the_estimate_names_what_differs_and_costs_each_width_by_its_own_probe():
    """Before: a width-64 kind beyond the first four was costed at a width-8 kind's step time
    (by batch size alone); now each width is probed and the text names the width."""
    spec, design = _design(WIDTHS)
    calls: list = []
    found = estimate(spec, design, concurrency=1, probe=_fake_probe(calls))
    assert sorted(c.cnn_width for c in calls) == [8, 64] and found.scaled == ()
    kinds = {kind: seconds for kind, _, seconds in found.per_kind}
    wide, narrow = (kinds[f"cnn_width={w} B=256 (120 steps, 2 evaluations)"] for w in (64, 8))
    assert wide - narrow == pytest.approx(120 * 256 * 56 * 1e-5)  # its own step time
    assert len(found.lines()) == 1 and "4 × cnn_width=64 B=256" in found.lines()[0]


def test_the_estimate_says_which_kinds_it_scaled_from_which_and_by_what():
    spec, design = _design(BATCHES)
    calls: list = []
    found = estimate(spec, design, concurrency=1, probe=_fake_probe(calls))
    assert len(calls) == MAX_KINDS and found.probed == MAX_KINDS
    kinds = {kind: seconds for kind, _, seconds in found.per_kind}
    # scaled by its batch size: the same seconds per example as the B=1024 probe
    assert kinds["B=512 (60 steps, 2 evaluations)"] == pytest.approx(
        1.0 + 60 * 512 * 32 * 1e-5 + 2 * 0.5 + 0.1)  # fmt: skip
    assert found.lines()[1] == (
        "estimate: 4 of 6 kinds probed; scaled from the probed kind equal in every other cost "
        "field: B=256 (120 steps, 2 evaluations) from B=128 (240 steps, 2 evaluations) (× 2 per "
        "step, its batch size); B=512 (60 steps, 2 evaluations) from B=1024 (30 steps, 2 "
        "evaluations) (× 0.5 per step, its batch size)"
    )  # fmt: skip


@pytest.mark.slow
def test_plan_estimate_probes_each_encoder_width_for_real(tmp_path):
    """Real probes (digits, 13 steps at B = 256 and one evaluation each; about 25 s) of a
    width-8 and a width-64 encoder: each measured, the wider one costlier, the text naming the
    width. (At the smoke budget a probe is 2 steps and its setup decides.)"""
    file = tmp_path / "widths.yaml"
    file.write_text(yaml.safe_dump(DEFAULT | {"study": "widths", "factors": WIDTHS}))
    done = subprocess.run([STUDY, "plan", str(file), "--estimate"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    line = done.stdout.splitlines()[-1]
    assert line.startswith("estimate: about ") and "nothing recorded" in line
    assert "4 × cnn_width=64 B=256" in line and "4 × cnn_width=8 B=256" in line
    assert line.index("cnn_width=64") < line.index("cnn_width=8 ")  # the costlier first
