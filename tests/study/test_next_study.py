"""``study next`` on finished studies recorded in a real embedded MLflow store without training
(tests/kits/recordkit.py plants each trial's results): a plane whose best point is on the edge
gets points along its path of steepest ascent, a null effect more replicates, a maximum inside a
central composite a smaller region around it, a bent factorial a central composite. Every
written file passes ``study plan`` and keeps the budget; the command says why."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from recordkit import record_study

from search_spaces.designs import build_design
from search_spaces.spec import StudyError, load_spec, parse_spec
from study.sequential import next_study

STUDY = str(Path(sys.executable).with_name("study"))
DEFAULT = yaml.safe_load((Path(__file__).resolve().parents[2] / "search_spaces" /
                          "default.yaml").read_text())  # fmt: skip


def write(folder: Path, name: str, **changes) -> Path:
    data = DEFAULT | {"study": name} | changes
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def recorded(tmp_path: Path, name: str, truth, **changes) -> tuple[Path, str]:
    file = write(tmp_path, name, **changes)
    uri = record_study(tmp_path, name, spec=load_spec(file), truth=truth)
    return file, uri


def plane(u, v, replicate, i):  # accuracy falls 1.5 points per doubling of τ, clearly
    noise = (0.001, -0.001, 0.0005, -0.0005)[i % 4]
    return {"probe/knn_top1_h": 0.95 - 0.015 * u + noise, "z/align": 0.2 + 0.1 * u + noise,
            "z/uniform": -3.4 + 0.1 * v - noise}  # fmt: skip


def test_a_plane_with_its_best_on_the_edge_gets_points_along_the_path(tmp_path):
    file, uri = recorded(tmp_path, "planted-plane", plane)
    done = subprocess.run([STUDY, "next", str(file), "--tracking-uri", uri], cwd=tmp_path,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    written = tmp_path / "planted-plane-next1.yaml"
    assert f"wrote {written}" in done.stdout
    assert "the path of steepest ascent is established" in done.stdout
    spec = load_spec(written)
    assert spec.study == "planted-plane-next1" and spec.design.kind == "points"
    assert "after planted-plane: a plane fits probe/knn_top1_h" in spec.description
    # accuracy falls with τ and does not depend on B: the path lowers τ and holds B
    temperatures = [float(p["temperature"]) for p in spec.design.points]
    assert temperatures == sorted(temperatures, reverse=True) and temperatures[0] < 0.1
    # one coded unit (half the log-range of τ: a factor √5) per step, from the region's edge
    assert temperatures[0] == pytest.approx(0.1 / math.sqrt(5), rel=1e-3)
    assert temperatures[-1] == pytest.approx(0.1 / math.sqrt(5) ** 3, rel=1e-3)
    assert len(temperatures) == 3
    assert "batch_size" not in spec.factors and spec.trial["batch_size"] == pytest.approx(
        128, rel=1e-9)  # fmt: skip
    design = build_design(spec)
    assert {t.config.examples_seen for t in design.trials} == {30720}  # compute matched
    plan = subprocess.run([STUDY, "plan", str(written)], cwd=tmp_path, capture_output=True,
                          text=True)  # fmt: skip
    assert plan.returncode == 0, plan.stderr
    assert "every trial sees 30720 examples" in plan.stdout


def null(u, v, replicate, i):
    noise = (0.004, -0.003, -0.004, 0.003, 0.002, -0.002, 0.001, -0.001)[i % 8]
    return {"probe/knn_top1_h": 0.9 + noise, "z/align": 0.2 + noise, "z/uniform": -3.4}


# τ from 0.1 to 0.4 and B from 64 to 256 (u, v in [0, 2]) for the central composites
SQUARE = {"temperature": {"range": [0.1, 0.4], "scale": "log"},
          "batch_size": {"range": [64, 256], "scale": "log"}}  # fmt: skip
CCD = {"kind": "central_composite", "replicates": 1}


def bowl(u, v, replicate, i):  # the maximum at u = 1.2, v = 0.8
    noise = (0.001, -0.001, 0.0005, -0.0005)[i % 4]
    return {"probe/knn_top1_h": 0.95 - 0.02 * (u - 1.2) ** 2 - 0.015 * (v - 0.8) ** 2
            + noise, "z/align": 0.2 + noise, "z/uniform": -3.4 - noise}  # fmt: skip


def twisted(u, v, replicate, i):
    noise = (0.001, -0.001, 0.0005, -0.0005)[i % 4]
    x, y = 2 * u / math.log2(5) - 1, v - 1  # coded ±1
    return {"probe/knn_top1_h": 0.9 + 0.01 * x + 0.03 * x * y + noise, "z/align": 0.2,
            "z/uniform": -3.4 + noise}  # fmt: skip


def saddle(u, v, replicate, i):  # up along τ, down along B, through the centre
    noise = (0.001, -0.001, 0.0005, -0.0005)[i % 4]
    return {"probe/knn_top1_h": 0.9 + 0.02 * (u - 1) ** 2 - 0.02 * (v - 1) ** 2 + noise,
            "z/align": 0.2 + noise, "z/uniform": -3.4 - noise}  # fmt: skip


def gentle(u, v, replicate, i):  # a plane over three levels a factor: no curvature to detect
    noise = (0.004, -0.003, -0.004, 0.003, 0.002, -0.002, 0.001, -0.001)[i % 8]
    return {"probe/knn_top1_h": 0.9 - 0.004 * u + noise, "z/align": 0.2 + noise,
            "z/uniform": -3.4 - noise}  # fmt: skip


THREE_LEVELS = {"temperature": {"levels": [0.1, 0.2, 0.4], "scale": "log"},
                "batch_size": {"levels": [64, 128, 256], "scale": "log"}}  # fmt: skip
TRUTHS = {
    "plane": (plane, {}),
    "null": (null, {}),
    "bowl": (bowl, {"factors": SQUARE, "design": CCD}),
    "twisted": (twisted, {}),
    "saddle": (saddle, {"factors": SQUARE, "design": CCD}),
    "three-levels": (gentle, {"factors": THREE_LEVELS}),
}


@pytest.mark.parametrize("truth", sorted(TRUTHS))
def test_the_headlines_next_and_study_next_say_the_same_thing(tmp_path, truth):
    """One decision: what the report's headline says to run next ("Next:", report.json, the
    parent's description) is what ``study next`` writes, or why it writes nothing."""
    from study.record import StudyRecord
    from study.reporting import make_report

    planted, changes = TRUTHS[truth]
    name = f"agree-{truth}"
    file, uri = recorded(tmp_path, name, planted, **changes)
    summary, _ = make_report(StudyRecord.existing(uri, name), None, tmp_path / "report",
                             tracking_uri=uri, figures=False)  # fmt: skip
    said = summary["headline"]["next_step"]
    assert f"Next: {said}" in summary["headline"]["lines"]
    assert summary["next_step"]["reason"].rstrip(".") == said.rstrip(".")
    try:
        reason = next_study(file, tracking_uri=uri, out=tmp_path / "next.yaml").reason
    except StudyError as err:  # nothing to write: it says why, in the headline's words
        assert summary["next_step"]["kind"] == "none"
        reason = str(err).split(": ", 1)[1]
    assert said.rstrip(".") == reason.rstrip(".")


