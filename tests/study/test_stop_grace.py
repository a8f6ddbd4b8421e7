"""A true record under any grace: a stop signal ends the open study's unfinished runs KILLED
first, before anything waits on Ray, on Tune or on a thread, so a scheduler's SIGKILL a second
later leaves no run RUNNING or SCHEDULED; and a run a SIGKILLed driver left RUNNING is never
shown as running.

The first test is the mechanism, in a second or two: a driver process whose main thread is
stuck in a C call that the kernel restarts after every signal (as Ray's core waits on a dead GCS),
so Python's own handler never runs; the runs are ended all the same, within 1 s, by the thread
that reads the wakeup fd, and the writes the main thread makes once it wakes (a trial starting,
finishing, failing, a new trial's run) change nothing.

The studies (slow): one ``study run`` per phase, its process group sent SIGTERM, then SIGKILL a
grace of 1, 2 or 3 s later; each grace is paired with two phases, so every grace and every
phase is covered by five driver runs instead of twelve:

=====================  =======  ======================================================
phase                  grace    what is running when the SIGTERM comes
=====================  =======  ======================================================
baselines              1 s      the parent open, its baselines measured (cold cache)
first trial            2 s      one trial RUNNING, the other SCHEDULED
several trials         1 s      two trials RUNNING at once (max_concurrent 2)
several trials         3 s      the same, with the longest grace
report                 2 s      every trial FINISHED, the results and report being written
=====================  =======  ======================================================

After each: no run RUNNING or SCHEDULED in the store, ``study status`` shows nothing running,
and the same ``study run`` resumes the study and finishes it. A run left RUNNING by a driver that
was SIGKILLed outright (no SIGTERM first) is shown as "driver gone" with the command that resumes
it, by ``status``, ``list`` and ``report``, and the next ``study run`` ends it KILLED first.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from mlflow.tracking import MlflowClient

STUCK_DRIVER = textwrap.dedent(
    """
    import ctypes, signal, sys
    from search_spaces.designs import build_design
    from search_spaces.spec import load_spec
    from study.mlflow_views import start_described_parent
    from study.record import StudyRecord
    from study.runner import catch_stop_signals
    from study.stopping import StopRequested, record_opened

    spec = load_spec(None).model_copy(update={"study": "stuck"})
    design = build_design(spec)
    record = StudyRecord(sys.argv[1], "stuck", "artifacts")
    catch_stop_signals()
    record_opened(record)
    parent = start_described_parent(record, spec, design, "")
    plans = list(design.trials)
    runs = [record.ensure_trial_run(plan, parent, spec.sha) for plan in plans[:3]]
    record.begin_attempt(runs[0])
    record.begin_attempt(runs[1])
    record.finish_trial(runs[1], {"status": "finished", "examples_seen": 10})
    record.begin_attempt(runs[2])
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.siginterrupt(signum, False)  # the kernel restarts the read: Python never wakes
    print("ready", flush=True)
    libc, buffer = ctypes.CDLL(None), ctypes.create_string_buffer(1)
    try:
        libc.read(0, buffer, 1)  # stuck in C until the test writes a byte
        print("no interrupt", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    record.begin_attempt(runs[0])  # what Tune may still do once its wait returns
    record.finish_trial(runs[2], {"status": "finished", "examples_seen": 10})
    record.fail_trial(runs[0], "a worker died with the group")
    record.finish_parent(parent, True)
    try:
        record.ensure_trial_run(plans[3], parent, spec.sha)
        print("created", flush=True)
    except StopRequested:
        print("no new run", flush=True)
    """
)


def statuses(uri: str, study: str) -> dict[str, str]:
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(study)
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    return {r.data.tags.get("study.trial_key", "parent"): r.info.status for r in runs}


def end_times(uri: str, study: str) -> list[int]:
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(study)
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    return [r.info.end_time for r in runs if r.info.status == "KILLED"]


STOPS = [
    pytest.param(signal.SIGTERM, True, id="SIGTERM-group"),
    pytest.param(signal.SIGINT, False, id="SIGINT-driver"),
    pytest.param(signal.SIGHUP, True, id="SIGHUP-group"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "group"), STOPS)
def test_a_stop_ends_the_runs_at_once_while_the_main_thread_is_stuck_in_c(
    tmp_path, signum, group
):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    driver = subprocess.Popen(
        [sys.executable, "-c", STUCK_DRIVER, uri], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True, cwd=tmp_path,
    )  # fmt: skip
    try:
        assert driver.stdout.readline().strip() == "ready", driver.stderr.read()[-3000:]
        before = statuses(uri, "stuck")
        (finished,) = [key for key, status in before.items() if status == "FINISHED"]
        assert sorted(before.values()) == ["FINISHED"] + ["RUNNING"] * 3, before
        stopped = {key: "KILLED" for key in before if key != finished}
        sent_at = time.time()
        (os.killpg if group else os.kill)(driver.pid, signum)
        deadline = time.monotonic() + 30
        while "RUNNING" in statuses(uri, "stuck").values():
            assert time.monotonic() < deadline, statuses(uri, "stuck")
            time.sleep(0.05)
        assert driver.poll() is None  # still stuck in its C call: its own handler never ran
        assert statuses(uri, "stuck") == stopped | {finished: "FINISHED"}
        # ended within 1 s of the signal (the runs' end time is when the stop wrote it)
        assert max(end_times(uri, "stuck")) - sent_at * 1000 < 1000
        out, err = driver.communicate("x", timeout=60)  # its C call returns: the handler runs
        assert out.split() == ["interrupted", "no", "new", "run"], err[-3000:]
        # what the main thread wrote after the stop changed nothing; a finished trial stays so
        assert statuses(uri, "stuck") == stopped | {finished: "FINISHED"}
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(timeout=30)


def planted_study(folder, holder_pid: int) -> tuple[str, str]:
    """A recorded study (tests/kits/recordkit.py) whose parent and one trial are left RUNNING,
    its lease naming ``holder_pid`` on this host; returns the store's URI and the resume
    command its driver kept."""
    import socket

    from recordkit import record_study

    from study.driver_gone import RUN_COMMAND_TAG
    from study.lease import LEASE_TAG, Holder

    uri = record_study(folder, name="gone")
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("gone")
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    parent = next(r for r in runs if r.data.tags["study.role"] == "parent")
    trial = min((r for r in runs if r.data.tags["study.role"] == "trial"),
                key=lambda r: r.data.tags["study.trial_key"])  # fmt: skip
    for run in (parent, trial):
        client.update_run(run.info.run_id, status="RUNNING")
    holder = Holder("t0ken", socket.gethostname(), holder_pid, time.time(), time.time())
    client.set_experiment_tag(experiment.experiment_id, LEASE_TAG, holder.to_text())
    command = f"study run {folder / 'gone.yaml'} --tracking-uri {uri}"
    client.set_experiment_tag(experiment.experiment_id, RUN_COMMAND_TAG, command)
    return uri, command


def dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def study_says(*argv: str, cwd) -> str:
    from studykit import STUDY

    done = subprocess.run([STUDY, *argv], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env=os.environ | {"COLUMNS": "200"})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr


@pytest.mark.slow
def test_runs_a_killed_driver_left_running_are_said_driver_gone_with_the_resume_command(tmp_path):
    import socket

    pid = dead_pid()
    uri, command = planted_study(tmp_path, pid)
    gone = f"driver gone (pid {pid} on {socket.gethostname()})"
    status = study_says("status", "gone", "--tracking-uri", uri, cwd=tmp_path)
    assert "running" not in status.lower(), status
    assert gone in status and command in status and "2 unfinished runs of a driver that was killed" in status
    assert "1 driver gone" in status  # the trial's row and count
    listed = study_says("list", "--tracking-uri", uri, cwd=tmp_path)
    assert listed.splitlines()[0] == "gone" and gone in listed and command in listed
    report = study_says("report", "gone", "--no-figures", "--out", str(tmp_path / "r"),
                        "--tracking-uri", uri, cwd=tmp_path)  # fmt: skip
    assert gone in report and command in report


@pytest.mark.slow
def test_runs_of_a_live_driver_are_running_and_name_it(tmp_path):
    uri, _ = planted_study(tmp_path, os.getpid())  # this process: alive on this host
    status = study_says("status", "gone", "--tracking-uri", uri, cwd=tmp_path)
    assert "driver gone" not in status and "1 running" in status
    assert f"driver pid {os.getpid()} on " in status
    assert "driver gone" not in study_says("list", "--tracking-uri", uri, cwd=tmp_path)
