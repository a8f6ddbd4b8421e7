"""The study's record in MLflow: one experiment, one parent run, one child run per trial.

Layout (``shared/design.md``): experiment = study name; the parent run holds the study file, the
design table and the Parquet export; each trial (design point × replicate) has exactly one child
run, found again by its ``study.trial_key`` tag through retries and resumes and continued, never
duplicated. Metrics are logged with step = examples seen; a replayed evaluation (after resuming
from a checkpoint) is skipped when that step is already in the run, so no (run, metric, step) row
is ever written twice. Runs left RUNNING by a dead driver are ended KILLED when the study is next
touched, and reopened if the trial resumes.

Only the driver writes here (a Tune callback), so trials on worker nodes never need to reach
the tracking server, and an embedded SQLite store has a single writer.
"""

from __future__ import annotations

import difflib
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param, RunTag, ViewType
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from analysis.record import (
    BLOCK_TAG,
    PARENT,
    ROLE_TAG,
    TRIAL,
    TRIAL_CONFIG_TAG,
    decode_trial,
    encode_trial,
    study_runs,
)
from search_spaces.designs import PastTrial, TrialPlan
from search_spaces.spec import StudyError, StudySpec, spec_yaml

os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
SPEC_ARTIFACT = "study.yaml"
MAX_PARAM, MAX_TAG = 6000, 8000  # MLflow's limits on a param's and a tag's value
METRIC_PREFIXES = ("train/", "z/", "h/", "sim/", "probe/", "loss/", "time/", "trial/")


def default_tracking_uri(workdir: str | Path | None = None) -> str:
    """The embedded store: SQLite in the working directory."""
    return f"sqlite:///{Path(workdir or os.getcwd()).resolve() / 'mlflow.db'}"


def check_tracking_uri(uri: str, timeout: float = 5.0) -> None:
    """Raise StudyError naming the URI when the tracking store cannot be reached or created."""
    if uri.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout) as reply:
                if reply.status != 200:
                    raise StudyError(f"--tracking-uri {uri!r}: /health answered {reply.status}")
        except (urllib.error.URLError, OSError) as err:
            raise StudyError(f"--tracking-uri {uri!r} does not answer: {err}") from None
    elif uri.startswith("sqlite:///"):
        folder = Path(uri.removeprefix("sqlite:///")).parent
        if not folder.is_dir():
            raise StudyError(f"--tracking-uri {uri!r}: folder {str(folder)!r} does not exist")
    else:
        raise StudyError(
            f"--tracking-uri {uri!r}: expected sqlite:///PATH (embedded) or http(s)://HOST:PORT "
            "(an mlflow server); MLflow's file store is not supported"
        )


def tool(name: str) -> str:
    """A console script of this environment by full path (the venv need not be activated)."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else name


def shell_command(*argv: str, env: dict[str, str] | None = None) -> str:
    """argv as one line that a POSIX shell runs as given: every word quoted where it must be
    (spaces, ``#``, ``%``, parentheses, quotes, ``$``)."""
    words = [f"{k}={shlex.quote(v)}" for k, v in (env or {}).items()]
    return " ".join([*words, *(shlex.quote(str(a)) for a in argv)])


def ui_command(uri: str, port: int = 5000) -> str:
    """The command that opens the MLflow UI on this record, ready to paste."""
    if uri.startswith("sqlite:///"):
        return shell_command(tool("mlflow"), "ui", "--backend-store-uri", uri, "--port", str(port))
    return f"open {uri} in a browser (the MLflow server's own UI)"


def mlflow_command(uri: str, *argv: str) -> str:
    """An ``mlflow`` CLI command against this tracking store, ready to paste."""
    return shell_command(tool("mlflow"), *argv, env={"MLFLOW_TRACKING_URI": uri})


def store_exists(uri: str) -> bool:
    """False for an embedded store whose file is not there yet; servers always exist."""
    if uri.startswith("sqlite:///"):
        return Path(uri.removeprefix("sqlite:///")).is_file()
    return True


def check_store(uri: str, study: str, spec: StudySpec | None = None) -> bool:
    """The tracking store's state for this study, read without writing anything; True when the
    study is already recorded (it has a parent run), False for a study new to this store.

    Refuses (StudyError, naming what to run) a study whose MLflow experiment was deleted, an
    experiment of that name that holds runs of something else, a study whose parent run was
    deleted, a store that cannot be read and, given ``spec``, a study file that changed since
    the study first ran.
    """
    if not store_exists(uri):
        return False  # a new embedded store: nothing in it yet (and reading would create it)
    client = MlflowClient(uri)
    try:
        experiment = client.get_experiment_by_name(study)
        if experiment is None:
            return False
        eid = experiment.experiment_id
        if experiment.lifecycle_stage != "active":
            restore = mlflow_command(uri, "experiments", "restore", "--experiment-id", eid)
            purge = mlflow_command(uri, "gc", "--experiment-ids", eid)
            raise StudyError(
                f"study {study!r}: its MLflow experiment (id {eid}) was deleted in {uri}. "
                f"Restore it to resume the study: {restore} — or delete it for good ({purge}) "
                "to start afresh, or give the study another name"
            )
        if study_runs(client, eid, PARENT):
            if spec is not None:
                StudyRecord(uri, study).check_spec(spec)
            return True
        deleted = client.search_runs(
            [eid], filter_string=f"tags.`{ROLE_TAG}` = '{PARENT}'",
            run_view_type=ViewType.DELETED_ONLY, max_results=10,
        )  # fmt: skip
        if deleted:
            run_id = deleted[0].info.run_id
            raise StudyError(
                f"study {study!r}: its parent run {run_id} was deleted in {uri}; restore it to "
                f"resume the study: {mlflow_command(uri, 'runs', 'restore', '--run-id', run_id)}"
            )
        if client.search_runs([eid], max_results=1):
            raise StudyError(
                f"study {study!r}: the MLflow experiment of that name (id {eid}) in {uri} "
                "holds runs that are not this study's; give the study another name"
            )
        return False
    except MlflowException as err:
        raise StudyError(f"tracking store {uri!r} cannot be read: {err.message}") from None


def code_version() -> str:
    root = Path(__file__).resolve().parents[1]
    try:
        sha = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=5,
        ).stdout.strip()  # fmt: skip
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        from importlib.metadata import version

        return version("contrastive-studies")


