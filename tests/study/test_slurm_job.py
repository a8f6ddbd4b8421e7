"""scripts/slurm/study.sbatch without Slurm (issue 51, items 1 and 2): stand-in ``srun``,
``scontrol`` and ``sbatch`` first on PATH (tests/kits/slurm_bin/) record their calls; ``srun``
runs each node's step on this machine, so the job's two nodes are two Ray nodes on 127.0.0.1
(STUDY_INTERFACE=lo), with token authentication on. A study runs on both nodes and finishes; a
TERM to the batch shell (Slurm's ``--signal=B:TERM@120`` at the time limit) ends every run
KILLED, stops Ray on every node and submits the job again, which resumes the study to its end.
The script's own control flow (usage, the driver's exit status, the resubmission's options and
its cap) is checked quickly with stand-ins for ``study``, ``ray`` and ``python``."""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest
from slurmkit import (
    SCRIPT,
    Timeline,
    alive,
    fake_slurm,
    logged,
    option,
    processes_mentioning,
    wait_exit,
    wait_while_running,
)
from studykit import checkpoints, child_runs, parent_runs, wait_for, write_spec

JOB = 4101


@pytest.fixture
def slurm(tmp_path):
    """A fake Slurm's job (slurmkit.fake_slurm): every process it started is ended after."""
    with fake_slurm(tmp_path) as job:
        yield job


# --- the script's arguments and control flow (no Ray) ----------------------------------------


def test_the_script_parses():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0
    assert os.access(SCRIPT, os.X_OK)


