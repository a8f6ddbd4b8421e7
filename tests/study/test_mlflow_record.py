"""The MLflow record made for review: the experiment's kind, description and
runs-table views, the child runs' descriptions, source tags and training dataset, and the parent
run's summary. A real embedded SQLite store, no Ray."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient
from studykit import duplicated_metric_rows, sqlite_companion

from analysis.stats.best import study_summary
from search_spaces.designs import build_design
from search_spaces.spec import parse_spec
from study import CHECKS_KEY
from study.mlflow_views import describe_study, point_to_report, start_described_parent
from study.provenance import training_dataset
from study.record import KIND, KIND_TAG, StudyRecord
from study.tracking_store import create_store
from trainables.config import TrialConfig

ROOT = Path(__file__).resolve().parents[2]
NOTE = "mlflow.note.content"
TARGET = "probe/knn_top1_h"
T_2 = 4.302652729749462  # Student's t(0.975, 2), 4.303 in any table


def _spec(name: str = "review", replicates: int = 2):
    return parse_spec({
        "study": name, "description": "Does a lower temperature help digits?",
        "trial": {"dataset": "digits", "budget_examples": 1536, "batch_size": 64},
        "factors": {"temperature": {"levels": [0.1, 0.5], "scale": "log"}},
        "design": {"kind": "full_factorial", "replicates": replicates},
    })  # fmt: skip


@pytest.fixture
def recorded(tmp_path):
    """A study recorded as the runner records it before Ray starts: parent and child runs."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec = _spec()
    design = build_design(spec)
    record = StudyRecord(uri, spec.study, tmp_path / "artifacts")
    parent = start_described_parent(record, spec, design, "the study file")
    runs = {p.key: record.ensure_trial_run(p, parent, spec.sha) for p in design.trials}
    return record, spec, design, parent, runs


def _check_tags(record: StudyRecord, parent: str) -> dict[str, str]:
    tags = record.client.get_run(parent).data.tags
    return {k: v for k, v in tags.items() if k.startswith("study.check.")}


def test_the_self_checks_come_with_the_trials_and_a_failure_is_never_hidden(recorded):
    record, _, _, parent, _ = recorded
    assert _check_tags(record, parent) == {}  # nothing ran the trial code yet
    known: dict[str, str] = {}
    passed = {CHECKS_KEY: json.dumps({"info_nce_worked_example": "pass"})}
    failed = {CHECKS_KEY: json.dumps({"info_nce_worked_example": "fail: 0.7 != 0.6551"})}
    record.record_checks(parent, {"status": "finished"}, known)  # a report without checks
    assert _check_tags(record, parent) == {}
    record.record_checks(parent, passed, known)
    assert _check_tags(record, parent) == {"study.check.info_nce_worked_example": "pass"}
    record.record_checks(parent, failed, known)  # another node, other code
    record.record_checks(parent, passed, known)  # passes after it do not hide it
    assert _check_tags(record, parent) == {
        "study.check.info_nce_worked_example": "fail: 0.7 != 0.6551"
    }


def test_opening_a_study_imports_no_torch(tmp_path):
    """The driver's record (parent run, trial runs) is written without torch: its import is
    seconds of CPU at every study's start, and the self-checks run in the trials."""
    code = ("import sys; from pathlib import Path; from search_spaces.designs import build_design; "
            "from search_spaces.spec import load_spec; from study.record import StudyRecord; "
            "from study.mlflow_views import start_described_parent; "
            "spec = load_spec(None); design = build_design(spec); "
            f"record = StudyRecord('sqlite:///{tmp_path}/m.db', spec.study, Path('{tmp_path}')); "
            "parent = start_described_parent(record, spec, design, 'text'); "
            "[record.ensure_trial_run(p, parent, spec.sha) for p in design.trials]; "
            "print('torch' in sys.modules)")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.stdout.split()[-1:] == ["False"], done.stderr[-2000:]


def _experiment(record: StudyRecord):
    return record.client.get_experiment(record.experiment_id)


