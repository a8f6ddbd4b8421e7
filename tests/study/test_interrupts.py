"""Any stop of ``study run`` by a signal (SIGINT to the driver's process group, as Ctrl-C sends it;
SIGTERM to the group or to the driver alone, as Slurm, Kubernetes or a spot instance stop a job;
SIGHUP to the group, as a closed terminal does): the trials stop, every run that was not finished
ends KILLED (never RUNNING or SCHEDULED), nothing partial is presented as the study's result, the
product prints its own resume command, and the exit status is 128 + the signal's number (130,
143, 129), never an abort; running the same command again resumes from the checkpoints."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest
from studykit import (
    STUDY,
    checkpoints,
    child_runs,
    parent_runs,
    start_driver,
    wait_for,
    write_spec,
)

NAME = "interrupted"
# The drivers' grace before the watchdog ends the runs itself (20 s by default): a SIGTERM or a
# SIGHUP to the process group kills Ray's GCS and leaves the driver waiting, so the watchdog ends
# those stops; 6 s of it is the same path, 14 s sooner, and still longer than a driver that can
# clean up takes to do so.
GRACE = {"CONTRASTIVE_STOP_GRACE_S": "6"}


STOPS = [
    pytest.param(signal.SIGINT, True, id="SIGINT-group"),  # a terminal's Ctrl-C
    pytest.param(signal.SIGTERM, True, id="SIGTERM-group"),  # Slurm's scancel, a job's end
    pytest.param(signal.SIGTERM, False, id="SIGTERM-driver"),  # Kubernetes, kill PID
    pytest.param(signal.SIGHUP, True, id="SIGHUP-group"),  # the terminal closed
]


def interrupt(process: subprocess.Popen, signum=signal.SIGINT, group=True) -> tuple[str, str]:
    (os.killpg if group else os.kill)(process.pid, signum)
    return process.communicate(timeout=180)


def said(signum) -> str:
    by = "" if signum == signal.SIGINT else f" by {signal.Signals(signum).name}"
    return f"interrupted: study 'interrupted' interrupted{by}"


def statuses(uri: str) -> set[str]:
    return {r.info.status for r in [*child_runs(uri, NAME), *parent_runs(uri, NAME)]}


@pytest.mark.long
@pytest.mark.slow
# Two trials, the second still waiting when the first is interrupted (its run must end KILLED,
# not SCHEDULED). How a data-parallel trial stops is tested with its study, in
# tests/study/test_data_parallel_study.py: each more of its trials costs seconds of Ray Train's
# actors starting. One study for both interrupts (each driver costs a Ray start): the resumed
# run, drawing its figures, is interrupted again while its report is written.
@pytest.mark.parametrize(("signum", "group"), STOPS)
def test_an_interrupt_during_the_trials_or_the_report_kills_what_is_unfinished_and_resumes(
    workdir, ray_tmp, signum, group
):
    levels = [0.1, 0.5]
    spec = write_spec(workdir / "s.yaml", NAME, factors={"temperature": {"levels": levels}},
                      trial={"budget_examples": 128 * 24, "batch_size": 128, "eval_marks": 6},
                      max_concurrent=1, resources={"workers": 1, "cpu": 1})  # fmt: skip
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    command, first = start_driver(spec, workdir, uri, STUDY, env=os.environ | GRACE)
    trial_dir = workdir / "studies" / NAME / "trials" / "p000-r0"
    wait_for(lambda: len(checkpoints(trial_dir)) >= 1, 180, "a first checkpoint", first)
    out, err = interrupt(first, signum, group)
    assert first.returncode == 128 + signum, err[-3000:]
    assert f"{said(signum)}: its trials were stopped" in err
    # the same command, resumed: its options kept
    assert f"{STUDY} run {spec} --no-figures" in err and "Tuner.restore" not in out + err
    assert statuses(uri) <= {"KILLED", "FINISHED"} and "KILLED" in statuses(uri)
    assert not (workdir / "studies" / NAME / "results.parquet").exists()  # nothing partial
    assert "Highest" not in out and "report:" not in out

    # resumed with its figures (seconds of drawing: a wide window), interrupted in the report
    staging = workdir / "tmp"
    staging.mkdir()
    _, second = start_driver(spec, workdir, uri, STUDY, figures=True,
                             env=os.environ | GRACE | {"TMPDIR": str(staging)})  # fmt: skip
    wait_for(lambda: list(staging.glob("study-out-*")), 400, "the export to begin", second)
    _, err = interrupt(second, signum, group)
    assert second.returncode == 128 + signum, err[-3000:]
    assert said(signum) in err and f"{STUDY} run {spec}" in err
    (parent,) = parent_runs(uri, NAME)
    assert parent.info.status == "KILLED"  # the study's run did not complete
    assert {r.info.status for r in child_runs(uri, NAME)} == {"FINISHED"}  # its trials did
    assert not (workdir / "studies" / NAME / "report").exists()

    again = subprocess.run(command, cwd=workdir, capture_output=True, text=True, timeout=400)
    assert again.returncode == 0, again.stderr[-3000:]
    runs = {r.data.tags["study.trial_key"]: r for r in child_runs(uri, NAME)}
    assert {r.info.status for r in runs.values()} == {"FINISHED"} and len(runs) == len(levels)
    assert runs["p000-r0"].data.metrics["trial/resumed_from"] > 0  # from its checkpoint
    assert parent_runs(uri, NAME)[0].info.status == "FINISHED"
    assert (workdir / "studies" / NAME / "report" / "report.html").is_file()
