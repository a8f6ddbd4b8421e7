"""A starting driver says so at once: ``study status NAME`` names a study from the moment its
``study run`` starts.

The driver's lease (:mod:`study.lease`) is written once MLflow is imported and the store is
ready, seconds into the run (20 s on a loaded 2-core machine), so for that long ``study status``
answered "no study named …". Writing the lease earlier is not an option: bad input must be
refused with nothing written in the user's folders. So the driver announces itself outside them,
in this user's temporary folder (``<tmp>/study-drivers-<uid>/<study>.json``: its pid, the
moment that process started, host, start time, store and working folder), the moment it has read
the study file's name, and removes the announcement when it exits.

``/tmp`` is shared, and its path is predictable, so the folder is used only when this user made
it alone (:mod:`study.private`; else ``$XDG_RUNTIME_DIR/study-drivers``, said once), and an
announcement is believed only when its pid is alive *and started at the announced moment* (a
stale file whose pid another process reuses is not), on this host, for the store that
``study status`` reads: a study of the same name in another folder and store is another study.
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

from study.private import distrust, process_start, read_regular, shared_or_private, write_private
from trainables.remote import redacted

FOLDER_NAME = "study-drivers"


def _shared_path() -> Path:
    return Path(tempfile.gettempdir()) / f"{FOLDER_NAME}-{os.getuid()}"


def _folders() -> list[Path]:
    """Where announcements may be, in the order they are looked for; only folders of this
    user's alone."""
    found = []
    for folder in (_shared_path(), Path(os.environ.get("XDG_RUNTIME_DIR") or "/") / FOLDER_NAME):
        with contextlib.suppress(OSError):
            if folder.is_absolute() and distrust(folder) is None:
                found.append(folder)
    return found


def same_store(a: str, b: str) -> bool:
    """Whether two tracking URIs name one store (an embedded store by its resolved file)."""
    return _canonical(a) == _canonical(b)


def _canonical(uri: str) -> str:
    if uri.startswith("sqlite:///"):
        return "sqlite:///" + os.path.realpath(uri.removeprefix("sqlite:///"))
    return redacted(uri.rstrip("/"))  # an announcement is a file: it keeps no password


def announce(name: str, store: str) -> None:
    """Announce this process as the starting driver of study ``name`` recording into ``store``
    until it exits."""
    with contextlib.suppress(OSError):
        folder = shared_or_private(_shared_path(), FOLDER_NAME, "study status's announcements")
        record = {"pid": os.getpid(), "started": process_start(os.getpid()),
                  "host": socket.gethostname(), "since": time.time(), "cwd": os.getcwd(),
                  "store": _canonical(store)}  # fmt: skip
        path = write_private(folder, f"{name}.json", json.dumps(record).encode())
        atexit.register(_withdraw, path, os.getpid())


def _withdraw(path: Path, pid: int) -> None:
    with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
        if json.loads(read_regular(path) or b"{}").get("pid") == pid:
            path.unlink()


def announced(name: str, store: str) -> dict | None:
    """The live driver that announced study ``name`` in ``store`` on this host, else None."""
    for folder in _folders():
        record = _believed(folder / f"{name}.json", store)
        if record is not None:
            return record
    return None


def _believed(path: Path, store: str) -> dict | None:
    try:
        record = json.loads(read_regular(path) or b"")
        pid, started = int(record["pid"]), record["started"]
        ours = record["host"] == socket.gethostname() and same_store(record["store"], store)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if not ours or pid == os.getpid() or started is None:
        return None
    return record if process_start(pid) == started else None
