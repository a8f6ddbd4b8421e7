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

import contextlib
import functools
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from analysis.reading.state import STORAGE_TAG
from search_spaces.designs import AdaptiveDesign, FixedDesign, Schedule, TrialPlan
from search_spaces.spec import StudySpec
from study.baselines import measure_for_study
from study.capacity import check_resources, cluster_capacity, cluster_total, trial_slots
from study.cluster import reach_cluster
from study.driver_gone import RUN_COMMAND_TAG
from study.ending import (
    StudyFailedError,
    StudyOutcome,
    end_runs,
    export_and_report,
    interrupted_words,
    load_report_modules,
    next_steps,
    print_ending,
    rerun_command,
)
from study.finished import AIMS_TAG, REPORT_DIR, aims_fingerprint
from study.lease import study_lease
from study.leftovers import Leftovers
from study.local_ray import (
    DriverRay,
    RayStartError,
    check_local_ray,
    env_vars_to_copy,
    propagated_env_vars,
    trial_actors_take_idle_workers,
)
from study.mlflow_views import start_described_parent
from study.opened_study import OpenedStudy, open_study
from study.preflight import checked_storage, preflight
from study.progress import ProgressView, StudyProgress
from study.record import StoreState, StudyRecord
from study.session_time import record_session
from study.stop_signals import (
    StudyInterruptedError,
    cluster_watched,
    held,
    hold_sigint,
    lease_lost,
    release_sigint,
    still_held,
    stopped_by,
    study_cleaned,
    study_opened,
)
from study.stopping import new_study, record_closed, record_opened, stopped
from study.storage import Storage
from study.store_locks import StoreHeldError, store_held
from study.terminal import say
from study.tracking_store import default_tracking_uri
from trainables.remote import redacted

_USER_PENDING = os.environ.get("TUNE_MAX_PENDING_TRIALS_PG")  # a user's own setting wins


# ---------------------------------------------------------------------------------------------
# launching
# ---------------------------------------------------------------------------------------------
def launch(
    spec: StudySpec,
    schedule: Schedule,
    record: StudyRecord,
    parent_id: str,
    *,
    study: Storage,
    address: str | None,
    max_concurrent: int | None,
    quiet: bool,
) -> float:
    """Run what the schedule proposes on Ray Tune, with Ray started
    (:func:`study.local_ray.start_ray`); returns the summed wall time of the trials.

    Raises:
        StudyFailedError: Tune itself failed (every trial's own failure is recorded, not raised).
    """
    from study.tune_adapters import MlflowRecorder, trial_key

    trial_actors_take_idle_workers()
    if address:
        check_resources(spec, cluster_capacity(), f"the cluster at {address}", cluster_total())
    existing = record.trial_runs()
    still_held()
    run_ids = {
        p.key: record.ensure_trial_run(p, parent_id, spec.sha, existing) for p in schedule.known
    }

    def new_run(payload: dict) -> str:
        return record.ensure_trial_run(TrialPlan.from_payload(payload), parent_id, spec.sha)

    resources, concurrency = _trial_resources(spec, max_concurrent or spec.max_concurrent)
    recorder = MlflowRecorder(record, parent_id, run_ids, new_run, study)
    progress = StudyProgress(
        spec.study, schedule.total, schedule.done, trial_slots(spec, concurrency),
        spec.target.metric, spec.target.mode,
    )  # fmt: skip
    progress.seed({key: run.data.metrics.get(spec.target.metric)
                   for key, run in existing.items() if run.info.status == "FINISHED"})  # fmt: skip
    view = ProgressView(progress, trial_key)
    tuner = _tuner(spec, schedule, study, resources, concurrency,
                   [recorder, *([] if quiet else [view])])  # fmt: skip
    copied = env_vars_to_copy(address)  # refuses a secret a cluster's nodes lack
    try:
        results = _fit(tuner, copied, record, study)
    finally:
        if not quiet:
            view.close()
    return sum(float(r.metrics.get("wall_s", 0.0) or 0.0) for r in results if r.metrics)


