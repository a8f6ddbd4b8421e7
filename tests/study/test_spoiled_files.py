"""Every file the product reads back, spoiled (truncated, overwritten with garbage, deleted):
each is named with what was done instead, and nothing is lost. Real ``study`` CLI subprocesses on
a real MLflow store (a study recorded in a second by tests/kits/recordkit.py where no training is
needed; a tiny real study, interrupted, for a trial's checkpoints)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from recordkit import NAME, record_study
from studykit import STUDY, child_runs, start_driver, wait_for, write_spec

from analysis.reading.load import load_outcomes

HELD_OUT = 200  # items each planted trial's outcomes cover
# the driver's grace before its watchdog ends the runs itself (tests/study/test_interrupts.py)
GRACE = {"CONTRASTIVE_STOP_GRACE_S": "6"}


def spoil(path: Path, how: str) -> None:
    """Truncate ``path`` to half, overwrite it with garbage bytes, or delete it."""
    if how == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif how == "garbage":
        path.write_bytes(b"\x00\xffnot what was written\n" * 40)
    else:
        path.unlink()


def study_cli(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([STUDY, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def trial_outcomes_file(uri: str, key: str) -> tuple[str, Path]:
    """(run id, its outcomes file) of the planted trial ``key``."""
    (run,) = [r for r in child_runs(uri, NAME) if r.data.tags["study.trial_key"] == key]
    folder = Path(run.info.artifact_uri.removeprefix("file://"))
    return run.info.run_id, folder / "evidence" / "outcomes.parquet"


@pytest.mark.parametrize("how", ["truncated", "garbage", "deleted"])
def test_a_spoiled_outcomes_file_is_named_and_the_best_point_keeps_its_line(tmp_path, how):
    uri = record_study(tmp_path, outcomes=HELD_OUT)
    # a replicate of the best point (p001, temperature 0.1 and batch size 256): its interval
    # can no longer count the items, and must say so rather than vanish
    run_id, victim = trial_outcomes_file(uri, "p001-r1")
    spoil(victim, how)

    out = tmp_path / "out"
    done = study_cli("report", NAME, "--no-figures", "--tracking-uri", uri, "--out", str(out),
                     cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    problem = "are missing" if how == "deleted" else "cannot be read"
    best = next(line for line in done.stdout.splitlines() if line.startswith("Highest"))
    assert "observed at p001" in best and "95% interval" in best
    assert f"counting seeds only (the per-item outcomes of p001-r1 {problem})" in best
    assert f"Note: The per-item outcomes of p001-r1 ({victim}) {problem}" in done.stdout

    report = json.loads((out / "report.json").read_text())
    (unread,) = report["unread_files"]
    assert (unread["system"], unread["run_id"], unread["file"]) == ("p001-r1", run_id, str(victim))
    assert (unread["problem"] == "missing") == (how == "deleted")
    assert report["best_point"]["point_id"] == "p001" and report["best_point"]["ci_low"]
    assert report["headline"]["notes"] and str(victim) in report["headline"]["notes"][0]
    assert str(victim) in (out / "report.html").read_text()
    parent = next(r for r in MlflowClient(uri).search_runs(
        [MlflowClient(uri).get_experiment_by_name(NAME).experiment_id],
        filter_string="tags.`study.role` = 'parent'"))  # fmt: skip
    assert "p001-r1" in parent.data.tags["mlflow.note.content"]
    # the other seven trials' outcomes are still read and used
    found = load_outcomes(NAME, uri)
    assert len(found.trials) == 7 and run_id not in found.trials
    assert report["measurement"]["items"] == HELD_OUT


def complete_checkpoints(trial_dir: Path) -> list[Path]:
    """The trial's complete checkpoints, oldest first (one set aside is none of them)."""
    return sorted(
        p
        for p in trial_dir.glob("checkpoint_*")
        if re.fullmatch(r"checkpoint_\d+", p.name) and (p / "DONE").is_file()
    )


