"""Reading a study's MLflow record back into a results table, exactly as it was written.

MLflow stores params and tags as text. Every trial's child run therefore carries its whole
TrialConfig and derived values once more, losslessly, as JSON in the tag ``study.trial_config``
(``{"config": {...}, "derived": {...}}``): a ``data_root`` of ``"20240501"``, ``"0x1F"``,
``"yes"`` or ``"a #b"`` comes back as that string, a float as that float, a tuple as a tuple.
Runs recorded before that tag existed are read by each field's declared type instead (never by
guessing the type from the text).

The names below are the record's contract (``docs/mlflow.md``); ``study/`` writes with them.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from analysis.reading.sqlite_reader import ACTIVE_ONLY
from analysis.reading.state import UNFINISHED, state_of
from analysis.reading.store import read_client, store_exists
from trainables.remote import redacted

if TYPE_CHECKING:  # imported where a table is made: a command that reads runs only never needs it
    import pyarrow as pa

ROLE_TAG = "study.role"
PARENT, TRIAL = "parent", "trial"
TRIAL_CONFIG_TAG = "study.trial_config"
BLOCK_TAG = "study.block"  # augmented designs: 1 the factorial, 2 the axial and centre points
BASELINES_TAG = "study.baselines"  # the parent's baselines, JSON (study/baselines.py)
# a study of several architectures: each one's baselines, JSON, in a tag of its own (+ its number)
ARCHITECTURE_BASELINES_TAG = "study.baselines.architecture."
# the study file's goals (analysis.stats.desirability), JSON; a tag, so a study resumed with new
# goals is analysed with those
GOALS_TAG = "study.goals"
# a multi-objective Optuna design's objectives ([{metric, mode}], JSON): the report's Pareto front
OBJECTIVES_TAG = "study.objectives"
# a confirmation study's chosen point and rival (search_spaces.spec.Confirms), JSON; "" when none
CONFIRMS_TAG = "study.confirms"
SCHEMA_VERSION = "1"
# Where a trial ran, as its child run's tags ``study.<name>`` and results.parquet's columns: the
# Ray node's id and address, the accelerator ids Ray assigned it (comma-separated, empty without
# a GPU share) and the torch device it trained on (``torch_device``; the TrialConfig's
# ``device`` is what the study asked for) (study.trainable.placement)
PLACEMENT = ("node_id", "node_ip", "gpu_ids", "torch_device")
SUMMARY_METRICS = {
    "trial/wall_s": "wall_s",
    "trial/examples_seen": "examples_seen",
    "trial/steps": "steps",
    "trial/resumed_from": "resumed_from",  # examples seen at the last resume; 0: never resumed
    "trial/heldout_items": "heldout_items",  # the held-out items every accuracy counts over
}


def encode_trial(config: dict[str, Any], derived: dict[str, Any]) -> str:
    """The lossless JSON of a trial's fields (``config``) and derived values."""
    return json.dumps({"config": config, "derived": derived}, sort_keys=True, allow_nan=True)


def _field_from_text(annotation: Any, text: str) -> Any:
    """One param written as ``str(value)``, read by its declared type (legacy runs)."""
    from trainables.text import accepts_none, base_type

    kind = base_type(annotation)
    if text == "None" and accepts_none(annotation):
        return None
    if kind is tuple:
        return tuple(json.loads(text))
    if kind is bool:
        return {"True": True, "False": False}.get(text, text)
    return text  # int, float, str and Literal: the model converts (or keeps) the text itself


def _number(text: str) -> int | float | None:
    if text == "None":
        return None
    try:
        return int(text)
    except ValueError:
        return float(text)


def decode_trial(params: dict[str, str], tags: dict[str, str]) -> tuple[dict, dict]:
    """(TrialConfig fields, derived values) of one child run, exactly as written."""
    from trainables.config import TrialConfig

    if TRIAL_CONFIG_TAG in tags:
        data = json.loads(tags[TRIAL_CONFIG_TAG])
        config = TrialConfig(**data["config"]).model_dump()
        return config, dict(data["derived"])
    raw = {
        name: _field_from_text(field.annotation, params[name])
        for name, field in TrialConfig.model_fields.items()
        if name in params
    }
    config = TrialConfig(**raw).model_dump()
    derived = {k: _number(v) for k, v in params.items() if k.startswith("derived/")}
    return config, derived


