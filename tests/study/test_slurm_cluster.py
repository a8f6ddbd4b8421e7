"""scripts/slurm/study.sbatch forming its cluster where real sites differ from a quiet machine
(issue 59, items 2 to 6): a slow head, a worker whose first ``ray start`` fails, a port of the
job's block taken, two jobs whose ids share the default block, memory from the job's
allocation, the job's own MLflow server writing the store, Ray's logs kept and its temp dir
removed. The nodes are real Ray nodes on 127.0.0.1 (stand-ins only for Slurm's commands,
tests/kits/slurm_bin/, and for ``ray`` where a node must be slow or fail once); the quick
tests of the script's own choices use stand-ins for ``ray``, ``python``'s join and ``study``."""

from __future__ import annotations

import os
import re
import socket
import stat
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from slurmkit import _free, fake_slurm, logged, processes_mentioning, wait_exit, wait_while_running
from studykit import child_runs, parent_runs, wait_for, write_spec

JOB = 5901
REAL_BIN = Path(__file__).resolve().parents[2] / ".venv" / "bin"
MB = 1 << 20


@pytest.fixture
def slurm(tmp_path):
    """A fake Slurm's job (slurmkit.fake_slurm): every process it started is ended after."""
    with fake_slurm(tmp_path, prefix="rc") as job:
        yield job


def _job_dir(slurm, job_id: int = JOB) -> Path:
    return slurm.submit / ".study-slurm" / str(job_id)


def _tiny(path: Path, name: str, levels=(0.1, 0.5)) -> Path:
    return write_spec(path, name, factors={"temperature": {"levels": list(levels)}},
                      max_concurrent=2, resources={"cpu": 1, "gpu": 0})  # fmt: skip


def _script(path: Path, body: str) -> Path:
    path.write_text(f"#!/bin/bash\n{body}")
    path.chmod(0o755)
    return path


def _assert_nodes_cleaned(slurm, log: Path, nodes: list[str], job_id: int = JOB) -> None:
    """Every node's Ray temp dir is gone and its Ray session logs (raylet.out and the rest) are
    in the job folder under the node's name, at most 1 MB a file."""
    temps = [Path(m[1]).parent for m in logged(log, r"Ray's temp dir (\S+/ray);")]
    assert temps, log.read_text()[-3000:]
    assert not [t for t in temps if t.exists()], temps
    for name in nodes:
        logs = _job_dir(slurm, job_id) / "ray-logs" / name
        files = [p for p in logs.rglob("*") if p.is_file()]
        assert any(p.name == "raylet.out" for p in files), (name, files)
        assert all(p.stat().st_size <= MB for p in files)
        assert stat.S_IMODE(logs.stat().st_mode) == 0o700
    assert logged(log, rf"{nodes[0]}: Ray's logs in \S+ray-logs/{nodes[0]} \(\d+ files")


# --- a real two-node cluster on a slow and a busy node -------------------------------------------