def test_experiment_is_model_development_and_says_what_the_study_is_for(recorded):
    record, spec, _, parent, _ = recorded
    tags = _experiment(record).tags
    assert tags[KIND_TAG] == "custom_model_development" == KIND
    note = tags[NOTE]
    eid = record.experiment_id
    assert "Does a lower temperature help digits?" in note
    assert "`temperature` (0.1, 0.5, log scale)" in note
    assert "full_factorial, 2 replicate(s): 4 trials at 2 points" in note
    assert "1,536 examples (`budget_examples`) of `digits`" in note
    assert f"`{TARGET}`, higher is better" in note
    # links open MLflow 3.17's model-training pages whatever the browser last showed
    ml = "workflowType=machine_learning"
    assert f"(#/experiments/{eid}/runs/{parent}?{ml})" in note
    assert f"(#/experiments/{eid}/runs?viewStateShareKey=study-trials&{ml})" in note
    assert f"(#/experiments/{eid}/runs?viewStateShareKey=study-points&{ml})" in note
    assert "- **Latest report:** not written yet" in note
    # the parent run's own description is the study file's, as before
    assert record.client.get_run(parent).data.tags[NOTE] == spec.description


def test_runs_table_views_select_the_factors_and_key_metrics_sorted_by_the_target(recorded):
    record = recorded[0]
    tags = _experiment(record).tags
    trials = json.loads(tags["mlflow.sharedViewState.study-trials"])
    points = json.loads(tags["mlflow.sharedViewState.study-points"])
    assert trials["name"] == f"review: trials by {TARGET}"
    assert isinstance(trials["createdAt"], int) and isinstance(trials["state"], str)
    state = json.loads(trials["state"])
    assert state["selectedColumns"] == [
        "params.`temperature`", f"metrics.`{TARGET}`",
        "metrics.`z/align`", "metrics.`z/uniform`", "tags.`study.point_id`",
    ]  # fmt: skip
    assert state["orderByKey"] == f"metrics.`{TARGET}`" and state["orderByAsc"] is False
    assert state["searchFilter"] == "tags.`study.role` = 'trial'"
    grouped = json.loads(points["state"])
    assert grouped["groupBy"] == {
        "aggregateFunction": "average",
        "groupByKeys": [{"mode": "param", "groupByData": "temperature"}],
    }
    # writing them again (a resumed study) keeps each view's creation time
    describe_study(record, *recorded[1:4])
    again = json.loads(_experiment(record).tags["mlflow.sharedViewState.study-trials"])
    assert again["createdAt"] == trials["createdAt"]


def test_the_description_points_at_the_latest_report_and_keeps_pointing(recorded, tmp_path):
    record, spec, design, parent, _ = recorded
    local = tmp_path / "studies" / "review" / "report" / "report.html"
    point_to_report(record, parent, local)
    line = next(x for x in _experiment(record).tags[NOTE].splitlines() if "Latest report" in x)
    eid = record.experiment_id
    link = f"#/experiments/{eid}/runs/{parent}/artifacts/report/report.html"
    assert f"({link}?workflowType=machine_learning)" in line
    assert f"stored copy `{local}`" in line
    start_described_parent(record, spec, design, "the study file")  # resumed: it stays
    assert line in _experiment(record).tags[NOTE].splitlines()


def test_an_experiment_made_without_the_kind_tag_gets_it_on_the_next_run(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    spec = _spec("old-study")
    eid = client.create_experiment("old-study", str(tmp_path / "artifacts"))  # as made before
    assert KIND_TAG not in client.get_experiment(eid).tags
    record = StudyRecord(uri, "old-study")
    assert KIND_TAG not in client.get_experiment(eid).tags  # opening it writes nothing
    record.start_parent(spec, build_design(spec), "text")
    assert client.get_experiment(eid).tags[KIND_TAG] == KIND
    # a kind the UI inferred by itself is replaced; one a user chose is kept
    client.set_experiment_tag(eid, KIND_TAG, "no_inferred_type")
    record.ensure_kind()
    assert client.get_experiment(eid).tags[KIND_TAG] == KIND
    client.set_experiment_tag(eid, KIND_TAG, "genai_development")
    record.ensure_kind()
    assert client.get_experiment(eid).tags[KIND_TAG] == "genai_development"


def _git(*argv: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *argv], capture_output=True, text=True).stdout


