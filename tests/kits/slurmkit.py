"""A Slurm job of scripts/slurm/study.sbatch without Slurm: stand-in ``srun``, ``scontrol`` and
``sbatch`` (tests/kits/slurm_bin/) first on PATH record their calls in a JSON-lines file; srun
runs each node's step on this machine, so a job's "nodes" are Ray nodes on 127.0.0.1."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "slurm" / "study.sbatch"
SLURM_BIN = Path(__file__).with_name("slurm_bin")


def free_port_block(size: int, lo: int = 20000, hi: int = 32000) -> int:
    """The first port of ``size`` consecutive ports that are free on every interface, below the
    kernel's ephemeral range (where ports the OS hands out at random could take one meanwhile)."""
    for _ in range(200):
        base = random.randrange(lo, hi - size)
        if all(_free(port) for port in range(base, base + size)):
            return base
    raise AssertionError(f"no {size} free consecutive ports in {lo}-{hi}")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def processes_mentioning(text: str) -> set[int]:
    """PIDs of the processes (not this one) whose command line or environment holds ``text``."""
    import psutil

    found = set()
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        if proc.pid == os.getpid() or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
            if text in cmdline or any(text in v for v in proc.environ().values()):
                found.add(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def alive(pids: set[int]) -> set[int]:
    import psutil

    left = set()
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                left.add(pid)
        except psutil.NoSuchProcess:
            pass
    return left


@dataclass
class SlurmJob:
    """One fake cluster's jobs: a submit folder, a short Ray temp dir and a port block."""

    submit: Path
    ray_tmp: str
    calls: Path
    nodes: tuple[str, ...] = ("node1", "node2")
    cpus_per_node: int = 1
    port: int = 0
    ports_per_node: int = 40
    extra: dict = field(default_factory=dict)

    def env(self, job_id: int) -> dict[str, str]:
        """What Slurm gives a batch script of job ``job_id``, plus the test's own settings: every
        node binds lo (127.0.0.1), the nodes share this machine so their ports are a stride
        apart, and Ray's temp dir is the test's."""
        if not self.port:
            self.port = free_port_block(self.ports_per_node * len(self.nodes))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RAY_"))}
        job = {
            "PATH": f"{SLURM_BIN}{os.pathsep}{env.get('PATH', '')}",
            "FAKE_SLURM_LOG": str(self.calls),
            "FAKE_SLURM_NEXT_JOB_ID": str(job_id + 1),
            "SLURM_JOB_ID": str(job_id),
            "SLURM_JOB_NAME": "study",
            "SLURM_JOB_NODELIST": ",".join(self.nodes),
            "SLURM_JOB_NUM_NODES": str(len(self.nodes)),
            "SLURM_SUBMIT_DIR": str(self.submit),
            "SLURM_CPUS_ON_NODE": str(self.cpus_per_node),
            "STUDY_INTERFACE": "lo",
            "STUDY_RAY_TMPDIR": self.ray_tmp,
            "STUDY_RAY_PORT": str(self.port),
            "STUDY_RAY_PORTS": str(self.ports_per_node),
            "STUDY_RAY_NODE_STRIDE": str(self.ports_per_node),
            "STUDY_JOIN_TIMEOUT": "240",
        }
        return env | job | self.extra

    def start(
        self, args: list[str], env: dict[str, str], log: Path, script: Path = SCRIPT,
        cwd: Path | None = None,
    ) -> subprocess.Popen:  # fmt: skip
        """The batch script, as slurmd runs it: in the submit folder, output to ``log``; a
        session of its own, so that a signal to the test's group never reaches it."""
        with open(log, "ab") as out:
            return subprocess.Popen(
                ["bash", str(script), *args], cwd=cwd or self.submit, env=env, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    def records(self, tool: str | None = None) -> list[dict]:
        if not self.calls.exists():
            return []
        rows = [json.loads(line) for line in self.calls.read_text().splitlines() if line]
        return [r for r in rows if tool is None or r["tool"] == tool]

    def resubmission(self, record: dict, job_id: int) -> tuple[Path, list[str], dict, Path]:
        """What a recorded ``sbatch`` call would run: (script, its arguments, the next job's
        environment, its folder). The environment is the one sbatch was called in
        (``--export=ALL``: every SLURM_* variable it inherited too, as Slurm propagates them)
        plus what ``--export`` adds, with Slurm's own variables of job ``job_id`` over it."""
        argv = list(record["argv"])
        options = []
        while argv and argv[0].startswith("-"):
            options.append(argv.pop(0))
        script, args = Path(argv[0]), argv[1:]
        env = dict(record["env"])
        for option in options:
            if option.startswith("--export="):
                first, *pairs = option.split("=", 1)[1].split(",")
                assert first == "ALL", option
                env |= dict(pair.split("=", 1) for pair in pairs)
        chdir = next((o.split("=", 1)[1] for o in options if o.startswith("--chdir=")), None)
        folder = Path(chdir or record["cwd"])
        slurm = self.env(job_id)
        env |= {k: v for k, v in slurm.items() if k.startswith("SLURM_")}
        env["FAKE_SLURM_NEXT_JOB_ID"] = str(job_id + 1)
        return script, args, env, folder

    def requeued(self, env: dict[str, str], restarts: int = 1) -> dict[str, str]:
        """The environment Slurm starts a requeued job in: the one it was submitted with (``env``,
        the same SLURM_JOB_ID), with SLURM_RESTART_COUNT, the times it was started again."""
        return env | {"SLURM_RESTART_COUNT": str(restarts)}


def option(record: dict, name: str) -> str | None:
    """The value of ``--name=VALUE`` among a recorded call's arguments."""
    for arg in record["argv"]:
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
    return None


def logged(log: Path, pattern: str) -> list[re.Match]:
    """Every match of ``pattern`` (a regular expression) among the job log's lines."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return [m for line in text.splitlines() if (m := re.search(pattern, line))]


def wait_while_running(predicate, job: subprocess.Popen, log: Path, timeout: float, what: str):
    """Poll ``predicate`` until it holds, failing with the job log's tail if the job ends first
    or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        ended = job.poll() is not None
        if ended or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-5000:] if log.exists() else ""
            why = f"the job exited {job.returncode}" if ended else f"{timeout} s passed"
            raise AssertionError(f"{why} before {what}; its log ends:\n{tail}")
        time.sleep(0.1)
    return value


def wait_exit(process: subprocess.Popen, timeout: float, log: Path) -> int:
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        tail = log.read_text(errors="replace")[-4000:] if log.exists() else ""
        raise AssertionError(f"the job did not end in {timeout} s; its log ends:\n{tail}") from None


class Timeline:
    """A test's timeline: events in seconds since it began (and the wall clock), printed as
    they are noted and, sorted, by :meth:`show`."""

    def __init__(self) -> None:
        self.t0 = time.time()
        self.events: list[tuple[float, str]] = []

    def note(self, what: str, at: float | None = None) -> float:
        at = time.time() if at is None else at
        self.events.append((at, what))
        print(self._line(at, what), flush=True)
        return at

    def show(self) -> None:
        print("timeline:", *(self._line(at, what) for at, what in sorted(self.events)), sep="\n")

    def write(self, path: Path | str) -> None:
        """The sorted timeline to ``path`` (a file to quote from), and printed."""
        self.show()
        lines = [self._line(at, what) for at, what in sorted(self.events)]
        Path(path).write_text("\n".join(lines) + "\n")

    def _line(self, at: float, what: str) -> str:
        clock = time.strftime("%H:%M:%S", time.localtime(at))
        return f"  {at - self.t0:7.2f} s  ({clock}.{int(at % 1 * 1000):03d})  {what}"


@contextlib.contextmanager
def fake_slurm(tmp_path: Path, prefix: str = "rs"):
    """A :class:`SlurmJob` with a submit folder, a short Ray temp dir of the test's own (Unix
    socket paths are limited to ~107 bytes) and the stand-ins' call log; afterwards every
    process whose command line or environment names the temp dir (each job's shell, driver,
    srun steps and Ray's processes all carry it in STUDY_RAY_TMPDIR) is killed by PID."""
    from processkit import kill_processes_mentioning

    ray_tmp = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    submit = tmp_path / "submit"
    submit.mkdir()
    try:
        yield SlurmJob(submit=submit, ray_tmp=ray_tmp, calls=tmp_path / "slurm-calls.jsonl")
    finally:
        kill_processes_mentioning(ray_tmp)
        shutil.rmtree(ray_tmp, ignore_errors=True)