def _trial_resources(spec: StudySpec, concurrency: int | None) -> tuple[dict, int | None]:
    """What Tune reserves for one trial, and how many trials it runs at once."""
    resources = {"cpu": spec.resources.cpu, "gpu": spec.resources.gpu}
    if spec.resources.memory:  # Ray's memory resource, in bytes: Ray packs trials by it
        resources["memory"] = spec.resources.memory
    if spec.resources.workers > 1:
        # The Tune trial only drives its Ray Train run, whose workers hold the resources (W ×
        # the per-worker ask): the trial holds none itself (one byte of memory, as Tune needs a
        # non-empty request), and Tune runs no more trials at once than the cluster holds.
        resources = {"cpu": 0, "gpu": 0, "memory": 1}
        concurrency = trial_slots(spec, concurrency)
    return resources, concurrency


def _tuner(
    spec: StudySpec, schedule: Schedule, study: Storage, resources: dict,
    concurrency: int | None, callbacks: list,
):  # fmt: skip
    """Ray Tune's ``Tuner`` for the schedule: the design's searcher, the study's storage, the
    recorder (and the progress view) among its callbacks."""
    from ray import tune
    from ray.tune.logger import JsonLoggerCallback

    from study.trainable import run_study_trial
    from study.tune_adapters import ScheduleSearcher, trial_key

    # Tune lets a custom searcher hold one pending trial at a time unless told otherwise;
    # every free slot may hold one, so concurrent trials start together.
    os.environ["TUNE_MAX_PENDING_TRIALS_PG"] = _USER_PENDING or str(trial_slots(spec, concurrency))
    # Tune's own SIGINT handler absorbs the interrupt and returns as if the study had ended;
    # without it, Ctrl-C raises KeyboardInterrupt here, and run_study ends every run KILLED
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
    # Tune's own CSV and TensorBoard logs of every report repeat what the record holds, and are
    # written at every report (to the bucket, for a bucket's study); its TensorBoard logger
    # alone imports torch into the driver. Its JSON log stays: Tune's results read it
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    return tune.Tuner(
        tune.with_resources(run_study_trial, resources),
        tune_config=tune.TuneConfig(
            search_alg=ScheduleSearcher(schedule, study.sub("trials"), spec.resources),
            num_samples=schedule.remaining,
            max_concurrent_trials=concurrency,
            reuse_actors=True,
            trial_dirname_creator=trial_key,
            trial_name_creator=trial_key,
        ),
        run_config=tune.RunConfig(
            name=f"{spec.study}-{time.strftime('%Y%m%d-%H%M%S')}",
            storage_path=study.path("ray"),
            storage_filesystem=study.fs,
            failure_config=tune.FailureConfig(max_failures=spec.max_failures),
            callbacks=[JsonLoggerCallback(), *callbacks],
            verbose=0,
        ),
    )


def _fit(tuner, copied: set[str] | None, record: StudyRecord, study: Storage):
    """``tuner.fit()``, Tune's own failure (not a trial's) said as a :class:`StudyFailedError`."""
    from study.tune_adapters import StorageLostError, lost_words, storage_lost

    try:
        with propagated_env_vars(copied):
            return tuner.fit()
    except StorageLostError as err:
        raise StudyFailedError(str(err)) from err
    except Exception as err:  # Tune's own failure, not a trial's: nothing stays RUNNING
        held_by = store_held(record.client)
        if held_by is not None:  # Tune wraps a callback's error in its own: the cause is this
            raise StudyFailedError(str(held_by)) from err
        with contextlib.suppress(StorageLostError):
            storage_lost(study)  # the usual reason Tune itself fails mid-study: say it
            raise StudyFailedError(f"Ray Tune failed: {type(err).__name__}: {err}") from err
        raise StudyFailedError(lost_words(study)) from err


