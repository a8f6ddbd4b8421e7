"""Loading a study's results: from MLflow (``load_study``) or from the Parquet export
(``read_results``), as the same DataFrame; and per-evaluation histories (``load_history``).

The results frame has one row per trial with the Parquet export's columns (``study``,
``point_id``, ``replicate``, ``status``, one column per factor, the fixed fields, ``derived.*``,
every metric's final value, ``wall_s``, ``examples_seen``, ``steps``). ``frame.attrs`` carries
``study``, ``factors`` (the varied fields, in study-file order), ``spec_sha``, ``design``,
``scales`` (factor -> linear | log), ``resources`` (per-trial cpu/gpu), ``checks`` (self-checks
run in the study's trials: name -> "pass" or "fail: ...") and, for studies that recorded it,
``target`` (``{"metric": ..., "mode": "max" | "min"}`` of the study file), ``goals`` (the
study file's goals for the overall desirability, :mod:`analysis.stats.desirability`; empty when
none), ``objectives`` (a multi-objective Optuna design's ``[{"metric", "mode"}]``; empty otherwise)
and ``baselines`` (kind -> ``{"metrics", "per_seed", "seeds", "name", "about"}``: what the study's
results are read against, :mod:`trainables.baselines`; empty when none was measured; in a study
of several architectures, the first's) and ``baselines_by_architecture`` (``[{"arch", "fields",
"baselines"}]``: each architecture's, :mod:`study.baselines`; empty in a study of one).

Per-item outcomes (every probe's label for each held-out item, of every finished trial and every
baseline system: :mod:`analysis.reading.outcomes`) are read by :func:`load_outcomes`.

Which store: :func:`default_store`, the one the ``study`` CLI records in and reads from when none
is named (MLFLOW_TRACKING_URI, else the nearest ``mlflow.db`` at or above the working folder).
Reading never creates a store, and a name the store does not hold is a LookupError that names
the store and the studies it holds (:func:`analysis.reading.record.unknown_study`).
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from analysis.reading.outcomes import (
    BASELINE_FOLDER,
    MISSING,
    TRIAL_ARTIFACT,
    Outcomes,
    SystemOutcomes,
    Unread,
    parse_baseline_file,
    read_outcomes,
    system_arch,
)
from analysis.reading.record import (
    BASELINES_TAG,
    PARENT,
    TRIAL,
    decode_json_columns,
    find_experiment,
    recorded_studies,
    results_table,
    study_runs,
    trial_status,
    unknown_study,
)
from analysis.reading.store import (
    STORE_FILE,
    default_store,
    local_folder,
    read_client,
    store_exists,
    store_problem,
)

__all__ = [
    "STORE_FILE", "default_store", "load_history", "load_outcomes", "load_study",
    "read_results", "recorded_studies", "results_frame", "store_exists", "store_problem",
    "unknown_study",
]  # fmt: skip


def results_frame(table: pa.Table) -> pd.DataFrame:
    """An Arrow results table as a DataFrame: list columns as tuples, integer columns with
    missing values as pandas' nullable Int64 (not floats)."""
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    frame = table.to_pandas()
    decode_json_columns(frame, json.loads(meta.get("json_columns") or "[]"))
    for column in table.schema:
        if pa.types.is_integer(column.type) and table[column.name].null_count:
            frame[column.name] = pd.array(table[column.name].to_pylist(), dtype="Int64")
    frame.attrs["study"] = meta.get("study", "")
    frame.attrs["factors"] = json.loads(meta.get("factors", "[]"))
    frame.attrs["spec_sha"] = meta.get("spec_sha", "")
    frame.attrs["schema_version"] = meta.get("schema_version", "")
    frame.attrs["design"] = meta.get("design", "")
    frame.attrs["resources"] = json.loads(meta.get("resources") or "{}")
    frame.attrs["checks"] = json.loads(meta.get("checks") or "{}")
    frame.attrs["scales"] = json.loads(meta.get("scales") or "{}")
    if meta.get("target"):
        frame.attrs["target"] = json.loads(meta["target"])
    frame.attrs["baselines"] = json.loads(meta.get("baselines") or "{}")
    frame.attrs["baselines_by_architecture"] = json.loads(
        meta.get("baselines_by_architecture") or "[]"
    )
    frame.attrs["goals"] = json.loads(meta.get("goals") or "[]")
    frame.attrs["objectives"] = json.loads(meta.get("objectives") or "[]")
    frame.attrs["confirms"] = json.loads(meta.get("confirms") or "null")
    # {"kind", "total", "not_finished", "pid", "host"} (analysis.reading.state); absent from
    # exports made before it was kept
    frame.attrs["state"] = json.loads(meta.get("state") or "null")
    return frame


