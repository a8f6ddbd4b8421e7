"""Real Ray nodes for the cluster tests: ``ray start`` on 127.0.0.1, token authentication on.

Each node runs ``ray start … --block`` in a process session of its own, so that it is ended
whole (its GCS, raylet and agents) by process group: TERM, then KILL a few seconds later; then
every process that still mentions the cluster's temp folder is killed by PID. ``ray stop`` is
never run (it would stop every Ray on the machine)."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from processkit import kill_processes_mentioning

RAY = str(Path(sys.executable).with_name("ray"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class TokenCluster:
    """A cluster of ``ray start`` nodes on 127.0.0.1 sharing one token file."""

    root: Path  # short (Unix socket paths): the nodes' temp folder and the token live here
    port: int
    nodes: list[subprocess.Popen] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def token_path(self) -> Path:
        return self.root / "auth_token"

    def env(self, **extra: str) -> dict[str, str]:
        """This process's environment with the cluster's token (what a driver needs to join)."""
        token = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(self.token_path)}
        return dict(os.environ) | token | extra

    def start_node(self, *, head: bool, cpus: int = 1, gpus: int = 0) -> subprocess.Popen:
        where = (
            ["--head", "--port", str(self.port), "--include-dashboard=false"]
            if head
            else ["--address", self.address]
        )
        command = [
            RAY, "start", *where, "--node-ip-address", "127.0.0.1", "--temp-dir",
            str(self.root / "t"), "--num-cpus", str(cpus), "--num-gpus", str(gpus),
            "--disable-usage-stats", "--block",
        ]  # fmt: skip
        if not head:  # a second node on this machine needs ports of its own
            command += ["--node-manager-port", str(free_port()),
                        "--object-manager-port", str(free_port()),
                        "--min-worker-port", "0", "--max-worker-port", "0"]  # fmt: skip
        log = open(self.root / f"node{len(self.nodes)}.log", "w")  # noqa: SIM115
        node = subprocess.Popen(command, env=self.env(), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
        self.nodes.append(node)
        return node

    def alive_nodes(self) -> list[dict]:
        """The live nodes as the cluster's GCS knows them, asked from a fresh process."""
        script = (
            "import json, ray\n"
            f"ray.init(address={self.address!r}, logging_level='ERROR')\n"
            "print(json.dumps([n for n in ray.nodes() if n['Alive']], default=str))\n"
        )
        done = subprocess.run([sys.executable, "-c", script], env=self.env(), text=True,
                              capture_output=True, timeout=120)  # fmt: skip
        if done.returncode:
            return []
        import json

        return json.loads(done.stdout.strip().splitlines()[-1])

    def wait_nodes(self, count: int, timeout: float = 180) -> list[dict]:
        deadline = time.monotonic() + timeout
        while True:
            alive = self.alive_nodes() if self._listening() else []
            if len(alive) >= count:
                return alive
            for node in self.nodes:
                assert node.poll() is None, self.logs()
            assert time.monotonic() < deadline, f"{count} nodes did not join: {self.logs()}"
            time.sleep(1)

    def _listening(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def logs(self) -> str:
        return "\n".join(p.read_text()[-2000:] for p in sorted(self.root.glob("node*.log")))

    def kill_head(self) -> None:
        """The head node's whole process group, at once (a machine lost)."""
        _end_group(self.nodes[0], signal.SIGKILL)

    def stop(self) -> None:
        for node in self.nodes:
            _end_group(node, signal.SIGTERM)
        for node in self.nodes:
            try:
                node.wait(timeout=5)
            except subprocess.TimeoutExpired:
                _end_group(node, signal.SIGKILL)
        kill_processes_mentioning(str(self.root))


def _end_group(node: subprocess.Popen, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(node.pid, signum)


def token_cluster(*, nodes: list[dict]) -> TokenCluster:
    """Start a cluster of ``nodes`` (each ``{"cpus": n, "gpus": g}``; the first is the head)
    and wait until every node has joined; the caller stops it (:meth:`TokenCluster.stop`)."""
    root = Path(tempfile.mkdtemp(prefix="rc", dir="/tmp"))
    cluster = TokenCluster(root, free_port())
    cluster.token_path.write_text(secrets.token_hex(32))
    cluster.token_path.chmod(0o600)
    try:
        for i, node in enumerate(nodes):
            cluster.start_node(head=i == 0, **node)
            if i == 0:
                cluster.wait_nodes(1)
        cluster.wait_nodes(len(nodes))
    except BaseException:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
        raise
    return cluster
