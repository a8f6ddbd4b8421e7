"""A trial's checkpoints in one folder, and how many of them are kept: implemented once, for a
local folder (:class:`LocalFolder`, the Ray-free :class:`trainables.train.LocalReporter`) and for
the study's storage (``study.storage.StoredCheckpoints``, a folder or a bucket).

Each checkpoint is a folder ``checkpoint_<step>`` (the step zero-padded to 12 digits, so names
sort by step) that counts only once complete: a writer killed mid-copy never leaves one that
resumes. What "complete" means is the folder's own (an atomic rename locally, a ``DONE`` marker
written last in a bucket); :class:`Retention` names, orders, keeps the ``keep`` newest and
finds the latest.

A checkpoint that is complete but cannot be loaded (truncated or overwritten on disk, a bucket
that handed back garbage) is *set aside*: renamed ``checkpoint_<step>.unreadable``
(:data:`UNREADABLE`), which no longer counts as a checkpoint, so it is never retried and never
removed by the retention either (nothing is lost: it can be looked at); the trial resumes from
the newest one that loads, or starts afresh, and says which (:data:`RESUME_NOTE`).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Protocol

CHECKPOINT = re.compile(r"^checkpoint_(\d+)$")
UNREADABLE = ".unreadable"  # the suffix of a checkpoint set aside: it could not be loaded
# the result key that carries what a resume found (a checkpoint set aside, where it resumed
# from) to the driver, which says it and tags the trial's run with it
RESUME_NOTE = "resume_note"


def checkpoint_name(step: int) -> str:
    """The folder name of the checkpoint at ``step``."""
    return f"checkpoint_{step:012d}"


class CheckpointFolder(Protocol):
    """Where one trial's checkpoint folders live."""

    def put(self, local: str | Path, name: str) -> None:
        """Copy the local folder ``local`` in as ``name``; complete when this returns."""

    def complete(self) -> list[str]:
        """The names of the complete folders, in any order (others may be among them)."""

    def remove(self, name: str) -> None:
        """Remove the folder ``name`` (nothing when it is absent)."""

    def rename(self, name: str, new: str) -> str:
        """Rename the folder ``name`` to ``new``; returns where it now is (a path or a URI)."""

    def names(self) -> list[str]:
        """Every entry's name, complete or not (to find a free name)."""


class Retention:
    """The checkpoints of one trial in ``folder``: ``save`` adds one and keeps the ``keep``
    newest complete ones; ``names`` lists them, oldest first."""

    def __init__(self, folder: CheckpointFolder, keep: int = 2) -> None:
        self.folder, self.keep = folder, keep

    def save(self, local: str | Path, step: int) -> str:
        name = checkpoint_name(step)
        self.folder.put(local, name)
        for old in self.names()[: -self.keep]:
            self.folder.remove(old)
        return name

    def names(self) -> list[str]:
        """Complete checkpoint folders, oldest first."""
        return sorted(n for n in self.folder.complete() if CHECKPOINT.match(n))

    def latest(self) -> str | None:
        found = self.names()
        return found[-1] if found else None

    def set_aside(self, name: str) -> str:
        """Rename the checkpoint ``name``, which cannot be loaded, to ``<name>.unreadable``
        (``.unreadable.2`` … when that is taken: one set aside before is kept too); returns
        where it now is. It no longer counts as a checkpoint: never retried, never removed."""
        taken = set(self.folder.names())
        new, n = f"{name}{UNREADABLE}", 1
        while new in taken:
            n += 1
            new = f"{name}{UNREADABLE}.{n}"
        return self.folder.rename(name, new)


class LocalFolder:
    """Checkpoint folders under a local directory: each copied in as ``<name>.partial`` and
    renamed (atomic: a kill never leaves a half-written checkpoint)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def put(self, local: str | Path, name: str) -> None:
        target = self.root / name
        partial = target.with_suffix(".partial")
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(local, partial)
        partial.rename(target)

    def complete(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return [p.name for p in self.root.iterdir() if p.is_dir() and p.suffix != ".partial"]

    def remove(self, name: str) -> None:
        shutil.rmtree(self.root / name, ignore_errors=True)

    def rename(self, name: str, new: str) -> str:
        (self.root / name).rename(self.root / new)
        return str(self.root / new)

    def names(self) -> list[str]:
        return [p.name for p in self.root.iterdir()] if self.root.is_dir() else []