def test_child_runs_describe_themselves_and_carry_source_tags_and_their_dataset(recorded):
    record, _, design, parent, runs = recorded
    client, eid = record.client, record.experiment_id
    plan = design.trials[0]
    run = client.get_run(runs[plan.key])
    note = run.data.tags[NOTE]
    assert f"**Trial `{plan.key}`** of study `review`" in note
    assert f"`temperature` (τ) = {plan.factors['temperature']}" in note
    assert "- **Status:** scheduled · **examples seen:** 0 of 1,536" in note
    parent_link = f"#/experiments/{eid}/runs/{parent}?workflowType=machine_learning"
    assert f"- **Parent:** [review]({parent_link})" in note
    assert run.info.run_name == plan.run_name and "τ=" in run.info.run_name

    commit = _git("rev-parse", "HEAD").strip()
    for tags in (run.data.tags, client.get_run(parent).data.tags):
        assert tags["mlflow.source.type"] == "LOCAL"
        assert tags["mlflow.source.name"] == sys.argv[0]
        assert tags["mlflow.user"]
        if commit:  # the tests run from a git checkout
            assert tags["mlflow.source.git.commit"] == commit

    inputs = run.inputs.dataset_inputs
    assert len(inputs) == 1
    dataset = inputs[0].dataset
    assert dataset.name == "digits" and dataset.source_type == "code"
    assert json.loads(dataset.source) == {"tags": {"loader": "sklearn.datasets.load_digits"}}
    assert len(dataset.digest) == 8 and json.loads(dataset.profile)["data_seed"] == 0
    assert [(t.key, t.value) for t in inputs[0].tags] == [("mlflow.data.context", "training")]
    # the same data: one fingerprint for every trial
    digests = {client.get_run(r).inputs.dataset_inputs[0].dataset.digest for r in runs.values()}
    assert digests == {dataset.digest}


def test_child_description_follows_the_trial_and_its_dataset_is_logged_once(recorded):
    record, spec, design, parent, runs = recorded
    client = record.client
    first, second = design.trials[0], design.trials[1]
    run_id = runs[first.key]
    record.begin_attempt(run_id)
    record.log_evaluation(run_id, {"train/examples_seen": 768, TARGET: 0.5}, 768)
    record.begin_attempt(run_id)  # Ray restarted the trial: same run, one more attempt
    note = client.get_run(run_id).data.tags[NOTE]
    assert "- **Status:** running (attempt 2) · **examples seen:** 768 of 1,536" in note
    record.finish_trial(run_id, {"status": "finished", "examples_seen": 1536, "wall_s": 1.0})
    run = client.get_run(run_id)
    assert "- **Status:** finished · **examples seen:** 1,536 of 1,536" in run.data.tags[NOTE]
    # its name and its description's first line give its factors and its target's value
    assert run.info.run_name == f"{first.run_name} — {TARGET} 50.0%"
    assert run.data.tags[NOTE].startswith(f"**{run.info.run_name}** (finished) · **Trial `")
    assert len(run.inputs.dataset_inputs) == 1
    # resumed: the run is found again, its dataset is not logged twice
    assert record.ensure_trial_run(first, parent, spec.sha) == run_id
    assert len(client.get_run(run_id).inputs.dataset_inputs) == 1

    record.begin_attempt(runs[second.key])
    record.fail_trial(runs[second.key], "Traceback: boom")
    note = client.get_run(runs[second.key]).data.tags[NOTE]
    assert "- **Status:** failed · **examples seen:** not recorded of 1,536" in note
    assert note.count("**Status:**") == 1


