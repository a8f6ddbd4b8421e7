"""Where a study keeps what every node must see: ``--storage``, a local folder or a bucket.

``--storage`` is a plain path (a folder on this machine, as before) or any URI pyarrow's
filesystems resolve: ``s3://bucket/prefix``, ``gs://bucket/prefix``, ``hdfs://…``. Everything
goes through one :class:`Storage`, a pyarrow filesystem and a root in it, whatever the kind:
Ray Tune's experiment storage, each trial's folder (its checkpoints, which resume depends on),
``results.parquet``, the report and the driver's lock. There is no second code path for local
folders. On S3 the AWS SDK's usual settings apply (an instance role on EC2; ``AWS_PROFILE`` or
keys on a laptop; ``AWS_ENDPOINT_URL`` for an S3-compatible server).

Layout under the root, per study: ``<study>/ray/`` (Tune), ``<study>/trials/<key>/`` (a trial's
``checkpoint_<examples seen>/`` folders, each complete once its ``DONE`` marker is written, and
its workers' pid files), ``<study>/results.parquet``, ``<study>/report/``, ``<study>/driver.lock``,
and ``mlartifacts/`` (MLflow's artifacts with the embedded SQLite store).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainables.checkpoints import CHECKPOINT, Retention
from trainables.remote import is_remote

DONE = "DONE"  # written last into a checkpoint folder: the checkpoint is complete


@dataclass(frozen=True)
class Storage:
    """A pyarrow filesystem and a root folder in it; ``uri`` is what the user would type to name
    the root again (an absolute path for a local folder)."""

    uri: str
    fs: Any  # pyarrow.fs.FileSystem
    root: str  # the root's path inside ``fs``

    @property
    def is_local(self) -> bool:
        return type(self.fs).__name__ == "LocalFileSystem"

    def path(self, *parts: str) -> str:
        """The path inside ``fs`` of ``parts`` under the root."""
        return "/".join([self.root.rstrip("/"), *(p.strip("/") for p in parts if p)])

    def uri_of(self, *parts: str) -> str:
        """``parts`` under the root as a URI (or an absolute path for a local folder)."""
        return "/".join([self.uri.rstrip("/"), *(p.strip("/") for p in parts if p)])

    def sub(self, *parts: str) -> Storage:
        """The storage rooted at ``parts`` under this root."""
        return Storage(self.uri_of(*parts), self.fs, self.path(*parts))

    # -- files --
    def exists(self, *parts: str) -> bool:
        from pyarrow.fs import FileType

        return self.fs.get_file_info(self.path(*parts)).type != FileType.NotFound

    def write_text(self, text: str, *parts: str) -> None:
        """Write a whole file (see :meth:`write_whole`)."""

        def put(path: str) -> None:
            with self.fs.open_output_stream(path) as out:
                out.write(text.encode())

        self.write_whole(put, *parts)

    def write_whole(self, write, *parts: str) -> None:
        """``write(path)`` writes the file ``parts``, so that a reader at the same moment sees
        the old file or the new, never a part. Other processes read these files while they are
        rewritten (the lease at a heartbeat, ``results.parquet`` at a resumed study's end), and
        opening a local file for writing empties it first. So a local file is written beside
        and renamed over (atomic on POSIX); an object store's put is whole already."""
        target = self.path(*parts)
        self._parent(target)
        if not self.is_local:
            write(target)
            return
        written = f"{target}.{uuid.uuid4().hex[:8]}.part"
        try:
            write(written)
            self.fs.move(written, target)
        finally:
            if os.path.exists(written):
                os.remove(written)  # a failed write leaves no part behind

    def read_text(self, *parts: str) -> str:
        """A small file's text. A local one only when it is a regular file (a FIFO planted in a
        group-writable project folder would make the reader wait for ever)."""
        if self.is_local:
            return _read_regular_file(self.path(*parts)).decode()
        with self.fs.open_input_stream(self.path(*parts)) as stream:
            return stream.read().decode()

    def delete(self, *parts: str) -> None:
        """Delete a file or a folder (with everything in it); nothing when it is not there."""
        from pyarrow.fs import FileType

        target = self.path(*parts)
        kind = self.fs.get_file_info(target).type
        if kind == FileType.Directory:
            self.fs.delete_dir(target)
        elif kind == FileType.File:
            self.fs.delete_file(target)

    def move(self, source: str, target: str) -> None:
        """Rename the file or folder ``source`` to ``target`` (both under the root): a local
        rename; in a bucket, which has no rename of a folder, a copy then a delete."""
        if self.is_local:
            self.fs.move(self.path(source), self.path(target))
            return
        from pyarrow.fs import FileType, copy_files

        if self.fs.get_file_info(self.path(source)).type == FileType.Directory:
            self.fs.create_dir(self.path(target), recursive=True)
        copy_files(self.path(source), self.path(target), self.fs, self.fs)
        self.delete(source)

    def folders(self, *parts: str) -> list[str]:
        """Names of the folders directly under ``parts`` (none when it is not there)."""
        from pyarrow.fs import FileSelector, FileType

        found = self.fs.get_file_info(FileSelector(self.path(*parts), allow_not_found=True))
        return sorted(i.base_name for i in found if i.type == FileType.Directory)

    def upload(self, local: str | Path, *parts: str) -> None:
        """Copy a local file or folder (recursively) to ``parts`` under the root."""
        from pyarrow.fs import LocalFileSystem, copy_files

        local = Path(local).resolve()
        target = self.path(*parts)
        if local.is_dir():
            self.fs.create_dir(target, recursive=True)
        else:
            self._parent(target)
        copy_files(str(local), target, LocalFileSystem(), self.fs)

    def download(self, local: str | Path, *parts: str) -> Path:
        """Copy ``parts`` under the root (a file or a folder) to the local path ``local``."""
        from pyarrow.fs import LocalFileSystem, copy_files

        local = Path(local)
        local.parent.mkdir(parents=True, exist_ok=True)
        copy_files(self.path(*parts), str(local), self.fs, LocalFileSystem())
        return local

    def _parent(self, target: str) -> None:
        parent = target.rsplit("/", 1)[0]
        if parent and parent != target:
            self.fs.create_dir(parent, recursive=True)


def open_storage(where: str | Path | None) -> Storage:
    """``--storage`` as a :class:`Storage`: a URI through pyarrow, a plain path (default
    ``studies``) as an absolute local folder.

    Raises:
        ValueError: pyarrow does not know the URI's filesystem (naming the URI).
    """
    from pyarrow.fs import FileSystem, LocalFileSystem

    text = str(where) if where is not None else "studies"
    if not is_remote(text):  # a plain path, or file://
        root = str(Path(text.removeprefix("file://")).expanduser().resolve())
        return Storage(root, LocalFileSystem(), root)
    try:
        fs, root = FileSystem.from_uri(text)
    except Exception as err:  # pyarrow's ArrowInvalid / OSError, with its own words
        raise ValueError(f"{text}: not a filesystem pyarrow can open ({err})") from None
    return Storage(text.split("?", 1)[0].rstrip("/"), fs, root.rstrip("/"))


def check_writable(storage: Storage) -> None:
    """Write, read back and delete a small object under the root.

    Raises:
        OSError: the storage cannot be reached, or refuses one of the three (pyarrow's words).
    """
    name = f".study-write-check-{uuid.uuid4().hex[:12]}"
    storage.write_text("ok", name)
    try:
        if storage.read_text(name) != "ok":
            raise OSError(f"{storage.uri_of(name)} read back differently")
    finally:
        storage.delete(name)


# ---------------------------------------------------------------------------------------------
# a trial's checkpoints
# ---------------------------------------------------------------------------------------------
class _StoredFolder:
    """A trial's folder of the study's storage as a checkpoint folder
    (:class:`trainables.checkpoints.CheckpointFolder`): a checkpoint is uploaded, then its
    ``DONE`` marker written last, so a folder without ``DONE`` (a writer killed mid-upload)
    never counts."""

    def __init__(self, trial: Storage) -> None:
        self.trial = trial

    def put(self, local: str | Path, name: str) -> None:
        self.trial.delete(name)  # an upload a killed writer left half done
        self.trial.upload(local, name)
        self.trial.write_text(str(int(name.removeprefix("checkpoint_"))), name, DONE)  # the step

    def complete(self) -> list[str]:
        names = [n for n in self.trial.folders() if CHECKPOINT.match(n)]
        return [n for n in names if self.trial.exists(n, DONE)]

    def remove(self, name: str) -> None:
        self.trial.delete(name)

    def rename(self, name: str, new: str) -> str:
        self.trial.move(name, new)
        return self.trial.uri_of(new)

    def names(self) -> list[str]:
        return self.trial.folders()


class StoredCheckpoints:
    """A trial's checkpoints in its folder of the study's storage (``trials/<key>/``).

    ``save`` uploads a local checkpoint folder as ``checkpoint_<step>/`` and writes ``DONE`` in it
    last; the ``keep`` newest complete ones stay (:class:`trainables.checkpoints.Retention`, as
    a local trial keeps its own). ``latest`` downloads the newest complete one to a local
    temporary folder, the copy ``run_trial`` resumes from, and removes the previous such copy."""

    def __init__(self, trial: Storage, keep: int = 2) -> None:
        self.trial, self.keep = trial, keep
        self._kept = Retention(_StoredFolder(trial), keep)
        self._downloaded: str | None = None
        self._name: str | None = None  # the stored checkpoint that copy is of

    def save(self, local: str | Path, step: int) -> None:
        self._kept.save(local, step)

    def complete(self) -> list[str]:
        """Complete checkpoint folders, oldest first."""
        return self._kept.names()

    def latest(self) -> str | None:
        found = self._kept.latest()
        if found is None:
            return None
        self.release()
        copy = tempfile.mkdtemp(prefix="trial-resume-")
        self.trial.download(copy, found)
        self._downloaded, self._name = copy, found
        return copy

    def where(self, copy: str) -> str:
        """The stored checkpoint (its URI, or path) that :meth:`latest` copied to ``copy``."""
        return self.trial.uri_of(self._name) if copy == self._downloaded else copy

    def set_aside(self, copy: str) -> str:
        """Set aside the stored checkpoint :meth:`latest` copied to ``copy``, which cannot be
        loaded (:meth:`trainables.checkpoints.Retention.set_aside`); returns where it is now."""
        if copy != self._downloaded:
            raise ValueError(f"{copy}: not the checkpoint this trial last resumed from")
        self.release()
        return self._kept.set_aside(self._name)

    def release(self) -> None:
        """Remove the local copy the last :meth:`latest` made."""
        if self._downloaded is not None:
            shutil.rmtree(self._downloaded, ignore_errors=True)
            self._downloaded = None


def write_pid(trial: Storage, name: str) -> None:
    """This process's pid as ``name`` in the trial's folder (tests and operators kill by it)."""
    trial.write_text(str(os.getpid()), name)


def _read_regular_file(path: str) -> bytes:
    """``path``'s bytes; OSError (FileNotFoundError when missing) unless a regular file."""
    from study.private import read_regular

    data = read_regular(path, limit=64 << 20)
    if data is None:
        os.stat(path)  # FileNotFoundError, as pyarrow's would be, when it is not there
        raise OSError(f"{path}: not a regular file of at most 64 MB; not read")
    return data