@dataclass(frozen=True)
class _Driven:
    """What one ``study run`` drives, once checked: the study, where it is recorded and kept,
    and the command that resumes it."""

    spec: StudySpec
    design: FixedDesign | AdaptiveDesign
    source_text: str
    tracking_uri: str
    address: str | None  # the cluster's, as reached; None: this machine
    storage: Storage
    study: Storage  # the study's own folder in the storage
    rerun: str
    artifacts: str | None
    store: StoreState  # the tracking store as the preflight found it (``recorded``: a resume)


def run_study(
    spec_path: str | Path | None = None,
    *,
    opened: OpenedStudy | None = None,
    address: str | None = None,
    tracking_uri: str | None = None,
    storage: str | Path | None = None,
    max_concurrent: int | None = None,
    smoke: bool = False,
    quiet: bool = False,
    figures: bool = True,
    experiment=None,
) -> StudyOutcome:
    """``study run``: validate, record, run what is missing, export. See the module docstring.
    ``opened``: the study as ``study run`` read it (:func:`study.opened_study.open_study`);
    else the file at ``spec_path`` is read here. ``experiment``: the study's experiment as
    ``study run`` already found it in the store at ``tracking_uri`` (not looked up again).

    Raises:
        StudyError: the study file, data, store or resources are wrong; nothing was written.
        StudyFailedError: the driver failed after recording began; every run of the study is ended
            (none left RUNNING), what was logged stays, and the message says what to run next.
    """
    t0 = time.perf_counter()
    new_study()  # a stop of an earlier study in this process is not this one's
    opened = opened or open_study(spec_path, smoke)
    spec, design, source_text = opened.spec, opened.design, opened.source_text
    tracking_uri = tracking_uri or default_tracking_uri()
    store = preflight(spec, design, tracking_uri, address, experiment)  # looked up once
    typed_address = address
    if address:  # the cluster is reached before anything is recorded: refused in seconds
        address = reach_cluster(address)
    check_local_ray(address)  # a Ray that cannot start is said before anything is made
    # what this run makes, removed should Ray not start
    made = Leftovers.before(tracking_uri, spec.study, storage, store)
    storage = checked_storage(storage)
    driven = _Driven(
        spec, design, source_text, tracking_uri, address, storage, storage.sub(spec.study),
        rerun_command(opened.path, opened.smoke, tracking_uri, storage, figures, typed_address),
        storage.uri_of("mlartifacts") if tracking_uri.startswith("sqlite") else None, store,
    )  # fmt: skip
    return _drive(driven, made, t0, max_concurrent=max_concurrent, quiet=quiet, figures=figures)


def _drive(
    driven: _Driven, made: Leftovers, t0: float, *, max_concurrent: int | None, quiet: bool,
    figures: bool,
) -> StudyOutcome:  # fmt: skip
    """Take the study's lease, open its record, run what is missing, export and report; what
    this run ``made`` is removed should Ray not start."""
    spec, tracking_uri = driven.spec, driven.tracking_uri

    # the lease comes before anything is run or ended: a live driver's runs are its own. The
    # record is opened once: by the lease, should it make the study's experiment, or below
    found = driven.store.experiment
    made_records: list[StudyRecord] = []

    def make_record() -> StudyRecord:
        made_records.append(StudyRecord(tracking_uri, spec.study, driven.artifacts, found))
        return made_records[-1]

    lease = study_lease(driven.study, tracking_uri, spec.study, make_record,
                        functools.partial(load_report_modules, figures),
                        None if found is None else found.experiment_id)  # fmt: skip
    lease.on_lost = lease_lost
    ray_here = DriverRay(driven.address, spec, max_concurrent or spec.max_concurrent)
    # a new study runs every trial: its Ray starts while the lease is taken (see entered_beside)
    with (
        made.removed_on(RayStartError),
        ray_here,
        entered_beside(lease, None if driven.store.recorded else ray_here.start),
        held(lease),
    ):
        opened: list[tuple[StudyRecord, str]] = []  # the record and parent, once open
        interrupted = False
        try:
            with ray_here:  # Ray stops before the lease is let go: no trial outlives it
                record, parent_id = _open_record(
                    made_records[-1] if made_records else make_record(), spec, driven.design,
                    driven.source_text, driven.rerun,
                )  # fmt: skip
                opened.append((record, parent_id))
                ran = _run_opened(
                    driven, record, parent_id, ray_here, max_concurrent=max_concurrent,
                    quiet=quiet, figures=figures,
                )  # fmt: skip
            counts = record.status_counts()
            ok = set(counts) <= {"FINISHED"} and counts.get("FINISHED", 0) == driven.design.total
            still_held()
            record_session(record, parent_id, time.perf_counter() - t0)  # its own time, fixed cost
            record.finish_parent(parent_id, ok=ok)
            record_closed(record)  # ended: a stop from now on leaves its runs as they are
        except (KeyboardInterrupt, SystemExit):
            interrupted = hold_sigint()  # the runs are ended below, outside the interrupted frames
        if interrupted:
            _end_interrupted(driven, opened)
    schedule, trial_s, tail_from, results, findings = ran
    outcome = StudyOutcome(
        spec.study, tracking_uri, parent_id, results, counts, schedule.remaining,
        time.perf_counter() - t0, record.logging_s, trial_s, time.perf_counter() - tail_from,
    )  # fmt: skip
    if not quiet:
        print_ending(outcome, findings, driven.study.uri_of(REPORT_DIR, "report.html"), record,
                     spec, driven.storage.uri)  # fmt: skip
    return outcome


