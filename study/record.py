"""The study's record in MLflow: one experiment, one parent run, one child run per trial.

Layout (``docs/mlflow.md``): experiment = study name; the parent run holds the study file, the
design table and the Parquet export; each trial (design point × replicate) has exactly one child
run, found again by its ``study.trial_key`` tag through retries and resumes and continued, never
duplicated. Metrics are logged with step = examples seen, and every write of a trial's metrics
is idempotent per (run, metric, step): a metric whose step is already in the run is not written
again (:meth:`StudyRecord.unlogged`), whoever wrote it (a replayed evaluation after resuming
from a checkpoint, a retried write, a second driver), so no (run, metric, step) row is ever
written twice. MLflow's own table would not refuse one: its key holds the value and the time
too. Runs left RUNNING by a dead driver are ended KILLED when the study is next touched, and
reopened if the trial resumes.

Only the driver writes here (a Tune callback), so trials on worker nodes never need to reach
the tracking server, and an embedded SQLite store has a single writer.

What a reviewer opens in the MLflow UI on top of the record (the runs table's saved views, their
charts and the experiment's description) is :mod:`study.mlflow_views`, which imports this module;
this module never imports it.
"""

from __future__ import annotations

import difflib
import json
import logging
import math
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis.reading.record import (
    BLOCK_TAG,
    CONFIRMS_TAG,
    GOALS_TAG,
    OBJECTIVES_TAG,
    PARENT,
    PLACEMENT,
    ROLE_TAG,
    STUDY_TAG,
    TRIAL,
    TRIAL_CONFIG_TAG,
    decode_trial,
    encode_trial,
    find_experiment,
    study_runs,
    unknown_study,
)
from analysis.reading.sqlite_reader import DELETED_ONLY
from analysis.reading.store import (
    read_client,
    store_exists,
)
from search_spaces.designs import PastTrial, TrialPlan
from search_spaces.designs.replicates import extends_replicates
from search_spaces.spec import StudyError, StudySpec, spec_yaml
from study import CHECKS_KEY, EVIDENCE_KEY
from study.commands import mlflow_command
from study.internals.mlflow import store_engine
from study.provenance import code_version, data_fields, source_tags, training_dataset
from study.run_artifacts import EVIDENCE_ARTIFACTS, evidence_files
from study.run_notes import (
    STATUS_LINE,
    finished_name,
    finished_title,
    parent_run_name,
    replace_line,
    status_line,
    trial_note,
)
from study.stopping import creates_run, status_write
from study.terminal import say
from study.tracking_store import (
    check_tracking_uri,
    create_store,
    default_tracking_uri,
    quiet_run_links,
    writing_client,
)
from trainables.config import TrialConfig
from trainables.remote import redacted, without_credentials
from trainables.shown import in_markdown

os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
# MLflow's tag names (mlflow.utils.mlflow_tags), written out: MLflow itself is imported on first
# use (_bind_mlflow), since a command that only reads an embedded store does without it
MLFLOW_RUN_NOTE = "mlflow.note.content"
MLFLOW_PARENT_RUN_ID = "mlflow.parentRunId"


def _bind_mlflow() -> None:
    """Import MLflow's client and entities into this module's names. Importing MLflow takes
    seconds and a command that only reads an embedded store reads it without MLflow
    (analysis.reading.sqlite_reader), so what writes, or reads a server, binds them first."""
    global Dataset, DatasetInput, InputTag, Metric, Param, RunTag, MlflowException, MlflowClient
    from mlflow.entities import Dataset, DatasetInput, InputTag, Metric, Param, RunTag
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient


# MLflow announces at INFO that it creates or upgrades an embedded store's tables ("Creating
# initial MLflow database tables...", "Updating database tables") on every new store: a study
# says where its record is in its own words; MLflow's warnings and errors still show.
logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)

SPEC_ARTIFACT = "study.yaml"
ATTEMPT_STARTED_TAG = "study.attempt_started"
# a checkpoint the trial could not load, set aside, and where it resumed instead
RESUME_NOTE_TAG, RESUME_LINE = "study.resume_note", "- **Checkpoint:**"
MAX_PARAM, MAX_TAG = 6000, 8000  # MLflow's limits on a param's and a tag's value
METRIC_PREFIXES = ("train/", "z/", "h/", "sim/", "probe/", "loss/", "time/", "trial/", "shift/")
# MLflow 3's UI opens an experiment as a GenAI one unless it is told otherwise: this kind opens
# the runs table. Kinds the UI writes by itself (inferred) or none at all are not a user's choice.
KIND_TAG, KIND = "mlflow.experimentKind", "custom_model_development"
UNCHOSEN_KINDS = (
    "", "no_inferred_type", "genai_development_inferred", "custom_model_development_inferred",
)  # fmt: skip
SUMMARY_PREFIX = "study/"


