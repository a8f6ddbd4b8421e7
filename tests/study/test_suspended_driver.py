"""One driver per study, even when one is suspended (Ctrl-Z: SIGSTOP) past the lease's timeout.

Before: a second driver on the same host took the lease of a suspended one ("last heartbeat
28 s ago") although its process was alive; on SIGCONT both ran every trial, both exited 0, and
the store held 204 duplicated metric rows. Now a lease whose process lives on this host is never
taken over; a driver that wakes to find its lease taken by another host stops at once, writing
nothing; and every metric write is idempotent per (run, key, step)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from mlflow.entities import Metric
from studykit import STUDY, child_runs, duplicated_metric_rows, start_driver, wait_for, write_spec

from study.lease import Holder, StorageLease, TrackingLease
from study.record import StudyRecord
from study.storage import open_storage

NAME = "suspended"
# a heartbeat each 0.5 s and a timeout of 4 s: "past the lease's timeout" in seconds
LEASE_ENV = {"CONTRASTIVE_LEASE_HEARTBEAT_S": "0.5", "CONTRASTIVE_LEASE_TIMEOUT_S": "4"}
PAST_TIMEOUT_S = 7


def tiny_study(workdir: Path) -> Path:
    """Three trials, one at a time, each a few evaluations long: a driver stopped mid-study
    has trials left to run on both sides of its suspension."""
    trial = {"budget_examples": 128 * 24, "batch_size": 128, "eval_marks": 4}
    factors = {"temperature": {"levels": [0.1, 0.3, 0.5]}}
    return write_spec(workdir / "s.yaml", NAME, factors=factors, trial=trial)


def first_metrics_logged(uri: str) -> bool:
    """Whether a trial is running and has logged an evaluation."""
    try:
        runs = child_runs(uri, NAME)
    except Exception:  # the store or the experiment not made yet
        return False
    return any(run.info.status == "RUNNING" and run.data.metrics for run in runs)


def snapshot(db: Path) -> dict:
    """Each run's status and end time and its count of metric rows, straight from the store."""
    with sqlite3.connect(db) as con:
        runs = dict(((r, (s, e)) for r, s, e in con.execute(
            "SELECT run_uuid, status, end_time FROM runs")))  # fmt: skip
        counts = dict(con.execute("SELECT run_uuid, COUNT(*) FROM metrics GROUP BY run_uuid"))
    return {run: (*state, counts.get(run, 0)) for run, state in runs.items()}


def signal_driver(driver: subprocess.Popen, signum: int, whole: bool) -> None:
    """``signum`` to the driver's whole process group (as Ctrl-Z stops a job, with the Ray
    processes it started) or to the driver alone (``kill -STOP PID``)."""
    if whole:
        os.killpg(driver.pid, signum)
    else:
        os.kill(driver.pid, signum)


@pytest.fixture(params=["group"])
def stopped_driver(request, workdir, ray_tmp):
    """Driver 1 of the tiny study, stopped once its first trial has logged an evaluation: its
    whole process group (as Ctrl-Z stops a job), or the driver alone where the test's
    ``stopped_driver`` parameter says "alone"; killed whole at the end, whatever happened.
    Yields the store's URI, the driver and a function that wakes it (SIGCONT, to what was
    stopped)."""
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    env = os.environ | LEASE_ENV | {"RAY_TMPDIR": ray_tmp}
    _, driver = start_driver(tiny_study(workdir), workdir, uri, STUDY, env=env)
    try:
        wait_for(lambda: first_metrics_logged(uri), 300, "a trial logged an evaluation", driver)
        whole = request.param == "group"
        signal_driver(driver, signal.SIGSTOP, whole)
        yield uri, driver, lambda: signal_driver(driver, signal.SIGCONT, whole)
    finally:
        with contextlib.suppress(ProcessLookupError):  # a group stopped stays so: end it
            os.killpg(driver.pid, signal.SIGKILL)
        driver.communicate(timeout=30)