def _run_opened(
    driven: _Driven, record: StudyRecord, parent_id: str, ray_here: DriverRay, *,
    max_concurrent: int | None, quiet: bool, figures: bool,
) -> tuple[Schedule, float, float, str, list[str] | None]:  # fmt: skip
    """With the record open: the baselines, the trials the record lacks, then (Ray stopped) the
    export and the report. Returns the schedule, the trials' summed wall time, when the tail
    began, the results' URI and the headline's lines."""
    spec, rerun = driven.spec, driven.rerun
    record.client.set_tag(parent_id, STORAGE_TAG, redacted(driven.storage.uri))  # found again
    study_opened(record, parent_id, functools.partial(interrupted_words, spec, rerun, True))
    measure_for_study(spec, driven.design, record, parent_id, quiet)
    schedule, trial_s = _run_trials(
        spec, driven.design, record, parent_id, ray_here, study=driven.study,
        max_concurrent=max_concurrent, quiet=quiet, tracking_uri=driven.tracking_uri,
        rerun=rerun,
    )  # fmt: skip
    tail_from = time.perf_counter()
    still_held()
    # Ray shuts down first, here: its shutdown sets SIGTERM back to the default action at the C
    # level (a SIGTERM after it killed the driver mid-report, the parent left RUNNING), so the
    # stop signals are caught again at once, before the results are exported and the report
    # drawn (in the main thread, where an interrupt stops them at once)
    ray_here.stop()
    results, findings = export_and_report(
        record, parent_id, driven.study, spec, driven.tracking_uri, rerun, figures
    )
    if findings is not None:  # reported with these aims: the cheap answer's check
        record.client.set_tag(parent_id, AIMS_TAG, aims_fingerprint(spec))
    return schedule, trial_s, tail_from, results, findings


def _end_interrupted(driven: _Driven, opened: list[tuple[StudyRecord, str]]) -> None:
    """After a stop: every unfinished run of the study ended KILLED, the stop signals caught
    again, and the stop raised as :class:`StudyInterruptedError`."""
    for record, parent_id in opened:
        end_runs(record, parent_id, "KILLED")
    study_cleaned()  # the watchdog has nothing left to do
    release_sigint()
    signum = stopped_by()
    message = interrupted_words(driven.spec, driven.rerun, bool(opened), signum)
    raise StudyInterruptedError(message, signum)


