"""The record reads back exactly, a finished study is never lost, and every command the product
prints runs when pasted. Real MLflow (SQLite), real Ray, real bash.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient
from studykit import child_runs, parent_runs, stop_group, wait_healthy, write_spec

from analysis.reading.load import load_study, read_results
from analysis.reading.record import TRIAL_CONFIG_TAG, results_table
from search_spaces.designs import build_design
from search_spaces.spec import StudyError, parse_spec
from study.commands import shell_command, ui_command
from study.ending import StudyFailedError
from study.export import export_parquet
from study.record import StudyRecord
from study.runner import run_study
from trainables.config import TrialConfig

STUDY = str(Path(sys.executable).with_name("study"))
ENV = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}

# Strings a user can type that a text parser would turn into something else.
TRICKY_TEXT = [
    "20240501", "0x1F", "017", "1e-4", ".5", "1_000", "yes", "on", "off", "No", "True", "null",
    "None", "~", "2024-05-01", "1:20", "a #b", "lab notes #3 (50%)", " padded ", "[1, 2]",
    "{a: 1}", "'quoted'", "ünïcode", "$HOME", "",
]  # fmt: skip

# Every TrialConfig field away from its default (a value of the field's type in every case).
EVERY_FIELD = {
    "dataset": "toy", "data_root": "20240501", "download": True, "data_checksums": False,
    "data_seed": 7, "image_size": 24, "heldout_size": 111, "probe_train_size": 222,
    "toy_classes": 5, "toy_dim": 9, "toy_spread": 0.25, "toy_noise": 0.125,
    "toy_train_size": 1000, "toy_photos_per_item": 3, "encoder": "mlp", "mlp_hidden": (64, 32),
    "cnn_width": 16, "cnn_grid": 2, "crop_area_min": 0.3,
    "activation": "tanh", "feature_dim": 17, "projection": "linear", "projection_hidden": 33,
    "projection_dim": 12, "objective": "align_uniform", "temperature": 0.3, "lam_t": 1e-4,
    "uniform_t": 3.0, "align_alpha": 1.5, "group_policy": "mask", "batch_size": 96,
    "budget_examples": 96 * 40, "optimizer": "sgd", "base_lr": 5e-2, "lr_scaling": "sqrt",
    "momentum": 0.5, "weight_decay": 0.0, "warmup_fraction": 0.1, "schedule": "constant",
    "augmentation": "noise", "aug_strength": 0.7, "eval_marks": 5,
    "eval_at_start": True, "knn_k": 7, "knn_temperature": 0.2, "linear_probe": False,
    "linear_probe_iters": 9, "collapse_std": 0.001, "seed": 3, "device": "cpu",
    "precision": "bf16", "num_workers": 2, "compile": "off", "workers": 2, "negatives": "local",
    "sync_bn": True,
}  # fmt: skip


def test_every_field_differs_from_its_default():
    config = TrialConfig(**EVERY_FIELD)
    assert set(EVERY_FIELD) == set(TrialConfig.model_fields)
    same = [k for k, f in TrialConfig.model_fields.items() if getattr(config, k) == f.default]
    assert same == []


def _record_of(tmp_path: Path, levels: list) -> tuple[str, list]:
    """A study whose factor is data_root at these levels, recorded in a real SQLite store."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # workers is a resource (the study sets it from resources.workers), not a trial field
    fixed = {k: v for k, v in EVERY_FIELD.items() if k not in ("data_root", "seed", "workers")}
    spec = parse_spec({"study": "round-trip", "trial": fixed,
                       "resources": {"workers": EVERY_FIELD["workers"]},
                       "factors": {"data_root": {"levels": levels}}})  # fmt: skip
    design = build_design(spec)
    record = StudyRecord(uri, spec.study, tmp_path / "artifacts")
    parent = record.start_parent(spec, design, "text")
    for plan in design.trials:
        record.ensure_trial_run(plan, parent, spec.sha)
    return uri, list(design.trials)


def _assert_rows_match(table_rows: list[dict], plans: list) -> None:
    for row, plan in zip(table_rows, plans, strict=True):
        expected = plan.config.model_dump()
        for name, value in expected.items():
            got = row[name]
            got = tuple(json.loads(got)) if isinstance(value, tuple) else got
            assert got == value and type(got) is type(value), (name, got, value)


