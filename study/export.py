"""The results table: one Parquet row per trial, read back from the MLflow record.

Columns (``shared/design.md``): ``study``, ``point_id``, ``replicate``, ``status``, one column per
factor, the fixed TrialConfig fields, ``derived.*``, the final value of every metric (named as
logged, e.g. ``z/align``), ``wall_s``, ``examples_seen``, ``steps``. The file's metadata holds
``schema_version``, the study name, its spec fingerprint, the list of factors, the design kind,
the per-trial resources (JSON) and the study's self-checks (JSON, e.g. the InfoNCE worked
example).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from study.record import StudyRecord
from trainables.config import TrialConfig

SCHEMA_VERSION = "1"
_SUMMARY = {
    "trial/wall_s": "wall_s",
    "trial/examples_seen": "examples_seen",
    "trial/steps": "steps",
}


def _typed_params(params: dict[str, str]) -> dict[str, Any]:
    """MLflow's string params -> TrialConfig's typed values."""
    raw = {}
    for name in TrialConfig.model_fields:
        if name in params:
            text = params[name]
            raw[name] = None if text == "None" else yaml.safe_load(text)
    return TrialConfig(**raw).model_dump()


def result_rows(record: StudyRecord) -> tuple[list[dict[str, Any]], list[str]]:
    """(rows, factor names) of every child run, in point and replicate order."""
    parent = record.parent()
    factors = []
    if parent is not None and parent.data.params.get("factors"):
        factors = [f.strip() for f in parent.data.params["factors"].split(",")]
    rows = []
    for key, run in sorted(record.trial_runs().items()):
        params, tags, metrics = run.data.params, run.data.tags, run.data.metrics
        config = _typed_params(params)
        status = tags.get("study.trial_status") or run.info.status.lower()
        row: dict[str, Any] = {
            "study": record.study,
            "point_id": tags.get("study.point_id", ""),
            "replicate": int(tags.get("study.replicate", "0")),
            "status": status,
            "trial_key": key,
            "run_id": run.info.run_id,
        }
        row |= {name: config[name] for name in factors if name in config}
        row |= {name: value for name, value in config.items() if name not in factors}
        row |= {
            "derived." + k.removeprefix("derived/"): yaml.safe_load(v) if v != "None" else None
            for k, v in params.items()
            if k.startswith("derived/")
        }
        row |= {k: v for k, v in metrics.items() if k not in _SUMMARY}
        row |= {column: metrics.get(k) for k, column in _SUMMARY.items()}
        rows.append(row)
    return rows, factors


def _column(values: list[Any]) -> pa.Array:
    if all(v is None or isinstance(v, list | tuple) for v in values):
        return pa.array([json.dumps(v) if v is not None else None for v in values], pa.string())
    if any(isinstance(v, float) for v in values) and all(
        v is None or isinstance(v, int | float) for v in values
    ):
        return pa.array([None if v is None else float(v) for v in values], pa.float64())
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([None if v is None else str(v) for v in values], pa.string())


def results_table(record: StudyRecord, spec_sha: str = "") -> pa.Table:
    """The study's results as an Arrow table, with the schema metadata."""
    rows, factors = result_rows(record)
    columns: list[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns]
    table = pa.table({c: _column([row.get(c) for row in rows]) for c in columns})
    parent = record.parent()
    tags = parent.data.tags if parent else {}
    params = parent.data.params if parent else {}
    metadata = {
        "schema_version": SCHEMA_VERSION,
        "study": record.study,
        "spec_sha": spec_sha or tags.get("study.spec_sha", ""),
        "factors": json.dumps(factors),
        # what the parent run knows beyond the rows: self-checks and per-trial resources
        "checks": json.dumps(
            {
                k.removeprefix("study.check."): v
                for k, v in tags.items()
                if k.startswith("study.check.")
            }
        ),
        "resources": params.get("resources", "{}"),
        "scales": params.get("factor_scales", "{}"),
        "design": params.get("design", ""),
    }
    return table.replace_schema_metadata({**(table.schema.metadata or {}), **metadata})


def export_parquet(record: StudyRecord, out: str | Path, spec_sha: str = "") -> Path:
    """Write the study's results table; returns the path."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(results_table(record, spec_sha), out)
    return out