def _flat_params(plan: TrialPlan) -> list[Param]:
    """Params as a reviewer reads them in the UI; the exact values are in the JSON tag."""
    params = {
        k: json.dumps(v) if isinstance(v, list | tuple) else v
        for k, v in plan.config.model_dump().items()
    }
    params |= plan.config.derived()
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


def self_checks() -> dict[str, str]:
    """Checks of the running code recorded with every study (release gate item 1).

    ``info_nce_worked_example``: seed 004's hand-computed M = 3 example (anchor 0°, positive 20°,
    negatives 90°, 180°, 270°, τ = 1) must give 0.6551.
    """
    import torch

    from trainables.objectives import info_nce

    angles = torch.deg2rad(torch.tensor([0.0, 20.0, 90.0, 180.0, 270.0, 90.0, 180.0, 270.0]))
    z = torch.stack([angles.cos(), angles.sin()], dim=1).double()
    sources = torch.tensor([0, 0, 1, 2, 3, 1, 2, 3])
    groups = torch.tensor([0, 0, 1, 2, 3, 0, 0, 0])  # the negatives' twins are masked
    loss = float(info_nce(z, sources, 1.0, groups=groups, group_policy="mask", reduction="none")[0])
    ok = abs(loss - 0.6551) < 1e-4
    return {"info_nce_worked_example": "pass" if ok else f"fail: {loss:.6f} != 0.6551"}


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