@pytest.mark.long
@pytest.mark.slow
def test_a_slow_head_and_a_worker_whose_first_start_fails_still_form_the_cluster(slurm, tmp_path):
    """ray-project/ray#8181 and #25819 (a worker that reaches the head before its GCS answers
    fails): the head's `ray start` is 40 s late, as on a loaded node, and the worker's first one
    fails. The workers start only once the head's GCS answers, the failed start is tried
    again with its output kept, and the study finishes. The job states --mem (2048 MB a node,
    ray-project/ray#6968: Ray sized from the whole machine): each `ray start` and each joined
    node carry it. Afterwards Ray's temp dirs are gone and its logs are in the job folder."""
    delay = 40
    ray = _script(tmp_path / "ray", f"""
echo "$(date +%s.%N) $*" >>"{tmp_path}/ray-starts"
case " $* " in
    *" --head "*) sleep {delay} ;;
    *) if [ ! -e "{tmp_path}/worker-failed" ]; then
           touch "{tmp_path}/worker-failed"
           echo "stand-in: this node's first ray start fails" >&2
           exit 1
       fi ;;
esac
exec {REAL_BIN}/ray "$@"
""")  # fmt: skip
    spec = _tiny(slurm.submit / "slow.yaml", "slurm-slow")
    slurm.extra = {"STUDY_RAY_BIN": str(ray), "SLURM_MEM_PER_NODE": "2048"}
    log = tmp_path / "job.log"
    t0 = time.time()
    job = slurm.start([str(spec), "--no-figures"], slurm.env(JOB), log)
    rc = wait_exit(job, 600, log)
    print(f"job {JOB}: exit {rc} after {time.time() - t0:.1f} s")
    print(*(line for line in log.read_text().splitlines() if "study.sbatch" in line), sep="\n")
    assert rc == 0, log.read_text()[-5000:]

    starts = [line.split(" ", 1) for line in (tmp_path / "ray-starts").read_text().splitlines()]
    head = [float(t) for t, args in starts if " --head " in f" {args} "]
    workers = [float(t) for t, args in starts if " --head " not in f" {args} "]
    assert len(head) == 1 and len(workers) == 2, starts  # the worker's second start joined
    # no worker started before the head's GCS answered (its `ray start` ran after the delay)
    assert workers[0] > head[0] + delay, (head, workers)
    worker_log = (_job_dir(slurm) / "ray-1-node2.log").read_text()
    assert "=== study.sbatch: attempt 1 of 3" in worker_log
    assert "stand-in: this node's first ray start fails" in worker_log  # the first attempt kept
    assert "=== study.sbatch: attempt 2 of 3" in worker_log
    assert logged(log, r"worker 1 on node2: ray start exited before the node started "
                       r"\(attempt 1 of 3")  # fmt: skip

    # memory: the job's 2048 MB a node, 30 % of it for the object store, the rest for tasks
    store = int(2048 * MB * 0.3)
    for _, args in starts:
        assert f"--memory {2048 * MB - store} --object-store-memory {store} " in args, args
    said = logged(
        log,
        r"(head|worker) \d on node\d \(\S+\): 127\.0\.0\.1, 1 CPUs, 0 GPUs, "
        r"memory 2048 MB: 1433 MB for tasks and an object store of 614 MB \(0\.3\)",
    )
    assert {m[1] for m in said} == {"head", "worker"}  # the worker's line once an attempt
    joined = logged(log, r"joined: 1 CPUs, 0 GPUs \((\w+)\), (\d+) MB memory, (\d+) MB object")
    assert sorted(m[1] for m in joined) == ["head", "worker"], log.read_text()[-3000:]
    assert all((m[2], m[3]) == ("1433", "614") for m in joined), [m.string for m in joined]

    uri = f"sqlite:///{slurm.submit / 'mlflow.db'}"
    assert {r.info.status for r in child_runs(uri, "slurm-slow")} == {"FINISHED"}
    assert len(child_runs(uri, "slurm-slow")) == 2
    assert [r.info.status for r in parent_runs(uri, "slurm-slow")] == ["FINISHED"]
    _assert_nodes_cleaned(slurm, log, ["0-node1", "1-node2"])
    wait_for(lambda: not processes_mentioning(slurm.ray_tmp), 30, "the job's processes to end")


