"""Reading an embedded MLflow store without MLflow: the cheapest client for commands that only
read (``study status``, ``export``, ``list``, ``power``; ``load_study`` in a notebook).

Importing MLflow takes 2–4 s and opening its SQLAlchemy store verifies the schema on every
start, while a command that prints a study's trials needs a few rows of five tables. So an
embedded store whose schema is the installed MLflow's (:func:`analysis.reading.store.store_problem`)
is read here, through a read-only SQLite connection, by :class:`SQLiteReader`: the part of
``MlflowClient``'s reading API this project calls, answering as MLflow's SQLAlchemy store does
(runs newest first, then by id; a run's metrics are its latest values; NaN where MLflow keeps
``is_nan``). A server, or a store this MLflow does not read, gets the real client
(:func:`analysis.reading.store.read_client`). ``tests/analysis/reading/test_sqlite_reader.py``
compares both on real stores.
"""

from __future__ import annotations

import math
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ACTIVE_ONLY, DELETED_ONLY, ALL = 1, 2, 3  # mlflow.entities.ViewType's values
_ROLE_FILTER = re.compile(r"tags\.`(?P<key>[^`]+)` = '(?P<value>[^']*)'")


@dataclass(frozen=True)
class Experiment:
    experiment_id: str
    name: str
    artifact_location: str
    lifecycle_stage: str
    tags: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    run_name: str
    experiment_id: str
    status: str
    start_time: int | None
    end_time: int | None
    lifecycle_stage: str
    artifact_uri: str

    @property
    def run_uuid(self) -> str:
        return self.run_id


@dataclass(frozen=True)
class RunData:
    metrics: dict[str, float]
    params: dict[str, str]
    tags: dict[str, str]


@dataclass(frozen=True)
class Run:
    info: RunInfo
    data: RunData


def _view(view_type: int) -> tuple[str, ...]:
    return {ACTIVE_ONLY: ("active",), DELETED_ONLY: ("deleted",)}.get(
        int(view_type), ("active", "deleted")
    )


class SQLiteReader:
    """``MlflowClient``'s reading calls this project makes, on an embedded store, read-only."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        path = Path(uri.removeprefix("sqlite:///")).resolve()
        self._db = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, check_same_thread=False)

    def close(self) -> None:
        self._db.close()

    # the reads that need MLflow's artifact repositories or its history pages go to MLflow's
    # own client, made on first need; nothing that writes is reachable through the reader
    _THROUGH_MLFLOW = frozenset({"list_artifacts", "download_artifacts", "get_metric_history"})

    def __getattr__(self, name: str):
        if name not in SQLiteReader._THROUGH_MLFLOW:
            raise AttributeError(f"{type(self).__name__} reads only; it has no {name!r}")
        if "_client" not in self.__dict__:
            from mlflow.tracking import MlflowClient

            self.__dict__["_client"] = MlflowClient(self.uri)
        return getattr(self.__dict__["_client"], name)

    def _rows(self, sql: str, args: tuple = ()) -> list[tuple]:
        return self._db.execute(sql, args).fetchall()

    # -- experiments --
    def _experiments(self, where: str, args: tuple) -> list[Experiment]:
        rows = self._rows(
            "SELECT experiment_id, name, artifact_location, lifecycle_stage FROM experiments "
            f"WHERE {where} ORDER BY creation_time DESC, experiment_id ASC",
            args,
        )
        out = []
        for eid, name, location, stage in rows:
            tags = dict(self._rows("SELECT key, value FROM experiment_tags WHERE experiment_id = ?",
                                   (eid,)))  # fmt: skip
            out.append(Experiment(str(eid), name, location, stage, tags))
        return out

    def get_experiment_by_name(self, name: str) -> Experiment | None:
        found = self._experiments("name = ?", (name,))
        return found[0] if found else None

    def get_experiment(self, experiment_id: str) -> Experiment:
        found = self._experiments("experiment_id = ?", (int(experiment_id),))
        if not found:
            raise LookupError(f"no experiment with id {experiment_id} in {self.uri}")
        return found[0]

    def search_experiments(self, view_type: int = ACTIVE_ONLY, **_: Any) -> list[Experiment]:
        stages = _view(view_type)
        marks = ",".join("?" * len(stages))
        return self._experiments(f"lifecycle_stage IN ({marks})", stages)

    # -- runs --
    def search_runs(
        self,
        experiment_ids: list[str],
        filter_string: str = "",
        run_view_type: int = ACTIVE_ONLY,
        max_results: int = 1000,
        **_: Any,
    ) -> list[Run]:
        """Runs of these experiments, newest first; ``filter_string`` may be empty or one tag
        equality (``tags.`key` = 'value'``), the only filter this project writes."""
        stages = _view(run_view_type)
        where = [f"r.experiment_id IN ({','.join('?' * len(experiment_ids))})",
                 f"r.lifecycle_stage IN ({','.join('?' * len(stages))})"]  # fmt: skip
        args: list[Any] = [int(e) for e in experiment_ids] + list(stages)
        if filter_string.strip():
            match = _ROLE_FILTER.fullmatch(filter_string.strip())
            if match is None:
                raise NotImplementedError(f"filter {filter_string!r}: only tags.`key` = 'value'")
            where.append("EXISTS (SELECT 1 FROM tags t WHERE t.run_uuid = r.run_uuid "
                         "AND t.key = ? AND t.value = ?)")  # fmt: skip
            args += [match["key"], match["value"]]
        rows = self._rows(
            "SELECT r.run_uuid, r.name, r.experiment_id, r.status, r.start_time, r.end_time, "
            f"r.lifecycle_stage, r.artifact_uri FROM runs r WHERE {' AND '.join(where)} "
            "ORDER BY r.start_time DESC, r.run_uuid ASC LIMIT ?",
            (*args, int(max_results)),
        )
        return self._with_data([RunInfo(r[0], r[1] or "", str(r[2]), *r[3:]) for r in rows])

    def get_run(self, run_id: str) -> Run:
        rows = self._rows(
            "SELECT run_uuid, name, experiment_id, status, start_time, end_time, lifecycle_stage, "
            "artifact_uri FROM runs WHERE run_uuid = ?",
            (run_id,),
        )
        if not rows:
            raise LookupError(f"no run {run_id} in {self.uri}")
        r = rows[0]
        return self._with_data([RunInfo(r[0], r[1] or "", str(r[2]), *r[3:])])[0]

    def _with_data(self, infos: list[RunInfo]) -> list[Run]:
        """Each run's tags, params and latest metrics, three queries for all of them."""
        if not infos:
            return []
        ids = [i.run_id for i in infos]
        tags, params, metrics = ({i: {} for i in ids} for _ in range(3))
        for chunk in (ids[k : k + 900] for k in range(0, len(ids), 900)):  # SQLite's limit
            marks = ",".join("?" * len(chunk))
            for run, key, value in self._rows(
                f"SELECT run_uuid, key, value FROM tags WHERE run_uuid IN ({marks})", chunk
            ):
                tags[run][key] = value
            for run, key, value in self._rows(
                f"SELECT run_uuid, key, value FROM params WHERE run_uuid IN ({marks})", chunk
            ):
                params[run][key] = value
            for run, key, value, is_nan in self._rows(
                f"SELECT run_uuid, key, value, is_nan FROM latest_metrics "
                f"WHERE run_uuid IN ({marks})",
                chunk,
            ):
                metrics[run][key] = math.nan if is_nan else float(value)
        return [Run(i, RunData(metrics[i.run_id], params[i.run_id], tags[i.run_id]))
                for i in infos]  # fmt: skip