def read_results(path: str | Path) -> pd.DataFrame:
    """The Parquet export of a study, one row per trial.

    Raises:
        ValueError: the file is not a study's export (its metadata is gone: pandas'
            ``to_parquet`` of a read table drops it), or a finished trial has no value of a
            factor (the column and the trial are named): nothing could be analysed from it.
    """
    table = read_table(path)
    meta = table.schema.metadata or {}
    if b"schema_version" not in meta or b"factors" not in meta:
        raise ValueError(
            f"{path}: not a study's results export: its metadata (study, factors, design, "
            "target) is missing, as after pandas re-saves a read table; write it again with "
            "study export STUDY --out FILE, or keep the file study run wrote"
        )
    frame = results_frame(table)
    _check_factor_values(frame, path)
    return frame


def read_table(path: str | Path) -> pa.Table:
    """A Parquet file, a path or a URI, read through one open handle. A study that resumes
    rewrites its results.parquet (a new file renamed over the old); pyarrow reading by path
    takes the size of one file and may read the other ("corrupt file?")."""
    try:
        if "://" in str(path):
            fs, where = pafs.FileSystem.from_uri(str(path))
        else:
            fs, where = pafs.LocalFileSystem(), str(Path(path).absolute())
        kind = fs.get_file_info(where).type
        if kind == pafs.FileType.NotFound:
            raise ValueError(f"{path}: no such file (a results .parquet: study run writes "
                             "studies/<study>/results.parquet, study export another)")  # fmt: skip
        if kind == pafs.FileType.Directory:
            raise ValueError(f"{path}: a folder, not a results .parquet file")
        with fs.open_input_file(where) as handle:
            return pq.read_table(handle)
    except ValueError as err:
        if str(err).startswith(str(path)):
            raise
        # pyarrow's ArrowInvalid is a ValueError: "Could not open Parquet input source
        # '<Buffer>'" names neither the file nor what it is
        raise ValueError(f"{path}: not a Parquet file ({_first_line(err)}){_AGAIN}") from None
    except OSError as err:  # unreadable, a bucket refused: pyarrow's own words, with the file
        raise ValueError(f"{path}: cannot be read ({_first_line(err)})") from None


# what to do about a results file that is spoiled (truncated, garbage): the record still has it
_AGAIN = ("; a study's results are kept in its record: `study report STUDY` reads them from "
          "there, `study export STUDY --out FILE` writes the file again")


def _first_line(err: Exception) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def _check_factor_values(frame: pd.DataFrame, path: str | Path) -> None:
    """Every finished trial has a value of every factor (a trial at no point cannot be fit)."""
    done = frame[frame["status"] == "finished"] if "status" in frame else frame
    for factor in frame.attrs.get("factors", []):
        if factor not in frame:
            raise ValueError(f"{path}: the factor column {factor!r} is missing")
        blank = done[done[factor].isna()]
        if len(blank):
            who = blank.index.astype(str).map(lambda i: f"row {i}")
            if "trial_key" in blank:
                who = blank["trial_key"]
            elif {"point_id", "replicate"} <= set(blank):
                who = blank["point_id"] + "-r" + blank["replicate"].astype(str)
            raise ValueError(
                f"{path}: factor {factor!r} has no value for finished trial(s) "
                f"{', '.join(map(str, who[:5]))}: a trial must sit at a design point; fix "
                "or drop those rows"
            )


def load_study(name: str, tracking_uri: str | None = None) -> pd.DataFrame:
    """One row per trial, read from the MLflow record (the same columns as ``read_results``);
    from :func:`default_store` unless ``tracking_uri`` is given. ``frame.attrs["store"]`` is
    the store it was read from.

    Raises:
        LookupError: there is no store there, or it holds no (active) study of that name; the
            message names the store and the studies it holds
            (:func:`analysis.reading.record.unknown_study`).
        ValueError: the file there is no store this MLflow reads (:func:`store_problem`).
    """
    uri = _uri(tracking_uri, name)
    try:
        table = results_table(read_client(uri), name)
    except LookupError:  # no (active) experiment of that name: say what the store holds
        raise LookupError(unknown_study(uri, name)) from None
    frame = results_frame(table)
    frame.attrs["store"] = uri
    return frame


def _uri(tracking_uri: str | None, study: str) -> str:
    """``tracking_uri``, else :func:`default_store`. Reading never creates a store: an embedded
    one whose file is not there is a LookupError naming it (an MlflowClient on it would write
    an empty database there), and a file that is no store this MLflow reads a ValueError."""
    uri = tracking_uri or default_store()
    if not store_exists(uri):
        raise LookupError(unknown_study(uri, study))
    return uri