@pytest.mark.long
@pytest.mark.slow
def test_a_taken_port_moves_the_job_and_its_own_mlflow_server_records_the_study(slurm, tmp_path):
    """The head's GCS port is held by another process: the head moves to the next free block,
    writes it to head_address, the worker joins it and the study finishes. With
    STUDY_MLFLOW_SERVER=on (the default where the store is on NFS, Lustre, …: SQLite's locks do
    not hold there, optuna/optuna#815 "database disk image is malformed") the driver records
    through the job's own MLflow server on the head, which is gone after the job, and every run
    is in the store file. A live job of another host marked as writing the store is named at
    the start."""
    spec = _tiny(slurm.submit / "served.yaml", "slurm-served")
    slurm.extra = {"STUDY_MLFLOW_SERVER": "on"}
    env = slurm.env(JOB)
    base = slurm.port
    marker = slurm.submit / ".mlflow.db.writer"
    marker.write_text("other-node 4242 777\n")  # a job of another host (scontrol: RUNNING)
    log = tmp_path / "job.log"
    with socket.socket() as held:
        held.bind(("127.0.0.1", base))
        held.listen()
        job = slurm.start([str(spec), "--no-figures"], env, log)
        pid_file = _job_dir(slurm) / "driver.pid"
        wait_while_running(pid_file.exists, job, log, 600, "the driver")
        import psutil

        driver_env = wait_while_running(
            lambda: _environ(psutil, int(pid_file.read_text())), job, log, 30, "its environment"
        )  # fmt: skip
        served = (_job_dir(slurm) / "mlflow_address").read_text().strip()
        assert marker.read_text().split()[1:] == [str(JOB), str(job.pid)]  # this job's, now
        rc = wait_exit(job, 600, log)
    print(*(line for line in log.read_text().splitlines() if "study.sbatch" in line), sep="\n")
    assert rc == 0, log.read_text()[-5000:]

    moved = int((_job_dir(slurm) / "head_address").read_text().strip().rsplit(":", 1)[1])
    assert moved != base and (moved - base) % (2 * slurm.ports_per_node) == 0, (base, moved)
    assert logged(log, rf"head 0 on node1: a port of {base}-{base + 39} is taken on this node: "
                       rf"ports {moved}-{moved + 39}")  # fmt: skip
    assert logged(log, rf"head at 127\.0\.0\.1:{moved} \(\S+head_address\); starting the workers")
    worker_log = (_job_dir(slurm) / "ray-1-node2.log").read_text()
    assert f"--address 127.0.0.1:{moved} " in worker_log  # the worker read the moved address

    assert served == f"http://127.0.0.1:{moved + 9}"
    assert driver_env.get("MLFLOW_TRACKING_URI") == served
    assert logged(log, r"the store \S+mlflow\.db \(\S+\) is served by the job's own MLflow "
                       r"server on the head \(STUDY_MLFLOW_SERVER=on\)")  # fmt: skip
    assert logged(log, r"warning: the store \S+mlflow\.db is being written by job 4242 on "
                       r"other-node \(pid 777\) too: .* one tracking server")  # fmt: skip
    with pytest.raises(urllib.error.URLError):  # the server is gone with the job
        urllib.request.urlopen(f"{served}/health", timeout=5)
    wait_for(lambda: not processes_mentioning(str(slurm.submit / "mlflow.db")), 30,
             "the processes that named the store (the server's) to end")  # fmt: skip
    assert not marker.exists()  # this job's marker removed at its end

    uri = f"sqlite:///{slurm.submit / 'mlflow.db'}"  # the file, read here after the job
    children = child_runs(uri, "slurm-served")
    assert len(children) == 2 and {r.info.status for r in children} == {"FINISHED"}
    assert [r.info.status for r in parent_runs(uri, "slurm-served")] == ["FINISHED"]
    parent = parent_runs(uri, "slurm-served")[0]
    from mlflow.tracking import MlflowClient

    location = MlflowClient(uri).get_experiment(parent.info.experiment_id).artifact_location
    assert str(slurm.submit / "studies" / "mlartifacts") in location, location
    assert MlflowClient(uri).list_artifacts(parent.info.run_id)  # readable from the file
    _assert_nodes_cleaned(slurm, log, ["0-node1", "1-node2"])
    wait_for(lambda: not processes_mentioning(slurm.ray_tmp), 30, "the job's processes to end")


def _environ(psutil, pid: int) -> dict | None:
    try:
        env = psutil.Process(pid).environ()
    except psutil.Error:
        return None
    return env if "MLFLOW_TRACKING_URI" in env else None


