"""Paths a user names, checked before anything is created: ``--out``, ``--storage``,
``--tracking-uri`` (an embedded store's file) and a local ``data_root``.

A command that meets a path it cannot use deep inside a write ends in a traceback and, often,
with something half made (an empty ``studies/``, an experiment, a store). So each command asks
here first, and a path that will not do is refused with a :class:`StudyError` (exit 2) of one
line: the option, the path, what is wrong and what to do instead. Whether a folder can be written
is asked of the kernel (``os.access``), not read from its mode bits, so that a read-only
mount and another user's folder count alike (root passes both, as its writes would).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from shlex import quote
from typing import NoReturn

from search_spaces.spec import StudyError


def refuse(option: str, path: str | Path, problem: str, fix: str) -> NoReturn:
    """Raise the one-line refusal: ``OPTION 'PATH': PROBLEM; FIX`` (nothing was written)."""
    raise StudyError(f"{option} {str(path)!r}: {problem}; {fix} (nothing was written)")


def new_file(option: str, path: str | Path, example: str = "out.yaml") -> Path:
    """``path`` as a file to write or replace: not a folder nor anything but a regular file, in
    a folder that exists and that this user can write (``example``: a file name the fix offers
    when a folder was given)."""
    path = Path(path).expanduser()
    kind = _kind(option, path)
    if kind == "folder":
        refuse(option, path, "is a folder, not a file",
               f"name a file in it, e.g. {option} {quote(str(path / example))}")  # fmt: skip
    if kind == "other":
        refuse(option, path, "is not a regular file (a FIFO, a device or a socket)",
               f"give another {option}")  # fmt: skip
    existing_folder(option, path, path.parent)
    if kind == "file" and not os.access(path, os.W_OK):
        refuse(option, path, "cannot be written by this user", f"give another {option}")
    return path


def writable_folder(option: str, path: str | Path) -> Path:
    """``path`` as a folder to write into: one this user can write, or, when absent, one whose
    parent exists and can be written (it is made there; a missing parent is not made, so that a
    typo does not grow a tree of folders)."""
    path = Path(path).expanduser()
    kind = _kind(option, path)
    if kind in ("file", "other"):
        refuse(option, path, "is a file, not a folder",
               f"give a folder (one that does not exist yet is made), e.g. {option} "
               f"{quote(str(path.with_name(path.name + '-folder')))}")  # fmt: skip
    if kind == "folder":
        _writable(option, path, path)
    else:
        existing_folder(option, path, path.parent)
    return path


def existing_folder(option: str, path: str | Path, folder: Path) -> None:
    """``folder`` (where ``path`` goes) exists, is a folder, and this user can write in it."""
    shown = str(folder) or "."
    kind = _kind(option, folder)
    if kind == "missing":
        refuse(option, path, f"its folder {shown!r} does not exist",
               f"make it first (mkdir -p {quote(shown)}) or give another {option}")  # fmt: skip
    if kind != "folder":
        refuse(option, path, f"{shown!r} is a file, not a folder", f"give another {option}")
    _writable(option, path, folder)


def _writable(option: str, path: str | Path, folder: Path) -> None:
    # writing a file in a folder needs write and search permission on it
    if not os.access(folder, os.W_OK | os.X_OK):
        shown = str(folder) or "."
        refuse(option, path, f"the folder {shown!r} cannot be written by this user",
               "give a folder you can write, or ask its owner for write access")  # fmt: skip


def _kind(option: str, path: Path) -> str:
    """What is at ``path`` (a symlink followed): ``folder``, ``file``, ``other`` (a FIFO, a
    device, a socket) or ``missing``; refused when a folder above it cannot be searched (where
    ``Path.exists`` would raise PermissionError)."""
    try:
        mode = path.stat().st_mode
    except PermissionError:
        refuse(option, path, "cannot be reached by this user (a folder above it cannot be "
               "searched)", "give a path you can reach")  # fmt: skip
    except (FileNotFoundError, NotADirectoryError):
        return "missing"
    except OSError as err:  # a symlink loop, a name too long: nothing there to use
        refuse(option, path, f"cannot be used ({err.strerror})", f"give another {option}")
    return "folder" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"


def store_file(uri: str, *, writing: bool) -> None:
    """An embedded store's file (``sqlite:///PATH``) where MLflow can open it: its folder exists
    (and, for a command that writes the store, can be written: SQLite writes its journal beside
    the file) and the file, when it exists, is not a folder (and can be written). A server's URI
    passes: the server checks its own."""
    if not uri.startswith("sqlite:///"):
        return
    path = Path(uri.removeprefix("sqlite:///"))
    kind = _kind("--tracking-uri", path)
    if kind == "folder":
        inside = quote(f"sqlite:///{path / 'mlflow.db'}")
        refuse("--tracking-uri", uri, "is a folder",
               f"name the store's file in it, e.g. --tracking-uri {inside}")  # fmt: skip
    folder = path.parent
    above = _kind("--tracking-uri", folder)
    if above == "missing":
        refuse("--tracking-uri", uri, f"folder {str(folder)!r} does not exist",
               f"make it first (mkdir -p {quote(str(folder))}) or name a store in another "
               "folder")  # fmt: skip
    if above != "folder":
        refuse("--tracking-uri", uri, f"{str(folder)!r} is a file, not a folder",
               "name a store in a folder")  # fmt: skip
    if writing and not os.access(folder, os.W_OK | os.X_OK):
        refuse("--tracking-uri", uri, f"the folder {str(folder)!r} cannot be written by this "
               "user (the store and its journal are written there)",
               "name a store in a folder you can write")  # fmt: skip
    if writing and kind != "missing" and not os.access(path, os.W_OK):
        refuse("--tracking-uri", uri, "the store cannot be written by this user",
               "name a store you can write, or copy it somewhere you can")  # fmt: skip


def download_folder(config) -> None:
    """A trial's local ``data_root`` that torchvision downloads into (``download: true``, a
    dataset read from files): a folder this user can write, or one it can make. Otherwise the
    download fails inside every trial, after the study was recorded. A bucket is refused where
    it is listed (:func:`trainables.sources.check_data`); a folder only read is checked there."""
    from trainables.config import ON_DISK_DATASETS
    from trainables.remote import is_uri
    from trainables.sources import data_dir, data_root

    if config.download and config.dataset in ON_DISK_DATASETS and not is_uri(data_root(config)):
        writable_folder("trial.data_root", data_dir(config))