def _run_trials(
    spec: StudySpec, design, record: StudyRecord, parent_id: str, ray_here: DriverRay, *,
    study: Storage, max_concurrent: int | None, quiet: bool, tracking_uri: str, rerun: str,
) -> tuple[Schedule, float]:  # fmt: skip
    """Run the trials the record lacks; returns the schedule and the trials' summed wall time.
    A failure ends every unfinished run of the study (FAILED; KILLED on an interrupt, which is
    raised again as KeyboardInterrupt)."""
    interrupted = False
    try:
        schedule = design.schedule(record.past_trials())
        trial_s = 0.0
        if schedule.remaining:
            ray_here.start()
            with cluster_watched(ray_here.address, spec, rerun):
                trial_s = launch(
                    spec, schedule, record, parent_id, study=study, address=ray_here.address,
                    max_concurrent=max_concurrent, quiet=quiet,
                )  # fmt: skip
        elif not quiet:
            say(f"study {spec.study}: all {schedule.total} trials FINISHED; nothing to run")
        return schedule, trial_s
    except (KeyboardInterrupt, SystemExit):
        interrupted = hold_sigint()  # ended below, once the interrupted frames are gone
    except BaseException as err:
        if stopped():  # Tune failing on the Ray a group's stop signal killed: still the stop
            interrupted = hold_sigint()
        else:
            ended = end_runs(record, parent_id, "FAILED")
            steps = next_steps(spec, tracking_uri, rerun, ended)
            if isinstance(err, StudyFailedError | StoreHeldError):
                raise StudyFailedError(f"{err}\n{steps}") from err
            if isinstance(err, Exception):
                raise StudyFailedError(f"{type(err).__name__}: {err}\n{steps}") from err
            raise
    if interrupted:
        end_runs(record, parent_id, "KILLED")
        raise KeyboardInterrupt  # SIGINT stays held: run_study ends the rest and releases it


@contextlib.contextmanager
def entered_beside(context, work=None):
    """Enter ``context`` (the driver's lease) in a helper thread while ``work()`` (Ray's start)
    runs in this one, and hold it for the ``with`` block.

    Why: a new study's first trial waits for Ray and then for a worker that imports torch (about
    6 s of CPU); taking the lease (MLflow's imports, the store, a settle of a second) and loading
    the report's modules take as long again, on the driver's core. One after the other they were
    the study's first 20 s; side by side they overlap. Ray starts here, in the main thread: the
    Ray processes it starts die with the thread that started them (Linux's parent-death signal),
    and only the main thread lives as long as the study. Should the lease be refused, its
    refusal is raised once the work is done, and the caller stops what the work started (a Ray
    started for nothing: no trial runs, nothing is recorded)."""
    if work is None:
        with context as value:
            yield value
        return
    with ThreadPoolExecutor(1, thread_name_prefix="study-lease") as pool:
        entering = pool.submit(context.__enter__)
        try:
            work()
        except BaseException:
            if entering.exception() is None:  # waits for the lease; then lets it go
                context.__exit__(*sys.exc_info())
            raise
        value = entering.result()  # the lease's refusal, raised
    with contextlib.ExitStack() as stack:
        stack.push(context)  # exited as a `with` block would (context.__exit__)
        yield value


def _open_record(
    record: StudyRecord, spec: StudySpec, design, source_text: str, rerun: str
) -> tuple[StudyRecord, str]:
    """The study's ``record``, with runs a dead driver left RUNNING ended (this driver holds
    the lease: no live one runs them) and the parent started. The command that resumes the
    study is kept with it, for what reads the record to print should this driver be killed
    outright."""
    record_opened(record)  # a stop from now on ends its unfinished runs at once
    orphans = record.end_orphans()
    if orphans:
        say(f"study {spec.study}: {len(orphans)} run{'s' * (len(orphans) != 1)} left RUNNING or "
            "SCHEDULED by a driver that is gone ended KILLED; they resume now", err=True,
            flush=True)  # fmt: skip
    record.client.set_experiment_tag(record.experiment_id, RUN_COMMAND_TAG, rerun)
    parent_id = start_described_parent(record, spec, design, source_text)
    return record, parent_id