@pytest.mark.slow
@pytest.mark.parametrize("how", ["truncated", "garbage"])
def test_a_spoiled_checkpoint_is_set_aside_and_the_trial_resumes_from_the_one_before(
    workdir, ray_tmp, how
):
    name = "spoiled-checkpoint"
    spec = write_spec(workdir / "s.yaml", name, factors={"temperature": {"levels": [0.1, 0.5]}},
                      trial={"budget_examples": 128 * 24, "batch_size": 128, "eval_marks": 6},
                      resources={"workers": 1, "cpu": 1})  # fmt: skip
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    command, first = start_driver(spec, workdir, uri, STUDY, env=os.environ | GRACE)
    trial_dir = workdir / "studies" / name / "trials" / "p000-r0"
    wait_for(lambda: len(complete_checkpoints(trial_dir)) >= 2, 300, "two checkpoints", first)
    os.killpg(first.pid, signal.SIGINT)  # Ctrl-C: the trial has to resume
    _, err = first.communicate(timeout=180)
    assert first.returncode == 130, err[-3000:]
    *_, before, newest = complete_checkpoints(trial_dir)
    spoil(newest / "trial.pt", how)

    again = subprocess.run(command, cwd=workdir, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    aside = trial_dir / f"{newest.name}.unreadable"
    said = f"trial p000-r0: checkpoint {newest} cannot be loaded"
    assert said in again.stderr and f"set aside as {aside}" in again.stderr
    step = int(before.name.removeprefix("checkpoint_"))
    assert f"resumed from the checkpoint before it ({step} examples seen)" in again.stderr
    assert aside.is_dir() and (aside / "trial.pt").is_file()  # kept, never read again
    runs = {r.data.tags["study.trial_key"]: r for r in child_runs(uri, name)}
    assert {r.info.status for r in runs.values()} == {"FINISHED"}
    resumed = runs["p000-r0"]
    assert resumed.data.metrics["trial/resumed_from"] == step
    assert "set aside as" in resumed.data.tags["study.resume_note"]
    assert "Checkpoint:" in resumed.data.tags["mlflow.note.content"]


@pytest.mark.parametrize("how", ["truncated", "garbage"])
def test_a_spoiled_lease_file_is_set_aside_named_and_the_lease_taken(workdir, capsys, how):
    """A lease file no driver wrote (every driver writes it whole): never read as a lease,
    never replaced in silence."""
    from study.lease import LEASE_FILE, StorageLease, study_lease
    from study.record import StudyRecord
    from study.storage import open_storage

    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    study = open_storage(workdir / "studies").sub("leased")
    lease_file = workdir / "studies" / "leased" / LEASE_FILE
    lease_file.parent.mkdir(parents=True)
    whole = '{"beat": 1, "host": "h", "pid": 1, "since": 1, "token": "t"}'
    spoiled = whole[:20] if how == "truncated" else "\x00\xff garbage"
    lease_file.write_text(spoiled)
    with study_lease(study, uri, "leased", lambda: StudyRecord(uri, "leased")) as held:
        assert StorageLease(study).read().token == held.me.token
    aside = lease_file.with_name(f"{LEASE_FILE}.unreadable")
    assert aside.read_text() == spoiled  # its bytes kept
    err = capsys.readouterr().err
    assert f"the lease file {lease_file} holds no lease a driver wrote" in err
    assert f"set aside as {LEASE_FILE}.unreadable, the study's lease is taken afresh" in err


@pytest.mark.slow
def test_spoiled_results_and_reports_of_a_finished_study_are_named_and_written_again(workdir):
    """``study run`` of a finished study answers from its stored report only when every file
    that answer rests on reads; each that does not is named, and written again."""
    from studykit import parent_runs

    from analysis.reading.load import read_results
    from analysis.reading.store import local_folder

    name = "spoiled-rerun"
    spec = write_spec(workdir / "tiny.yaml", name,
                      factors={"temperature": {"levels": [0.1, 0.5], "scale": "log"}})  # fmt: skip
    uri = f"sqlite:///{workdir / 'mlflow.db'}"

    def rerun() -> subprocess.CompletedProcess:
        done = study_cli("run", str(spec), "--no-figures", "--tracking-uri", uri, cwd=workdir,
                         timeout=600)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    rerun()
    folder = workdir / "studies" / name
    results, report_json = folder / "results.parquet", folder / "report" / "report.json"
    (parent,) = parent_runs(uri, name)
    stored = local_folder(parent.info.artifact_uri) / "report" / "report.json"
    instead = "the results and the report are written again from the record"

    spoil(results, "truncated")
    spoil(report_json, "garbage")
    again = rerun()
    assert f"{results} cannot be read (not a whole Parquet file" in again.stderr
    assert f"{report_json} cannot be read (UnicodeDecodeError" in again.stderr
    assert again.stderr.count(instead) == 2
    assert "the findings below are the stored report's" not in again.stdout  # not from them
    assert len(read_results(results)) == 2 and json.loads(report_json.read_text())["headline"]

    spoil(stored, "truncated")  # the report the finished-study answer is read from
    again = rerun()
    assert f"the stored report's {stored} cannot be read (JSONDecodeError" in again.stderr
    assert instead in again.stderr and json.loads(stored.read_text())["headline"]

    spoil(results, "deleted")
    again = rerun()
    assert f"{results} is missing: {instead}" in again.stderr and results.is_file()
    quiet = rerun()  # all whole again: the stored answer, and nothing named
    assert "the findings below are the stored report's" in quiet.stdout and not quiet.stderr

    spoil(stored, "garbage")  # the cheap `study report --json`: named on stderr, made afresh
    done = study_cli("report", name, "--json", "--no-figures", "--tracking-uri", uri, cwd=workdir)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"the stored report's {stored} cannot be read" in done.stderr
    assert "the report is made afresh from the record" in done.stderr
    assert json.loads(done.stdout)["n_trials"] == 2


@pytest.mark.parametrize("how", ["truncated", "garbage"])
def test_a_spoiled_results_file_given_to_report_is_refused_naming_it_and_the_way_back(
    tmp_path, how
):
    uri = record_study(tmp_path)
    results = tmp_path / "results.parquet"
    exported = study_cli("export", NAME, "--out", str(results), "--tracking-uri", uri, cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr[-3000:]
    spoil(results, how)
    done = study_cli("report", "--results", str(results), "--out", str(tmp_path / "out"),
                     cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"{results}: not a Parquet file" in done.stderr
    assert "`study export STUDY --out FILE` writes the file again" in done.stderr
    assert not (tmp_path / "out").exists()
