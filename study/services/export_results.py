"""``study export``: a recorded study's results table written as a Parquet file, a path or a
URI (the writing itself is :func:`study.export.export_parquet`).

Refusals are :class:`~search_spaces.spec.StudyError` (a file that cannot be written there,
said before the store is read; no such study); the typer command prints them and exits 2.
Deferred: :mod:`study.export` (pyarrow) and the record are imported when the command runs,
not when ``study`` starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from search_spaces.spec import StudyError
from study import paths
from study.services.recorded import existing, not_finished


@dataclass(frozen=True)
class Exported:
    """Where the table went, how many rows it has, and the note of a study not finished."""

    path: str
    rows: int
    note: str


def check_out(out: str) -> None:
    """``--out`` as a new file, refused before anything is read (a folder is refused when the
    write fails, with the fix)."""
    from trainables.remote import is_remote

    local = None if is_remote(out) else Path(out.removeprefix("file://"))
    if local is not None and not local.is_dir():
        paths.new_file("--out", local, example="results.parquet")


def export_study(name: str, out: str, uri: str) -> Exported:
    """Write study ``name``'s results table to ``out``; StudyError saying why it cannot."""
    from study.export import export_parquet

    record = existing(name, uri)
    try:
        path = export_parquet(record, out)
    except (OSError, ValueError) as err:  # pyarrow's reasons: no bucket, a folder there, …
        folder = " (a folder: give a file in it, e.g. --out DIR/results.parquet)" if (
            Path(out).is_dir()) else ""  # fmt: skip
        raise StudyError(f"--out {out}: cannot write the results there{folder} ({err}); "
                         "nothing was written") from None  # fmt: skip
    return Exported(path, len(record.trial_runs()), not_finished(record))