def load_history(
    name: str, tracking_uri: str | None = None, metrics: tuple[str, ...] = ("z/align", "z/uniform")
) -> pd.DataFrame:
    """Every evaluation of every trial: columns ``trial_key``, ``point_id``, ``replicate``,
    ``step`` (examples seen) and one column per metric."""
    uri = _uri(tracking_uri, name)
    client = read_client(uri)
    experiment = find_experiment(client, name)
    if experiment is None or experiment.lifecycle_stage != "active":
        raise LookupError(unknown_study(uri, name))
    runs = {r.data.tags["study.trial_key"]: r
            for r in study_runs(client, experiment.experiment_id, TRIAL)}  # fmt: skip
    if uri.startswith("sqlite:///"):
        return _history_sqlite(uri.removeprefix("sqlite:///"), runs, metrics)
    rows = []
    for key, run in runs.items():
        for metric in metrics:
            for m in client.get_metric_history(run.info.run_id, metric):
                rows.append((key, metric, int(m.step), m.value))
    return _pivot(rows, runs, metrics)


def _history_sqlite(db: str, runs: dict, metrics: tuple[str, ...]) -> pd.DataFrame:
    """One query for all runs (the client's per-run calls take seconds for thousands of runs)."""
    by_id = {run.info.run_id: key for key, run in runs.items()}
    if not by_id:
        return _pivot([], runs, metrics)
    marks = ",".join("?" * len(metrics))
    with sqlite3.connect(db) as con:
        found = con.execute(
            f"SELECT run_uuid, key, step, value FROM metrics WHERE key IN ({marks})", metrics
        ).fetchall()
    rows = [(by_id[r], k, int(s), v) for r, k, s, v in found if r in by_id]
    return _pivot(rows, runs, metrics)


def _pivot(rows: list[tuple], runs: dict, metrics: tuple[str, ...]) -> pd.DataFrame:
    columns = ["trial_key", "point_id", "replicate", "step", *metrics]
    if not rows:
        return pd.DataFrame(columns=columns)
    long = pd.DataFrame(rows, columns=["trial_key", "metric", "step", "value"])
    wide = long.pivot_table(
        index=["trial_key", "step"], columns="metric", values="value", aggfunc="last"
    ).reset_index()
    tags = {k: r.data.tags for k, r in runs.items()}
    wide["point_id"] = wide["trial_key"].map(lambda k: tags[k].get("study.point_id", ""))
    wide["replicate"] = wide["trial_key"].map(lambda k: int(tags[k].get("study.replicate", 0)))
    for metric in metrics:
        if metric not in wide:
            wide[metric] = float("nan")
    return wide[columns].sort_values(["trial_key", "step"]).reset_index(drop=True)


def load_outcomes(
    name: str, tracking_uri: str | None = None, run_ids: list[str] | None = None
) -> Outcomes:
    """The study's per-item outcomes (:class:`analysis.reading.outcomes.Outcomes`): every finished
    trial's ``evidence/outcomes.parquet`` (by run id; only ``run_ids`` when given) and every
    baseline system's table under the parent run's ``baselines/outcomes/`` (by (kind, seed or
    None)). A run without the file (a record older than the outcomes) is left out.

    Artifacts in a local folder (a path, or ``file:``) are read where they lie; any other store
    (S3, a tracking server) is read through MLflow's artifact repository into a temporary folder,
    so a read writes nothing into the store or the working folder.

    Raises:
        LookupError: no store there, or no (active) study of that name (:func:`unknown_study`).
    """
    uri = _uri(tracking_uri, name)
    client = read_client(uri)
    experiment = find_experiment(client, name)
    if experiment is None or experiment.lifecycle_stage != "active":
        raise LookupError(unknown_study(uri, name))
    runs = study_runs(client, experiment.experiment_id, TRIAL)
    wanted = None if run_ids is None else set(run_ids)
    finished = [r for r in runs if trial_status(r) == "finished"
                and (wanted is None or r.info.run_id in wanted)]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="outcomes-") as tmp:
        trials, unread, absent = {}, [], []
        for run in sorted(finished, key=lambda r: r.data.tags.get("study.trial_key", "")):
            key = run.data.tags.get("study.trial_key", run.info.run_id)
            artifacts = _Artifacts(run, uri, Path(tmp))
            found, where = artifacts.file(TRIAL_ARTIFACT), artifacts.where(TRIAL_ARTIFACT)
            if found is None:
                absent.append(Unread(key, run.info.run_id, where, MISSING))
                continue
            read = readable_outcomes(found)
            if isinstance(read, str):
                unread.append(Unread(key, run.info.run_id, where, read))
            else:
                trials[run.info.run_id] = read
        if trials or unread:  # a record older than the outcomes has none: nothing is missing
            unread = sorted([*unread, *absent], key=lambda u: u.system)
        if wanted is not None:  # in the order asked
            trials = {r: trials[r] for r in run_ids if r in trials}
        baselines, spoiled = _baseline_outcomes(client, experiment.experiment_id, uri, Path(tmp))
    return Outcomes(trials=trials, baselines=baselines, unread=(*unread, *spoiled))