# ---------------------------------------------------------------------------------------------
# runs -> rows -> an Arrow table
# ---------------------------------------------------------------------------------------------
STUDY_TAG = "study.name"  # on the experiment and on every run: the study, whatever its name
ALL = 3  # mlflow.entities.ViewType.ALL: active and deleted


def find_experiment(client, study: str):
    """The MLflow experiment of ``study``, found by its recorded identity, not only its name:
    the experiment of that name; else one tagged ``study.name`` = ``study``; else the one
    holding a run so tagged (a record made before experiments were tagged). A renamed
    experiment is found (its ``name`` says what it is called now; the caller notes it), a
    deleted one too (its ``lifecycle_stage`` says so; the caller refuses it naming the restore),
    the active one first. None when the store holds no trace of the study."""
    found = client.get_experiment_by_name(study)
    if found is not None:
        return found
    experiments = sorted(client.search_experiments(view_type=ALL),
                         key=lambda e: e.lifecycle_stage != "active")  # fmt: skip
    for experiment in experiments:
        if (experiment.tags or {}).get(STUDY_TAG) == study:
            return experiment
    for experiment in experiments:
        runs = client.search_runs([experiment.experiment_id],
                                  filter_string=f"tags.`{STUDY_TAG}` = '{study}'",
                                  run_view_type=ALL, max_results=1)  # fmt: skip
        if runs:
            return experiment
    return None


def study_runs(client, experiment_id: str, role: str) -> list:
    return client.search_runs(
        [experiment_id], filter_string=f"tags.`{ROLE_TAG}` = '{role}'", max_results=50000
    )


def trial_status(run) -> str:
    """A child run's results status: the trial's own word (finished, failed, killed) when it
    set one, else the run's status in lower case; a run not ended says so (running, scheduled),
    whatever an earlier attempt's word was."""
    if run.info.status in UNFINISHED:
        return run.info.status.lower()
    return run.data.tags.get("study.trial_status") or run.info.status.lower()


def trial_row(study: str, key: str, run, factors: list[str]) -> dict[str, Any]:
    """One results row of a child run (the columns of ``docs/storage.md``'s results table)."""
    params, tags, metrics = run.data.params, run.data.tags, run.data.metrics
    config, derived = decode_trial(params, tags)
    row: dict[str, Any] = {
        "study": study,
        "point_id": tags.get("study.point_id", ""),
        "replicate": int(tags.get("study.replicate", "0")),
        "status": trial_status(run),
        "trial_key": key,
        "run_id": run.info.run_id,
    }
    row |= {name: config[name] for name in factors if name in config}
    row |= {name: value for name, value in config.items() if name not in factors}
    row |= {"derived." + k.removeprefix("derived/"): v for k, v in derived.items()}
    if run.info.status in UNFINISHED:  # a running trial's metrics are partial: no result yet
        metrics = {}
    row |= {k: v for k, v in metrics.items() if k not in SUMMARY_METRICS}
    row |= {column: metrics.get(k) for k, column in SUMMARY_METRICS.items()}
    row |= {name: tags.get(f"study.{name}") for name in PLACEMENT}
    return row


def _column(values: list[Any]) -> tuple[pa.Array, bool]:
    """(array, JSON-encoded?) of one column; lists and tuples travel as JSON text."""
    import pyarrow as pa

    present = [v for v in values if v is not None]
    if present and all(isinstance(v, list | tuple) for v in present):
        text = [None if v is None else json.dumps(list(v)) for v in values]
        return pa.array(text, pa.string()), True
    if present and all(isinstance(v, str) for v in present):
        return pa.array(values, pa.string()), False
    if present and all(isinstance(v, bool) for v in present):
        return pa.array(values, pa.bool_()), False
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in present)
    if present and numbers:
        if all(isinstance(v, int) for v in present):
            return pa.array(values, pa.int64()), False
        return pa.array([None if v is None else float(v) for v in values], pa.float64()), False
    if not present:
        return pa.array(values, pa.null()), False
    # mixed kinds in one column cannot be typed without a loss: refuse rather than guess
    kinds = sorted({type(v).__name__ for v in present})
    raise ValueError(f"a results column mixes {', '.join(kinds)}: {present[:4]}")


