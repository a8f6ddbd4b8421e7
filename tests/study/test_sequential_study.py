"""``study augment``: a finished 2² factorial becomes a central composite, run as a second block.

The end-to-end test runs a real toy study on Ray Tune into the embedded SQLite store, augments
it through the CLI, runs the new study file and reads the record and the report back. The unit
tests check the refusals (every one before anything is written) and the design.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from studykit import ONE_AT_A_TIME, child_runs, parent_runs
from typer.testing import CliRunner

from search_spaces.designs import build_design
from search_spaces.sequential import augment_spec
from search_spaces.spec import StudyError, load_spec, parse_spec
from study.cli import app
from study.runner import run_study
from study.sequential import augment_study

TOY = {
    "study": "toy-2x2",
    "description": "temperature × batch size on the toy generator",
    "trial": {
        "dataset": "toy", "toy_classes": 4, "toy_dim": 8, "heldout_size": 200,
        "augmentation": "noise", "encoder": "mlp", "mlp_hidden": [16], "feature_dim": 2,
        "projection": "none", "budget_examples": 1024, "eval_marks": 1,
        "probe_train_size": 200, "linear_probe_iters": 10, "base_lr": 0.005,
        "optimizer": "adam", "schedule": "constant",
    },
    "factors": {
        "temperature": {"levels": [0.1, 0.4], "scale": "log"},
        "batch_size": {"levels": [32, 128], "scale": "log"},
    },
    "design": {"kind": "full_factorial", "replicates": 1},
    "resources": {"cpu": 1, "gpu": 0},
} | ONE_AT_A_TIME  # fmt: skip


def toy_file(folder: Path, **changes) -> Path:
    data = json.loads(json.dumps(TOY)) | changes
    path = folder / "toy.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def sqlite_uri(folder: Path) -> str:
    return f"sqlite:///{folder / 'mlflow.db'}"


# ---------------------------------------------------------------------------------------------
# the design
# ---------------------------------------------------------------------------------------------
def test_ccf_augmentation_keeps_the_factorial_and_adds_axial_and_centre_points(tmp_path):
    old = load_spec(toy_file(tmp_path))
    new, design = augment_spec(old, face="ccf", center=3)
    assert new.study == old.study and new.trial == old.trial and new.factors == old.factors
    assert new.design.kind == "central_composite" and new.design.augments.spec_sha == old.sha
    factorial = build_design(old).trials
    block1 = [t for t in design.trials if t.block == 1]
    block2 = [t for t in design.trials if t.block == 2]
    # block 1 is the factorial exactly: keys, seeds and values (found in the record, not re-run)
    assert [(t.key, t.seed, t.factors) for t in block1] == [
        (t.key, t.seed, t.factors) for t in factorial
    ]
    assert {t.role for t in block1} == {"factorial"}
    points = [(t.role, t.factors["temperature"], t.factors["batch_size"]) for t in block2]
    centre_t = math.exp((math.log(0.1) + math.log(0.4)) / 2)  # 0.2 on the log scale
    assert [p[0] for p in points] == ["axial"] * 4 + ["center"] * 3
    assert points[:4] == [("axial", 0.1, 64), ("axial", 0.4, 64),
                          ("axial", pytest.approx(centre_t), 32),
                          ("axial", pytest.approx(centre_t), 128)]  # fmt: skip
    assert all(p[1:] == (pytest.approx(centre_t), 64) for p in points[4:])
    # new point ids follow the factorial's; axial points share its common seeds, every centre
    # run has its own (seed + c * replicates): pure error
    assert [t.point_id for t in block2] == [f"p{i:03d}" for i in range(4, 11)]
    assert [t.seed for t in block2] == [0, 0, 0, 0, 0, 1, 2]
    assert design.structure["alpha"] == 1.0 and design.structure["blocks"] == {"1": 4, "2": 7}


def test_augmented_file_reads_back_as_the_same_spec(tmp_path):
    from search_spaces.sequential import augmented_yaml
    from trainables.text import load_yaml

    old = load_spec(toy_file(tmp_path, trial=TOY["trial"] | {"budget_examples": 3840}))
    new, design = augment_spec(old, face="ccc", alpha="rotatable")
    again = parse_spec(load_yaml(augmented_yaml(new, design, "toy.yaml")))
    assert again.sha == new.sha and again.canonical() == new.canonical()
    assert build_design(again).to_json() == design.to_json()


def test_ccc_alphas_in_coded_units_of_the_factorial(tmp_path):
    old = load_spec(toy_file(tmp_path, trial=TOY["trial"] | {"budget_examples": 3840}))
    _, rotatable = augment_spec(old, face="ccc", alpha="rotatable")
    assert rotatable.structure["alpha"] == pytest.approx(2**0.5)
    # orthogonal blocking with no centre runs in the factorial: alpha^2 = (2k + c) / 2
    _, orthogonal = augment_spec(old, face="ccc", alpha="orthogonal", center=4)
    assert orthogonal.structure["alpha"] == pytest.approx(math.sqrt((4 + 4) / 2))
    axial = [t.factors["temperature"] for t in rotatable.trials if t.role == "axial"]
    lo = math.exp(math.log(0.2) - 2**0.5 * math.log(2))  # log scale: centre 0.2, half-range ln 2
    assert axial[:2] == [pytest.approx(lo), pytest.approx(0.2 * 0.2 / lo)]


def test_a_changed_factorial_under_augments_is_refused(tmp_path):
    new, _ = augment_spec(load_spec(toy_file(tmp_path)))
    data = new.canonical()
    data["trial"]["budget_examples"] = 2048
    with pytest.raises(StudyError, match=r"design\.augments\.spec_sha: .* differ"):
        build_design(parse_spec(data))


# ---------------------------------------------------------------------------------------------
# refusals, before anything is written
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("changes", "pattern"),
    [
        ({"design": {"kind": "latin_hypercube", "samples": 4}},
         r"design\.kind: 'latin_hypercube': only a finished two-level factorial"),
        ({"factors": {"temperature": {"levels": [0.1, 0.2, 0.4]},
                      "batch_size": {"levels": [32, 128]}}},
         r"factors\.temperature: levels \[0\.1, 0\.2, 0\.4\]: .* exactly 2 levels .* got 3"),
        ({"factors": {"augmentation": {"levels": ["noise", "crop"]}}},
         r"factors: .* at least one numeric factor .* \(augmentation takes text\)"),
    ],
)  # fmt: skip
def test_refusals_of_a_study_that_is_not_a_two_level_factorial(tmp_path, changes, pattern):
    data = json.loads(json.dumps(TOY)) | changes
    if "augmentation" in data["factors"]:
        data["trial"] = {k: v for k, v in data["trial"].items() if k != "augmentation"}
    with pytest.raises(StudyError, match=pattern):
        augment_spec(parse_spec(data))


def test_an_augmented_design_is_not_augmented_again(tmp_path):
    new, _ = augment_spec(load_spec(toy_file(tmp_path)))
    with pytest.raises(StudyError, match=r"design\.kind: 'central_composite'.* augmented design"):
        augment_spec(new)


def test_ccc_axial_batch_size_that_cannot_divide_the_budget_is_refused(tmp_path):
    old = load_spec(toy_file(tmp_path))  # budget 1024: the divisor nearest 24 is 32, a level
    with pytest.raises(StudyError, match=r"factors\.batch_size: the axial point at -1\.414 .* "
                       r"inside the factorial's range \[32, 128\]"):  # fmt: skip
        augment_spec(old, face="ccc")


def test_ccc_axial_point_outside_a_field_range_is_refused(tmp_path):
    changes = {"factors": {"temperature": {"levels": [0.05, 0.5], "scale": "linear"},
                           "batch_size": {"levels": [32, 128], "scale": "log"}}}  # fmt: skip
    old = parse_spec(json.loads(json.dumps(TOY)) | changes)
    with pytest.raises(
        StudyError, match=r"factors\.temperature: level -0\.175: .* greater than 0.* axial point"
    ):
        augment_spec(old, face="ccc", alpha=2)


def test_cli_refuses_an_unfinished_or_unrecorded_study_and_writes_nothing(workdir):
    spec = toy_file(workdir)
    uri = sqlite_uri(workdir)
    result = CliRunner().invoke(app, ["augment", str(spec), "--tracking-uri", uri])
    assert result.exit_code == 2 and "study 'toy-2x2': not in" in result.output
    assert not (workdir / "toy-ccd.yaml").exists()
    result = CliRunner().invoke(app, ["augment", str(spec), "--to", "box_behnken"])
    assert result.exit_code == 2 and "--to 'box_behnken'" in result.output
    result = CliRunner().invoke(app, ["augment", str(spec), "--face", "cci"])
    assert result.exit_code == 2 and "--face 'cci'" in result.output


def test_unfinished_factorial_is_refused_naming_its_trials(workdir):
    from study.record import StudyRecord

    spec = load_spec(toy_file(workdir))
    uri = sqlite_uri(workdir)
    record = StudyRecord(uri, spec.study)
    design = build_design(spec)
    parent = record.start_parent(spec, design, "")
    for plan in design.trials[:3]:
        record.finish_trial(record.ensure_trial_run(plan, parent, spec.sha), {})
    with pytest.raises(StudyError, match=r"not finished: 3 of 4 trials FINISHED \(p003-r0: "
                       r"not run\): 1 of 4 trials not finished; driver gone; "
                       r"finish it first"):  # fmt: skip
        augment_study(workdir / "toy.yaml", tracking_uri=uri)
    assert not (workdir / "toy-ccd.yaml").exists()


@pytest.mark.long
# ---------------------------------------------------------------------------------------------
# end to end: Ray Tune, the embedded store, the report
# ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_augment_a_finished_2x2_runs_only_the_new_block_and_reports_curvature(workdir, shared_ray):
    uri, storage = sqlite_uri(workdir), workdir / "studies"
    spec = toy_file(workdir)
    first = run_study(spec, tracking_uri=uri, storage=storage, quiet=True, figures=False)
    assert first.ok and first.launched == 4
    before = {r.data.tags["study.trial_key"]: r for r in child_runs(uri, "toy-2x2")}

    result = CliRunner().invoke(app, ["augment", str(spec), "--tracking-uri", uri])
    assert result.exit_code == 0, result.output
    new_file = workdir / "toy-ccd.yaml"
    assert new_file.is_file() and "block 2: 7 new axial and centre trials" in result.output
    new = load_spec(new_file)
    assert new.study == "toy-2x2" and new.design.augments.spec_sha == load_spec(spec).sha
    assert len(parent_runs(uri, "toy-2x2")) == 1  # augment itself records nothing

    second = run_study(new_file, tracking_uri=uri, storage=storage, quiet=True, figures=False)
    assert second.ok and second.launched == 7 and second.counts == {"FINISHED": 11}
    parents = {p.data.tags["study.spec_sha"]: p for p in parent_runs(uri, "toy-2x2")}
    assert set(parents) == {load_spec(spec).sha, new.sha}
    assert parents[new.sha].data.tags["study.block"] == "2"
    assert parents[new.sha].data.tags["study.augments"] == load_spec(spec).sha
    assert all(p.info.status == "FINISHED" for p in parents.values())
    after = {r.data.tags["study.trial_key"]: r for r in child_runs(uri, "toy-2x2")}
    assert len(after) == 11 and set(before) <= set(after)
    for key, run in before.items():  # the factorial's runs are untouched
        again = after[key]
        assert again.info.run_id == run.info.run_id and again.info.end_time == run.info.end_time
        assert again.data.tags == run.data.tags and again.data.metrics == run.data.metrics
        assert again.data.tags["mlflow.parentRunId"] == parents[load_spec(spec).sha].info.run_id
    for key in set(after) - set(before):
        tags = after[key].data.tags
        assert tags["study.block"] == "2"
        assert tags["mlflow.parentRunId"] == parents[new.sha].info.run_id

    frame = pq.read_table(second.results).to_pandas()
    assert len(frame) == 11
    assert frame.groupby("block").size().to_dict() == {1: 4, 2: 7}
    report = json.loads((storage / "toy-2x2" / "report" / "report.json").read_text())
    fitted = [r for r in report["responses"].values() if r["status"] == "fitted"]
    assert fitted, report
    for response in fitted:
        assert response["blocks"] == "block"
        assert response["model"] == "second order with two-factor interactions"
        assert {"I(temperature ** 2)", "I(batch_size ** 2)"} <= set(response["terms"])
    html = (storage / "toy-2x2" / "report" / "report.html").read_text()
    assert "<th>block</th>" in html and "the trials ran in blocks" in html  # the ANOVA's line
    assert "<th>I(temperature ** 2)</th>" in html

    # re-running the augmented study resumes it: nothing is missing, nothing runs
    third = run_study(new_file, tracking_uri=uri, storage=storage, quiet=True, figures=False)
    assert third.launched == 0 and len(child_runs(uri, "toy-2x2")) == 11
    assert len(parent_runs(uri, "toy-2x2")) == 2


def test_a_fractional_factorial_keeps_its_fraction_as_block_1(tmp_path):
    factors = TOY["factors"] | {"base_lr": {"levels": [0.001, 0.01], "scale": "log"}}
    design = {"kind": "fractional_factorial", "generators": "a b ab"}
    trial = {k: v for k, v in TOY["trial"].items() if k != "base_lr"} | {"budget_examples": 3840}
    old = load_spec(toy_file(tmp_path, factors=factors, design=design, trial=trial))
    new, augmented = augment_spec(old, face="ccc")
    assert new.design.augments.kind == "fractional_factorial"
    assert new.design.augments.generators == "a b ab"
    block1 = [t.factors for t in augmented.trials if t.block == 1]
    assert block1 == [t.factors for t in build_design(old).trials] and len(block1) == 4
    roles = [t.role for t in augmented.trials if t.block == 2]
    assert roles == ["axial"] * 6 + ["center"] * 3
    assert augmented.structure["alpha"] == pytest.approx(4**0.25)  # F = 4 runs of the fraction
