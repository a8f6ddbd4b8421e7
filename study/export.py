"""The results table: one Parquet row per trial, read back from the MLflow record.

Columns (``docs/storage.md``): ``study``, ``point_id``, ``replicate``, ``status``, one column per
factor, the fixed TrialConfig fields, ``derived.*``, the final value of every metric (named as
logged, e.g. ``z/align``), ``wall_s``, ``examples_seen``, ``steps``. The file's metadata holds
``schema_version``, the study name, its spec fingerprint, the list of factors, the design kind,
the per-trial resources (JSON), the study's self-checks (JSON, e.g. the InfoNCE worked example)
and ``json_columns`` (list-valued fields such as ``mlp_hidden``, stored as JSON text).

Reading the record is ``analysis.reading.record``'s job (every value comes back exactly as written);
this module writes the file.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from analysis.reading.record import SCHEMA_VERSION
from analysis.reading.record import results_table as _results_table
from study.record import StudyRecord
from study.storage import open_storage

__all__ = ["SCHEMA_VERSION", "export_parquet", "results_table"]


def results_table(record: StudyRecord, spec_sha: str = "") -> pa.Table:
    """The study's results as an Arrow table, with the schema metadata."""
    return _results_table(record.client, record.study, spec_sha)


def export_parquet(record: StudyRecord, out: str | Path, spec_sha: str = "") -> str:
    """Write the study's results table to ``out``, a path or a URI (``s3://…/results.parquet``,
    through pyarrow's filesystems as a study's storage); returns where it went. The table is
    read whole before the file is opened, and the file is written whole (see
    :meth:`Storage.write_whole`): a reader never sees a truncated file."""
    table = results_table(record, spec_sha)
    where, name = str(out).rstrip("/").rsplit("/", 1) if "/" in str(out) else (".", str(out))
    folder = open_storage(where or "/")
    folder.write_whole(lambda path: pq.write_table(table, path, filesystem=folder.fs), name)
    return folder.uri_of(name)
