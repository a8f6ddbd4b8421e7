"""A starting driver says so at once: ``study status NAME`` names a study from the moment its
``study run`` starts.

The driver's lease (:mod:`study.lease`) is written once MLflow is imported and the store is
ready, seconds into the run (20 s on a loaded 2-core machine), so for that long ``study status``
answered "no study named …". Writing the lease earlier is not an option: bad input must be
refused with nothing written in the user's folders. So the driver announces itself outside them,
in this user's temporary folder (``<tmp>/study-drivers-<uid>/<study>.json``: its pid, host,
start time, store and working folder), the moment it has read the study file's name, and removes
the announcement when it exits. ``study status`` reads it only while that pid is alive; a stale
file (a killed driver) is ignored.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import socket
import tempfile
import time
from pathlib import Path


def _folder() -> Path:
    return Path(tempfile.gettempdir()) / f"study-drivers-{os.getuid()}"


def _path(name: str) -> Path:
    return _folder() / f"{name}.json"


def announce(name: str) -> None:
    """Announce this process as the starting driver of study ``name`` until it exits."""
    with contextlib.suppress(OSError):
        _folder().mkdir(mode=0o700, exist_ok=True)
        path = _path(name)
        record = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(),
                  "cwd": os.getcwd()}  # fmt: skip
        scratch = path.with_suffix(f".{os.getpid()}.tmp")
        scratch.write_text(json.dumps(record))
        scratch.replace(path)
        atexit.register(_withdraw, path, os.getpid())


def _withdraw(path: Path, pid: int) -> None:
    with contextlib.suppress(OSError, ValueError):
        if json.loads(path.read_text()).get("pid") == pid:
            path.unlink()


def announced(name: str) -> dict | None:
    """The live driver that announced study ``name`` on this host, else None."""
    from study.lease import pid_alive

    try:
        record = json.loads(_path(name).read_text())
        pid = int(record["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return record if pid != os.getpid() and pid_alive(pid) else None
