"""Folders and files in shared places: nothing another user made is trusted.

A cluster's login and compute nodes share ``/tmp``, and project folders are group-writable. A
folder at a predictable path (``/tmp/study-drivers-<uid>``, ``/tmp/ray``) may have been made
first by someone else, who then owns what goes in it: a symlink planted under the name this
user's process writes truncates a file of this user's (libsdl-org/SDL#11887 is the same kind), a
FIFO makes a reader hang, a planted file is believed. So:

- a folder the product makes in a shared place is made with mode 0700 exactly (not as the
  umask leaves it), and one that exists already is used only when it is a real folder (not a
  symlink) owned by this uid with no group or other write bit (:func:`private_folder`);
- files in it are written beside and renamed over, the scratch file opened with
  ``O_CREAT | O_EXCL | O_NOFOLLOW`` (:func:`write_private`), and read only when they are regular
  files of a bounded size, opened without following a symlink and without blocking on a FIFO
  (:func:`read_regular`);
- a process named in such a file is believed only when it is the process that wrote it: the
  same pid *started at the recorded moment* (:func:`process_start`), so a reused pid is not.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from pathlib import Path

from analysis.reading.state import process_start  # noqa: F401  (one reading of /proc, re-exported)
from trainables.shown import shown

READ_LIMIT = 1 << 20  # bytes: what a product file in a shared place may hold (a record, a pid)


class UntrustedPathError(OSError):
    """A folder at a shared path that this user did not make alone; its message names the path,
    why it is not trusted, and its owner."""


def owner_name(uid: int) -> str:
    """``"uid 1001 (bob)"``, or just the uid where the name is unknown."""
    import pwd

    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def distrust(path: Path) -> str | None:
    """Why the existing ``path`` is not a folder of this user's alone, or None when it is."""
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        return f"it is a symbolic link, owned by {owner_name(info.st_uid)}"
    if not stat.S_ISDIR(info.st_mode):
        return f"it is not a folder, owned by {owner_name(info.st_uid)}"
    if info.st_uid != os.getuid():
        return f"it is owned by {owner_name(info.st_uid)}, not by this user"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"its group or others may write in it (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def private_folder(path: str | Path) -> Path:
    """``path`` as a folder of this user's alone: made with mode 0700 when missing (its parent
    must exist), else checked. Raises UntrustedPathError naming the path, the reason and the
    owner when it exists and is not this user's alone."""
    path = Path(path)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
        os.chmod(path, 0o700)  # exactly: mkdir's mode is reduced by the umask, never raised
    why = distrust(path)
    if why is not None:
        raise UntrustedPathError(f"{path}: not used, {why}")
    return path


_SAID: set[str] = set()


def say_once(message: str) -> None:
    """Tell the user ``message`` on stderr, once per process."""
    if message not in _SAID:
        _SAID.add(message)
        # a path it names may be another user's, its characters theirs: shown as written
        print(shown(f"note: {message}"), file=sys.stderr, flush=True)


def runtime_folder(name: str) -> Path | None:
    """``$XDG_RUNTIME_DIR/<name>`` as a private folder (the per-user folder a login makes,
    mode 0700, on tmpfs), or None where there is none or it is not this user's."""
    base = os.environ.get("XDG_RUNTIME_DIR", "")
    if not base or not os.path.isabs(base):
        return None
    try:
        if distrust(Path(base)) is not None:
            return None
        return private_folder(Path(base) / name)
    except OSError:
        return None


_FALLBACKS: dict[tuple[Path, str], Path] = {}


def shared_or_private(path: Path, fallback_name: str, purpose: str) -> Path:
    """``path`` when it is (or can be made) this user's alone; else a private folder, with one
    note saying why: ``$XDG_RUNTIME_DIR/<fallback_name>``, or a fresh ``mkdtemp`` (the same one
    for the rest of this process)."""
    try:
        return private_folder(path)
    except OSError as err:
        key = (Path(path), fallback_name)
        if key not in _FALLBACKS or distrust(_FALLBACKS[key]) is not None:
            found = runtime_folder(fallback_name)
            _FALLBACKS[key] = found or Path(tempfile.mkdtemp(prefix=f"{fallback_name}-"))
        say_once(f"{purpose}: {err}; using {_FALLBACKS[key]} instead")
        return _FALLBACKS[key]


def write_private(folder: Path, name: str, data: bytes) -> Path:
    """Write ``folder/name`` whole (mode 0600): a scratch file of a name nobody can have
    planted, created exclusively and never through a symlink, renamed over the target (a rename
    replaces a symlink at the target, never what it points to)."""
    scratch = folder / f".{name}.{os.getpid()}.{os.urandom(6).hex()}"
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(scratch, folder / name)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(scratch)
        raise
    return folder / name


def read_regular(path: str | Path, limit: int = READ_LIMIT) -> bytes | None:
    """The bytes of ``path`` when it is a regular file (not a symlink, a FIFO or a device) of at
    most ``limit`` bytes; None otherwise, or when it cannot be read. Never blocks: a FIFO is
    opened non-blocking and refused by its type."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
        return data if len(data) <= limit else None
    except OSError:
        return None
    finally:
        os.close(fd)


def _stat_fields(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command's name (the state first), or None
    when there is no such process."""
    data = read_regular(f"/proc/{pid}/stat", limit=4096)
    if not data:
        return None
    # the command's name, in parentheses, may hold spaces and ')': fields follow the last ')'
    return data.rpartition(b")")[2].split()


def process_stopped(pid: int) -> bool:
    """Whether process ``pid`` of this host is stopped: suspended by Ctrl-Z (SIGTSTP) or SIGSTOP
    (state ``T``), or by a tracer (``t``)."""
    fields = _stat_fields(pid)
    return bool(fields) and fields[0] in (b"T", b"t")
