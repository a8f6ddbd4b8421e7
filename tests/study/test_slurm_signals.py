"""The time limit, a cancel and a preemption told apart (issue 59, item 1):
scripts/slurm/study.sbatch under the stand-ins of tests/kits/slurm_bin (two real Ray nodes on
127.0.0.1, a real study, real signals), each signal sent where Slurm sends it:

- USR1 to the batch shell, Slurm's ``--signal=B:USR1@120`` before the time limit: every unfinished
  run ends KILLED, Ray stops, the job asks ``scontrol requeue`` (once; no ``sbatch``), and the job
  Slurm starts again (the same ID, SLURM_RESTART_COUNT=1, its output appended to the same file)
  resumes the study to every trial FINISHED once. Replays submitit#1708 (the requeue ends the
  running job with a TERM of its own, which is no cancel) and NVIDIA/pyxis#129 (a requeued job's
  output truncated without ``--open-mode=append``).
- TERM to the batch shell, ``scancel``: the study stops, exit 143, nothing is queued, no run is left
  RUNNING.
- TERM to the node steps first, a preemption under ``GraceTime`` (Slurm signals every step): Ray
  stops on both nodes under the driver; the job notices the steps ended, stops the driver, leaves
  no run RUNNING, queues nothing and says it was preempted. Replays the preemption of
  facebookincubator/submitit#1603 (TERM, not the time-limit signal, at a preemption).

The USR1 and preemption tests write their timelines to /tmp/timeline-59-usr1.txt and
/tmp/timeline-59-preempt.txt."""

from __future__ import annotations

import os
import signal
import time

import pytest
from slurmkit import (
    SCRIPT,
    Timeline,
    alive,
    fake_slurm,
    logged,
    processes_mentioning,
    wait_exit,
    wait_while_running,
)
from studykit import checkpoints, child_runs, parent_runs, write_spec

JOB = 5901


@pytest.fixture
def slurm(tmp_path):
    """A fake Slurm's job (slurmkit.fake_slurm): every process it started is ended after."""
    with fake_slurm(tmp_path, prefix="sg") as job:
        yield job


def _start_mid_study(slurm, tmp_path, name: str, clock: Timeline):
    """The job of a four-trial study (two at a time, one a node), started and waited on until a
    trial has a checkpoint and trials are left: (the job, its output file, the store's URI, the
    study file, the processes of the job, the runs' states then)."""
    spec = write_spec(slurm.submit / f"{name}.yaml", name,
                      factors={"temperature": {"levels": [0.1, 0.5], "scale": "log"}},
                      trial={"budget_examples": 128 * 24, "batch_size": 128, "eval_marks": 6},
                      replicates=2, max_concurrent=2, resources={"cpu": 1, "gpu": 0})  # fmt: skip
    uri = f"sqlite:///{slurm.submit / 'mlflow.db'}"
    trials = slurm.submit / "studies" / name / "trials"
    log = tmp_path / f"slurm-{JOB}.out"
    clock.note(f"job {JOB} starts")
    job = slurm.start([str(spec), "--no-figures"], slurm.env(JOB), log)

    def mid_study():
        done = [p for p in trials.glob("*") if checkpoints(p)] if trials.exists() else []
        return done and len(done) < 4

    wait_while_running(mid_study, job, log, 600, "a first checkpoint")
    started = processes_mentioning(slurm.ray_tmp)  # the job's shell, steps, Ray, driver
    states = {r.data.tags["study.trial_key"]: r.info.status for r in child_runs(uri, name)}
    return job, log, uri, spec, started, dict(sorted(states.items()))


def _runs_ended(clock: Timeline, uri: str, name: str) -> list:
    """Every run of the study, none RUNNING; the first and last KILLED noted on the timeline."""
    runs = [*child_runs(uri, name), *parent_runs(uri, name)]
    assert {r.info.status for r in runs} <= {"KILLED", "FINISHED", "FAILED"}, [r.info for r in runs]
    killed = [r.info.end_time / 1000 for r in runs if r.info.status == "KILLED"]
    assert killed, [r.info for r in runs]
    clock.note(f"the first of {len(killed)} runs ended KILLED", min(killed))
    clock.note(f"the last of {len(killed)} runs ended KILLED", max(killed))
    return runs


