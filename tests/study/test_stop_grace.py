"""A true record under any grace: a stop signal ends the open study's unfinished runs KILLED
first, before anything waits on Ray, on Tune or on a thread, so a scheduler's SIGKILL a second
later leaves no run RUNNING or SCHEDULED; and a run a SIGKILLed driver left RUNNING is never
shown as running.

The first test is the mechanism, in a second or two: a driver process whose main thread is
stuck in a C call that the kernel restarts after every signal (as Ray's core waits on a dead GCS),
so Python's own handler never runs; the runs are ended all the same, within 1 s, by the thread
that reads the wakeup fd, and the writes the main thread makes once it wakes (a trial starting,
finishing, failing, a new trial's run) change nothing.

The study (slow, long): one study of four tiny trials (two at a time), stopped at each phase in
turn and resumed by the next ``study run``, its process group sent SIGTERM, then SIGKILL a grace
of 1, 2 or 3 s later; each driver run ends one phase, so every phase and every grace is covered
by six driver runs instead of one study per combination (twelve studies):

==============  =====  ============================================================
phase           grace  what runs when the SIGTERM comes
==============  =====  ============================================================
baselines       1 s    the parent open, its baselines measured (a cold cache)
first trial     2 s    the first trial's run RUNNING, the others SCHEDULED
several trials  3 s    two trials RUNNING at once
killed outright  -     a trial RUNNING, the group SIGKILLed with no SIGTERM at all
report          1 s    every trial FINISHED, the results and the report being written
==============  =====  ============================================================

After each graced stop: no run RUNNING or SCHEDULED in the store and ``study status`` shows
nothing running. After the outright SIGKILL, the runs left RUNNING are said "driver gone (pid N
on HOST)" by ``status``, with the command that resumes the study, and the next ``study run``
ends them KILLED before it starts anything. The last run finishes the study.
"""

from __future__ import annotations

import contextlib
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
    from study.stop_signals import catch_stop_signals
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
def test_a_stop_ends_the_runs_at_once_while_the_main_thread_is_stuck_in_c(tmp_path, signum, group):
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
    assert gone in status and command in status
    assert "2 unfinished runs of a driver that was killed" in status
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


NAME = "graced"


def store_statuses(db) -> dict[str, str]:
    """trial key (or "parent") -> status, read without creating or migrating the store (a second
    process migrating a new store while the driver does breaks both); {} before it exists."""
    import sqlite3

    if not db.exists():
        return {}
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as con:
            rows = con.execute(
                "SELECT COALESCE(k.value, 'parent'), r.status FROM runs r "
                "JOIN tags role ON role.run_uuid = r.run_uuid AND role.key = 'study.role' "
                "LEFT JOIN tags k ON k.run_uuid = r.run_uuid AND k.key = 'study.trial_key'"
            ).fetchall()
    except sqlite3.Error:  # the driver is creating its tables
        return {}
    return dict(rows)


def unfinished(db) -> dict[str, str]:
    return {k: v for k, v in store_statuses(db).items() if v in ("RUNNING", "SCHEDULED")}


def stop_with_grace(driver, grace: float | None) -> str:
    """SIGTERM to the driver's whole group, then SIGKILL ``grace`` s later (at once when None),
    as a scheduler stops a job; returns what the driver printed."""
    if grace is not None:
        os.killpg(driver.pid, signal.SIGTERM)
        time.sleep(grace)
    with contextlib.suppress(ProcessLookupError):  # the whole group ended within the grace
        os.killpg(driver.pid, signal.SIGKILL)
    out, err = driver.communicate(timeout=60)
    return out + err