@pytest.mark.long
@pytest.mark.slow
def test_two_jobs_whose_ids_differ_by_63_share_a_node_with_the_default_ports(tmp_path):
    """The default block is 20000 + (job id mod 63) x 200: jobs 63 apart get the same one. The
    second job, started while the first holds its ports, finds them taken, moves, and both
    studies finish."""
    with fake_slurm(tmp_path, prefix="rc") as slurm:
        slurm.nodes = ("node1",)
        slot = next(
            s
            for s in range(3, 62)
            if all(_free(p) for p in range(20000 + s * 200, 20000 + (s + 2) * 200))
        )
        first, second = 6300 + slot, 6300 + slot + 63  # fmt: skip
        gate = tmp_path / "gate"
        # the first job's driver waits for the test, so that both jobs hold their ports at once
        held = _script(tmp_path / "study", f'until [ -e "{gate}" ]; do sleep 0.2; done\n'
                                           f'exec {REAL_BIN}/study "$@"\n')  # fmt: skip
        jobs, logs = {}, {}
        for job_id, study in ((first, held), (second, REAL_BIN / "study")):
            env = slurm.env(job_id) | {
                "STUDY_BIN": str(study),
                "STUDY_PYTHON": str(REAL_BIN / "python"),
                "STUDY_RAY_BIN": str(REAL_BIN / "ray"),
            }
            for name in ("STUDY_RAY_PORT", "STUDY_RAY_PORTS", "STUDY_RAY_NODE_STRIDE"):
                del env[name]  # the default formula
            spec = _tiny(slurm.submit / f"j{job_id}.yaml", f"slurm-{job_id}", levels=(0.1,))
            logs[job_id] = tmp_path / f"job-{job_id}.log"
            jobs[job_id] = slurm.start([str(spec), "--no-figures"], env, logs[job_id])
            wait_while_running(lambda j=job_id: logged(logs[j], r"head at 127\.0\.0\.1:(\d+)"),
                               jobs[job_id], logs[job_id], 300, "its head")  # fmt: skip
        ports = {j: int(logged(logs[j], r"head at 127\.0\.0\.1:(\d+)")[0][1]) for j in jobs}
        print(f"jobs {first} and {second}: heads at ports {ports}")
        assert ports[first] == 20000 + slot * 200  # the default formula's block
        assert ports[second] == ports[first] + 200  # moved to the next block
        assert logged(logs[second], rf"a port of {ports[first]}-{ports[first] + 199} is taken")
        for job_id, port in ports.items():  # both clusters' GCS answer at this moment
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
            assert jobs[job_id].poll() is None
        gate.touch()
        for job_id in jobs:
            rc = wait_exit(jobs[job_id], 600, logs[job_id])
            assert rc == 0, logs[job_id].read_text()[-4000:]
        uri = f"sqlite:///{slurm.submit / 'mlflow.db'}"
        for job_id in jobs:
            assert [r.info.status for r in child_runs(uri, f"slurm-{job_id}")] == ["FINISHED"]
            _assert_nodes_cleaned(slurm, logs[job_id], ["0-node1"], job_id)


# --- the script's own choices, with stand-ins for ray, the join and study ------------------------


def _stand_ins(folder: Path, ray_body: str | None = None) -> Path:
    """``ray`` (records its arguments and the open-file limit it was given, then sleeps until
    ended), ``python`` (runs ``-c`` code with python3; as the join, waits until every node
    started) and ``study`` (records its store and exits 0)."""
    folder.mkdir()
    default_ray = ('echo "$$ $(ulimit -n) $*" >>"$FAKE_DIR/ray-starts"\n'
                   'echo "Ray runtime started."\nexec sleep 600\n')  # fmt: skip
    _script(folder / "ray", ray_body or default_ray)
    _script(folder / "python", 'if [ "$1" = -c ]; then exec python3 "$@"; fi\ncat >/dev/null\n'
            'until [ "$(cat "$FAKE_DIR/ray-starts" 2>/dev/null | wc -l)" -ge "$3" ]; do\n'
            "  sleep 0.1\ndone\n")  # fmt: skip
    _script(folder / "study", 'echo "$MLFLOW_TRACKING_URI" >"$FAKE_DIR/study-store"\n')
    return folder / "study"