def _all_gone(clock: Timeline, slurm, started: set[int], since: float) -> None:
    """Every process the job started is gone within Slurm's KillWait (30 s) of ``since``."""
    gone_by = time.time()
    while alive(started) and time.time() - since < 30:
        time.sleep(0.2)
        gone_by = time.time()
    assert not alive(started), sorted(alive(started))
    assert not processes_mentioning(slurm.ray_tmp)
    clock.note("every process of the job gone, Ray's on both nodes included (checked)", gone_by)


def _requeues(slurm) -> list[dict]:
    return [r for r in slurm.records("scontrol") if r["argv"][0] == "requeue"]


def _script_lines(log) -> list[str]:
    return [line for line in log.read_text().splitlines() if line.startswith("study.sbatch")]


@pytest.mark.long
@pytest.mark.slow
def test_the_time_limit_s_usr1_stops_the_study_and_the_requeued_job_resumes_it(slurm, tmp_path):
    name = "slurm-usr1"
    clock = Timeline()
    job, log, uri, spec, started, states = _start_mid_study(slurm, tmp_path, name, clock)
    usr1 = clock.note(f"USR1 sent to the batch shell (pid {job.pid}), as --signal=B:USR1@120 does;"
                      f" {len(started)} processes of the job alive; trials {states}")  # fmt: skip
    os.kill(job.pid, signal.SIGUSR1)
    rc = wait_exit(job, 180, log)
    clock.note(f"job {JOB} exited {rc}")
    assert rc == 143, log.read_text()[-5000:]

    (received,) = logged(log, r"study.sbatch: USR1 received at ([\d.]+)")
    clock.note("the script forwarded it to the driver (TERM)", float(received[1]))
    (driver,) = logged(log, r"study.sbatch: driver exited (\d+) at ([\d.]+)")
    assert driver[1] == "143"
    clock.note("the driver exited 143", float(driver[2]))
    runs = _runs_ended(clock, uri, name)
    assert parent_runs(uri, name)[0].info.status == "KILLED"
    assert min(r.info.end_time / 1000 for r in runs if r.info.status == "KILLED") >= usr1
    trials = slurm.submit / "studies" / name / "trials"
    stopped = [r.data.tags["study.trial_key"] for r in child_runs(uri, name)
               if r.info.status == "KILLED"]  # fmt: skip
    resumable = {key for key in stopped if checkpoints(trials / key)}
    _all_gone(clock, slurm, started, float(driver[2]))

    # moved on by Slurm's own requeue: once, no sbatch; the job's last line says so
    (requeue,) = _requeues(slurm)
    assert requeue["argv"] == ["requeue", str(JOB)] and not slurm.records("sbatch")
    clock.note(f"scontrol requeue {JOB} (the job is queued again: same ID, same options)",
               requeue["time"])  # fmt: skip
    last = log.read_text().splitlines()[-1]
    said = "study.sbatch: stopped by USR1 (the time-limit warning): requeued at "
    assert last.startswith(said), last
    assert f"job {JOB} starts again with the same options, restart 1 of the job" in last

    # the job Slurm starts again: the same ID and environment, SLURM_RESTART_COUNT=1, its output
    # appended to the same file (--open-mode=append). A fresh port block: the first run's ports
    # may linger in TIME_WAIT on this one machine (a real requeue may land on any node)
    first = log.read_text()
    slurm.port = 0
    env = slurm.requeued(slurm.env(JOB))
    assert env["SLURM_JOB_ID"] == str(JOB) and env["SLURM_RESTART_COUNT"] == "1"
    clock.note(f"job {JOB} starts again (SLURM_RESTART_COUNT=1)")
    second = slurm.start([str(spec), "--no-figures"], env, log, script=SCRIPT)
    rc = wait_exit(second, 600, log)
    clock.note(f"job {JOB}, restart 1, exited {rc}: the study finished")
    assert rc == 0, log.read_text()[-5000:]
    assert log.read_text().startswith(first)  # appended, not truncated
    assert logged(log, rf"study.sbatch: job {JOB} started again: restart 1 of the job")
    assert logged(log, r"job folder \S+ reused: 3 stale PID file\(s\) removed, 2 node log\(s\) ")

    children = child_runs(uri, name)
    keys = [r.data.tags["study.trial_key"] for r in children]
    assert sorted(keys) == sorted(set(keys)) and len(keys) == 4  # each trial once
    assert {r.info.status for r in children} == {"FINISHED"}
    assert [r.info.status for r in parent_runs(uri, name)] == ["FINISHED"]
    assert len(_requeues(slurm)) == 1 and not slurm.records("sbatch")  # nothing more queued
    resumed = {r.data.tags["study.trial_key"]: r.data.metrics.get("trial/resumed_from")
               for r in children}  # fmt: skip
    print(f"stopped with a checkpoint: {sorted(resumable)}; resumed_from: {resumed}")
    assert all(resumed[key] and resumed[key] > 0 for key in resumable)
    clock.write("/tmp/timeline-59-usr1.txt")
    print(f"job output {log}:", *_script_lines(log), sep="\n")


