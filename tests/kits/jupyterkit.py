"""A real ``jupyter lab`` for tests: started headless on 127.0.0.1, on a port chosen here, with a
token, its config, data and runtime folders (and HOME) in the test's own folder; driven through
Jupyter Server's REST API and a kernel's websocket, as JupyterLab drives it; stopped with
``POST /api/shutdown``, then by PID (the server and every process it started: its kernels)."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import psutil

BIN = Path(sys.executable).parent
# what points Jupyter or the notebook elsewhere: none of it may leak in from the shell
LEAKS = ("MLFLOW_TRACKING_URI", "TRACKING_URI", "STUDY", "STUDY_RESULTS", "IPYTHONDIR",
         "MPLCONFIGDIR")  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Lab:
    """A running ``jupyter lab``: its process, address and token, and every process it has
    started (:meth:`processes`, recorded as they are seen, for the cleanup by PID)."""

    process: subprocess.Popen
    url: str
    token: str
    log: Path
    seen: dict[int, psutil.Process] = field(default_factory=dict)

    def processes(self) -> list[psutil.Process]:
        """The server's descendants now (its kernels), remembered for :func:`stop`."""
        try:
            now = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            now = []
        self.seen.update({p.pid: p for p in now})
        return now

    def request(self, method: str, path: str, body: dict | None = None, timeout: float = 30):
        """``method path`` with the token; the decoded JSON (None for an empty answer)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.url + path, data=data, method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(req, timeout=timeout) as answer:
            text = answer.read().decode()
        return json.loads(text) if text.strip() else None

    def page(self, path: str, timeout: float = 30) -> tuple[int, str]:
        req = urllib.request.Request(self.url + path,
                                     headers={"Authorization": f"token {self.token}"})  # fmt: skip
        with urllib.request.urlopen(req, timeout=timeout) as answer:
            return answer.status, answer.read().decode()

    def logged(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def lab_environment(home: Path, **settings: str) -> dict[str, str]:
    """The shell's environment with HOME and every Jupyter folder in ``home`` (nothing of the
    user's read or written), the venv's tools first on the PATH, and ``settings``."""
    env = {k: v for k, v in os.environ.items()
           if k not in LEAKS and not k.startswith("JUPYTER")}  # fmt: skip
    for name in ("config", "data", "runtime"):
        (home / f"jupyter-{name}").mkdir(parents=True, exist_ok=True)
    env |= {
        "HOME": str(home),
        "JUPYTER_CONFIG_DIR": str(home / "jupyter-config"),
        "JUPYTER_DATA_DIR": str(home / "jupyter-data"),
        "JUPYTER_RUNTIME_DIR": str(home / "jupyter-runtime"),
        "IPYTHONDIR": str(home / "ipython"),
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    return env | settings


@contextmanager
def jupyter_lab(args: list[str], cwd: Path, env: dict[str, str], log: Path, startup: float = 120):
    """``jupyter lab ARGS`` headless in ``cwd``, yielding a :class:`Lab` once ``/api/status``
    answers; stopped on leaving (:func:`stop`)."""
    port, token = free_port(), secrets.token_hex(16)
    command = [str(BIN / "jupyter"), "lab", *args, "--no-browser", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
               f"--IdentityProvider.token={token}"]  # fmt: skip
    if os.geteuid() == 0:  # a container's root, as CI's: Jupyter refuses it unless told
        command.append("--allow-root")
    with open(log, "wb") as out:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    lab = Lab(process, f"http://127.0.0.1:{port}", token, log)
    try:
        deadline = time.monotonic() + startup
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"jupyter lab exited {process.returncode}:\n{lab.logged()}")
            try:
                lab.request("GET", "/api/status", timeout=5)
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no /api/status in {startup} s:\n{lab.logged()}") from None
                time.sleep(0.5)
        yield lab
    finally:
        stop(lab)


def stop(lab: Lab, grace: float = 20) -> bool:
    """``POST /api/shutdown``, then the server by PID (TERM, then KILL) if it is still there,
    then any process it started that outlived it. True when the shutdown alone ended them all."""
    lab.processes()
    clean = True
    try:
        lab.request("POST", "/api/shutdown", timeout=10)
        lab.process.wait(timeout=grace)
    except (urllib.error.URLError, ConnectionError, TimeoutError, subprocess.TimeoutExpired):
        clean = False
        for signal_it in (lab.process.terminate, lab.process.kill):
            if lab.process.poll() is None:
                signal_it()
                with suppress(subprocess.TimeoutExpired):
                    lab.process.wait(timeout=5)
    _, alive = psutil.wait_procs(list(lab.seen.values()), timeout=grace if clean else 5)
    for proc in alive:
        clean = False
        with suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(alive, timeout=5)
    return clean


def message(msg_type: str, content: dict, session: str, channel: str = "shell") -> dict:
    """A Jupyter message (protocol 5.3) as the websocket's JSON carries it."""
    header = {"msg_id": uuid.uuid4().hex, "msg_type": msg_type, "username": "test",
              "session": session, "date": "", "version": "5.3"}  # fmt: skip
    return {"header": header, "parent_header": {}, "metadata": {}, "content": content,
            "channel": channel, "buffers": []}  # fmt: skip


async def _execute(url: str, codes: list[str], timeout: float) -> list[list[dict]]:
    from tornado.websocket import websocket_connect

    socket_ = await websocket_connect(url)
    session = uuid.uuid4().hex
    done: list[list[dict]] = []
    try:
        for code in codes:
            request = message("execute_request", {
                "code": code, "silent": False, "store_history": True, "user_expressions": {},
                "allow_stdin": False, "stop_on_error": True}, session)  # fmt: skip
            await socket_.write_message(json.dumps(request))
            ours, outputs, replied, idle = request["header"]["msg_id"], [], None, False
            while replied is None or not idle:
                raw = await asyncio.wait_for(socket_.read_message(), timeout)
                if raw is None:
                    raise ConnectionError("the kernel's websocket closed")
                if isinstance(raw, bytes):  # a binary frame (buffers): nothing we read
                    continue
                msg = json.loads(raw)
                if msg.get("parent_header", {}).get("msg_id") != ours:
                    continue
                kind = msg["header"]["msg_type"]
                if msg["channel"] == "shell" and kind == "execute_reply":
                    replied = msg["content"]
                elif kind == "status":
                    idle = msg["content"]["execution_state"] == "idle"
                elif kind in ("stream", "display_data", "execute_result", "error"):
                    outputs.append({"output_type": kind, **msg["content"]})
            done.append(outputs)
            if replied["status"] != "ok":
                break
    finally:
        socket_.close()
    return done


def execute(lab: Lab, kernel_id: str, codes: list[str], timeout: float = 300) -> list[list[dict]]:
    """Each of ``codes`` run in turn in the kernel, over its websocket (``/api/kernels/<id>/
    channels``), as JupyterLab runs a cell; each one's outputs (stream, display_data,
    execute_result, error). Stops after a cell that fails, as *Run All* does."""
    url = lab.url.replace("http", "ws", 1)
    url += f"/api/kernels/{kernel_id}/channels?session_id={uuid.uuid4().hex}&token={lab.token}"
    return asyncio.run(_execute(url, codes, timeout))


def stdout(outputs: list[dict]) -> str:
    return "".join(o["text"] for o in outputs
                   if o["output_type"] == "stream" and o["name"] == "stdout")  # fmt: skip