@dataclass(frozen=True)
class StoreState:
    """The tracking store as ``study run`` found it before writing anything (:func:`store_state`):
    the study's experiment looked up once, for every check of the record that follows (the
    leftovers a stopped run removes, the lease, the record opened)."""

    uri: str
    study: str
    store_exists: bool  # False: a new embedded store (its file is not there)
    experiment: Any | None = None  # as find_experiment found it; None: no trace of the study
    recorded: bool = False  # the study has a parent run: a resume


def check_store(uri: str, study: str, spec: StudySpec | None = None) -> bool:
    """The tracking store's state for this study, read without writing anything; True when the
    study is already recorded (it has a parent run), False for a study new to this store.
    Refuses as :func:`store_state` does."""
    return store_state(uri, study, spec).recorded


def store_state(
    uri: str, study: str, spec: StudySpec | None = None, experiment: Any | None = None
) -> StoreState:
    """The tracking store's state for this study, read without writing anything, the study's
    experiment looked up once (:class:`StoreState`; ``experiment``: found already in this store,
    nothing written since: not looked up again).

    Refuses (StudyError, naming what to run) a study whose MLflow experiment was deleted, an
    experiment of that name that holds runs of something else, a study whose parent run was
    deleted, a store that cannot be read and, given ``spec``, a study file that changed since
    the study first ran.
    """
    if not store_exists(uri):
        # a new embedded store: nothing in it yet (and reading would create it)
        return StoreState(uri, study, store_exists=False)
    shown = redacted(uri)  # a server's URI may carry a password: never shown
    client = read_client(uri)
    try:
        if experiment is None:
            experiment = find_experiment(client, study)
        if experiment is None:
            return StoreState(uri, study, store_exists=True)
        eid = experiment.experiment_id
        if experiment.lifecycle_stage != "active":
            restore = mlflow_command(uri, "experiments", "restore", "--experiment-id", eid)
            purge = mlflow_command(uri, "gc", "--experiment-ids", eid)
            raise StudyError(
                f"study {study!r}: its MLflow experiment (id {eid}) was deleted in {shown}. "
                f"Restore it to resume the study: {restore} — or delete it for good ({purge}) "
                "to start afresh, or give the study another name"
            )
        found = StoreState(uri, study, True, experiment)
        if study_runs(client, eid, PARENT):
            if spec is not None:  # read as the rest is: no MLflow unless the file changed
                StudyRecord.reading(uri, study, client, eid).check_spec(spec)
            return StoreState(uri, study, True, experiment, recorded=True)
        deleted = client.search_runs(
            [eid], filter_string=f"tags.`{ROLE_TAG}` = '{PARENT}'",
            run_view_type=DELETED_ONLY, max_results=10,
        )  # fmt: skip
        if deleted:
            run_id = deleted[0].info.run_id
            raise StudyError(
                f"study {study!r}: its parent run {run_id} was deleted in {shown}; restore it to "
                f"resume the study: {mlflow_command(uri, 'runs', 'restore', '--run-id', run_id)}"
            )
        if client.search_runs([eid], max_results=1):
            raise StudyError(
                f"study {study!r}: the MLflow experiment of that name (id {eid}) in {shown} "
                "holds runs that are not this study's; give the study another name"
            )
        return found
    except StudyError:
        raise
    except Exception as err:  # MLflow's, or SQLite's through the reader
        why = getattr(err, "message", None) or str(err)
        raise StudyError(f"tracking store {shown!r} cannot be read: {redacted(why)}") from None


def _flat_params(plan: TrialPlan) -> list[Param]:
    """Params as a reviewer reads them in the UI; the exact values are in the JSON tag."""
    params = {
        k: json.dumps(v) if isinstance(v, list | tuple) else v
        for k, v in plan.config.model_dump().items()
    }
    params |= plan.config.derived()
    _bind_mlflow()
    return [Param(k, str(v)) for k, v in params.items()]


def trial_json(plan: TrialPlan) -> str:
    """The lossless record of a trial's fields and derived values (tag ``study.trial_config``)."""
    return encode_trial(plan.config.model_dump(mode="json"), plan.config.derived())


