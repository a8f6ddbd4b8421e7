"""Running a study: validate, record, launch on Ray Tune, resume, export.

``run_study`` is the whole of ``study run``. Everything that can be wrong with the study file, the
data, the tracking store or the resources is found before Ray starts (or, with ``--address``,
before any trial starts), and nothing already recorded is touched until then.

Resume: a study is identified by its name. Running it again finds its parent run, refuses a study
file that changed (showing the difference), ends KILLED whatever a dead driver left RUNNING, and
launches only the trials without a FINISHED child run. Each relaunched trial continues its own
child run and resumes from the last checkpoint in its trial folder, so at most one evaluation
interval of work is lost.
"""

from __future__ import annotations

import math
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from search_spaces.designs import (
    INTEGER_FIELDS,
    DesignTable,
    TrialPlan,
    adaptive_sample,
    batch_sizes_matching,
    build_design,
    trial_config,
)
from search_spaces.spec import StudyError, StudySpec, load_spec, parse_spec
from study.export import export_parquet
from study.progress import ProgressView, StudyProgress
from study.record import StudyRecord, check_tracking_uri, default_tracking_uri, ui_command
from trainables.data import check_data

RESULTS_FILE = "results.parquet"


@dataclass(frozen=True)
class StudyOutcome:
    name: str
    tracking_uri: str
    parent_run_id: str
    results: Path
    counts: dict[str, int]
    launched: int
    wall_s: float
    logging_s: float
    trial_s: float

    @property
    def ok(self) -> bool:
        return set(self.counts) <= {"FINISHED"}


# ---------------------------------------------------------------------------------------------
# preparing
# ---------------------------------------------------------------------------------------------
def smoke_spec(spec: StudySpec) -> StudySpec:
    """A seconds-per-trial copy named ``<study>-smoke``: tiny budget, one replicate."""
    data = spec.canonical()
    batches = spec.factors["batch_size"].levels if "batch_size" in spec.factors else None
    batches = batches or [spec.trial.get("batch_size", 256)]
    budget = 2 * math.lcm(*[int(b) for b in batches])
    data["study"] = f"{spec.study}-smoke"
    data["trial"] = data["trial"] | {
        "budget_examples": budget, "eval_marks": 1, "heldout_size": 200,
        "probe_train_size": 300, "linear_probe_iters": 20,
    }  # fmt: skip
    data["design"] = data["design"] | {"replicates": 1}
    if spec.design.samples:
        data["design"]["samples"] = min(spec.design.samples, 4)
    return parse_spec(data, f"{spec.study} (smoke)")


def local_capacity() -> dict[str, float]:
    import torch

    return {"CPU": float(os.cpu_count() or 1), "GPU": float(torch.cuda.device_count())}


def check_resources(spec: StudySpec, capacity: dict[str, float], where: str) -> None:
    """Every trial must fit on one node: compare its ask with the largest node."""
    for name, ask in (("cpu", spec.resources.cpu), ("gpu", spec.resources.gpu)):
        have = capacity.get(name.upper(), 0.0)
        if ask > have:
            raise StudyError(
                f"resources.{name}: each trial asks for {ask:g} {name.upper()} but {where} has "
                f"{have:g} on its largest node"
            )


def cluster_capacity() -> dict[str, float]:
    import ray

    best: dict[str, float] = {}
    for node in ray.nodes():
        if node.get("Alive"):
            for key in ("CPU", "GPU"):
                best[key] = max(best.get(key, 0.0), float(node["Resources"].get(key, 0.0)))
    return best


def preflight(spec: StudySpec, table: DesignTable, tracking_uri: str, address: str | None) -> None:
    """Everything checkable before Ray starts; raises StudyError naming the field and value."""
    sample = table.trials[0].config if table.trials else adaptive_sample(spec)
    try:
        check_data(sample)
    except ValueError as err:
        raise StudyError(f"trial.{err}") from None
    check_tracking_uri(tracking_uri)
    if address is None:
        check_resources(spec, local_capacity(), "this machine (no --address: the study runs here)")