@pytest.mark.long
@pytest.mark.slow
def test_a_term_to_the_batch_shell_stops_the_study_and_queues_nothing(slurm, tmp_path):
    """scancel: TERM to the batch shell (and the steps, which the script stops itself first)."""
    name = "slurm-scancel"
    clock = Timeline()
    job, log, uri, spec, started, states = _start_mid_study(slurm, tmp_path, name, clock)
    clock.note(f"TERM sent to the batch shell (pid {job.pid}), as scancel does; trials {states}")
    os.kill(job.pid, signal.SIGTERM)
    rc = wait_exit(job, 180, log)
    clock.note(f"job {JOB} exited {rc}")
    assert rc == 143, log.read_text()[-5000:]
    (driver,) = logged(log, r"study.sbatch: driver exited (\d+) at ([\d.]+)")
    assert driver[1] == "143"
    _runs_ended(clock, uri, name)
    _all_gone(clock, slurm, started, float(driver[2]))
    assert not _requeues(slurm) and not slurm.records("sbatch")
    last = log.read_text().splitlines()[-1]
    said = (f"study.sbatch: stopped by TERM (scancel or preemption): nothing queued; resume with: "
            f"cd {slurm.submit} && sbatch --job-name=study ")  # fmt: skip
    assert last.startswith(said), last
    assert last.endswith(f" {SCRIPT} {spec} --no-figures"), last
    clock.show()


@pytest.mark.long
@pytest.mark.slow
def test_a_preemption_s_term_to_the_node_steps_leaves_nothing_running_and_says_so(slurm, tmp_path):
    """A preemption under GraceTime: Slurm's TERM reaches the node steps (srun forwards it to
    each node's task: Ray stops there) before anything reaches the batch shell."""
    name = "slurm-preempt"
    clock = Timeline()
    job, log, uri, _, started, states = _start_mid_study(slurm, tmp_path, name, clock)
    steps = {s["host"]: s["pid"] for s in slurm.records("srun")}
    assert sorted(steps) == ["node1", "node2"] and alive(set(steps.values())) == set(steps.values())
    clock.note(f"TERM sent to both node steps (pids {sorted(steps.values())}), as a preemption "
               f"with GraceTime does; trials {states}")  # fmt: skip
    for pid in steps.values():
        os.kill(pid, signal.SIGTERM)
    rc = wait_exit(job, 180, log)
    clock.note(f"job {JOB} exited {rc}")
    lines = "\n".join(_script_lines(log))
    (ended,) = logged(log, r"study.sbatch: the step of (node\d) ended at ([\d.]+) while the")
    clock.note(f"the script noticed the step of {ended[1]} ended; it stops the driver",
               float(ended[2]))  # fmt: skip
    for stopped in logged(log, r"study.sbatch: (head|worker) \d on (node\d): Ray stopped"):
        print(stopped.string)
    (driver,) = logged(log, r"study.sbatch: driver exited (\d+) at ([\d.]+)")
    clock.note(f"the driver exited {driver[1]}", float(driver[2]))
    assert rc == int(driver[1]) and rc in (143, 1), lines
    _runs_ended(clock, uri, name)
    _all_gone(clock, slurm, started, float(driver[2]))
    assert not _requeues(slurm) and not slurm.records("sbatch")
    last = log.read_text().splitlines()[-1]
    assert last.startswith(f"study.sbatch: preempted: the step of {ended[1]} ended while the "
                           "study ran (Ray went away there: a preemption's TERM reaches every "
                           "step, or the node failed)"), last  # fmt: skip
    assert "nothing queued; resume with: " in last, last
    clock.write("/tmp/timeline-59-preempt.txt")
    print(f"job output {log}:", *_script_lines(log), sep="\n")