def check_plan_fits(plan: TrialPlan) -> None:
    """MLflow refuses a param over 6000 or a tag over 8000 characters: refuse the study first."""
    for param in _flat_params(plan):
        if len(param.value) > MAX_PARAM:
            raise StudyError(
                f"trial.{param.key}: {len(param.value)} characters, over MLflow's limit of "
                f"{MAX_PARAM} for a param (got {param.value[:40]!r}…)"
            )
    if len(trial_json(plan)) > MAX_TAG:
        raise StudyError(
            f"trial: the trial's settings take {len(trial_json(plan))} characters as JSON, over "
            f"MLflow's limit of {MAX_TAG} for a tag"
        )


def opens_block(parent, spec: StudySpec) -> bool:
    """Whether ``spec`` augments the study whose newest parent run is ``parent`` (``study
    augment``): its first run opens block 2 under a parent run of its own."""
    augments = spec.design.augments
    sha = parent.data.tags.get("study.spec_sha")
    return augments is not None and sha == augments.spec_sha != spec.sha


def block_tags(spec: StudySpec) -> dict[str, str]:
    """The parent run's tags of an augmented design: its block and the factorial it extends."""
    augments = spec.design.augments
    return {} if augments is None else {BLOCK_TAG: "2", "study.augments": augments.spec_sha}


# The tracking URIs this process opened, by the same URI without credentials: what a record
# unpickled in this process is given back (StudyRecord.__getstate__ writes no password)
_GIVEN_URIS: dict[str, str] = {}


def _create_experiment(client, study: str, location: str | None) -> str:
    """The study's new experiment; or the one another driver of the study, starting at the
    same moment, created between our look and our creation (the lease then refuses one)."""
    try:
        return client.create_experiment(study, artifact_location=location,
                                        tags={KIND_TAG: KIND, STUDY_TAG: study})  # fmt: skip
    except MlflowException as err:
        if err.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
        return client.get_experiment_by_name(study).experiment_id