class StudyRecord:
    """Reads and writes one study's runs in one MLflow tracking store."""

    def __init__(self, tracking_uri: str, study: str, artifact_root: str | Path | None = None):
        self.uri = tracking_uri
        self.study = study
        self.client = MlflowClient(tracking_uri)
        experiment = self.client.get_experiment_by_name(study)
        if experiment is None:
            location = None
            if artifact_root is not None:
                location = Path(artifact_root).resolve().as_uri()
            self.experiment_id = self.client.create_experiment(study, artifact_location=location)
        else:
            self.experiment_id = experiment.experiment_id
        self.logging_s = 0.0  # time spent writing metrics, for the benchmark

    def __getstate__(self) -> dict[str, Any]:
        # Ray pickles the Tuner's callbacks with its experiment state; the client is rebuilt.
        return {k: v for k, v in self.__dict__.items() if k != "client"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.client = MlflowClient(self.uri)

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
        if opens_block(parent, spec):
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

    def start_parent(self, spec: StudySpec, design, source_text: str) -> str:
        parent = self.parent()
        if parent is not None and not opens_block(parent, spec):
            self.client.update_run(parent.info.run_id, status="RUNNING")
            return parent.info.run_id
        run = self.client.create_run(
            self.experiment_id,
            run_name=spec.study,
            tags={
                "study.name": spec.study, "study.role": PARENT, "study.spec_sha": spec.sha,
                "study.code_version": code_version(), "study.design": spec.design.kind,
                "mlflow.note.content": spec.description, **block_tags(spec),
            },
        )  # fmt: skip
        run_id = run.info.run_id
        self.client.log_batch(run_id, params=[
            Param("design", spec.design.kind), Param("replicates", str(spec.design.replicates)),
            Param("factors", ", ".join(spec.factors)), Param("trials", str(design.total)),
            Param("resources", json.dumps(spec.resources.model_dump())),
            Param("factor_scales", json.dumps({n: f.scale for n, f in spec.factors.items()})),
        ], tags=[RunTag(f"study.check.{k}", v) for k, v in self_checks().items()])  # fmt: skip
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / SPEC_ARTIFACT).write_text(spec_yaml(spec))
            (Path(tmp) / "study_file.yaml").write_text(source_text)
            design_json = json.dumps(design.to_json(), indent=1, default=str)
            (Path(tmp) / "design.json").write_text(design_json)
            for name in (SPEC_ARTIFACT, "study_file.yaml", "design.json"):
                self.client.log_artifact(run_id, str(Path(tmp) / name))
        return run_id

    def finish_parent(self, run_id: str, ok: bool) -> None:
        self.client.set_terminated(run_id, "FINISHED" if ok else "FAILED")

    def log_parent_artifact(self, run_id: str, path: str | Path) -> None:
        self.client.log_artifact(run_id, str(path))

    # -- child runs --
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
                TRIAL_CONFIG_TAG: trial_json(plan),
                **({BLOCK_TAG: str(plan.block)} if plan.block else {}),
            },
        )  # fmt: skip
        self.client.log_batch(run.info.run_id, params=_flat_params(plan))
        self.client.update_run(run.info.run_id, status="SCHEDULED")
        return run.info.run_id

    def last_logged_step(self, run_id: str) -> int:
        """Largest examples-seen step already logged in the run (-1 when none)."""
        history = self.client.get_metric_history(run_id, "train/examples_seen")
        return max((int(m.step) for m in history), default=-1)

    def begin_attempt(self, run_id: str) -> None:
        run = self.client.get_run(run_id)
        attempts = int(run.data.tags.get("study.attempts", "0")) + 1
        self.client.set_tag(run_id, "study.attempts", str(attempts))
        self.client.update_run(run_id, status="RUNNING")

    def log_evaluation(self, run_id: str, result: dict[str, Any], step: int) -> None:
        t0 = time.perf_counter()
        stamp = int(time.time() * 1000)
        metrics = [
            Metric(k, float(v), stamp, step)
            for k, v in result.items()
            if k.startswith(METRIC_PREFIXES)
            and isinstance(v, int | float)
            and not isinstance(v, bool)
        ]
        for a in range(0, len(metrics), 1000):
            self.client.log_batch(run_id, metrics=metrics[a : a + 1000])
        self.logging_s += time.perf_counter() - t0

    def finish_trial(self, run_id: str, summary: dict[str, Any]) -> None:
        t0 = time.perf_counter()
        tags = [RunTag("study.trial_status", str(summary.get("status", "finished")))]
        if summary.get("node_id"):
            tags.append(RunTag("study.node_id", str(summary["node_id"])))
        stamp = int(time.time() * 1000)
        final = [
            Metric(f"trial/{k}", float(summary[k]), stamp, int(summary.get("examples_seen", 0)))
            for k in ("wall_s", "examples_seen", "steps")
            if isinstance(summary.get(k), int | float)
        ]
        self.client.log_batch(run_id, metrics=final, tags=tags)
        self.client.set_terminated(run_id, "FINISHED")
        self.logging_s += time.perf_counter() - t0

    def fail_trial(self, run_id: str, message: str) -> None:
        self.client.set_tag(run_id, "study.trial_status", "failed")
        self.client.set_tag(run_id, "study.error", message[:4000])
        self.client.set_terminated(run_id, "FAILED")

    def end_unfinished(self, parent_id: str, status: str = "FAILED") -> None:
        """After the driver failed: no run of this study stays RUNNING or SCHEDULED."""
        for run in self._runs(TRIAL):
            if run.info.status in ("RUNNING", "SCHEDULED"):
                self.client.set_terminated(run.info.run_id, status)
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
    "StudyRecord", "check_store", "check_tracking_uri", "default_tracking_uri", "mlflow_command",
    "shell_command", "ui_command",
]  # fmt: skip