@pytest.mark.slow
@pytest.mark.parametrize("stopped_driver", ["group", "alone"], indirect=True)
def test_a_suspended_driver_on_this_host_is_never_taken_over(workdir, stopped_driver):
    """Driver 2 comes past driver 1's timeout: refused (exit 2) naming driver 1's pid and how to
    let it go on; driver 1, woken, finishes alone: every trial ran once, no row doubled."""
    uri, first, wake = stopped_driver
    time.sleep(PAST_TIMEOUT_S)  # driver 1 has not beaten for longer than the timeout
    second = subprocess.run(
        [STUDY, "run", str(workdir / "s.yaml"), "--no-figures", "--tracking-uri", uri,
         "--storage", str(workdir / "studies")],
        cwd=workdir, env=os.environ | LEASE_ENV, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert second.returncode == 2, second.stderr[-3000:]
    assert f"pid {first.pid}" in second.stderr
    assert f"kill -CONT {first.pid}" in second.stderr and "it is stopped" in second.stderr
    assert "took over" not in second.stderr
    wake()
    _, err = first.communicate(timeout=400)
    assert first.returncode == 0, err[-3000:]
    runs = child_runs(uri, NAME)
    assert len(runs) == 3 and {r.info.status for r in runs} == {"FINISHED"}
    assert {r.data.tags["study.attempts"] for r in runs} == {"1"}  # each trial ran once
    assert duplicated_metric_rows(workdir / "mlflow.db") == []


@pytest.mark.slow
def test_a_driver_waking_to_find_its_lease_taken_by_another_host_stops_at_once(
    workdir, stopped_driver
):
    """While driver 1 is stopped past its timeout, a driver on another host takes the study
    (its lease written in both places, as that driver's takeover writes it). Driver 1, woken,
    exits non-zero naming that driver, and writes nothing more: no run ended or changed, no
    metric row added, the other driver's lease left in place."""
    uri, first, wake = stopped_driver
    db = workdir / "mlflow.db"
    time.sleep(PAST_TIMEOUT_S)
    other = Holder("elsewhere", "other-host.example", 4242, time.time(), time.time())
    study = open_storage(workdir / "studies").sub(NAME)
    places = [StorageLease(study), TrackingLease(uri, NAME, lambda: StudyRecord(uri, NAME))]
    for place in places:
        place.write(other)
    before = snapshot(db)
    wake()
    _, err = first.communicate(timeout=120)
    assert first.returncode not in (0, None), err[-3000:]
    assert "host other-host.example, pid 4242" in err and "stopped at once" in err
    assert snapshot(db) == before  # no status, end time or metric row of any run changed
    assert {run.info.status for run in child_runs(uri, NAME)} & {"RUNNING"}  # left as it was
    assert all(place.read() == other for place in places)  # the other driver's lease stays


def test_a_metric_written_twice_at_one_step_is_one_row(workdir):
    """The same evaluation (and the same final metrics) written twice, as a second driver or a
    retried write would: one row per (run, key, step), new steps still written."""
    from search_spaces.designs import build_design
    from search_spaces.spec import load_spec

    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    spec = load_spec(None).model_copy(update={"study": "twice"})
    design = build_design(spec)
    record = StudyRecord(uri, "twice")
    parent = record.start_parent(spec, design, "")
    run_id = record.ensure_trial_run(next(iter(design.representatives())), parent, spec.sha)
    evaluation = {"probe/knn_top1": 0.5, "train/loss": 1.25, "train/examples_seen": 128}
    for _ in range(2):
        record.log_evaluation(run_id, evaluation, step=128)
        record.finish_trial(run_id, {"examples_seen": 128, "wall_s": 3.0, "steps": 1})
    record.log_evaluation(run_id, {**evaluation, "train/loss": 1.0}, step=256)
    assert duplicated_metric_rows(workdir / "mlflow.db") == []
    history = record.client.get_metric_history(run_id, "train/loss")
    assert sorted((int(m.step), m.value) for m in history) == [(128, 1.25), (256, 1.0)]
    repeated = [Metric("train/loss", 9.0, 0, 128), Metric("train/loss", 9.0, 0, 512),
                Metric("train/loss", 8.0, 0, 512)]  # fmt: skip
    assert [(m.step, m.value) for m in record.unlogged(run_id, repeated)] == [(512, 9.0)]


def test_a_lease_of_a_live_process_here_with_a_silent_heartbeat_is_refused(workdir, monkeypatch):
    """The lease check alone: a process of this host, alive (stopped), whose lease has not
    beaten for ten timeouts, is refused naming its pid; the same pid recorded with another
    start (a pid reused by a later process) is taken over."""
    from search_spaces.spec import StudyError
    from study.lease import study_lease
    from study.private import process_start

    monkeypatch.setenv("CONTRASTIVE_LEASE_TIMEOUT_S", "2")
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    study = open_storage(workdir / "studies").sub("here")
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        os.kill(sleeper.pid, signal.SIGSTOP)
        wait_for(lambda: Path(f"/proc/{sleeper.pid}/stat").read_text().split(") ")[1][0] == "T",
                 10, "the process stopped")  # fmt: skip
        old = time.time() - 20
        silent = Holder("stopped", socket.gethostname(), sleeper.pid, old, old,
                        process_start(sleeper.pid))  # fmt: skip
        StorageLease(study).write(silent)
        with pytest.raises(StudyError) as err:
            study_lease(study, uri, "here", lambda: StudyRecord(uri, "here")).__enter__()
        assert f"pid {sleeper.pid}" in str(err.value) and "it is stopped" in str(err.value)
        assert f"kill -CONT {sleeper.pid}" in str(err.value)
        reused = Holder("reused", silent.host, silent.pid, old, old, silent.start - 1)
        StorageLease(study).write(reused)
        with study_lease(study, uri, "here", lambda: StudyRecord(uri, "here")) as held:
            assert StorageLease(study).read().token == held.me.token
    finally:
        sleeper.kill()  # SIGKILL ends a stopped process too
        sleeper.wait()