def test_on_disk_data_is_named_by_its_root_and_fingerprinted_by_its_files(tmp_path):
    root = tmp_path / "cifar"
    (root / "cifar-10-batches-py").mkdir(parents=True)
    batch = root / "cifar-10-batches-py" / "data_batch_1"
    batch.write_bytes(b"0" * 10)
    config = TrialConfig(dataset="cifar10", data_root=str(root), encoder="small_cnn")
    first = training_dataset(config).dataset
    assert first.name == "cifar10" and first.source_type == "local"
    assert json.loads(first.source) == {"uri": str(root.resolve())}
    assert training_dataset(config).dataset.digest == first.digest  # stable
    batch.write_bytes(b"0" * 11)  # a changed file is another dataset
    assert training_dataset(config).dataset.digest != first.digest
    digits = [training_dataset(TrialConfig(dataset="digits", data_seed=s)) for s in (0, 1)]
    assert digits[0].dataset.digest != digits[1].dataset.digest


def _results(rows: list[tuple]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=["point_id", "status", "temperature", TARGET])
    df.attrs["factors"] = ["temperature"]
    return df


def test_parent_summary_metrics_from_a_results_table_worked_by_hand(recorded):
    record, _, _, parent, _ = recorded
    df = _results([
        ("p0", "finished", 0.1, 0.80), ("p0", "finished", 0.1, 0.84),
        ("p0", "finished", 0.1, 0.82), ("p1", "finished", 0.5, 0.70),
        ("p1", "finished", 0.5, 0.74), ("p1", "finished", 0.5, 0.72),
        ("p1", "failed", 0.5, 0.99),
    ])  # fmt: skip
    best = study_summary(df, TARGET, "max").best
    record.log_summary(parent, study_summary(df, TARGET, "max"))
    run = record.client.get_run(parent)
    m, tags = run.data.metrics, run.data.tags
    half = T_2 * 0.02 / math.sqrt(3)  # s = 0.02 over 3 replicates
    assert m["study/trials"] == 7 and m["study/trials_finished"] == 6
    assert m["study/best_mean"] == pytest.approx(0.82) and m["study/best_n"] == 3
    assert m["study/best_ci_low"] == pytest.approx(0.82 - half)
    assert m["study/best_ci_high"] == pytest.approx(0.82 + half)
    assert tags["study.best_point_id"] == "p0" == best.point_id
    assert json.loads(tags["study.best_factors"]) == {"temperature": 0.1}
    assert tags["study.target_metric"] == TARGET and tags["study.target_mode"] == "max"
    assert run.data.params["target_metric"] == TARGET and run.data.params["target_mode"] == "max"

    # a later best point of one replicate: its interval is none, and the earlier one goes
    later = pd.concat([df, _results([("p2", "finished", 0.3, 0.95)])], ignore_index=True)
    record.log_summary(parent, study_summary(later, TARGET, "max"))
    m = record.client.get_run(parent).data.metrics
    assert m["study/best_mean"] == pytest.approx(0.95) and m["study/best_n"] == 1
    assert math.isnan(m["study/best_ci_low"]) and math.isnan(m["study/best_ci_high"])


def test_a_summary_of_the_same_trials_is_not_written_twice(recorded, tmp_path):
    record, _, _, parent, _ = recorded
    df = _results([("p0", "finished", 0.1, 0.80), ("p0", "finished", 0.1, 0.84)])
    record.log_summary(parent, study_summary(df, TARGET, "max"))
    # the study resumed: the same export
    record.log_summary(parent, study_summary(df, TARGET, "max"))
    assert duplicated_metric_rows(tmp_path / "mlflow.db") == []
    history = record.client.get_metric_history(parent, "study/best_mean")
    assert [(m.step, m.value) for m in history] == [(2, pytest.approx(0.82))]
    # the same count of finished trials with another value: one step further, never a twin row
    changed = _results([("p0", "finished", 0.1, 0.80), ("p0", "finished", 0.1, 0.90)])
    record.log_summary(parent, study_summary(changed, TARGET, "max"))
    history = record.client.get_metric_history(parent, "study/best_mean")
    assert sorted((m.step, round(m.value, 6)) for m in history) == [(2, 0.82), (3, 0.85)]
    assert record.client.get_run(parent).data.metrics["study/best_mean"] == pytest.approx(0.85)
    assert duplicated_metric_rows(tmp_path / "mlflow.db") == []