def test_every_field_and_every_typed_string_reads_back_exactly(tmp_path):
    uri, plans = _record_of(tmp_path, [*TRICKY_TEXT, None])
    rows = results_table(MlflowClient(uri), "round-trip").to_pylist()
    assert [r["data_root"] for r in rows] == [p.config.data_root for p in plans]
    assert {type(r["data_root"]) for r in rows[:-1]} == {str}
    _assert_rows_match(rows, plans)
    assert rows[0]["derived.lam"] == pytest.approx(1e-4 / 3.0)

    # Parquet and the MLflow reader give the same frame, with tuples and the exact text
    path = export_parquet(StudyRecord(uri, "round-trip"), tmp_path / "r.parquet")
    from_file, from_record = read_results(path), load_study("round-trip", uri)
    pd.testing.assert_frame_equal(from_file, from_record)
    assert from_file["data_root"].tolist()[:-1] == TRICKY_TEXT
    assert from_file["mlp_hidden"].tolist()[0] == (64, 32)
    assert from_file["heldout_size"].dtype == "int64" and from_file["lam_t"].dtype == "float64"


def test_records_written_before_the_lossless_tag_read_by_declared_type(tmp_path):
    # a record from before the lossless tag: params only, as the earlier version wrote them
    # ("None" stays None: that text is the one a legacy record cannot tell from the value None)
    legacy = [t for t in TRICKY_TEXT if t != "None"]
    uri, plans = _record_of(tmp_path, legacy)
    client = MlflowClient(uri)
    for run in child_runs(uri, "round-trip"):
        client.delete_tag(run.info.run_id, TRIAL_CONFIG_TAG)
    rows = results_table(client, "round-trip").to_pylist()
    assert [r["data_root"] for r in rows] == legacy
    _assert_rows_match(rows, plans)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def paste(command: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run a printed command exactly as a user pasting it into bash would."""
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=ENV, capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip


def _ui_answers(command: str, cwd: Path) -> int:
    server = subprocess.Popen(["bash", "-c", command], cwd=cwd, env=ENV,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              start_new_session=True)  # fmt: skip
    port = int(re.search(r"--port (\d+)", command).group(1))
    try:
        return wait_healthy(f"http://127.0.0.1:{port}", server)
    finally:
        stop_group(server)


@pytest.mark.long
@pytest.mark.slow
def test_a_finished_study_is_never_lost_and_its_commands_run_when_pasted(
    tmp_path, shared_ray, monkeypatch
):
    # A folder whose name breaks unquoted shell commands, holding the data folder "20240501".
    home = tmp_path / "lab notes #3 (50%)"
    (home / "20240501").mkdir(parents=True)
    monkeypatch.chdir(home)
    spec = write_spec(home / "s.yaml", "kept", factors={"temperature": {"levels": [0.1, 0.5]}},
                      trial={"data_root": "20240501", "budget_examples": 512,
                             "eval_marks": 1})  # fmt: skip
    assert "data_root: '20240501'" in spec.read_text()  # quoted: bare, YAML reads it as a number
    uri = f"sqlite:///{home / 'mlflow.db'}"
    storage = home / "studies"
    blocker = storage / "kept" / "results.parquet"
    (blocker / "x").mkdir(parents=True)  # the export cannot write its file: a folder is there

    with pytest.raises(StudyFailedError) as caught:
        run_study(spec, tracking_uri=uri, storage=storage, quiet=True, figures=False)
    message = str(caught.value)
    assert "Nothing logged was lost" in message
    runs = child_runs(uri, "kept")
    assert len(runs) == 2 and {r.info.status for r in runs} == {"FINISHED"}
    assert parent_runs(uri, "kept")[0].info.status == "FAILED"  # not left RUNNING

    # the printed export command, pasted, writes the file once the obstacle is gone
    (blocker / "x").rmdir()
    blocker.rmdir()
    export = next(line.split("Export again with: ", 1)[1] for line in message.splitlines()
                  if "Export again with: " in line)  # fmt: skip
    done = paste(export, home)
    assert done.returncode == 0, done.stderr[-2000:]
    frame = read_results(blocker)
    assert frame["data_root"].tolist() == ["20240501", "20240501"]
    assert set(frame["status"]) == {"finished"}

    # running the study again relaunches nothing, exports, reports and finishes the parent
    again = run_study(spec, tracking_uri=uri, storage=storage, quiet=True, figures=False)
    assert again.ok and again.launched == 0
    assert parent_runs(uri, "kept")[0].info.status == "FINISHED"
    assert (storage / "kept" / "report" / "report.html").is_file()

    # the MLflow UI command printed at the end of `study run` starts the UI when pasted
    port = _free_port()
    command = ui_command(uri, port)
    assert command.startswith("MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false " + shell_command(
        str(Path(sys.executable).with_name("mlflow"))))  # fmt: skip
    assert command.endswith("--workers 1")
    assert _ui_answers(command, home) == 200

    # the experiment deleted in the UI: refused before anything is written; the printed
    # restore command, pasted, brings it back and the study runs again
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("kept")
    client.delete_experiment(experiment.experiment_id)
    with pytest.raises(StudyError) as refused:
        run_study(spec, tracking_uri=uri, storage=storage, quiet=True, figures=False)
    assert f"MLflow experiment (id {experiment.experiment_id}) was deleted" in str(refused.value)
    status = subprocess.run([STUDY, "status", "kept", "--tracking-uri", uri], cwd=home,
                            capture_output=True, text=True, env=ENV)  # fmt: skip
    assert status.returncode == 2 and "was deleted" in status.stderr
    restore = str(refused.value).split("Restore it to resume the study: ", 1)[1].split(" — ")[0]
    assert paste(restore, home).returncode == 0
    assert run_study(spec, tracking_uri=uri, storage=storage, quiet=True, figures=False).ok

    # the parent run deleted: refused, and its printed restore command works
    parent = parent_runs(uri, "kept")[0].info.run_id
    client.delete_run(parent)
    with pytest.raises(StudyError, match=f"its parent run {parent} was deleted") as refused:
        run_study(spec, tracking_uri=uri, storage=storage, quiet=True, figures=False)
    assert paste(str(refused.value).split("resume the study: ", 1)[1], home).returncode == 0
    assert run_study(spec, tracking_uri=uri, storage=storage, quiet=True, figures=False).ok
    assert len(child_runs(uri, "kept")) == 2 and len(parent_runs(uri, "kept")) == 1


def test_an_experiment_of_that_name_holding_other_runs_is_refused(workdir):
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    client = MlflowClient(uri)
    client.create_run(client.create_experiment("default-digits"))
    before = len(
        client.search_runs([client.get_experiment_by_name("default-digits").experiment_id])
    )
    with pytest.raises(StudyError, match="holds runs that are not this study's"):
        run_study(None, tracking_uri=uri, storage=workdir / "studies", quiet=True, figures=False)
    after = client.search_runs([client.get_experiment_by_name("default-digits").experiment_id])
    assert len(after) == before == 1


def test_a_driver_that_fails_leaves_nothing_running_and_says_what_to_run(
    workdir, monkeypatch, shared_ray
):
    """Tune itself failing mid-study (here: a launch that raises once its trials run)."""
    import study.runner as runner

    def failing_launch(spec, schedule, record, parent_id, **kw):
        for plan in schedule.known:
            record.begin_attempt(record.ensure_trial_run(plan, parent_id, spec.sha))
        raise runner.StudyFailedError("Ray Tune failed: TuneError: a trial reported nothing")

    monkeypatch.setattr(runner, "launch", failing_launch)
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    with pytest.raises(StudyFailedError) as caught:
        run_study(
            None,
            smoke=True,
            tracking_uri=uri,
            storage=workdir / "studies",
            quiet=True,
            figures=False,
        )
    runs = child_runs(uri, "default-digits-smoke")
    assert len(runs) == 4 and {r.info.status for r in runs} == {"FAILED"}
    assert parent_runs(uri, "default-digits-smoke")[0].info.status == "FAILED"
    message = str(caught.value)
    assert "none is left RUNNING" in message
    status = message.split("See its trials: ", 1)[1].splitlines()[0]
    shown = paste(status, workdir)
    assert shown.returncode == 0 and "4 trials: 4 failed" in shown.stdout
    assert [line.split()[1] for line in shown.stdout.splitlines() if line.startswith("p0")] == [
        "failed"
    ] * 4


def test_study_status_export_and_report_refuse_a_deleted_study(workdir):
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    client = MlflowClient(uri)
    client.delete_experiment(client.create_experiment("gone"))
    for argv in (["status", "gone"], ["export", "gone", "--out", "x.parquet"], ["report", "gone"]):
        done = subprocess.run([STUDY, *argv, "--tracking-uri", uri], cwd=workdir,
                              capture_output=True, text=True, env=ENV)  # fmt: skip
        assert done.returncode == 2, (argv, done.stderr[-1000:])
        assert "was deleted" in done.stderr and "experiments restore" in done.stderr