class StudyRecord:
    """Reads and writes one study's runs in one MLflow tracking store."""

    def __init__(
        self, tracking_uri: str, study: str, artifact_root: str | Path | None = None,
        experiment: Any | None = None,
    ) -> None:  # fmt: skip
        """``experiment``: the study's experiment as already found in this store (by
        :func:`store_state`), not looked up again; None: looked up here, created when absent."""
        create_store(tracking_uri)
        _bind_mlflow()
        client = writing_client(tracking_uri)
        if experiment is None:
            experiment = find_experiment(client, study)
        if experiment is not None and experiment.name != study:  # renamed in MLflow's UI
            say(f"study {study!r}: its MLflow experiment (id {experiment.experiment_id}) is "
                f"named {experiment.name!r} now; recording into it, not a new one")  # fmt: skip
        if experiment is None:
            location = None
            if artifact_root is not None and "://" in str(artifact_root):
                location = str(artifact_root).rstrip("/")  # a bucket: s3://…/mlartifacts
            elif artifact_root is not None:
                location = Path(artifact_root).resolve().as_uri()
            eid = _create_experiment(client, study, location)
        else:
            eid = experiment.experiment_id
        self._open(tracking_uri, study, client, eid)

    def _open(self, tracking_uri: str, study: str, client, experiment_id: str) -> None:
        self.uri, self.study, self.client, self.experiment_id = (
            tracking_uri, study, client, experiment_id)  # fmt: skip
        quiet_run_links(tracking_uri)
        _GIVEN_URIS[without_credentials(tracking_uri)] = tracking_uri
        self.logging_s = 0.0  # time spent writing metrics, for the benchmark
        self._datasets: dict[tuple, DatasetInput] = {}  # data fields -> the dataset input

    @classmethod
    def existing(cls, tracking_uri: str, study: str, read_only: bool = False) -> StudyRecord:
        """The record of a study the store already holds, opened without writing anything (no
        store file, no experiment is created). Raises LookupError saying what the store holds
        (:func:`analysis.reading.record.unknown_study`) when it has no such study. ``read_only``: it
        reads through the cheapest client (:func:`analysis.reading.store.read_client`: an embedded
        store without
        MLflow) and cannot write, as a command that only reads wants."""
        if not store_exists(tracking_uri):
            raise LookupError(unknown_study(tracking_uri, study))
        client = read_client(tracking_uri)
        experiment = find_experiment(client, study)
        if experiment is None or experiment.lifecycle_stage != "active":
            raise LookupError(unknown_study(tracking_uri, study))
        if not read_only:
            return cls(tracking_uri, study)
        return cls.reading(tracking_uri, study, client, experiment.experiment_id)

    @classmethod
    def reading(cls, tracking_uri: str, study: str, client, experiment_id: str) -> StudyRecord:
        """The record of the study's experiment ``experiment_id``, already found, read through
        ``client`` (a reading one: nothing is written)."""
        record = cls.__new__(cls)
        record._open(tracking_uri, study, client, experiment_id)
        return record

    def __getstate__(self) -> dict[str, Any]:
        # Ray pickles the Tuner's callbacks with its experiment state (tuner.pkl, in the study's
        # storage); the client is rebuilt, and a password in the URI stays in this process
        state = {k: v for k, v in self.__dict__.items() if k not in ("client", "_datasets")}
        return state | {"uri": without_credentials(self.uri)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # the URI as this process was given it; elsewhere MLflow's client takes the credentials
        # from MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD
        state["uri"] = _GIVEN_URIS.get(state["uri"], state["uri"])
        self.__dict__.update(state)
        _bind_mlflow()
        self.client = writing_client(self.uri)
        quiet_run_links(self.uri)
        self._datasets = {}

    # -- lookups --
    def _runs(self, role: str) -> list:
        return study_runs(self.client, self.experiment_id, role)

    def parent(self):
        runs = self._runs(PARENT)
        return runs[0] if runs else None

    def trial_runs(self) -> dict[str, Any]:
        """trial key -> its (single) child run."""
        return {r.data.tags["study.trial_key"]: r for r in self._runs(TRIAL)}

    def past_trials(self) -> list[PastTrial]:
        """Every trial in the record, as a design reads it when the study resumes."""
        past = []
        for key, run in sorted(self.trial_runs().items()):
            config, _ = decode_trial(run.data.params, run.data.tags)
            past.append(PastTrial(key, run.info.status, config, dict(run.data.metrics)))
        return past

    # -- the parent run and the spec --
    def check_spec(self, spec: StudySpec) -> None:
        """Refuse a study file that changed since the study first ran, showing the differences."""
        parent = self.parent()
        if parent is None or parent.data.tags.get("study.spec_sha") == spec.sha:
            return
        if opens_block(parent, spec) or self.adds_replicates(parent, spec):
            return
        if parent.data.tags.get("study.augments") == spec.sha:
            raise StudyError(
                f"study {self.study!r} was augmented to a central composite (parent run "
                f"{parent.info.run_id}, spec_sha {parent.data.tags.get('study.spec_sha')}): this "
                "factorial's trials are its block 1 now; run the augmented study file instead"
            )
        with tempfile.TemporaryDirectory() as tmp:
            old_file = self.client.download_artifacts(parent.info.run_id, SPEC_ARTIFACT, tmp)
            old = Path(old_file).read_text()
        diff = "".join(difflib.unified_diff(
            old.splitlines(True), spec_yaml(spec).splitlines(True),
            f"{self.study} as first run", "this study file",
        ))  # fmt: skip
        raise StudyError(
            f"study {self.study!r} exists with a different study file (spec_sha "
            f"{parent.data.tags.get('study.spec_sha')} != {spec.sha}); refusing to mix them. "
            f"Rename the study to start a new one, or restore the original file.\n{diff}"
        )

    def recorded_spec(self, parent) -> StudySpec | None:
        """The study file ``parent`` was started with (its canonical artifact), or None."""
        from search_spaces.spec import load_spec

        try:
            with tempfile.TemporaryDirectory() as tmp:
                path = self.client.download_artifacts(parent.info.run_id, SPEC_ARTIFACT, tmp)
                return load_spec(path)
        except Exception:  # an artifact lost or unreadable: no extension is recognised
            return None

    def adds_replicates(self, parent, spec: StudySpec) -> bool:
        """Whether ``spec`` adds replicates to the study ``parent`` recorded, and nothing else
        (:func:`extends_replicates`): they run as a new block under a parent run of their own."""
        if parent.data.tags.get("study.spec_sha") == spec.sha:
            return False
        old = self.recorded_spec(parent)
        return old is not None and extends_replicates(old, spec)

    # -- the experiment's kind; its description and views: study.mlflow_views --
    def ensure_kind(self) -> None:
        """Mark the experiment as model development (MLflow 3's UI then opens its runs table,
        not its GenAI view), unless a user chose a kind: experiments made before this tag was
        written get it on the study's next run."""
        tags = self.client.get_experiment(self.experiment_id).tags
        if tags.get(KIND_TAG, "") in UNCHOSEN_KINDS:
            self.client.set_experiment_tag(self.experiment_id, KIND_TAG, KIND)
        if tags.get(STUDY_TAG) != self.study:  # its identity, found again if it is renamed
            self.client.set_experiment_tag(self.experiment_id, STUDY_TAG, self.study)

    def record_aims(self, spec: StudySpec, parent_id: str) -> None:
        """The study file's goals, its design's objectives and the study it confirms, as the
        parent run's tags (``analysis.reading.record`` reads them back)."""
        goals = [g.model_dump(mode="json") for g in spec.goals]
        self.client.set_tag(parent_id, GOALS_TAG, json.dumps(goals, sort_keys=True))
        objectives = [o.model_dump(mode="json") for o in spec.design.objectives or ()]
        self.client.set_tag(parent_id, OBJECTIVES_TAG, json.dumps(objectives))
        confirms = spec.confirms and json.dumps(spec.confirms.model_dump(mode="json"))
        self.client.set_tag(parent_id, CONFIRMS_TAG, confirms or "")

    # -- the parent run --
    def set_parent_note(self, run_id: str, markdown: str) -> None:
        """Replace the parent run's description (``mlflow.note.content``, Markdown) with
        ``markdown``, e.g. the study's findings once its report is written.

        Raises:
            ValueError: the text is longer than MLflow's limit for a tag (8000 characters).
        """
        if len(markdown) > MAX_TAG:
            raise ValueError(
                f"a parent run's description is at most {MAX_TAG} characters (MLflow's limit for "
                f"a tag), got {len(markdown)}"
            )
        self.client.set_tag(run_id, MLFLOW_RUN_NOTE, markdown)

    def log_summary(self, run_id: str, summary) -> None:
        """The study's summary (:class:`analysis.stats.best.StudySummary`, computed where every
        other reader of the best point computes it) on its parent run: metrics ``study/trials``,
        ``study/trials_finished`` and, when a finished trial has a value of the target,
        ``study/best_mean``, ``study/best_n`` and the 95 % interval ``study/best_ci_low`` and
        ``study/best_ci_high`` (only when the best point has one: no interval is never logged
        as one of zero width; an interval logged earlier for another best point is overwritten
        with NaN); tags ``study.best_point_id``, ``study.best_factors`` (JSON),
        ``study.target_metric`` and ``study.target_mode``. Step: the number of finished trials
        (a value already logged there is not logged again: see ``_summary_step``)."""
        stamp = int(time.time() * 1000)
        finished, best = summary.finished, summary.best
        values = {"trials": float(summary.trials), "trials_finished": float(finished)}
        tags = {"study.target_metric": summary.metric, "study.target_mode": summary.mode}
        if best is not None:
            values |= {"best_mean": best.mean, "best_n": float(best.n)}
            tags |= {"study.best_point_id": best.point_id,
                     "study.best_factors": json.dumps(best.factors, default=str)}  # fmt: skip
            logged = self.client.get_run(run_id).data.metrics
            if best.has_interval:
                values |= {"best_ci_low": best.ci_low, "best_ci_high": best.ci_high}
            elif f"{SUMMARY_PREFIX}best_ci_low" in logged:
                values |= {"best_ci_low": float("nan"), "best_ci_high": float("nan")}
        metrics = []
        for name, value in values.items():
            step = self._summary_step(run_id, SUMMARY_PREFIX + name, float(value), finished)
            if step is not None:
                metrics.append(Metric(SUMMARY_PREFIX + name, float(value), stamp, step))
        self.client.log_batch(run_id, metrics=metrics, tags=[RunTag(k, v) for k, v in tags.items()])

    def _summary_step(self, run_id: str, key: str, value: float, step: int) -> int | None:
        """The step to log a summary metric at: ``step`` (the finished trials), or None when the
        run already holds this value there (a resumed study exports the same trials again, and
        no (run, metric, step) row is written twice); a different value there (the table
        changed under the same count) goes one step past the last."""
        history = self.client.get_metric_history(run_id, key)
        there = [m.value for m in history if m.step == step]
        if not there:
            return step
        if there[-1] == value or (math.isnan(there[-1]) and math.isnan(value)):
            return None
        return max(m.step for m in history) + 1

    @status_write
    @creates_run
    def start_parent(self, spec: StudySpec, design, source_text: str) -> str:
        """The study's parent run: the newest reopened, or a new one (the study's first run, or
        an augmented block's) with the study's params, its file and design, and the results of
        the self-checks (:func:`trainables.checks.self_checks`) to come with its trials'
        results (:meth:`record_checks`). The experiment's description and the runs table's
        views are written after it by :func:`study.mlflow_views.start_described_parent`."""
        self.ensure_kind()
        parent = self.parent()
        extension = {}
        if parent is not None and self.adds_replicates(parent, spec):
            # more replicates of the same study: block n + 1, on fresh seeds, under its own parent
            blocks = [int(p.data.tags.get(BLOCK_TAG, "1")) for p in self._runs(PARENT)]
            extension = {BLOCK_TAG: str(max(blocks) + 1),
                         "study.extends": parent.data.tags.get("study.spec_sha", "")}  # fmt: skip
        elif parent is not None and not opens_block(parent, spec):
            self.client.update_run(parent.info.run_id, status="RUNNING")
            self.record_aims(spec, parent.info.run_id)
            return parent.info.run_id
        run = self.client.create_run(
            self.experiment_id,
            run_name=parent_run_name(spec),
            tags={
                "study.name": spec.study, "study.role": PARENT, "study.spec_sha": spec.sha,
                "study.code_version": code_version(), "study.design": spec.design.kind,
                MLFLOW_RUN_NOTE: in_markdown(spec.description, MAX_TAG), **block_tags(spec),
                **extension,
                **source_tags(),
            },
        )  # fmt: skip
        run_id = run.info.run_id
        self.client.log_batch(run_id, params=[
            Param("design", spec.design.kind), Param("replicates", str(spec.design.replicates)),
            Param("factors", ", ".join(spec.factors)), Param("trials", str(design.total)),
            Param("resources", json.dumps(spec.resources.model_dump())),
            Param("factor_scales", json.dumps({n: f.scale for n, f in spec.factors.items()})),
            Param("target_metric", spec.target.metric), Param("target_mode", spec.target.mode),
        ])  # fmt: skip
        self.record_aims(spec, run_id)
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / SPEC_ARTIFACT).write_text(spec_yaml(spec))
            (Path(tmp) / "study_file.yaml").write_text(source_text)
            design_json = json.dumps(design.to_json(), indent=1, default=str)
            (Path(tmp) / "design.json").write_text(design_json)
            for name in (SPEC_ARTIFACT, "study_file.yaml", "design.json"):
                self.client.log_artifact(run_id, str(Path(tmp) / name))
        return run_id

    @status_write
    def finish_parent(self, run_id: str, ok: bool) -> None:
        self.client.set_terminated(run_id, "FINISHED" if ok else "FAILED")

    def log_parent_artifact(self, run_id: str, path: str | Path) -> None:
        self.client.log_artifact(run_id, str(path))

    # -- child runs --
    @status_write
    @creates_run
    def ensure_trial_run(
        self, plan: TrialPlan, parent_id: str, spec_sha: str, existing: dict | None = None
    ) -> str:
        """The trial's child run: found by tag and reopened, or created once."""
        existing = self.trial_runs() if existing is None else existing
        if plan.key in existing:
            return existing[plan.key].info.run_id
        run = self.client.create_run(
            self.experiment_id,
            run_name=plan.run_name,
            tags={
                "mlflow.parentRunId": parent_id, "study.name": self.study, "study.role": TRIAL,
                "study.point_id": plan.point_id, "study.replicate": str(plan.replicate),
                "study.trial_key": plan.key, "study.spec_sha": spec_sha,
                "study.code_version": code_version(), "study.attempts": "0",
                "study.workers": str(plan.config.workers),
                TRIAL_CONFIG_TAG: trial_json(plan),
                MLFLOW_RUN_NOTE: trial_note(plan, self.study, self.experiment_id, parent_id),
                **({BLOCK_TAG: str(plan.block)} if plan.block else {}), **source_tags(),
            },
        )  # fmt: skip
        self.client.log_batch(run.info.run_id, params=_flat_params(plan))
        self.client.log_inputs(run.info.run_id, datasets=[self._dataset(plan.config)])
        self.client.update_run(run.info.run_id, status="SCHEDULED")
        return run.info.run_id

    def _dataset(self, config: TrialConfig) -> DatasetInput:
        """The trial's training dataset input, made once per data fields in this record (data on
        disk is fingerprinted by walking its files, so not once per trial)."""
        key = tuple(data_fields(config).values())
        if key not in self._datasets:
            self._datasets[key] = training_dataset(config)
        return self._datasets[key]

    def _note_status(self, run, status: str, examples_seen: int | None) -> RunTag:
        """The child run's description with its status line rewritten."""
        note = run.data.tags.get(MLFLOW_RUN_NOTE, "")
        line = status_line(status, examples_seen, run.data.params.get("budget_examples"))
        return RunTag(MLFLOW_RUN_NOTE, replace_line(note, STATUS_LINE, line))

    def last_logged_step(self, run_id: str) -> int:
        """Largest examples-seen step already logged in the run (-1 when none)."""
        history = self.client.get_metric_history(run_id, "train/examples_seen")
        return max((int(m.step) for m in history), default=-1)

    @status_write
    def begin_attempt(self, run_id: str) -> None:
        run = self.client.get_run(run_id)
        attempts = int(run.data.tags.get("study.attempts", "0")) + 1
        seen = run.data.metrics.get("train/examples_seen")
        note = self._note_status(run, f"running (attempt {attempts})", seen or 0)
        # when this attempt took its resources (epoch ms, as MLflow's own times): the run's
        # start_time is when it was scheduled, and its end_time closes the window
        started = RunTag(ATTEMPT_STARTED_TAG, str(int(time.time() * 1000)))
        self.client.log_batch(run_id, tags=[RunTag("study.attempts", str(attempts)), started, note])
        self.client.update_run(run_id, status="RUNNING")

    def note_resume(self, run_id: str, note: str) -> None:
        """What the trial's attempt found of its checkpoints (one it could not load, set aside,
        and where it resumed instead): the tag :data:`RESUME_NOTE_TAG` and a line of its
        description."""
        run = self.client.get_run(run_id)
        text = replace_line(run.data.tags.get(MLFLOW_RUN_NOTE, ""), RESUME_LINE,
                            f"{RESUME_LINE} {in_markdown(note)}")  # fmt: skip
        self.client.log_batch(run_id, tags=[RunTag(RESUME_NOTE_TAG, note[:MAX_TAG]),
                                            RunTag(MLFLOW_RUN_NOTE, text)])  # fmt: skip

    def log_evaluation(self, run_id: str, result: dict[str, Any], step: int) -> None:
        t0 = time.perf_counter()
        stamp = int(time.time() * 1000)
        metrics = self.unlogged(run_id, [
            Metric(k, float(v), stamp, step)
            for k, v in result.items()
            if k.startswith(METRIC_PREFIXES)
            and isinstance(v, int | float)
            and not isinstance(v, bool)
        ])  # fmt: skip
        for a in range(0, len(metrics), 1000):
            self.client.log_batch(run_id, metrics=metrics[a : a + 1000])
        self.logging_s += time.perf_counter() - t0

    def unlogged(self, run_id: str, metrics: list[Metric]) -> list[Metric]:
        """``metrics`` less those whose (key, step) the run already holds, and less repeats
        within them: what a write of them adds. The store is asked at each write (one indexed
        query per step for an embedded store), so a row written meanwhile by anyone counts."""
        there = self._logged_pairs(run_id, {int(m.step) for m in metrics})
        fresh = []
        for metric in metrics:
            pair = (metric.key, int(metric.step))
            if pair not in there:
                there.add(pair)
                fresh.append(metric)
        return fresh

    def _logged_pairs(self, run_id: str, steps: set[int]) -> set[tuple[str, int]]:
        """The (key, step) pairs the run holds at ``steps``: from the metrics table of an
        embedded store; through a server, from the histories of the metrics the run has."""
        if not steps:
            return set()
        engine = store_engine(self.client)
        if engine is not None:
            from sqlalchemy import text

            query = text("SELECT key, step FROM metrics WHERE run_uuid = :run AND step = :step")
            with engine.connect() as connection:
                return {(key, int(step)) for step_asked in sorted(steps)
                        for key, step in connection.execute(
                            query, {"run": run_id, "step": step_asked})}  # fmt: skip
        history = self.client.get_metric_history
        return {(key, int(m.step)) for key in self.client.get_run(run_id).data.metrics
                for m in history(run_id, key) if int(m.step) in steps}  # fmt: skip

    def _target_of(self, run) -> str | None:
        """The study's target metric, from the trial's parent run (``target_metric``), read once
        per parent."""
        targets = self.__dict__.setdefault("_targets", {})
        parent_id = run.data.tags.get(MLFLOW_PARENT_RUN_ID)
        if parent_id not in targets:
            try:
                targets[parent_id] = self.client.get_run(parent_id).data.params.get("target_metric")
            except (MlflowException, TypeError):
                targets[parent_id] = None
        return targets[parent_id]

    @status_write
    def finish_trial(self, run_id: str, summary: dict[str, Any]) -> None:
        """A finished trial: its status, final metrics and evidence; its run renamed with its
        target's value (:func:`finished_name`) and its description's first line led by that
        name (:func:`finished_title`)."""
        t0 = time.perf_counter()
        status = str(summary.get("status", "finished"))
        seen = summary.get("examples_seen")
        seen = int(seen) if isinstance(seen, int | float) else None
        run = self.client.get_run(run_id)
        note = self._note_status(run, status, seen)
        target = self._target_of(run)
        value = summary.get(target) if target else None
        if target and not isinstance(value, int | float):
            value = run.data.metrics.get(target)
        titled = finished_name(run.info.run_name or "", target, value)
        if titled != (run.info.run_name or ""):
            self.client.update_run(run_id, name=titled)
            note = RunTag(MLFLOW_RUN_NOTE, finished_title(note.value, titled, status))
        tags = [RunTag("study.trial_status", status), note]
        tags += [RunTag(f"study.{name}", str(summary[name]))
                 for name in PLACEMENT if summary.get(name) is not None]  # fmt: skip
        stamp = int(time.time() * 1000)
        final = self.unlogged(run_id, [
            Metric(f"trial/{k}", float(summary[k]), stamp, int(summary.get("examples_seen", 0)))
            for k in ("wall_s", "examples_seen", "steps", "resumed_from", "heldout_items")
            if isinstance(summary.get(k), int | float)
        ])  # fmt: skip
        self.client.log_batch(run_id, metrics=final, tags=tags)
        if summary.get(EVIDENCE_KEY):
            self.log_evidence(run_id, json.loads(summary[EVIDENCE_KEY]))
        self.client.set_terminated(run_id, "FINISHED")
        self.logging_s += time.perf_counter() - t0

    def record_checks(self, parent_id: str, summary: dict[str, Any], known: dict[str, str]) -> None:
        """The self-checks a trial ran (``summary[CHECKS_KEY]``) as the parent's tags
        ``study.check.<name>``: each the first time it is seen, and again when it fails where
        it had passed (a node with other code), so that one failure is never hidden by the
        passes around it. ``known`` holds what this driver recorded so far, and is updated."""
        checks = json.loads(summary.get(CHECKS_KEY) or "{}")
        news = {k: v for k, v in checks.items()
                if k not in known or (known[k] == "pass" and v != "pass")}  # fmt: skip
        if news:
            tags = [RunTag(f"study.check.{k}", str(v)) for k, v in news.items()]
            self.client.log_batch(parent_id, tags=tags)
            known.update(news)

    def log_evidence(self, run_id: str, evidence: dict[str, Any]) -> None:
        """A trial's evidence beyond its metrics (``run_trial(...)["evidence"]``: per-class and
        per-group tables, the shift tests, the source-return table and panel) as artifacts of
        its run under ``evidence/`` (:func:`evidence_files`)."""
        with tempfile.TemporaryDirectory(prefix="evidence-") as tmp:
            if evidence_files(evidence, Path(tmp)):
                self.client.log_artifacts(run_id, tmp, EVIDENCE_ARTIFACTS)

    @status_write
    def fail_trial(self, run_id: str, message: str) -> None:
        run = self.client.get_run(run_id)
        seen = run.data.metrics.get("train/examples_seen")
        tags = [
            RunTag("study.trial_status", "failed"), RunTag("study.error", message[:4000]),
            self._note_status(run, "failed", None if seen is None else int(seen)),
        ]  # fmt: skip
        self.client.log_batch(run_id, tags=tags)
        self.client.set_terminated(run_id, "FAILED")

    def end_unfinished(self, parent_id: str, status: str = "FAILED") -> None:
        """After the driver failed: no run of this study stays RUNNING or SCHEDULED (a parent
        already ended, FINISHED before a late stop or KILLED by it, keeps its status)."""
        for run in self._runs(TRIAL):
            if run.info.status in ("RUNNING", "SCHEDULED"):
                self.client.set_terminated(run.info.run_id, status)
        if self.client.get_run(parent_id).info.status in ("RUNNING", "SCHEDULED"):
            self.client.set_terminated(parent_id, status)

    def end_orphans(self) -> list[str]:
        """End KILLED every run of this study left RUNNING (or SCHEDULED) by a dead driver."""
        ended = []
        for role in (TRIAL, PARENT):
            for run in self._runs(role):
                if run.info.status in ("RUNNING", "SCHEDULED"):
                    self.client.set_terminated(run.info.run_id, "KILLED")
                    ended.append(run.info.run_id)
        return ended

    def status_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for run in self._runs(TRIAL):
            counts[run.info.status] = counts.get(run.info.status, 0) + 1
        return counts


__all__ = [
    "StudyRecord", "check_store", "check_tracking_uri", "default_tracking_uri",
]  # fmt: skip