class DriverLock:
    """One driver per study at a time; a lock left by a dead process on this host is taken over."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> DriverLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            host, _, pid = self.path.read_text().partition(":")
            if host == socket.gethostname() and pid.isdigit() and _alive(int(pid)):
                raise StudyError(f"study is already running (driver pid {pid}, lock {self.path})")
        self.path.write_text(f"{socket.gethostname()}:{os.getpid()}")
        return self

    def __exit__(self, *exc) -> None:
        self.path.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return pid != os.getpid()


# ---------------------------------------------------------------------------------------------
# recording from the driver
# ---------------------------------------------------------------------------------------------
def trial_key(trial) -> str:
    plan = trial.config["plan"]
    return plan["key"] or f"o-{trial.trial_id}"


def _recorder_class():
    from ray import tune

    class MlflowRecorder(tune.Callback):
        """Writes each trial's evaluations into its one child run, skipping replayed steps."""

        def __init__(self, record: StudyRecord, run_ids: dict[str, str], new_run) -> None:
            self.record, self.run_ids, self.new_run = record, run_ids, new_run
            self.logged: dict[str, int] = {}
            self.finished: set[str] = set()

        def _run_id(self, trial) -> str:
            key = trial_key(trial)
            if key not in self.run_ids:  # adaptive designs: the point exists only now
                self.run_ids[key] = self.new_run(trial)
            return self.run_ids[key]

        def on_trial_start(self, iteration, trials, trial, **info):
            # also called when Ray restarts a trial after a failure: one more attempt, same run
            run_id = self._run_id(trial)
            self.record.begin_attempt(run_id)
            self.logged[trial_key(trial)] = self.record.last_logged_step(run_id)

        def on_trial_result(self, iteration, trials, trial, result, **info):
            key, run_id = trial_key(trial), self._run_id(trial)
            if result.get("final"):
                summary = {**result, "status": result.get("trial_status", "finished")}
                self.record.finish_trial(run_id, summary)
                self.finished.add(key)
                return
            step = int(result["examples_seen"])
            if step <= self.logged.get(key, -1):
                return  # replayed after a resume: this step is already in the run
            self.record.log_evaluation(run_id, result, step)
            self.logged[key] = step

        def on_trial_error(self, iteration, trials, trial, **info):
            message = ""
            error_file = getattr(trial, "error_file", None)
            if error_file and Path(error_file).exists():
                message = Path(error_file).read_text()[-4000:]
            self.record.fail_trial(self._run_id(trial), message or "trial failed")

    return MlflowRecorder


# ---------------------------------------------------------------------------------------------
# launching
# ---------------------------------------------------------------------------------------------
def _payload(plan: TrialPlan, trials_root: Path, cpu: float) -> dict[str, Any]:
    return {
        "key": plan.key,
        "trial": plan.config.model_dump(mode="json"),
        "trial_dir": str(trials_root / plan.key),
        "cpu": cpu,
    }


def _optuna_space(spec: StudySpec) -> dict[str, Any]:
    from ray import tune

    space: dict[str, Any] = {}
    for name, factor in spec.factors.items():
        if factor.levels is not None:
            space[name] = tune.choice(factor.levels)
        elif name == "batch_size":
            space[name] = tune.choice(batch_sizes_matching(spec, factor))
        elif name in INTEGER_FIELDS:
            lo, hi = factor.bounds
            space[name] = (tune.lograndint if factor.scale == "log" else tune.randint)(
                int(lo), int(hi) + 1
            )
        else:
            lo, hi = factor.bounds
            space[name] = (tune.loguniform if factor.scale == "log" else tune.uniform)(lo, hi)
    return space