def _quick_env(slurm, tmp_path, **extra) -> dict:
    study = _stand_ins(tmp_path / "bin")
    slurm.extra = {"STUDY_BIN": str(study), "FAKE_DIR": str(tmp_path), "STUDY_STOP_WAIT": "1"}
    return slurm.env(JOB) | extra


@pytest.mark.slow
@pytest.mark.parametrize(
    ("allocation", "total_mb"),
    [
        pytest.param({"SLURM_MEM_PER_NODE": "3000"}, 3000, id="mem-per-node"),
        pytest.param({"SLURM_MEM_PER_CPU": "700", "SLURM_CPUS_ON_NODE": "2"}, 1400, id="per-cpu"),
        pytest.param({}, None, id="none-stated"),
    ],
)
def test_each_ray_start_gets_the_job_s_memory_and_the_open_file_limit(slurm, tmp_path, allocation,
                                                                      total_mb):  # fmt: skip
    env = _quick_env(slurm, tmp_path, **allocation, STUDY_OBJECT_STORE_FRACTION="0.25")
    log = tmp_path / "job.log"
    job = slurm.start(["s.yaml"], env, log)
    assert wait_exit(job, 60, log) == 0, log.read_text()
    starts = (tmp_path / "ray-starts").read_text().splitlines()
    assert len(starts) == 2
    hard = subprocess.run(["bash", "-c", "ulimit -H -n"], capture_output=True, text=True).stdout
    for line in starts:
        assert line.split()[1] == hard.strip()  # the soft limit raised to the hard one
        if total_mb is None:
            assert "--memory" not in line and "--object-store-memory" not in line
            continue
        memory = int(re.search(r"--memory (\d+) ", line)[1])
        store = int(re.search(r"--object-store-memory (\d+) ", line)[1])
        assert memory + store == total_mb * MB and store == int(total_mb * MB * 0.25)
    said = "memory Ray's own" if total_mb is None else f"memory {total_mb} MB: "
    assert len([m for m in logged(log, r"(head|worker) \d on node\d .*") if said in m[0]]) == 2


def requeues(slurm) -> list[list[str]]:
    return [r["argv"] for r in slurm.records("scontrol") if r["argv"][0] == "requeue"]


@pytest.mark.slow
def test_a_cluster_that_does_not_form_exits_3_after_trying_each_start_again(slurm, tmp_path):
    """A head whose every `ray start` fails: each attempt's output kept in its log, under a
    header, then the job exits 3 (its own status) without starting a worker or the driver, and
    the chain tries the job again, once: requeued; the same job failing again to form its
    cluster is not requeued a second time."""
    failing = 'echo "$$ 0 $*" >>"$FAKE_DIR/ray-fails"\necho "stand-in: no luck" >&2\nexit 1\n'
    env = _quick_env(slurm, tmp_path, STUDY_RAY_START_TRIES="2")
    _script(tmp_path / "bin" / "ray", failing)
    log = tmp_path / "job.log"
    job = slurm.start(["s.yaml"], env, log)
    assert wait_exit(job, 60, log) == 3, log.read_text()
    head_log = (_job_dir(slurm) / "ray-0-node1.log").read_text()
    assert head_log.count("stand-in: no luck") == 2
    assert "attempt 1 of 2" in head_log and "attempt 2 of 2" in head_log
    assert logged(log, r"driver exited 3 \(not started: the cluster did not form\)")
    assert [s["host"] for s in slurm.records("srun")] == ["node1"]
    assert not (tmp_path / "study-store").exists()
    temps = [Path(m[1]).parent for m in logged(log, r"Ray's temp dir (\S+/ray);")]
    assert temps and not [t for t in temps if t.exists()]
    assert requeues(slurm) == [["requeue", env["SLURM_JOB_ID"]]]
    assert logged(log, r"the cluster did not form \(exit 3\): tried again, once: requeued")

    again = slurm.start(["s.yaml"], slurm.requeued(env), log)  # Slurm starts it again
    assert wait_exit(again, 60, log) == 3, log.read_text()
    assert len(requeues(slurm)) == 1 and not slurm.records("sbatch")  # nothing more queued
    last = log.read_text().strip().splitlines()[-1]
    assert "the cluster did not form, a second time in a row: nothing queued" in last, last