def test_without_a_study_file_it_prints_its_usage_and_exits_2(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    for args in ([], [""], ["--time=10"]):
        done = subprocess.run(["bash", str(SCRIPT), *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=30)  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert "usage: sbatch [Slurm options] scripts/slurm/study.sbatch STUDY_FILE" in done.stderr
    outside = subprocess.run(["bash", str(SCRIPT), "s.yaml"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=30)  # fmt: skip
    assert outside.returncode == 2 and "not in a Slurm job" in outside.stderr


def _foreign_owner(path: Path) -> None:
    """Make ``path`` another user's (nobody's), as a second user on a shared machine would
    have made it first; this test runs as root where it can chown."""
    if os.getuid() != 0:
        pytest.skip("only root can give a folder another owner here")
    os.chown(path, 65534, 65534, follow_symlinks=False)


@pytest.mark.parametrize("planted", ["other-owner", "group-writable", "symlink", "file"])
def test_a_jobs_folder_this_user_did_not_make_alone_is_refused(slurm, tmp_path, planted):
    """A group member who may write in the jobs folder could swap a job's folder and its token
    before the nodes read it: the job refuses it (exit 2, the path, the owner, the fix) and
    starts no node."""
    jobs = slurm.submit / ".study-slurm"
    if planted == "symlink":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        jobs.symlink_to(tmp_path / "elsewhere")
    elif planted == "file":
        jobs.write_text("")
    else:
        jobs.mkdir(mode=0o700)
        if planted == "group-writable":
            jobs.chmod(0o2775)  # as a group project folder's setgid, umask 002 layout
        else:
            _foreign_owner(jobs)
    study = _stand_ins(tmp_path / "bin")
    slurm.extra = {"STUDY_BIN": str(study), "FAKE_DIR": str(tmp_path), "FAKE_STUDY_EXIT": "0"}
    log = tmp_path / "job.log"
    job = slurm.start(["s.yaml"], slurm.env(JOB), log)
    assert wait_exit(job, 60, log) == 2, log.read_text()
    said = log.read_text()
    assert f"study.sbatch: {jobs} " in said and "not used" in said
    expected = {"other-owner": "owned by nobody (uid 65534), not by",
                "group-writable": "may be written by its group or others (mode 2775)",
                "symlink": "is not a folder", "file": "is not a folder"}[planted]  # fmt: skip
    assert expected in said, said
    assert not slurm.records("srun") and not (jobs / str(JOB)).exists()


def test_a_jobs_folder_made_under_a_group_umask_is_private(slurm, tmp_path):
    """Under umask 002 (a group project's), the job's folders are still mode 0700."""
    study = _stand_ins(tmp_path / "bin")
    slurm.extra = {"STUDY_BIN": str(study), "FAKE_DIR": str(tmp_path), "FAKE_STUDY_EXIT": "0",
                   "STUDY_STOP_WAIT": "1"}  # fmt: skip
    log = tmp_path / "job.log"
    old = os.umask(0o002)
    try:
        job = slurm.start(["s.yaml"], slurm.env(JOB), log)
    finally:
        os.umask(old)
    assert wait_exit(job, 60, log) == 0, log.read_text()
    jobs = slurm.submit / ".study-slurm"
    assert stat.S_IMODE(jobs.stat().st_mode) == 0o700
    assert stat.S_IMODE((jobs / str(JOB)).stat().st_mode) == 0o700


def test_each_node_binds_the_ipv4_address_of_the_named_interface():
    functions = subprocess.run(
        ["sed", "-n", "/^node_ip() {/,/^}/p", str(SCRIPT)], capture_output=True, text=True
    ).stdout
    ask = f"{functions}\nnode_ip"
    lo = subprocess.run(["bash", "-c", ask], env=os.environ | {"STUDY_INTERFACE": "lo"},
                        capture_output=True, text=True)  # fmt: skip
    assert lo.stdout.strip() == "127.0.0.1", lo.stderr
    default = subprocess.run(["bash", "-c", ask], env=os.environ | {"STUDY_INTERFACE": ""},
                             capture_output=True, text=True)  # fmt: skip
    route = subprocess.run(["ip", "-o", "route", "show", "default"], capture_output=True,
                           text=True).stdout  # fmt: skip
    if route.strip():  # the default route's interface
        assert default.returncode == 0 and default.stdout.strip().count(".") == 3, default.stderr
    missing = subprocess.run(["bash", "-c", ask], env=os.environ | {"STUDY_INTERFACE": "nope0"},
                             capture_output=True, text=True)  # fmt: skip
    assert missing.returncode != 0 and "'nope0' has no IPv4 address" in missing.stderr


def _stand_ins(folder: Path) -> Path:
    """``study``, ``ray`` and ``python`` stand-ins (the script finds ray and python next to
    STUDY_BIN): ray's nodes sleep until ended, python answers the token and, once every node
    has started, the join; study records its arguments and exits $FAKE_STUDY_EXIT, or on
    ``term`` waits for a TERM and exits 143 as the real driver does, or on ``term-late`` takes
    2 s after a TERM and exits 0 (its last trial finished as the TERM came)."""
    folder.mkdir()
    scripts = {
        "ray": '[ "$1" = start ] || exit 2\necho "$$ $*" >>"$FAKE_DIR/ray-starts"\n'
        "exec sleep 600\n",
        # the join: until every node's `ray start` has begun ($3 is the number of nodes)
        "python": 'if [ "$1" = -c ]; then exec python3 "$@"; fi\ncat >/dev/null\n'
        'until [ "$(cat "$FAKE_DIR/ray-starts" 2>/dev/null | wc -l)" -ge "$3" ]; do\n'
        "  sleep 0.1\ndone\n"
        'echo "study.sbatch: node fake-node joined"\n',
        "study": 'printf "%s\\n" "$@" >"$FAKE_DIR/study-args"\n'
        'echo "$MLFLOW_TRACKING_URI" >"$FAKE_DIR/study-store"\n'
        'case "$FAKE_STUDY_EXIT" in\n'
        "  term) trap 'kill $!; exit 143' TERM ;;\n"
        "  term-late) trap 'kill $!; sleep 2; exit 0' TERM ;;\n"
        '  *) exit "$FAKE_STUDY_EXIT" ;;\nesac\n'
        'touch "$FAKE_DIR/driver-started"\nsleep 600 & wait $!\n',
    }
    for name, body in scripts.items():
        path = folder / name
        path.write_text(f"#!/bin/bash\n{body}")
        path.chmod(0o755)
    return folder / "study"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("exit", "count", "expected", "resubmitted"),
    [
        pytest.param("0", "0", 0, False, id="finished"),
        pytest.param("1", "0", 1, False, id="failed"),
        pytest.param("2", "0", 2, False, id="refused"),
        pytest.param("term", "0", 143, True, id="time-limit"),
        pytest.param("term", "10", 143, False, id="time-limit-capped"),
        # two TERMs, the driver ending 0 after them: its own status counts, not the signal's
        pytest.param("term-late", "0", 0, False, id="time-limit-study-done"),
    ],
)
def test_the_driver_s_exit_decides_the_resubmission(slurm, tmp_path, exit, count, expected,
                                                    resubmitted):  # fmt: skip
    study = _stand_ins(tmp_path / "bin")
    slurm.extra = {"STUDY_BIN": str(study), "FAKE_DIR": str(tmp_path), "STUDY_STOP_WAIT": "1",
                   "FAKE_STUDY_EXIT": exit, "STUDY_RESUBMIT_COUNT": count}  # fmt: skip
    env = slurm.env(JOB) | {"SLURM_JOB_PARTITION": "gpu", "SLURM_CPUS_PER_TASK": "8"}
    log = tmp_path / "job.log"
    work = tmp_path / "work"  # sbatch --chdir: the job runs apart from its submit folder
    work.mkdir()
    job = slurm.start(["s.yaml", "--no-figures"], env, log, cwd=work)
    if exit.startswith("term"):
        wait_for(lambda: (tmp_path / "driver-started").exists(), 60, "the driver", None)
        os.kill(job.pid, signal.SIGTERM)  # the batch shell alone, as --signal=B:TERM does
    if exit == "term-late":
        time.sleep(0.5)
        os.kill(job.pid, signal.SIGTERM)
    assert wait_exit(job, 60, log) == expected, log.read_text()
    assert logged(log, rf"study.sbatch: driver exited {expected}\b")

    # the nodes: one srun step per host, each a `ray start --block` bound to lo's address
    steps = slurm.records("srun")
    assert sorted(s["host"] for s in steps) == ["node1", "node2"]
    assert all(s["argv"][:4] == ["--nodes=1", "--ntasks=1", "-w", s["host"]] for s in steps)
    starts = (tmp_path / "ray-starts").read_text().splitlines()
    head = next(line for line in starts if " --head " in line)
    port = slurm.port
    assert f"--port {port} " in head and "--node-ip-address 127.0.0.1 " in head
    assert "--num-cpus 1 --num-gpus 0 " in head
    worker = next(line for line in starts if " --head " not in line)
    # Ray's temp dir: a fresh folder of this user's alone on each node, never a shared path
    temps = [re.search(r"--temp-dir (\S+) ", line).group(1) for line in (head, worker)]
    assert temps[0] != temps[1], temps
    for temp in map(Path, temps):
        assert temp.name == "ray" and re.fullmatch(r"study-ray\.\w{6}", temp.parent.name)
        assert temp.parent.parent == Path(slurm.ray_tmp)
        assert not temp.parent.exists()  # removed when its node stopped
    assert f"--address 127.0.0.1:{port} " in worker
    assert f"--node-manager-port {port + 43} " in worker  # the next node's block (one machine)
    # the nodes' own processes, stopped by the script (TERM, then KILL)
    node_pids = {int(line.split()[0]) for line in starts}
    assert not alive(node_pids)

    # the driver: the submit folder's store and storage, the user's options after them
    args = (tmp_path / "study-args").read_text().splitlines()
    assert args == ["run", "s.yaml", "--address", f"127.0.0.1:{port}", "--storage",
                    f"{slurm.submit}/studies", "--no-figures"]  # fmt: skip
    # the store by environment: a URI may carry credentials, and a command line is public
    store = (tmp_path / "study-store").read_text().strip()
    assert store == f"sqlite:///{slurm.submit}/mlflow.db"

    # a fresh token that only this user reads, in a folder only this user enters, handed to
    # each node's step in its environment (never on a command line, never by path)
    job_dir = slurm.submit / ".study-slurm" / str(JOB)
    token = job_dir / "auth_token"
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    assert stat.S_IMODE(job_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(job_dir.parent.stat().st_mode) == 0o700
    secret = token.read_text().strip()
    assert len(secret) == 64
    assert all("RAY_AUTH_TOKEN" in s["env_names"] for s in steps)
    assert all("RAY_AUTH_TOKEN_PATH" not in s["env_names"] for s in steps)
    assert not any(secret in " ".join(s["argv"]) for s in slurm.records())

    submitted = slurm.records("sbatch")
    assert len(submitted) == (1 if resubmitted else 0), submitted
    if exit == "term" and not resubmitted:
        assert logged(log, r"not resubmitted: 10 resubmissions already \(STUDY_RESUBMIT_MAX=10\)")
    if resubmitted:
        (call,) = submitted
        assert option(call, "dependency") == f"afterany:{JOB}"
        assert option(call, "export") == "ALL,STUDY_RESUBMIT_COUNT=1"
        assert option(call, "chdir") == str(work) and call["cwd"] == str(slurm.submit)
        assert option(call, "time") == "00:10:00"  # from `scontrol show job`
        assert option(call, "nodes") == "2" and option(call, "job-name") == "study"
        assert option(call, "partition") == "gpu" and option(call, "cpus-per-task") == "8"
        assert call["argv"][-3:] == [str(SCRIPT), "s.yaml", "--no-figures"]
        # nothing of this job's own (its folder, ports, temp dir) is handed to the next one
        assert not {"STUDY_JOB_DIR", "STUDY_HOME", "STUDY_PYTHON"} & set(call["env"])
        assert call["env"]["STUDY_RAY_PORT"] == str(port)  # the user's own setting is kept


@pytest.mark.slow
def test_a_term_while_the_nodes_join_stops_them_and_resubmits(slurm, tmp_path):
    study = _stand_ins(tmp_path / "bin")
    (tmp_path / "bin" / "python").write_text("#!/bin/bash\n"
                                             'if [ "$1" = -c ]; then exec python3 "$@"; fi\n'
                                             "exec sleep 600\n")  # fmt: skip  # never joins
    slurm.extra = {"STUDY_BIN": str(study), "FAKE_DIR": str(tmp_path), "STUDY_STOP_WAIT": "1",
                   "FAKE_STUDY_EXIT": "0"}  # fmt: skip
    log = tmp_path / "job.log"
    job = slurm.start(["s.yaml"], slurm.env(JOB), log)
    wait_for(lambda: len(slurm.records("srun")) == 1, 60, "the head's step", None)
    time.sleep(2)  # the workers wait for the head to join (it never does here)
    assert [s["host"] for s in slurm.records("srun")] == ["node1"]
    os.kill(job.pid, signal.SIGTERM)
    assert wait_exit(job, 60, log) == 143, log.read_text()
    assert logged(log, "stopped by TERM before the study started")
    assert [s["host"] for s in slurm.records("srun")] == ["node1"]  # no worker was started
    assert not (tmp_path / "study-args").exists()
    assert len(slurm.records("sbatch")) == 1


# --- a real study on a two-node Ray cluster -----------------------------------------------------


@pytest.mark.long
@pytest.mark.slow
def test_a_study_runs_on_both_nodes_of_the_job_and_finishes(slurm, tmp_path):
    spec = write_spec(slurm.submit / "toy.yaml", "slurm-toy",
                      factors={"temperature": {"levels": [0.1, 0.5], "scale": "log"}},
                      replicates=2, max_concurrent=2, resources={"cpu": 1, "gpu": 0})  # fmt: skip
    log = tmp_path / "job.log"
    t0 = time.time()
    job = slurm.start([str(spec), "--no-figures"], slurm.env(JOB), log)
    rc = wait_exit(job, 600, log)
    print(f"job {JOB}: exit {rc} after {time.time() - t0:.1f} s")
    assert rc == 0, log.read_text()[-5000:]
    lines = logged(log, r"study.sbatch: node ([0-9a-f]+) \S+ joined: 1 CPUs, 0 GPUs \((\w+)\)")
    print(*(line.string for line in lines), sep="\n")
    joined = {m[1] for m in lines}
    assert len(joined) == 2 and sorted(m[2] for m in lines) == ["head", "worker"], lines
    assert sorted(s["host"] for s in slurm.records("srun")) == ["node1", "node2"]
    assert not slurm.records("sbatch")  # a finished study submits nothing

    uri = f"sqlite:///{slurm.submit / 'mlflow.db'}"
    children = child_runs(uri, "slurm-toy")
    for run in sorted(children, key=lambda r: r.data.tags["study.trial_key"]):
        print(f"trial {run.data.tags['study.trial_key']}: {run.info.status} on node "
              f"{run.data.tags.get('study.node_id')}")  # fmt: skip
    assert len(children) == 4 and {r.info.status for r in children} == {"FINISHED"}
    nodes = {r.data.tags.get("study.node_id") for r in children}
    assert nodes == joined  # each node ran trials (1 CPU each: at most one trial a node)
    assert [r.info.status for r in parent_runs(uri, "slurm-toy")] == ["FINISHED"]
    # the job stopped its Ray itself
    wait_for(lambda: not processes_mentioning(slurm.ray_tmp), 30, "the job's processes to end")


@pytest.mark.long
@pytest.mark.slow
def test_a_term_at_the_time_limit_kills_the_runs_stops_ray_and_the_next_job_resumes(
    slurm, tmp_path
):
    name = "slurm-term"
    spec = write_spec(slurm.submit / "term.yaml", name,
                      factors={"temperature": {"levels": [0.1, 0.5], "scale": "log"}},
                      trial={"budget_examples": 128 * 24, "batch_size": 128, "eval_marks": 6},
                      replicates=2, max_concurrent=2, resources={"cpu": 1, "gpu": 0})  # fmt: skip
    uri = f"sqlite:///{slurm.submit / 'mlflow.db'}"
    trials = slurm.submit / "studies" / name / "trials"
    log = tmp_path / "job.log"
    clock = Timeline()
    clock.note(f"job {JOB} submitted")
    job = slurm.start([str(spec), "--no-figures"], slurm.env(JOB), log)

    def mid_study():
        done = [p for p in trials.glob("*") if checkpoints(p)] if trials.exists() else []
        return done and len(done) < 4

    wait_while_running(mid_study, job, log, 600, "a first checkpoint")
    started = processes_mentioning(slurm.ray_tmp)  # the job's shell, steps, Ray, driver
    sessions = {int(p.read_text()) for p in (slurm.submit / ".study-slurm" / str(JOB) /
                                             "pids").iterdir()}  # fmt: skip
    assert len(sessions) == 2 and sessions <= started
    before = {r.data.tags["study.trial_key"]: r.info.status for r in child_runs(uri, name)}
    term = clock.note(f"TERM sent to the batch shell (pid {job.pid}); {len(started)} processes "
                      f"of the job alive; trials {dict(sorted(before.items()))}")  # fmt: skip
    os.kill(job.pid, signal.SIGTERM)
    rc = wait_exit(job, 180, log)
    clock.note(f"the job exited {rc}")
    assert rc == 143, log.read_text()[-5000:]

    (driver,) = logged(log, r"study.sbatch: driver exited (\d+) at ([\d.]+)")
    assert driver[1] == "143"
    runs = [*child_runs(uri, name), *parent_runs(uri, name)]
    assert {r.info.status for r in runs} <= {"KILLED", "FINISHED"}, [r.info for r in runs]
    assert "KILLED" in {r.info.status for r in runs}
    assert parent_runs(uri, name)[0].info.status == "KILLED"
    killed = [r.info.end_time / 1000 for r in runs if r.info.status == "KILLED"]
    clock.note(f"the first of {len(killed)} runs ended KILLED", min(killed))
    clock.note(f"the last of {len(killed)} runs ended KILLED", max(killed))
    (received,) = logged(log, r"study.sbatch: TERM received at ([\d.]+)")
    clock.note("the script forwarded the TERM to the driver", float(received[1]))
    clock.note("the driver exited 143", float(driver[2]))
    # trials stopped with a checkpoint: the next job must continue them from it
    killed_trials = {r.data.tags["study.trial_key"] for r in child_runs(uri, name)
                     if r.info.status == "KILLED"}  # fmt: skip
    resumable = {key for key in killed_trials if checkpoints(trials / key)}
    (resubmitted,) = logged(log, r"study.sbatch: resubmitted at ([\d.]+)")
    clock.note("the job submitted itself again", float(resubmitted[1]))
    assert max(killed) >= term and float(driver[2]) - term < 60

    # every process the job started is gone, within Slurm's KillWait (30 s) of the driver's exit
    gone_by = time.time()
    while alive(started) and time.time() - float(driver[2]) < 30:
        time.sleep(0.2)
        gone_by = time.time()
    assert not alive(started), sorted(alive(started))
    assert not processes_mentioning(slurm.ray_tmp)
    clock.note("every process of the job gone (checked)", gone_by)
    assert gone_by - float(driver[2]) < 30

    (call,) = slurm.records("sbatch")
    assert option(call, "dependency") == f"afterany:{JOB}"
    # the next job, as Slurm would run it: the recorded script, arguments and environment
    script, args, env, folder = slurm.resubmission(call, JOB + 1)
    assert script == SCRIPT and env["STUDY_RESUBMIT_COUNT"] == "1"
    slurm.port = 0  # a fresh block: this job's ports may linger in TIME_WAIT
    env |= {k: v for k, v in slurm.env(JOB + 1).items() if k == "STUDY_RAY_PORT"}
    clock.note(f"job {JOB + 1} (the resubmission) starts")
    second = slurm.start(args, env, log, script=script, cwd=folder)
    rc = wait_exit(second, 600, log)
    clock.note(f"job {JOB + 1} exited {rc}")
    assert rc == 0, log.read_text()[-5000:]
    children = child_runs(uri, name)
    keys = [r.data.tags["study.trial_key"] for r in children]
    assert sorted(keys) == sorted(set(keys)) and len(keys) == 4  # each trial once
    assert {r.info.status for r in children} == {"FINISHED"}
    assert [r.info.status for r in parent_runs(uri, name)] == ["FINISHED"]
    assert len(slurm.records("sbatch")) == 1  # the finished study submitted nothing more
    resumed = {r.data.tags["study.trial_key"]: r.data.metrics.get("trial/resumed_from")
               for r in children}  # fmt: skip
    print(f"stopped with a checkpoint: {sorted(resumable)}; resumed_from: {resumed}")
    assert all(resumed[key] and resumed[key] > 0 for key in resumable)
    clock.show()
    lines = [line for line in log.read_text().splitlines() if line.startswith("study.sbatch")]
    print(f"job log {log}:", *lines, sep="\n")