def _optuna_history(spec: StudySpec, record: StudyRecord) -> tuple[list[dict], list[float]]:
    """Finished adaptive trials, to warm-start the sampler on resume."""
    points, rewards = [], []
    for run in record.trial_runs().values():
        value = run.data.metrics.get(spec.design.metric)
        if run.info.status == "FINISHED" and value is not None and math.isfinite(value):
            params = run.data.params
            points.append({n: yaml.safe_load(params[n]) for n in spec.factors})
            rewards.append(value)
    return points, rewards


def launch(
    spec: StudySpec,
    table: DesignTable,
    pending: list[TrialPlan],
    record: StudyRecord,
    parent_id: str,
    *,
    study_dir: Path,
    address: str | None,
    max_concurrent: int | None,
    already_done: int,
    quiet: bool,
) -> float:
    """Run the pending trials on Ray Tune; returns the summed wall time of launched trials."""
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    # a snapshot with every checkpoint is what we want (resume loses at most one interval)
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    import ray
    from ray import tune

    from study.trainable import run_study_trial

    started_ray = False
    if not ray.is_initialized():
        if address:
            ray.init(address=address, log_to_driver=False, logging_level="WARNING")
        else:
            capacity = local_capacity()
            ray.init(
                num_cpus=int(capacity["CPU"]), num_gpus=int(capacity["GPU"]),
                include_dashboard=False, log_to_driver=False, logging_level="WARNING",
                object_store_memory=256 * 2**20,
            )  # fmt: skip
        started_ray = True
    try:
        if address:
            check_resources(spec, cluster_capacity(), f"the cluster at {address}")
        trials_root = study_dir / "trials"
        existing = record.trial_runs()
        run_ids = {
            p.key: record.ensure_trial_run(p, parent_id, spec.sha, existing) for p in pending
        }

        def new_adaptive_run(trial) -> str:
            plan_in = trial.config["plan"]
            factors = {n: trial.config[n] for n in spec.factors}
            config = trial_config(spec, factors, plan_in["seed"])
            plan = TrialPlan(f"o-{trial.trial_id}", 0, plan_in["seed"], factors, config)
            return record.ensure_trial_run(plan, parent_id, spec.sha)

        resources = {"cpu": spec.resources.cpu, "gpu": spec.resources.gpu}
        trainable = tune.with_resources(run_study_trial, resources)
        concurrency = max_concurrent or spec.max_concurrent
        if table.adaptive:
            from ray.tune.search.optuna import OptunaSearch

            points, rewards = _optuna_history(spec, record)
            remaining = spec.design.samples - len(points)
            searcher = OptunaSearch(
                metric=spec.design.metric, mode=spec.design.mode, seed=spec.design.seed,
                points_to_evaluate=points or None, evaluated_rewards=rewards or None,
            )  # fmt: skip
            plan = {"key": None, "trial": None, "fixed": spec.trial, "seed": spec.design.seed,
                    "trials_root": str(trials_root), "cpu": spec.resources.cpu}  # fmt: skip
            param_space = {"plan": plan, **_optuna_space(spec)}
            tune_config = tune.TuneConfig(
                search_alg=searcher, num_samples=max(0, remaining),
                max_concurrent_trials=concurrency, reuse_actors=False,
            )  # fmt: skip
            total = spec.design.samples
        else:
            param_space = {
                "plan": tune.grid_search(
                    [_payload(p, trials_root, spec.resources.cpu) for p in pending]
                )
            }
            tune_config = tune.TuneConfig(
                max_concurrent_trials=concurrency, reuse_actors=False,
                trial_dirname_creator=trial_key, trial_name_creator=trial_key,
            )  # fmt: skip
            total = len(table.trials)
        recorder = _recorder_class()(record, run_ids, new_adaptive_run)
        slots = concurrency or max(1, int(local_capacity()["CPU"] // spec.resources.cpu))
        progress = StudyProgress(
            spec.study, total, already_done, slots, spec.target.metric, spec.target.mode
        )
        view = ProgressView(progress, trial_key)
        callbacks = [recorder] if quiet else [recorder, view]
        tuner = tune.Tuner(
            trainable,
            param_space=param_space,
            tune_config=tune_config,
            run_config=tune.RunConfig(
                name=f"{spec.study}-{time.strftime('%Y%m%d-%H%M%S')}",
                storage_path=str(study_dir / "ray"),
                failure_config=tune.FailureConfig(max_failures=spec.max_failures),
                checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
                callbacks=callbacks,
                verbose=0,
            ),
        )
        results = tuner.fit()
        if not quiet:
            view.close()
        return sum(float(r.metrics.get("wall_s", 0.0) or 0.0) for r in results if r.metrics)
    finally:
        if started_ray:
            ray.shutdown()


def _report(
    record: StudyRecord, results: Path, tracking_uri: str, folder: Path, quiet: bool
) -> None:
    """The analysis report of a finished study; a failure here never loses the record."""
    from study.reporting import make_report

    try:
        make_report(record, results, folder, tracking_uri=tracking_uri)
        if not quiet:
            print(f"report: {folder / 'report.html'}")
    except Exception as err:  # the study itself is complete and recorded
        print(f"report not written: {type(err).__name__}: {err}")


def run_study(
    spec_path: str | Path | None = None,
    *,
    address: str | None = None,
    tracking_uri: str | None = None,
    storage: str | Path | None = None,
    max_concurrent: int | None = None,
    smoke: bool = False,
    quiet: bool = False,
) -> StudyOutcome:
    """``study run``: validate, record, run what is missing, export. See the module docstring."""
    t0 = time.perf_counter()
    spec = load_spec(spec_path)
    source = Path(spec_path) if spec_path else None
    source_text = (
        source.read_text() if source and source.is_file() else yaml.safe_dump(spec.canonical())
    )
    if smoke:
        spec = smoke_spec(spec)
    table = build_design(spec)
    tracking_uri = tracking_uri or default_tracking_uri()
    storage = Path(storage or "studies").resolve()
    preflight(spec, table, tracking_uri, address)
    study_dir = storage / spec.study
    with DriverLock(study_dir / "driver.lock"):
        artifacts = storage / "mlartifacts" if tracking_uri.startswith("sqlite") else None
        record = StudyRecord(tracking_uri, spec.study, artifacts)
        record.check_spec(spec)
        record.end_orphans()
        parent_id = record.start_parent(spec, table, source_text)
        finished = {k for k, r in record.trial_runs().items() if r.info.status == "FINISHED"}
        pending = [p for p in table.trials if p.key not in finished]
        launched, trial_s = 0, 0.0
        if pending or (table.adaptive and len(finished) < (spec.design.samples or 0)):
            launched = len(pending) if not table.adaptive else spec.design.samples - len(finished)
            trial_s = launch(
                spec, table, pending, record, parent_id, study_dir=study_dir, address=address,
                max_concurrent=max_concurrent, already_done=len(finished), quiet=quiet,
            )  # fmt: skip
        elif not quiet:
            print(f"study {spec.study}: all {len(table.trials)} trials FINISHED; nothing to run")
        results = export_parquet(record, study_dir / RESULTS_FILE, spec.sha)
        record.log_parent_artifact(parent_id, results)
        _report(record, results, tracking_uri, study_dir / "report", quiet)
        counts = record.status_counts()
        record.finish_parent(parent_id, ok=set(counts) <= {"FINISHED"})
    outcome = StudyOutcome(
        spec.study, tracking_uri, parent_id, results, counts, launched,
        time.perf_counter() - t0, record.logging_s, trial_s,
    )  # fmt: skip
    if not quiet:
        print(f"study {spec.study}: {counts} · results {results}")
        print(f"MLflow UI: {ui_command(tracking_uri)}")
    return outcome