@pytest.mark.slow
def test_a_temp_root_too_long_for_ray_s_sockets_falls_back_to_tmp(slurm, tmp_path):
    long_root = Path(slurm.ray_tmp) / "a-rather-long-scratch"  # over 22 characters
    long_root.mkdir()
    env = _quick_env(slurm, tmp_path, STUDY_RAY_TMPDIR=str(long_root))
    log = tmp_path / "job.log"
    job = slurm.start(["s.yaml"], env, log)
    assert wait_exit(job, 60, log) == 0, log.read_text()
    said = rf"STUDY_RAY_TMPDIR={long_root} is too long for Ray's Unix socket paths \(107 bytes; "
    assert len(logged(log, said + r"at most 22 characters here\): /tmp instead")) == 2
    temps = [m[1] for m in logged(log, r"Ray's temp dir (\S+/ray);")]
    assert len(temps) == 2 and all(re.fullmatch(r"/tmp/study-ray\.\w{6}/ray", t) for t in temps)
    assert not [t for t in temps if Path(t).parent.exists()]  # removed at the end


@pytest.mark.slow
@pytest.mark.parametrize("planted", ["live-other-host", "symlink", "another-user", "this-job"])
def test_a_store_another_host_writes_is_named_at_the_start(slurm, tmp_path, planted):
    """SQLite on a network filesystem written from two hosts corrupts (optuna/optuna#815): a
    job told by the marker beside the store that a live job of another host writes it says so
    with the fix. A marker that is a symbolic link is not followed (its target is left as it
    was), one another user made is only reported."""
    marker = slurm.submit / ".mlflow.db.writer"
    target = tmp_path / "target"
    if planted == "symlink":
        target.write_text("other-node 4242 777\n")
        marker.symlink_to(target)
    else:
        marker.write_text(f"other-node {JOB if planted == 'this-job' else 4242} 777\n")
        if planted == "another-user":
            if os.getuid() != 0:
                pytest.skip("only root can give a file another owner here")
            os.chown(marker, 65534, 65534)
    env = _quick_env(slurm, tmp_path)
    log = tmp_path / "job.log"
    job = slurm.start(["s.yaml"], env, log)
    assert wait_exit(job, 60, log) == 0, log.read_text()
    said = "\n".join(m.string for m in logged(log, r"warning: "))
    if planted == "live-other-host":
        assert "is being written by job 4242 on other-node (pid 777) too" in said, said
        assert "STUDY_TRACKING_URI=http://HOST:PORT" in said and "a store of its own" in said
    elif planted == "symlink":
        assert "is not a marker" in said and "not read" in said, said
        assert target.read_text() == "other-node 4242 777\n"  # never written through
    elif planted == "another-user":
        assert "was made by another user (uid 65534)" in said and "not trusted" in said, said
    else:
        assert not said  # this job itself, started again
    assert logged(log, r"the store \S+mlflow\.db \(\S+\) is written by the driver "
                       r"\(STUDY_MLFLOW_SERVER=auto\)")  # fmt: skip
    assert (tmp_path / "study-store").read_text().strip().startswith("sqlite:///")
    assert not marker.exists() and not marker.is_symlink()  # this job's own, removed at its end
