"""scripts/slurm/study.sbatch without Slurm (issue 51, items 1 and 2): stand-in ``srun``,
``scontrol`` and ``sbatch`` first on PATH (tests/kits/slurm_bin/) record their calls; ``srun``
runs each node's step on this machine, so the job's two nodes are two Ray nodes on 127.0.0.1
(STUDY_INTERFACE=lo), with token authentication on. A study runs on both nodes and finishes
(tests/study/test_slurm_signals.py stops one at the time limit, by scancel and by preemption).
The script's own control flow (usage, the driver's exit status, which signal queues what, issue
59: USR1 requeues, TERM and INT queue nothing; the fallback resubmission's options, read back from
``scontrol show job``, and its environment, cleaned of Slurm's variables; the chain's cap; a
requeued job's reuse of its folder) is checked quickly with stand-ins for ``study``, ``ray`` and
``python``."""

from __future__ import annotations

import json
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
    alive,
    fake_slurm,
    logged,
    option,
    processes_mentioning,
    wait_exit,
)
from studykit import child_runs, parent_runs, wait_for, write_spec

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
    2 s after a TERM and exits 0 (its last trial finished as the TERM came), or on ``term-slow``
    takes 2 s after a TERM and exits 143."""
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
        "  term-slow) trap 'kill $!; sleep 2; exit 143' TERM ;;\n"
        '  *) exit "$FAKE_STUDY_EXIT" ;;\nesac\n'
        'touch "$FAKE_DIR/driver-started"\nsleep 600 & wait $!\n',
    }
    for name, body in scripts.items():
        path = folder / name
        path.write_text(f"#!/bin/bash\n{body}")
        path.chmod(0o755)
    return folder / "study"


# what `scontrol show job` reads back of a job submitted with
# `sbatch --gres=gpu:4 --constraint=a100 --exclusive --mem=64G --cpus-per-task=8 -p gpu -A proj -q
# high`: the GPUs, the constraint and exclusivity are in no SLURM_* variable
FIELDS = {"Partition": "gpu", "Account": "proj", "QOS": "high", "CPUs/Task": "8",
          "MinMemoryNode": "64G", "Features": "a100", "OverSubscribe": "NO",
          "TresPerNode": "gres/gpu:4"}  # fmt: skip
# what Slurm sets in such a job (and a user's own SBATCH_*/SRUN_* input variables): the ones a
# resubmission from inside the job would carry into the next job, where they break its srun
INHERITED = {"SLURM_CPUS_PER_TASK": "8", "SLURM_MEM_PER_NODE": "65536", "SLURM_JOB_PARTITION":
             "gpu", "SLURM_TRES_PER_TASK": "cpu=8", "SLURMD_NODENAME": "node1",
             "SBATCH_CONSTRAINT": "v100", "SRUN_CPUS_PER_TASK": "8"}  # fmt: skip
CLEANED = ("SLURM_", "SBATCH_", "SRUN_", "SLURMD_", "RAY_AUTH_", "RAY_ADDRESS")
CAPPED = {"SLURM_RESTART_COUNT": "10"}
CHAIN_CAPPED = {"SLURM_RESTART_COUNT": "3", "STUDY_RESUBMIT_COUNT": "7"}
IN_A_CHAIN = {"STUDY_RESUBMIT_COUNT": "2"}
REFUSED = {"FAKE_SLURM_REQUEUE": "refuse"}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("exit", "signals", "settings", "expected", "queued"),
    [
        pytest.param("0", [], {}, 0, None, id="finished"),
        pytest.param("1", [], {}, 1, None, id="failed"),
        pytest.param("2", [], {}, 2, None, id="refused"),
        # the time-limit warning: the job is requeued (the same ID, every option kept)
        pytest.param("term", ["USR1"], {}, 143, "requeue", id="time-limit"),
        # its chain's count: the job's restarts plus the new jobs before it
        pytest.param("term", ["USR1"], CAPPED, 143, None, id="time-limit-capped"),
        pytest.param("term", ["USR1"], CHAIN_CAPPED, 143, None, id="time-limit-capped-chain"),
        pytest.param("term", ["USR1"], IN_A_CHAIN, 143, "requeue", id="time-limit-in-a-chain"),
        # a site that disables requeue: a new job, its options read back from scontrol
        pytest.param("term", ["USR1"], REFUSED, 143, "sbatch", id="time-limit-requeue-refused"),
        # two USR1s, the driver ending 0 after them: its own status counts, not the signal's
        pytest.param("term-late", ["USR1", "USR1"], {}, 0, None, id="time-limit-study-done"),
        # scancel (TERM), an interrupt: stop, queue nothing
        pytest.param("term", ["TERM"], {}, 143, None, id="scancel"),
        pytest.param("term", ["INT"], {}, 143, None, id="interrupt"),
        # the time-limit warning, then a cancel before the driver stopped: the cancel wins
        pytest.param("term-slow", ["USR1", "TERM"], {}, 143, None, id="time-limit-then-scancel"),
    ],
)
def test_the_signal_and_the_driver_s_exit_decide_what_is_queued(
    slurm, tmp_path, exit, signals, settings, expected, queued
):
    study = _stand_ins(tmp_path / "bin")
    fields = tmp_path / "job-fields.json"
    fields.write_text(json.dumps(FIELDS))
    slurm.extra = {"STUDY_BIN": str(study), "FAKE_DIR": str(tmp_path), "STUDY_STOP_WAIT": "1",
                   "FAKE_STUDY_EXIT": exit, "FAKE_SLURM_JOB_FIELDS": str(fields),
                   **settings}  # fmt: skip
    env = slurm.env(JOB) | INHERITED
    log = tmp_path / "job.log"
    work = tmp_path / "work"  # sbatch --chdir: the job runs apart from its submit folder
    work.mkdir()
    job = slurm.start(["s.yaml", "--no-figures"], env, log, cwd=work)
    if signals:
        wait_for(lambda: (tmp_path / "driver-started").exists(), 60, "the driver", None)
    for i, name in enumerate(signals):
        if i:
            time.sleep(0.5)
        os.kill(job.pid, getattr(signal, f"SIG{name}"))  # the batch shell alone (--signal=B:)
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

    # what was queued, and the job's last line saying which signal it was and why
    requeues = [r for r in slurm.records("scontrol") if r["argv"][0] == "requeue"]
    submitted = slurm.records("sbatch")
    last = log.read_text().splitlines()[-1]
    resume = (f"resume with: cd {slurm.submit} && sbatch --chdir={work} --job-name=study "
              f"--account=proj --qos=high --time=00:10:00 --partition=gpu --nodes=2 "
              f"--cpus-per-task=8 --mem=64G --constraint=a100 --exclusive --gres=gpu:4 "
              f"{SCRIPT} s.yaml --no-figures")  # fmt: skip
    if queued == "requeue":
        assert [r["argv"] for r in requeues] == [["requeue", str(JOB)]] and not submitted
        move = int(settings.get("STUDY_RESUBMIT_COUNT", 0)) + 1
        assert re.fullmatch(r"study.sbatch: stopped by USR1 \(the time-limit warning\): requeued "
                            rf"at [\d.]+: job {JOB} starts again with the same options, restart 1 "
                            rf"of the job, move {move} of at most 10", last), last  # fmt: skip
    elif queued == "sbatch":
        assert len(requeues) == 1
        (call,) = submitted
        assert option(call, "dependency") == f"afterany:{JOB}"
        assert option(call, "export") == "ALL,STUDY_RESUBMIT_COUNT=1,STUDY_NOT_FORMED_BEFORE=0"
        assert option(call, "chdir") == str(work) and call["cwd"] == str(slurm.submit)
        # every option from `scontrol show job`, none from the environment (its SBATCH_CONSTRAINT
        # says v100; the job was given a100)
        assert option(call, "gres") == "gpu:4" and option(call, "constraint") == "a100"
        assert "--exclusive" in call["argv"] and option(call, "mem") == "64G"
        assert option(call, "time") == "00:10:00" and option(call, "nodes") == "2"
        assert option(call, "partition") == "gpu" and option(call, "cpus-per-task") == "8"
        assert option(call, "account") == "proj" and option(call, "qos") == "high"
        assert option(call, "job-name") == "study"
        assert call["argv"][-3:] == [str(SCRIPT), "s.yaml", "--no-figures"]
        # the environment it hands the next job: no variable of Slurm's or of this job's cluster
        assert not [k for k in call["env"] if k.startswith(CLEANED)], sorted(call["env"])
        assert "RAY_AUTH_TOKEN" not in call["env"]
        # nothing of this job's own (its folder, ports, temp dir) is handed to the next one
        assert not {"STUDY_JOB_DIR", "STUDY_HOME", "STUDY_PYTHON"} & set(call["env"])
        assert call["env"]["STUDY_RAY_PORT"] == str(port)  # the user's own setting is kept
        assert last.startswith("study.sbatch: stopped by USR1 (the time-limit warning): "
                               f"`scontrol requeue {JOB}` refused (Requested operation is "
                               f"presently disabled for job {JOB} ); resubmitted at ")  # fmt: skip
    else:
        assert not requeues and not submitted, (requeues, submitted)
    if settings in (CAPPED, CHAIN_CAPPED):
        assert last == (f"study.sbatch: stopped by USR1 (the time-limit warning): nothing queued: "
                        f"its chain moved on 10 time(s) already (STUDY_RESUBMIT_MAX=10); "
                        f"{resume}")  # fmt: skip
    if signals and signals[-1] in ("TERM", "INT"):
        why = {"TERM": "TERM (scancel or preemption)", "INT": "INT (an interrupt)"}[signals[-1]]
        assert last == f"study.sbatch: stopped by {why}: nothing queued; {resume}"
    if exit == "term-late":
        assert last == ("study.sbatch: stopped by USR1 (the time-limit warning), as the study "
                        "finished (the driver exited 0): nothing queued")  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(("name", "queued"), [("USR1", True), ("TERM", False)])
def test_a_signal_while_the_nodes_join_stops_them(slurm, tmp_path, name, queued):
    """The time-limit warning while the cluster forms requeues the job; a cancel queues nothing."""
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
    os.kill(job.pid, getattr(signal, f"SIG{name}"))
    assert wait_exit(job, 60, log) == 143, log.read_text()
    assert logged(log, f"stopped by {name} before the study started")
    assert [s["host"] for s in slurm.records("srun")] == ["node1"]  # no worker was started
    assert not (tmp_path / "study-args").exists()
    requeues = [r["argv"] for r in slurm.records("scontrol") if r["argv"][0] == "requeue"]
    assert requeues == ([["requeue", str(JOB)]] if queued else [])
    assert not slurm.records("sbatch")


@pytest.mark.slow
def test_a_requeued_job_reuses_its_folder_knowingly(slurm, tmp_path):
    """Slurm starts a requeued job again with the same ID (SLURM_RESTART_COUNT=1) and, under
    --open-mode=append, the same output file: the job says it is a restart, removes the stale
    PID files of the run before (never signalling them), keeps that run's node logs and renews
    the token."""
    study = _stand_ins(tmp_path / "bin")
    slurm.extra = {"STUDY_BIN": str(study), "FAKE_DIR": str(tmp_path), "STUDY_STOP_WAIT": "1",
                   "FAKE_STUDY_EXIT": "0"}  # fmt: skip
    log = tmp_path / "job.log"
    env = slurm.env(JOB)
    assert wait_exit(slurm.start(["s.yaml"], env, log), 60, log) == 0, log.read_text()
    job_dir = slurm.submit / ".study-slurm" / str(JOB)
    before = {p.name: p.read_text() for p in (job_dir / "pids").iterdir()}
    assert len(before) == 2 and (job_dir / "driver.pid").exists()
    token = (job_dir / "auth_token").read_text()
    first = log.read_text()

    again = slurm.start(["s.yaml"], slurm.requeued(env), log)
    assert wait_exit(again, 60, log) == 0, log.read_text()
    said = log.read_text()
    assert said.startswith(first)  # appended, not truncated
    assert len(logged(log, r"study.sbatch: driver exited 0\b")) == 2
    assert logged(log, rf"study.sbatch: job {JOB} started again: restart 1 of the job "
                       r"\(SLURM_RESTART_COUNT\)")  # fmt: skip
    assert logged(log, rf"job folder {job_dir} reused: 3 stale PID file\(s\) removed, 2 node "
                       rf"log\(s\) and Ray's own logs of the run before kept in "
                       rf"{job_dir}/before-restart-1, the token renewed")  # fmt: skip
    assert logged(log, rf"study.sbatch: job {JOB} \(resubmission 1 of at most 10\)")
    after = {p.name: p.read_text() for p in (job_dir / "pids").iterdir()}
    assert after.keys() == before.keys() and not set(after.values()) & set(before.values())
    assert sorted(p.name for p in (job_dir / "before-restart-1").iterdir()) == [
        "ray-0-node1.log", "ray-1-node2.log", "ray-logs"]  # fmt: skip
    assert (job_dir / "auth_token").read_text() != token


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