def test_nothing_detectable_asks_for_the_replicates_study_power_names(tmp_path):
    file, uri = recorded(tmp_path, "planted-null", null)
    done = next_study(file, tracking_uri=uri)
    assert done.kind == "replicates"
    assert "no factor moved probe/knn_top1_h detectably" in done.reason
    assert done.spec.design.replicates > 2 and done.spec.design.kind == "full_factorial"
    assert f"{done.spec.design.replicates} replicates per point" in done.reason
    assert done.spec.factors.keys() == {"temperature", "batch_size"}
    assert done.path == tmp_path / "planted-null-next1.yaml"


def test_a_maximum_inside_a_central_composite_gets_a_smaller_region_around_it(tmp_path):
    file, uri = recorded(tmp_path, "planted-bowl", bowl, factors=SQUARE, design=CCD)
    done = next_study(file, tracking_uri=uri)
    assert done.kind == "zoom", done.reason
    assert "has a maximum inside the region" in done.reason
    low, high = done.spec.factors["temperature"].range
    # the centre of the new range (on the log scale) is the planted maximum, τ = 0.1 × 2^1.2
    assert math.sqrt(low * high) == pytest.approx(0.1 * 2**1.2, rel=0.05)
    assert high / low == pytest.approx(2.0, rel=1e-6)  # half the old log-width (4×)
    assert done.spec.design.kind == "central_composite"
    assert {t.config.examples_seen for t in done.design.trials} == {30720}