def test_one_replicate_logs_no_interval_and_nothing_finished_logs_no_best(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec = _spec("single", replicates=1)
    record = StudyRecord(uri, spec.study, tmp_path / "artifacts")
    parent = record.start_parent(spec, build_design(spec), "text")
    record.log_summary(
        parent, study_summary(_results([("p0", "finished", 0.1, 0.9)]), TARGET, "max")
    )
    metrics = record.client.get_run(parent).data.metrics
    assert metrics["study/best_mean"] == 0.9
    assert not {"study/best_ci_low", "study/best_ci_high"} & set(metrics)

    other = StudyRecord(uri, "none-finished", tmp_path / "artifacts")
    spec = _spec("none-finished")
    parent = other.start_parent(spec, build_design(spec), "text")
    failed = pd.DataFrame({"point_id": ["p0"], "status": ["failed"]})
    summary = study_summary(failed, TARGET, "max")
    assert summary.best is None
    other.log_summary(parent, summary)
    run = other.client.get_run(parent)
    assert run.data.metrics == {"study/trials": 1.0, "study/trials_finished": 0.0}
    assert "study.best_point_id" not in run.data.tags


def test_the_parent_description_can_be_rewritten_with_findings(recorded):
    record, _, _, parent, _ = recorded
    record.set_parent_note(parent, "**Finding:** τ = 0.1 wins.")
    assert record.client.get_run(parent).data.tags[NOTE] == "**Finding:** τ = 0.1 wins."
    with pytest.raises(ValueError, match="at most 8000 characters"):
        record.set_parent_note(parent, "x" * 8001)


def test_a_trials_evidence_lands_in_its_run_as_csv_json_and_png(recorded, tmp_path):
    """finish_trial with the evidence a trial returns: the tables as CSV, the whole as
    JSON, the source-return panel as PNG; a trial without evidence logs no evidence/ folder."""
    import base64
    import csv
    import io

    from PIL import Image

    from study import EVIDENCE_KEY

    record, _, design, _, runs = recorded
    first, second = (runs[p.key] for p in design.trials[:2])
    buffer = io.BytesIO()
    Image.new("RGB", (5, 4)).save(buffer, format="PNG")
    png = buffer.getvalue()
    evidence = {
        "per_class": [{"space": "z", "class": 0, "n": 3, "align": 0.25, "uniform": -1.5},
                      {"space": "z", "class": 1, "n": 2, "align": 0.5, "uniform": None}],
        "per_group": [],
        "source_return": [{"anchor": 0, "role": "positive", "similarity": 0.9,
                           "false_negative": False}],
        "source_return_png": base64.b64encode(png).decode(),
    }  # fmt: skip
    record.finish_trial(first, {"status": "finished", "examples_seen": 1536,
                                EVIDENCE_KEY: json.dumps(evidence)})  # fmt: skip
    record.finish_trial(second, {"status": "finished", "examples_seen": 1536,
                                 EVIDENCE_KEY: json.dumps({})})  # fmt: skip
    listed = {a.path for a in record.client.list_artifacts(first, "evidence")}
    assert listed == {"evidence/evidence.json", "evidence/per_class.csv",
                      "evidence/source_return.csv", "evidence/source_return.png"}  # fmt: skip
    local = Path(record.client.download_artifacts(first, "evidence", str(tmp_path)))
    assert (local / "source_return.png").read_bytes() == png
    with open(local / "per_class.csv") as table:
        rows = list(csv.DictReader(table))
    assert rows == [
        {"space": "z", "class": "0", "n": "3", "align": "0.25", "uniform": "-1.5"},
        {"space": "z", "class": "1", "n": "2", "align": "0.5", "uniform": ""},
    ]
    whole = json.loads((local / "evidence.json").read_text())
    assert whole["per_class"] == evidence["per_class"] and "source_return_png" not in whole
    assert record.client.list_artifacts(second, "evidence") == []


@pytest.mark.parametrize(
    "fields",
    [{}, {"dataset": "toy", "toy_photos_per_item": 3, "linear_probe": False,
          "augmentation": "noise", "encoder": "mlp"}, {"objective": "align_uniform", "lam_t": 1.0}],
)  # fmt: skip
def test_every_metric_a_trial_reports_is_one_the_record_keeps(fields):
    """The driver logs a result's values whose names start with METRIC_PREFIXES: every name a
    trial can report (final_metrics: evaluations, the final evidence, times) must pass, or it
    silently never reaches MLflow (shift/ once did not)."""
    from study.record import METRIC_PREFIXES
    from trainables.metrics import final_metrics

    names = [n for n in final_metrics(TrialConfig(**fields)) if "/" in n]
    assert any(n.startswith("shift/") for n in names)
    assert [n for n in names if not n.startswith(METRIC_PREFIXES)] == []


CREATE = """
import sys, time
from pathlib import Path
from study.record import StudyRecord
go, uri, name = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
while not go.exists():
    time.sleep(0.005)
StudyRecord(uri, name)
"""
READ = """
import sys, time
from pathlib import Path
from mlflow.tracking import MlflowClient
from analysis.reading.load import store_exists
go, uri = Path(sys.argv[1]), sys.argv[2]
while not go.exists():
    time.sleep(0.005)
while not store_exists(uri):
    time.sleep(0.001)
print(sorted(e.name for e in MlflowClient(uri).search_experiments()))
"""


def _python(script: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", script, *args], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip


def test_a_new_store_opened_by_several_processes_at_once_is_created_whole_once(tmp_path):
    """Two drivers create the same new embedded store at the same moment while a reader opens it
    the instant it appears: MLflow alone runs its migrations in each process at once and they
    fail ('table experiments already exists', 'Online migration expected to match one row'). Each
    creator records its study, and the reader finds a complete store (its Default experiment)."""
    go, uri = tmp_path / "go", f"sqlite:///{tmp_path / 'shared.db'}"
    procs = [_python(CREATE, str(go), uri, "s0"), _python(CREATE, str(go), uri, "s1"),
             _python(READ, str(go), uri)]  # fmt: skip
    time.sleep(4)  # every process has imported MLflow and waits for the start
    go.touch()
    outputs = [p.communicate(timeout=120) for p in procs]
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err[-2000:]
    assert "Default" in outputs[-1][0]
    names = sorted(e.name for e in MlflowClient(uri).search_experiments())
    assert names == ["Default", "s0", "s1"]
    left = sorted(p.name for p in tmp_path.iterdir() if not sqlite_companion(p))
    assert left == ["go", "shared.db"]  # no partial left


def test_a_store_half_built_by_a_killed_creator_is_removed_and_a_live_ones_kept(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    left = tmp_path / f".s.db.{dead}.1.partial"
    building = tmp_path / f".s.db.{os.getpid()}.2.partial"  # another thread of a live process
    left.write_bytes(b"half")
    building.write_bytes(b"half")
    create_store(f"sqlite:///{tmp_path / 's.db'}")
    assert sorted(p.name for p in tmp_path.iterdir()) == [building.name, "s.db"]


def test_a_study_recorded_into_an_empty_file_makes_it_a_whole_store(tmp_path):
    (tmp_path / "s.db").touch()
    uri = f"sqlite:///{tmp_path / 's.db'}"
    StudyRecord(uri, "first")
    assert sorted(e.name for e in MlflowClient(uri).search_experiments()) == ["Default", "first"]
    assert [p.name for p in tmp_path.iterdir() if not sqlite_companion(p)] == ["s.db"]


def test_a_study_created_by_another_driver_between_look_and_creation_is_opened(
    tmp_path, monkeypatch
):
    """Two drivers of one study start together: both find no experiment, and the second's
    creation meets the first's (MLflow: RESOURCE_ALREADY_EXISTS); it opens the first's
    experiment, and the lease then refuses one of them."""
    import study.record as record_module

    uri = f"sqlite:///{tmp_path / 's.db'}"
    first = StudyRecord(uri, "same")
    looks = []

    def before_the_first_created_it(client, name):  # its look came before the first's creation
        looks.append(name)
        return None

    monkeypatch.setattr(record_module, "find_experiment", before_the_first_created_it)
    second = StudyRecord(uri, "same")
    assert looks == ["same"]
    assert second.experiment_id == first.experiment_id


def test_threads_of_one_process_creating_a_store_at_once_take_turns(tmp_path):
    """Alembic keeps the migration's context in a module global: two threads that migrated at
    once failed with KeyError: 'config'."""
    uris = [f"sqlite:///{tmp_path / f's{i}.db'}" for i in range(3)]
    with ThreadPoolExecutor(3) as pool:
        list(pool.map(create_store, uris))
    for uri in uris:
        assert [e.name for e in MlflowClient(uri).search_experiments()] == ["Default"]


def _store_contents(path: Path) -> dict:
    """Every table's schema (its clauses in any order: MLflow's own builds order a table's
    constraints differently from one build to the next) and rows, the Default experiment's times
    left out."""
    import sqlite3

    db = sqlite3.connect(path)
    tables = {name: sql for name, sql in db.execute("SELECT name, sql FROM sqlite_master")}
    clauses = {name: sorted(line.strip().rstrip(",") for line in (sql or "").splitlines())
               for name, sql in tables.items()}  # fmt: skip
    rows = {
        name: sorted(map(repr, db.execute(f'SELECT * FROM "{name}"')))
        for name, sql in tables.items()
        if sql and sql.startswith("CREATE TABLE") and name != "experiments"
    }
    rows["experiments"] = list(db.execute(
        "SELECT experiment_id, name, artifact_location, lifecycle_stage, workspace, "
        "creation_time = last_update_time FROM experiments"))  # fmt: skip
    db.close()
    return {"schema": clauses, "rows": rows}


def test_a_store_copied_from_the_template_is_the_store_mlflow_builds(tmp_path, monkeypatch):
    """The first new store is MLflow's own, kept as the template; the next, a copy made in
    another folder, holds what MLflow would have built there: the same schema, the same rows,
    the Default experiment's artifacts under that folder, created now."""
    from study.store_template import template_path

    monkeypatch.setenv("CONTRASTIVE_STORE_CACHE", str(tmp_path / "cache"))
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    monkeypatch.chdir(first)
    create_store(f"sqlite:///{first / 'a.db'}")
    assert template_path().is_file()
    monkeypatch.chdir(second)
    before = time.time() * 1000
    create_store(f"sqlite:///{second / 'copied.db'}")
    (tmp_path / "cache").rename(tmp_path / "away")  # no template: MLflow builds the reference
    MlflowClient(f"sqlite:///{second / 'built.db'}").search_experiments()
    copied, built = _store_contents(second / "copied.db"), _store_contents(second / "built.db")
    assert copied == built
    assert copied["rows"]["experiments"][0][2] == str(second / "mlruns" / "0")
    created = MlflowClient(f"sqlite:///{second / 'copied.db'}").get_experiment("0").creation_time
    assert before <= created <= time.time() * 1000


def test_a_template_that_is_no_store_is_not_used_and_is_built_anew(tmp_path, monkeypatch):
    from study.store_template import template_path

    monkeypatch.setenv("CONTRASTIVE_STORE_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    template_path().parent.mkdir(parents=True)
    template_path().write_bytes(b"SQLite format 3\x00 but cut short")
    uri = f"sqlite:///{tmp_path / 's.db'}"
    StudyRecord(uri, "after")
    assert sorted(e.name for e in MlflowClient(uri).search_experiments()) == ["Default", "after"]
    assert _store_contents(template_path())["rows"]["experiments"][0][1] == "Default"
