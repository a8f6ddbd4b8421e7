"""Nothing left by a study run that stops before it records anything.

``study run`` makes its places as it goes, some of them beside Ray's start (the lease makes the
study's experiment, and the embedded store, while Ray starts: :func:`study.runner.entered_beside`):
the store's file, the study's experiment, the storage folder and the study's folder in it. A run
that stops before its parent run is opened (this machine's Ray did not start) removes what it
made itself, and only that: a store, an experiment or a folder that was there before stays, so a
second look finds the machine as the user left it, and the study's name free to run again.
"""

from __future__ import annotations

import contextlib
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from analysis.reading.record import find_experiment
from analysis.reading.sqlite_reader import ALL
from analysis.reading.store import read_client, store_exists
from study.internals.mlflow import hard_delete_experiment
from study.storage import open_storage

if TYPE_CHECKING:
    from study.record import StoreState


@dataclass(frozen=True)
class Leftovers:
    """What of a study's places was not there before this run (see the module docstring)."""

    tracking_uri: str
    study: str
    new_store: bool  # the embedded store's file
    new_experiment: bool  # the study's experiment in the store
    new_study_folder: Path | None  # the study's folder in a local storage
    new_storage: Path | None  # the local storage's root folder

    @classmethod
    def before(
        cls, tracking_uri: str, study: str, where: str | Path | None,
        state: StoreState | None = None,
    ) -> Leftovers:  # fmt: skip
        """What is there now, read without writing (``where``: ``--storage`` as typed;
        ``state``: the store as the preflight found it, nothing written since: not read again)."""
        embedded = tracking_uri.startswith("sqlite:///")  # a server's is never removed: unread
        if state is not None:
            new_store = not state.store_exists
            new_experiment = new_store or (embedded and state.experiment is None)
        else:
            new_store = not store_exists(tracking_uri)
            new_experiment = new_store or (
                embedded and find_experiment(read_client(tracking_uri), study) is None
            )
        folder, root = _local_folders(where, study)
        return cls(tracking_uri, study, new_store, new_experiment,
                   None if folder is None or folder.exists() else folder,
                   None if root is None or root.exists() else root)  # fmt: skip

    def remove(self) -> None:
        """Remove what this run made: the store when it holds no other study, else the study's
        experiment (for an embedded store; a server's experiment can only be marked deleted,
        which would keep the name taken, so it stays), then the storage folders made: the
        study's whole (only this run, holding its lease, wrote in it), the root when empty."""
        uri = self.tracking_uri
        experiment = find_experiment(read_client(uri), self.study) if store_exists(uri) else None
        made = uri.startswith("sqlite:///") and self.new_experiment and experiment is not None
        if made and not read_client(uri).search_runs([experiment.experiment_id], max_results=1):
            if self.new_store and _holds_only(uri, self.study):  # no other study came meanwhile
                _remove_store(Path(uri.removeprefix("sqlite:///")))
            else:
                hard_delete_experiment(uri, experiment.experiment_id)
        if self.new_study_folder is not None:
            shutil.rmtree(self.new_study_folder, ignore_errors=True)
        if self.new_storage is not None:
            with contextlib.suppress(OSError):  # another study's files in it meanwhile: kept
                self.new_storage.rmdir()

    @contextlib.contextmanager
    def removed_on(self, *kinds: type[BaseException]):
        """For the ``with`` block: on one of ``kinds``, remove what this run made (never hiding
        the exception: a removal that fails leaves the rest, and the exception is raised)."""
        try:
            yield
        except kinds:
            with contextlib.suppress(Exception):
                self.remove()
            raise


def _local_folders(where: str | Path | None, study: str) -> tuple[Path | None, Path | None]:
    """(the study's folder, the storage's root) of a local ``--storage``; Nones otherwise."""
    try:
        storage = open_storage(where)
    except ValueError:  # refused by the storage's own check next
        return None, None
    if not storage.is_local:
        return None, None
    return Path(storage.path(study)), Path(storage.root)


def _holds_only(uri: str, study: str) -> bool:
    """Whether the store holds no experiment but MLflow's Default and the study's."""
    names = {e.name for e in read_client(uri).search_experiments(view_type=ALL)}
    return names <= {"Default", study}


def _remove_store(path: Path) -> None:
    """The store's file and SQLite's files beside it (its journal, a WAL and its index)."""
    for suffix in ("", "-journal", "-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)