def rows_table(rows: list[dict[str, Any]], metadata: dict[str, str]) -> pa.Table:
    """Rows -> an Arrow table with the results schema's metadata."""
    import pyarrow as pa

    columns: list[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns]
    arrays, encoded = {}, []
    for name in columns:
        try:
            arrays[name], is_json = _column([row.get(name) for row in rows])
        except ValueError as err:
            raise ValueError(f"column {name!r}: {err}") from None
        if is_json:
            encoded.append(name)
    table = pa.table(arrays) if arrays else pa.table({})
    meta = {"schema_version": SCHEMA_VERSION, **metadata, "json_columns": json.dumps(encoded)}
    return table.replace_schema_metadata(meta)


def results_table(client, study: str, spec_sha: str = "") -> pa.Table:
    """The study's results (one row per child run) as an Arrow table, read from MLflow.

    Raises:
        LookupError: no experiment of that name, or it was deleted.
    """
    return rows_table(*results_rows(client, study, spec_sha))


def results_fingerprint(client, study: str) -> str:
    """A fingerprint of everything a report of ``study`` reads from its record: every trial's
    row (its status, factors and every metric's latest value) and the table's metadata (the
    target, goals, confirmation, baselines, checks, whether it is still running). A report
    stored with it answers again only while the record still gives the same (a metric changed
    with MLflow's client, new goals or baselines change it). Raises LookupError as
    :func:`results_table`."""
    import hashlib

    rows, metadata = results_rows(client, study)
    text = json.dumps([rows, metadata], sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def results_rows(client, study: str, spec_sha: str = "") -> tuple[list[dict[str, Any]], dict]:
    """(one row per child run, the table's metadata) of :func:`results_table`."""
    experiment = find_experiment(client, study)
    if experiment is None or experiment.lifecycle_stage != "active":
        state = "was deleted" if experiment is not None else "does not exist"
        raise LookupError(f"the MLflow experiment of study {study!r} {state}")
    parents = study_runs(client, experiment.experiment_id, PARENT)
    parent = parents[0] if parents else None
    params = parent.data.params if parent else {}
    tags = parent.data.tags if parent else {}
    factors = [f.strip() for f in params.get("factors", "").split(",") if f.strip()]
    trials = {r.data.tags["study.trial_key"]: r
              for r in study_runs(client, experiment.experiment_id, TRIAL)}  # fmt: skip
    rows = [trial_row(study, key, run, factors) for key, run in sorted(trials.items())]
    blocks = trial_blocks(parents, trials)
    if blocks:
        for row in rows:
            row["block"] = blocks[row["trial_key"]]
    checks = {k.removeprefix("study.check."): v for k, v in tags.items()
              if k.startswith("study.check.")}  # fmt: skip
    state = state_of(experiment.tags or {}, parent, trials)
    metadata = {
        "study": study,
        # whether the study is still running (analysis.reading.state): its findings wait for it
        "state": json.dumps(state.to_json()),
        "spec_sha": spec_sha or tags.get("study.spec_sha", ""),
        "factors": json.dumps(factors),
        "checks": json.dumps(checks),
        "resources": params.get("resources", "{}"),
        "scales": params.get("factor_scales", "{}"),
        "design": params.get("design", ""),
        # {"metric", "mode"} of the study file; absent from studies recorded before it was logged
        "target": json.dumps(
            {"metric": params["target_metric"], "mode": params.get("target_mode", "max")}
        )
        if params.get("target_metric")
        else "",
        "goals": next((p.data.tags[GOALS_TAG] for p in parents if GOALS_TAG in p.data.tags), ""),
        "objectives": next(
            (p.data.tags[OBJECTIVES_TAG] for p in parents if OBJECTIVES_TAG in p.data.tags), ""
        ),
        "confirms": next(
            (p.data.tags[CONFIRMS_TAG] for p in parents if p.data.tags.get(CONFIRMS_TAG)), ""
        ),
        # what every result is read against (study/baselines.py), as the parent run keeps it
        "baselines": next(
            (p.data.tags[BASELINES_TAG] for p in parents if BASELINES_TAG in p.data.tags), ""
        ),
        "baselines_by_architecture": next(
            (architecture_baselines(p.data.tags) for p in parents if BASELINES_TAG in p.data.tags),
            "",
        ),
    }
    return rows, metadata


def architecture_baselines(tags: dict[str, str]) -> str:
    """The per-architecture baselines of a parent run's ``tags`` as one JSON list, in the
    architectures' order (``[{"arch", "fields", "baselines"}]``, study/baselines.py); "" for a
    study of one architecture, or one recorded before they were measured per architecture."""
    found = []
    for key, text in tags.items():
        number = key.removeprefix(ARCHITECTURE_BASELINES_TAG)
        if key.startswith(ARCHITECTURE_BASELINES_TAG) and number.isdigit():
            found.append((int(number), json.loads(text)))
    return json.dumps([entry for _, entry in sorted(found, key=lambda f: f[0])]) if found else ""


def trial_blocks(parents: list, trials: dict) -> dict[str, int]:
    """trial key -> its block, for a study run in blocks (``study augment``): the child run's
    ``study.block`` tag, else its parent run's (a parent without one is block 1). Empty for a
    study of one parent run and no block tags."""
    tagged = any(BLOCK_TAG in r.data.tags for r in [*parents, *trials.values()])
    if len(parents) < 2 and not tagged:
        return {}
    by_parent = {p.info.run_id: int(p.data.tags.get(BLOCK_TAG, "1")) for p in parents}
    return {
        key: int(run.data.tags.get(BLOCK_TAG) or
                 by_parent.get(run.data.tags.get("mlflow.parentRunId"), 1))
        for key, run in trials.items()
    }  # fmt: skip


def decode_json_columns(frame, names: list[str]) -> None:
    """JSON-encoded list columns back to tuples, in place."""
    for name in names:
        if name in frame:
            frame[name] = [None if v is None else tuple(json.loads(v)) for v in frame[name]]


def recorded_studies(uri: str) -> list[str]:
    """The names of the studies a store holds (active experiments with a parent run), read
    without writing: an embedded store that does not exist holds none."""
    if not store_exists(uri):
        return []
    client = read_client(uri)  # a file that is no store of this MLflow: ValueError
    names = []
    for experiment in client.search_experiments(view_type=ACTIVE_ONLY):
        if study_runs(client, experiment.experiment_id, PARENT):
            names.append(experiment.name)
    return sorted(names)


def unknown_study(uri: str, study: str) -> str:
    """Why ``study`` cannot be read from ``uri``, and what is there instead: no store at all,
    or the studies it does hold (the closest first, as a 'did you mean')."""
    if not store_exists(uri):
        return (f"no study named {study!r}: there is no MLflow store at {uri} (nothing was "
                "created); run the study first, or name the store it was recorded in (the CLI's "
                "--tracking-uri, the notebook's TRACKING_URI, or MLFLOW_TRACKING_URI)")  # fmt: skip
    held = recorded_studies(uri)
    uri = redacted(uri)  # a server's URI may carry a password: never shown
    if not held:
        return f"no study named {study!r} in {uri}: it holds no study"
    from trainables.names import MAX_SHOWN, did_you_mean  # the CLI's one 'did you mean'

    hint = did_you_mean(study, held)
    if len(held) <= MAX_SHOWN:
        return f"no study named {study!r} in {uri}{hint} It holds: {', '.join(held)}"
    return (f"no study named {study!r} in {uri}{hint} It holds {len(held)} studies; list them "
            f"with: study list --tracking-uri {uri}")  # fmt: skip