@pytest.mark.long
@pytest.mark.slow
def test_a_study_stopped_at_each_phase_with_each_grace_keeps_a_true_record(workdir, ray_tmp):
    from processkit import kill_processes_mentioning
    from studykit import STUDY, start_driver, wait_for, write_spec

    spec = write_spec(workdir / "s.yaml", NAME, factors={"temperature": {"levels": [0.1, 0.5]}},
                      trial={"budget_examples": 128 * 12, "batch_size": 128, "eval_marks": 3},
                      replicates=2, max_concurrent=2)  # fmt: skip
    uri, db = f"sqlite:///{workdir / 'mlflow.db'}", workdir / "mlflow.db"
    cold, staging = workdir / "baselines", workdir / "tmp"
    staging.mkdir()
    env = os.environ | {"CONTRASTIVE_BASELINE_CACHE": str(cold)}
    started: list = []

    def start(figures: bool = False):
        # the report's staging folder made in a folder of the test's (seen as the export begins)
        staged = {"TMPDIR": str(staging)} if figures else {}
        command, driver = start_driver(spec, workdir, uri, STUDY, env=env | staged,
                                       figures=figures)  # fmt: skip
        started.append(driver)
        return command, driver

    def reach(phase: str, reached, figures: bool = False):
        """A driver started and waited for until ``phase`` is ``reached``; started again when
        its Ray did not come up (a loaded 2-core machine: Ray's agents miss their 30 s), which is
        not what this test is about."""
        for attempt in range(4):
            command, driver = start(figures)
            try:
                wait_for(reached, 600, phase, driver)
                return command, driver
            except AssertionError as err:
                if "Ray did not start" not in str(err) or attempt == 3:
                    raise
            time.sleep(10)
        raise AssertionError("unreachable")

    def trials_running(n: int):
        return lambda: sum(v == "RUNNING" for k, v in store_statuses(db).items()
                           if k != "parent") >= n  # fmt: skip

    def status_text() -> str:
        done = subprocess.run([STUDY, "status", NAME, "--tracking-uri", uri], cwd=workdir,
                              capture_output=True, text=True, timeout=300,
                              env=os.environ | {"COLUMNS": "250"})  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout + done.stderr

    def stopped(driver, grace, phase: str) -> str:
        said = stop_with_grace(driver, grace)
        kill_processes_mentioning(ray_tmp)  # Ray's daemons outlive a killed driver
        assert unfinished(db) == {}, f"{phase}: {store_statuses(db)}"
        text = status_text()
        assert "running" not in text.lower() and "driver gone" not in text, f"{phase}: {text}"
        return said

    try:
        phases = [
            ("baselines", 1, lambda: list(cold.glob("raw-*.json"))),  # random_init measured now
            ("first trial", 2, trials_running(1)),
            ("several trials", 3, trials_running(2)),
        ]
        for phase, grace, reached in phases:
            _, driver = reach(phase, reached)
            stopped(driver, grace, phase)

        # killed outright: its runs left RUNNING, its driver gone
        _, driver = reach("a trial running", trials_running(1))
        pid = driver.pid
        stop_with_grace(driver, None)
        kill_processes_mentioning(ray_tmp)
        left = unfinished(db)
        assert left, store_statuses(db)
        text = status_text()
        assert "running" not in text.lower(), text
        assert f"driver gone (pid {pid} on " in text and f"study run {spec} --no-figures" in text

        # the runs left are ended KILLED first, the trials resumed, then the report
        command, driver = reach("the report", lambda: list(staging.glob("study-out-*")), True)
        said = stopped(driver, 1, "report")
        assert (
            f"{len(left)} runs left RUNNING or SCHEDULED by a driver that is gone ended "
            "KILLED" in said
        ), said

        again = subprocess.run(command, cwd=workdir, capture_output=True, text=True, timeout=600,
                               env=env)  # fmt: skip
        assert again.returncode == 0, again.stderr[-3000:]
        final = store_statuses(db)
        assert [k for k, v in final.items() if v != "FINISHED"] == [], final
        assert sorted(final) == ["p000-r0", "p000-r1", "p001-r0", "p001-r1", "parent"]
        assert (workdir / "studies" / NAME / "report" / "report.html").is_file()
    finally:
        for driver in started:
            if driver.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(driver.pid, signal.SIGKILL)
                driver.wait(timeout=60)