def readable_outcomes(path: Path) -> SystemOutcomes | str:
    """One system's outcomes from ``path``, or why they cannot be read (a truncated file, one
    overwritten with garbage, a table without the item and label columns): a spoiled file is
    named by the caller, never a reason to drop every other system's outcomes."""
    try:
        return read_outcomes(path)
    except (OSError, ValueError, KeyError, TypeError) as err:  # pyarrow's errors are ValueErrors
        return f"{type(err).__name__}: {_first_line(err).replace(str(path), 'the file')}"


def _baseline_outcomes(
    client, experiment_id: str, uri: str, tmp: Path
) -> tuple[dict[tuple, SystemOutcomes], list[Unread]]:
    """The baseline systems of the study's parent run: the newest parent that holds its
    baselines (as :func:`analysis.reading.record.results_table` reads their metrics) and their
    files; and the files of it that cannot be read (each named, its system left out)."""
    parents = [p for p in study_runs(client, experiment_id, PARENT)
               if BASELINES_TAG in p.data.tags]  # fmt: skip
    for parent in parents:
        found, unread = {}, []
        artifacts = _Artifacts(parent, uri, tmp)
        for path in artifacts.folder(BASELINE_FOLDER):
            system = parse_baseline_file(path.name)
            if system is None:
                continue
            read = readable_outcomes(path)
            if isinstance(read, str):
                where = artifacts.where(f"{BASELINE_FOLDER}/{path.name}")
                unread.append(Unread(f"baseline {path.stem}", parent.info.run_id, where, read))
            else:
                found[system] = read
        if found or unread:
            return dict(sorted(found.items(), key=_system_order)), unread
    return {}, []


def _system_order(item) -> tuple:
    """Kind, architecture, then the unseeded system before the seeds in order."""
    key = item[0]
    return key[0], system_arch(key) or 0, key[1] is not None, key[1] or 0


def _local_folder(uri: str | None) -> Path | None:
    """The folder an artifact URI names on this machine, else None
    (:func:`analysis.reading.store.local_folder`)."""
    return local_folder(uri)


class _Artifacts:
    """One run's artifacts, read: in place when they lie in a local folder, else downloaded
    through MLflow's artifact repository (what its client's ``download_artifacts`` uses) into a
    folder of ``tmp`` of the run's own."""

    def __init__(self, run, tracking_uri: str, tmp: Path) -> None:
        self.uri = run.info.artifact_uri
        self.local = _local_folder(self.uri)
        self.tracking_uri = tracking_uri
        self.tmp = tmp / run.info.run_id
        self._repo = None

    @property
    def repo(self):
        if self._repo is None:
            from mlflow.store.artifact.artifact_repository_registry import (
                get_artifact_repository,
            )

            self._repo = get_artifact_repository(self.uri, tracking_uri=self.tracking_uri)
        return self._repo

    def where(self, path: str) -> str:
        """The artifact ``path`` as the user finds it: its file on this machine, else its URI."""
        if self.local is not None:
            return str(self.local / path)
        return f"{self.uri.rstrip('/')}/{path}"

    def file(self, path: str) -> Path | None:
        """The local path of the artifact ``path``; None when the run has no such file."""
        if self.local is not None:
            found = self.local / path
            return found if found.is_file() else None
        parent, _, leaf = path.rpartition("/")
        listed = {Path(f.path).name for f in self.repo.list_artifacts(parent or None)
                  if not f.is_dir}  # fmt: skip
        if leaf not in listed:
            return None
        self.tmp.mkdir(parents=True, exist_ok=True)
        return Path(self.repo.download_artifacts(path, dst_path=str(self.tmp)))

    def folder(self, path: str) -> list[Path]:
        """The local paths of the files directly in the artifact folder ``path`` (sorted);
        none when it is not there."""
        if self.local is not None:
            found = self.local / path
            return sorted(p for p in found.iterdir() if p.is_file()) if found.is_dir() else []
        listed = [f.path for f in self.repo.list_artifacts(path) if not f.is_dir]
        if not listed:
            return []
        self.tmp.mkdir(parents=True, exist_ok=True)
        return sorted(Path(self.repo.download_artifacts(f, dst_path=str(self.tmp)))
                      for f in listed)  # fmt: skip