def test_a_factorial_whose_interaction_is_detected_is_augmented(tmp_path):
    file, uri = recorded(tmp_path, "planted-twist", twisted)
    done = next_study(file, tracking_uri=uri)
    assert done.kind == "augment", done.reason
    assert "its interactions are detected (temperature:batch_size)" in done.reason
    assert done.path == tmp_path / "planted-twist-ccd.yaml"
    assert done.spec.design.kind == "central_composite" and done.spec.study == "planted-twist"


def test_an_unfinished_or_unrecorded_study_is_refused_naming_the_command(tmp_path):
    file = write(tmp_path, "never-run")
    done = subprocess.run([STUDY, "next", str(file), "--tracking-uri",
                           f"sqlite:///{tmp_path / 'mlflow.db'}"], cwd=tmp_path,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 2
    assert "study 'never-run': not in" in done.stderr and "study run" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["never-run.yaml"]


def test_the_next_name_counts_up():
    from search_spaces.sequential import next_name

    assert next_name("default-digits") == "default-digits-next1"
    assert next_name("default-digits-next1") == "default-digits-next2"
    assert next_name("a-nextx") == "a-nextx-next1"
    assert parse_spec(DEFAULT | {"study": next_name("default-digits-next9")}).study == (
        "default-digits-next10")  # fmt: skip


def test_after_a_path_a_factorial_is_centred_on_the_best_point_along_it(tmp_path):
    # three points along a line in (τ, B); accuracy peaks at the middle one
    def peak(u, v, replicate, i):
        noise = (0.001, -0.001)[replicate % 2]
        return {"probe/knn_top1_h": 0.95 - 0.02 * abs(u - 1.0) + noise, "z/align": 0.2,
                "z/uniform": -3.4 + noise}  # fmt: skip

    points = [{"temperature": 0.1, "batch_size": 64}, {"temperature": 0.2, "batch_size": 128},
              {"temperature": 0.4, "batch_size": 256}]  # fmt: skip
    factors = {"temperature": {"range": [0.1, 0.4], "scale": "log"},
               "batch_size": {"range": [64, 256], "scale": "log"}}  # fmt: skip
    file, uri = recorded(tmp_path, "planted-path", peak, factors=factors,
                         design={"kind": "points", "replicates": 2, "points": points})  # fmt: skip
    done = next_study(file, tracking_uri=uri)
    assert done.kind == "factorial", done.reason
    assert "was best at p001 (temperature = 0.2, batch_size = 128" in done.reason
    # half a path step (a factor 2 on both) either side of the best point, on the log scale
    assert [float(v) for v in done.spec.factors["temperature"].levels] == pytest.approx(
        [0.2 / math.sqrt(2), 0.2 * math.sqrt(2)], rel=1e-3)  # fmt: skip
    # B = 128 / √2 and 128 · √2 (90.5, 181) snapped to the nearest sizes dividing 30720
    assert done.spec.factors["batch_size"].levels == [96, 192]
    assert done.spec.design.kind == "full_factorial"
    assert {t.config.examples_seen for t in done.design.trials} == {30720}


def _recorded_pairs(uri: str, name: str) -> set[tuple]:
    from analysis.reading.load import load_study

    df = load_study(name, uri)
    return {(float(t), int(b), int(s)) for t, b, s in
            zip(df["temperature"], df["batch_size"], df["seed"], strict=True)}  # fmt: skip


@pytest.mark.parametrize("truth", ["plane", "null"])
def test_no_follow_up_runs_a_point_and_seed_already_recorded(tmp_path, truth):
    """2 replicates recorded (seeds 0 and 1): the next study, whatever it is, starts its seeds
    past them, so no trial of it repeats a recorded one bit for bit."""
    name = f"planted-{truth}"
    file, uri = recorded(tmp_path, name, plane if truth == "plane" else null)
    done = next_study(file, tracking_uri=uri)
    seeds = {t.seed for t in done.design.trials}
    assert min(seeds) >= 2, seeds
    fixed = {k: v for k, v in done.spec.trial.items() if k in ("temperature", "batch_size")}
    new = {(float({**fixed, **t.factors}["temperature"]), int({**fixed, **t.factors}["batch_size"]),
            t.seed) for t in done.design.trials}  # fmt: skip
    assert not new & _recorded_pairs(uri, name)


def test_confirm_writes_the_selected_point_and_its_rival_on_fresh_seeds(tmp_path):
    file, uri = recorded(tmp_path, "planted-plane", plane)
    done = subprocess.run([STUDY, "next", str(file), "--confirm", "--tracking-uri", uri],
                          cwd=tmp_path, capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    written = tmp_path / "planted-plane-confirm.yaml"
    assert f"wrote {written}" in done.stdout
    assert "chosen among 4 points, so its mean is biased upward" in done.stdout
    spec = load_spec(written)
    assert spec.design.kind == "points" and spec.design.replicates >= 3
    confirms = spec.confirms
    assert confirms.study == "planted-plane"
    # accuracy falls with τ, B does nothing: the best is at τ = 0.1, its rival at τ = 0.1 too
    assert confirms.point["temperature"] == pytest.approx(0.1)
    assert confirms.rival["temperature"] == pytest.approx(0.1)
    assert confirms.point["batch_size"] != confirms.rival["batch_size"]
    design = build_design(spec)
    assert {t.config.examples_seen for t in design.trials} == {30720}
    assert min(t.seed for t in design.trials) >= 2
    assert len(design.trials) == 2 * spec.design.replicates
    plan = subprocess.run([STUDY, "plan", str(written)], cwd=tmp_path, capture_output=True,
                          text=True)  # fmt: skip
    assert plan.returncode == 0, plan.stderr


def test_a_confirmation_studys_record_says_whether_the_chosen_point_held(tmp_path):
    """The written confirmation study, recorded (planted results): its confirms travel through
    the parent run to the results' attrs, and the headline opens with the verdict."""
    from recordkit import record_study

    from analysis.reading.load import load_study
    from analysis.study_analysis import analyse

    file, uri = recorded(tmp_path, "planted-plane", plane)
    done = next_study(file, tracking_uri=uri, confirm=True)
    spec = load_spec(done.path)
    record_study(tmp_path, spec.study, spec=spec, truth=plane)
    df = load_study(spec.study, uri)
    assert df.attrs["confirms"]["study"] == "planted-plane"
    analysis = analyse(df)
    found = analysis.confirmation
    assert found is not None and found.verdict in ("held", "did not hold", "cannot be told apart")
    assert found.chosen.n == spec.design.replicates
    assert analysis.headline.lines()[1].startswith("Confirmation of planted-plane's selected point")


def steep(u, v, replicate, i):  # τ moves the accuracy by 6 points: far more than one item
    noise = (0.004, -0.004, 0.002, -0.002)[i % 4]
    return {"probe/knn_top1_h": 0.90 - 0.06 * u + 0.01 * v + noise,
            "z/align": 0.2 + 0.1 * u + noise, "z/uniform": -3.4 + 0.1 * v - noise}  # fmt: skip


def next_cli(file: Path, uri: str, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([STUDY, "next", str(file), *flags, "--tracking-uri", uri],
                          cwd=file.parent, capture_output=True, text=True)  # fmt: skip


def test_a_confirmation_the_held_out_set_cannot_resolve_is_not_written_unless_forced(tmp_path):
    """τ moves the accuracy (study next writes a path), but the best point and its rival differ
    only in B, which does nothing: their means lie within one of the 360 held-out items."""
    file = write(tmp_path, "planted-flat")
    uri = record_study(tmp_path, "planted-flat", spec=load_spec(file), truth=plane,
                       heldout_items=360)  # fmt: skip
    refused = next_cli(file, uri, "--confirm")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    said = refused.stderr
    assert "the held-out set cannot resolve the difference" in said
    assert "held-out items of 360 (one item, 0.28 points" in said
    assert "heldout_size, now 360" in said and "accepting either point" in said
    assert "--force" in said and "× the 8 of the study it follows" in said
    assert not (tmp_path / "planted-flat-confirm.yaml").exists()
    forced = next_cli(file, uri, "--confirm", "--force")
    assert forced.returncode == 0, forced.stderr
    assert (tmp_path / "planted-flat-confirm.yaml").is_file()
    assert "on this machine" in forced.stdout and "the compute of planted-flat" in forced.stdout


def test_a_cheap_resolvable_confirmation_is_written_with_its_cost(tmp_path):
    file = write(tmp_path, "planted-steep")
    uri = record_study(tmp_path, "planted-steep", spec=load_spec(file), truth=steep,
                       heldout_items=360)  # fmt: skip
    done = next_cli(file, uri, "--confirm")
    assert done.returncode == 0, done.stderr
    written = load_spec(tmp_path / "planted-steep-confirm.yaml")
    trials = 2 * written.design.replicates
    assert f"{trials} trials of 30720 examples each; about " in done.stdout
    assert "× the compute of planted-steep, which ran 8 trials in" in done.stdout


def test_every_follow_up_states_its_cost(tmp_path):
    file, uri = recorded(tmp_path, "planted-plane", plane)
    done = next_cli(file, uri)
    assert done.returncode == 0, done.stderr
    assert "on this machine (" in done.stdout and "from its recorded trial times" in done.stdout
    assert "× the compute of planted-plane, which ran 8 trials in" in done.stdout


def test_a_minimised_targets_chosen_mean_is_said_to_be_biased_downward(tmp_path):
    """The lowest of several noisy means lies below its truth: the words follow the mode."""
    from analysis.findings.next_step import selection_bias

    assert selection_bias("max") == "biased upward"
    assert selection_bias("min") == "biased downward"
    file, uri = recorded(tmp_path, "planted-min", plane,
                         target={"metric": "z/align", "mode": "min"})  # fmt: skip
    done = next_study(file, tracking_uri=uri, confirm=True, force=True)
    assert "so its mean is biased downward" in done.reason
    assert "biased upward" not in done.reason


def ceiling(u, v, replicate, i):  # every trial at 100%: nothing varies, nothing to confirm
    return {"probe/knn_top1_h": 1.0, "z/align": 0.2 + 0.1 * u, "z/uniform": -3.4 + 0.1 * v}


def test_confirm_refuses_what_next_refuses_from_the_same_decision(tmp_path):
    """A tie at the ceiling: `study next` writes nothing, and `--confirm` no more, saying the
    same reason (the one decision, analysis.next_step)."""
    file, uri = recorded(tmp_path, "planted-ceiling", ceiling)
    with pytest.raises(StudyError) as plain:
        next_study(file, tracking_uri=uri)
    with pytest.raises(StudyError) as confirmed:
        next_study(file, tracking_uri=uri, confirm=True, force=True)
    reason = str(plain.value).removeprefix("study 'planted-ceiling': ")
    assert str(confirmed.value) == f"study 'planted-ceiling': no confirmation: {reason}"
    assert not list(tmp_path.glob("planted-ceiling-*.yaml"))
