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
import datetime
import functools
import logging
import math
import os
import signal
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import yaml

from analysis.reading.state import STORAGE_TAG
from analysis.stats.best import study_summary
from search_spaces.designs import AdaptiveDesign, FixedDesign, Schedule, TrialPlan, build_design
from search_spaces.spec import (
    Resources,
    StudyError,
    StudySpec,
    in_file,
    load_spec,
    read_study_text,
    smoke_spec,
)
from study.baselines import measure_for_study
from study.capacity import LOCAL_OBJECT_STORE, check_resources, fitting_trials, local_capacity
from study.cluster import LOST_AFTER_S, check_token_auth_ray, reach_cluster, watch_cluster
from study.commands import shell_command, tool, ui_command
from study.driver_gone import RUN_COMMAND_TAG
from study.export import export_parquet
from study.finished import AIMS_TAG, REPORT_DIR, RESULTS_FILE, aims_fingerprint, places_lines
from study.internals.mlflow import store_engine
from study.internals.python import exit_now
from study.internals.ray import (
    TOKEN_AUTH_LOGGER,
    drop_tune_default_env_var,
    set_tune_propagated_env_vars,
    system_config,
    tune_propagated_env_vars,
)
from study.internals.torch import DYNAMO_MODULE
from study.lease import DriverLease, study_lease
from study.leftovers import Leftovers
from study.mlflow_views import TRIALS_VIEW, start_described_parent, ui_url, view_link
from study.paths import download_folder, writable_folder
from study.progress import ProgressView, StudyProgress
from study.record import StudyRecord, check_plan_fits, check_store
from study.session_time import record_session
from study.stopping import (
    STOP_SIGNALS,
    first_stop_signal,
    new_study,
    record_closed,
    record_opened,
    stopped,
    watch_stop_signals,
)
from study.storage import Storage, check_writable, open_storage
from study.store_locks import StoreHeldError, impatient, store_held
from study.terminal import say
from study.tracking_store import check_tracking_uri, default_tracking_uri
from trainables.checkpoints import RESUME_NOTE
from trainables.machine import cpus_why
from trainables.remote import redacted
from trainables.sources import check_data

# what a trial's worker imports: the trainable, the trial's loop with torch, and what the first
# optimizer of every trial imports (study.internals.torch)
TRIAL_MODULES = ["study.trainable", "trainables.train", DYNAMO_MODULE]
# and where the study's trials read digits not yet in this node's data cache: scikit-learn's
# loader and its stratified split (trainables.data.digits_split)
DIGITS_MODULES = ["sklearn.datasets", "sklearn.model_selection"]
_USER_PENDING = os.environ.get("TUNE_MAX_PENDING_TRIALS_PG")  # a user's own setting wins


class StudyFailedError(RuntimeError):
    """The study could not be completed after its trials began; nothing is left RUNNING, what
    was recorded stays, and the message says what to run next."""


class RayStartError(StudyFailedError):
    """This machine's Ray did not start (:func:`ray_start_explained`); the message is one
    paragraph naming the cause and where Ray's logs are."""


class StudyInterruptedError(RuntimeError):
    """``study run`` was stopped by a signal (SIGINT: Ctrl-C; SIGTERM: a scheduler, a spot
    instance, ``kill``; SIGHUP: a closed terminal): its trials stopped, every run of the study
    ended KILLED, nothing partial presented as its result; the message says how to resume. The
    CLI exits 128 + the signal's number with it (130, 143, 129), as a shell reports it."""

    def __init__(self, message: str, signum: int = signal.SIGINT) -> None:
        super().__init__(message)
        self.signum = int(signum)


# The signals that stop a study the same way (STOP_SIGNALS: SIGINT, SIGTERM, SIGHUP): every one
# of them ends its runs KILLED, first of all and at once (study.stopping). A cluster scheduler
# (Slurm, Kubernetes, a spot instance) stops a job with SIGTERM, then SIGKILL after a grace
# period; Ray's ray.init sets SIGTERM to sys.exit, so the handlers are set again after it.
_stopped_by: list[int] = []  # the signal that stopped this process's study, once one has


def _stop(signum: int, frame) -> None:
    """A stop signal in the main thread: remembered, the watchdog started, then raised as the
    interrupt every stop shares (the runs are ended where KeyboardInterrupt is caught)."""
    _stopped_by.append(signum)
    _watchdog(signum)
    raise KeyboardInterrupt(signal.Signals(signum).name)


# What the watchdog ends should the driver's own cleanup not: (record, parent run id, the
# message and resume command) of the study this process runs, set once it is opened
_open_study: list[tuple] = []
_cleaned = threading.Event()  # set once the runs of a stopped study are ended
STOP_GRACE_S = float(os.environ.get("CONTRASTIVE_STOP_GRACE_S", "20"))


def _watchdog(signum: int) -> None:
    """After a stop signal, give the driver :data:`STOP_GRACE_S` seconds to end its runs
    itself; if it has not (a SIGTERM to the job's process group kills Ray's GCS too, and the
    driver's Tune loop then waits on it until Ray's core exits the process with status 1),
    end them KILLED from here, say how to resume, and exit 128 + the signal. Well inside the
    grace period of Slurm (KillWait, 30 s) and Kubernetes (30 s) before their SIGKILL."""
    if _cleaned.is_set() or any(t.name == "study-stop-watchdog" for t in threading.enumerate()):
        return

    def watch() -> None:
        if _cleaned.wait(STOP_GRACE_S) or not _open_study:
            return
        record, parent_id, message = _open_study[-1]
        still_held()  # a driver whose lease was taken over ends no run: it exits here
        with contextlib.suppress(Exception):
            record.end_unfinished(parent_id, "KILLED")
            say(f"interrupted: {message(signum)}", err=True, flush=True)
        exit_now(128 + signum)

    threading.Thread(target=watch, name="study-stop-watchdog", daemon=True).start()


# The lease of the study this process drives, while it is held: every write to the record asks
# it first (:func:`still_held`), so that a driver woken after another driver took its lease
# over writes nothing more
_driver_lease: list[DriverLease] = []


def still_held() -> None:
    """Return only while this driver holds its study's lease: a driver whose lease another
    driver took over says so and exits (:func:`_lease_lost`), before any write of its own."""
    if _driver_lease:
        _driver_lease[-1].ensure_held()


def _lease_lost(message: str) -> None:
    """Another driver holds the study now (this one was suspended or cut off past the lease's
    timeout): say who, and exit 1 at once, from whichever thread found it. Nothing is ended or
    written: the runs are the other driver's (the stop watchdog is told so too). Ray's
    processes end with this one (their parent-death signal)."""
    _cleaned.set()
    say(message, err=True, flush=True)
    exit_now(1)


@contextlib.contextmanager
def _held(lease: DriverLease):
    """Make ``lease``, entered, the one :func:`still_held` asks for the block."""
    _driver_lease.append(lease)
    try:
        yield
    finally:
        _driver_lease.remove(lease)


def stopped_by() -> int:
    """The signal that stopped the study (SIGINT when none was seen: a KeyboardInterrupt)."""
    return _stopped_by[-1] if _stopped_by else int(first_stop_signal() or signal.SIGINT)


_holding: list[bool] = [False]  # between hold_sigint and release_sigint: stops are ignored


def catch_stop_signals() -> None:
    """SIGINT, SIGTERM and SIGHUP stop the study as Ctrl-C does (main thread only), the open
    study's runs ended KILLED first (:func:`study.stopping.watch_stop_signals`); while the
    cleanup after a stop holds them (:func:`hold_sigint`), they stay ignored."""
    if threading.current_thread() is threading.main_thread():
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN if _holding[0] else _stop)
        watch_stop_signals()


@contextlib.contextmanager
def sigint_ignored():
    """Every stop signal ignored for the block (cleanup that must finish: ending runs); in the
    main thread only, where Python handles signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def hold_sigint() -> bool:
    """Ignore further stop signals from now until :func:`release_sigint` (main thread only):
    the cleanup after an interrupt must finish. Returns True."""
    if threading.current_thread() is threading.main_thread():
        _holding[0] = True
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)
    return True


def release_sigint() -> None:
    if threading.current_thread() is threading.main_thread():
        _holding[0] = False
    catch_stop_signals()


@dataclass(frozen=True)
class StudyOutcome:
    name: str
    tracking_uri: str
    parent_run_id: str
    results: str  # results.parquet in the study's storage: an absolute path or a URI
    counts: dict[str, int]
    launched: int
    wall_s: float
    logging_s: float
    trial_s: float
    tail_s: float  # from the last trial's end to the study's: export, report, summary

    @property
    def ok(self) -> bool:
        return set(self.counts) <= {"FINISHED"}


# ---------------------------------------------------------------------------------------------
# preparing
# ---------------------------------------------------------------------------------------------
def cluster_capacity() -> dict[str, float]:
    """The largest live node's CPUs, GPUs and memory (each the largest of any node)."""
    import ray

    best: dict[str, float] = {}
    for node in ray.nodes():
        if node.get("Alive"):
            for key in ("CPU", "GPU", "memory"):
                best[key] = max(best.get(key, 0.0), float(node["Resources"].get(key, 0.0)))
    return best


def cluster_total() -> dict[str, float]:
    """Every live node's CPUs, GPUs and memory together."""
    import ray

    found = ray.cluster_resources()
    return {key: float(found.get(key, 0.0)) for key in ("CPU", "GPU", "memory")}


def preflight(
    spec: StudySpec, design: FixedDesign | AdaptiveDesign, tracking_uri: str, address: str | None
) -> bool:
    """Everything checkable before Ray starts or anything is written; raises StudyError naming
    the field and value: the data, every trial's fit in MLflow's limits, the tracking store and
    this study's state in it (deleted, changed study file), and this machine's resources.
    Returns whether the study is already recorded (a resume)."""
    check_token_auth_ray()  # a token asked of a Ray that has no token authentication
    sample = design.sample_config()
    try:
        check_data(sample)
    except ValueError as err:
        raise StudyError(f"trial.{err}") from None
    download_folder(sample)
    for plan in design.representatives():
        check_plan_fits(plan)
    if address is None:
        check_resources(spec, local_capacity(), "this machine (no --address: the study runs here)",
                        why=cpus_why())  # fmt: skip
    check_tracking_uri(tracking_uri, writing=True)  # the study writes its record there
    return check_store(tracking_uri, spec.study, spec)


def checked_storage(where: str | Path | None) -> Storage:
    """``--storage`` opened (a URI through pyarrow, a plain path as a local folder, default
    ``studies``) and checked: an object is written, read back and deleted under it.

    Raises:
        StudyError: naming ``--storage`` and the URI, with pyarrow's reason.
    """
    try:
        storage = open_storage(where)
    except ValueError as err:
        raise StudyError(f"--storage {redacted(str(err))}") from None
    if storage.is_local:  # said plainly, before the write below makes the folder or fails
        writable_folder("--storage", storage.root)
    try:
        check_writable(storage)
    except OSError as err:
        raise StudyError(
            f"--storage {redacted(storage.uri)}: cannot write there (a study keeps its "
            f"checkpoints, results and report in it): {redacted(str(err))}"
        ) from None
    return storage


# ---------------------------------------------------------------------------------------------
# recording from the driver
# ---------------------------------------------------------------------------------------------
def trial_key(trial) -> str:
    return trial.config["plan"]["key"]


def _recorder_class():
    from ray import tune

    class MlflowRecorder(tune.Callback):
        """Writes each trial's evaluations into its one child run, skipping replayed steps."""

        def __init__(
            self, record: StudyRecord, parent_id: str, run_ids: dict[str, str], new_run,
            study: Storage,
        ) -> None:  # fmt: skip
            self.record, self.parent_id, self.run_ids, self.new_run = (
                record, parent_id, run_ids, new_run,
            )  # fmt: skip
            self.study = study
            self.checks: dict[str, str] = {}  # the self-checks recorded on the parent so far
            self.logged: dict[str, int] = {}
            self.finished: set[str] = set()
            self.resume_notes: dict[str, str] = {}  # what each trial said of its checkpoints

        def _run_id(self, trial) -> str:
            still_held()  # every callback writes to the record next: only while the lease holds
            key = trial_key(trial)
            if key not in self.run_ids:  # adaptive proposals exist only from now on
                self.run_ids[key] = self.new_run(trial.config["plan"])
            return self.run_ids[key]

        def on_trial_start(self, iteration, trials, trial, **info):
            # also called when Ray restarts a trial after a failure: one more attempt, same run
            run_id = self._run_id(trial)
            self.record.begin_attempt(run_id)
            self.logged[trial_key(trial)] = self.record.last_logged_step(run_id)

        def on_trial_result(self, iteration, trials, trial, result, **info):
            key, run_id = trial_key(trial), self._run_id(trial)
            self._resume_noted(key, run_id, result.get(RESUME_NOTE))
            if result.get("final"):
                summary = {**result, "status": result.get("trial_status", "finished")}
                self.record.finish_trial(run_id, summary)
                self.record.record_checks(self.parent_id, summary, self.checks)
                self.finished.add(key)
                return
            step = int(result["examples_seen"])
            if step <= self.logged.get(key, -1):
                return  # replayed after a resume: this step is already in the run
            self.record.log_evaluation(run_id, result, step)
            self.logged[key] = step

        def _resume_noted(self, key: str, run_id: str, note: str | None) -> None:
            """A checkpoint the trial could not load and set aside, and where it resumed
            instead: said once on the terminal, and kept on its run."""
            if not note or self.resume_notes.get(key) == note:
                return
            self.resume_notes[key] = note
            say(f"trial {key}: {note}", err=True, flush=True)
            self.record.note_resume(run_id, note)

        def on_trial_recover(self, iteration, trials, trial, **info):
            storage_lost(self.study)  # retrying against storage that is gone helps nobody

        def on_trial_error(self, iteration, trials, trial, **info):
            still_held()
            storage_lost(self.study)
            message = ""
            error_file = getattr(trial, "error_file", None)
            if error_file and Path(error_file).exists():
                message = Path(error_file).read_text()[-4000:]
            self.record.fail_trial(self._run_id(trial), message or "trial failed")

    return MlflowRecorder


class StorageLostError(RuntimeError):
    """The study's storage cannot be written any more (a deleted bucket, lost credentials)."""


def _lost_words(study: Storage) -> str:
    return (f"--storage {redacted(study.uri)}: the study's storage cannot be written any more "
            "(was the bucket or folder deleted, or its credentials lost?); the trials keep their "
            "checkpoints and results there, so the study stopped instead of retrying against "
            "it. Restore the storage and run the study again to resume it")  # fmt: skip


def storage_lost(study: Storage) -> None:
    """Raise StorageLostError, naming ``--storage``, when a write-read-delete there fails."""
    try:
        check_writable(study)
    except OSError as err:
        raise StorageLostError(f"{_lost_words(study)} ({err})") from None


def _slots(spec: StudySpec, concurrency: int | None) -> int:
    """Trials that can run at once: the concurrency asked for, else as the cluster's CPUs allow.
    A data-parallel trial (whose Ray Train workers Tune does not count) is also held to as many
    at once as the cluster's CPUs and GPUs hold whole trials."""
    import ray

    found = ray.cluster_resources()
    res = spec.resources
    fit = fitting_trials(spec, found)
    if res.workers > 1 and res.gpu > 0:
        fit = max(1, min(fit, int(found.get("GPU", 0.0) // res.trial_gpu)))
    if concurrency:
        return min(concurrency, fit) if res.workers > 1 else concurrency
    return fit


def _searcher(schedule: Schedule, trials: Storage, resources: Resources):
    """Ray Tune's view of a design's schedule: each suggestion is the schedule's next trial,
    each completed trial's last result goes back to it (adaptive designs learn from it)."""
    from ray.tune.search import Searcher

    class ScheduleSearcher(Searcher):
        def __init__(self) -> None:
            super().__init__()
            self.keys: dict[str, str] = {}

        def set_search_properties(self, metric, mode, config, **spec) -> bool:
            return True

        def suggest(self, trial_id: str):
            plan = schedule.next(trial_id)
            if plan is None:
                return Searcher.FINISHED
            self.keys[trial_id] = plan.key
            # what the trial holds itself to (claim_share), and each Ray Train worker asks for
            share = {"cpu": resources.cpu, "gpu": resources.gpu}
            if resources.memory:
                share["memory"] = resources.memory
            payload = plan.payload() | {"trial_uri": trials.uri_of(plan.key), **share}
            return {"plan": payload}

        def on_trial_complete(self, trial_id: str, result=None, error: bool = False) -> None:
            key = self.keys.pop(trial_id, None)
            if key is not None:
                schedule.observe(key, None if error else result)

        def save(self, checkpoint_path: str) -> None:
            return None  # the study resumes from its MLflow record, not from Tune's state

        def restore(self, checkpoint_path: str) -> None:
            return None

    return ScheduleSearcher()


# ---------------------------------------------------------------------------------------------
# launching
# ---------------------------------------------------------------------------------------------
def start_ray(
    address: str | None, spec: StudySpec | None = None, concurrency: int | None = None
) -> bool:
    """Connect this driver to Ray: join the cluster at ``address``, or start Ray on this machine.
    Returns whether a Ray instance was started here (the caller shuts it down); False when this
    process was already connected.

    A local Ray is given the CPUs the study can use (``concurrency`` trials of ``spec``'s size,
    at most this machine's), and starts that many idle workers at once; each imports the
    trainable's module (torch, the trainables) as it starts, while the driver is still opening
    its record, so the first trials take a warm worker instead of waiting seconds for a fresh one
    (see :func:`_trial_actors_take_idle_workers`). Idle workers beyond the study's slots are let
    go."""
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    # a snapshot with every checkpoint is what we want (resume loses at most one interval)
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    import ray

    if ray.is_initialized():
        return False
    quiet_token_auth_notice()
    if address:
        ray.init(address=address, log_to_driver=False, logging_level="WARNING")
        return True
    for name, value in LOCAL_RAY_TRAIN_SETTINGS.items():  # a user's own setting wins
        os.environ.setdefault(name, value)
    capacity = local_capacity()
    cpus, slots = int(capacity["CPU"]), None
    if spec is not None:
        slots = concurrency or fitting_trials(spec, capacity)
        cpus = min(cpus, math.ceil(slots * spec.resources.trial_cpu))
    global _LOCAL_RAY_ENV
    environment = dict(os.environ)  # what the raylet, and so every worker, inherits
    _init_local_ray(ray, cpus, capacity, spec, slots)
    _LOCAL_RAY_ENV = (ray.get_runtime_context().get_node_id(), environment)
    return True


def _init_local_ray(ray, cpus: int, capacity: dict, spec, slots) -> None:
    ray.init(
        _temp_dir=local_ray_temp_dir(),
        num_cpus=cpus, num_gpus=int(capacity["GPU"]),
        # the memory trials may hold (resources.memory), as the preflight checked it
        _memory=int(capacity["memory"]),
        include_dashboard=False, log_to_driver=False, logging_level="WARNING",
        object_store_memory=LOCAL_OBJECT_STORE,
        **system_config(preload_python_modules=_preloaded(spec),
                        num_workers_soft_limit=slots or cpus),
    )  # fmt: skip


def local_ray_temp_dir() -> str:
    """Ray's temp dir for this driver's own Ray: ``ray`` inside a folder of this user's alone.

    Ray's default, ``/tmp/ray``, is a shared, predictable path: whoever made it first owns what
    goes in it, and Ray makes its temp dir mode 777 and writes logs there that anyone may read
    (the runtime-env agent's records every variable it applies). Ray's ``ray.init`` also reads
    ``<temp dir>/ray_current_cluster`` and joins the cluster it names, which another user may
    have written. So the folder above Ray's (``$RAY_TMPDIR``, else ``<tmp>/study-ray-<uid>``)
    must be this user's alone, mode 0700 (:func:`study.private.private_folder`); else a private
    one is used, said once."""
    from study.private import shared_or_private

    named = os.environ.get("RAY_TMPDIR", "")
    wanted = Path(named) if named else Path(tempfile.gettempdir()) / f"study-ray-{os.getuid()}"
    return str(shared_or_private(wanted, "study-ray", "Ray's temp dir") / "ray")


# The kernel takes a Unix socket's path in 108 bytes with its final NUL (104 on macOS), and Ray
# puts its sockets at <temp dir>/session_<date>_<time>_<microseconds>_<pid>/sockets/plasma_store
# (its longest name; raylet is shorter), the pid being the driver's own.
SOCKET_PATH_LIMIT = (104 if sys.platform == "darwin" else 108) - 1


def ray_socket_problem(temp_dir: str) -> str | None:
    """Why a local Ray in ``temp_dir`` could not make its sockets, or None when it can."""
    session = datetime.datetime.now().strftime(f"session_%Y-%m-%d_%H-%M-%S_%f_{os.getpid()}")
    sample = os.path.join(temp_dir, session, "sockets", "plasma_store")
    size = len(sample.encode())
    if size <= SOCKET_PATH_LIMIT:
        return None
    return (f"its socket paths would be {size} bytes long ({sample}), over the "
            f"{SOCKET_PATH_LIMIT}-byte limit of a Unix socket's path; set RAY_TMPDIR to a shorter "
            "folder (such as /tmp) and run the study again")  # fmt: skip


def check_local_ray(address: str | None) -> None:
    """Refuse (:class:`RayStartError`), before anything of the study is made, a Ray this
    machine would start but could not: its socket paths too long for the kernel."""
    ray = sys.modules.get("ray")  # not imported here for a check (seconds)
    if address or (ray is not None and ray.is_initialized()):
        return
    problem = ray_socket_problem(local_ray_temp_dir())
    if problem:
        raise RayStartError(_ray_start_words(problem))


@contextlib.contextmanager
def ray_start_explained(address: str | None):
    """A local Ray that fails to start, as one paragraph (:class:`RayStartError`): the cause
    (the socket path's length, a time-out, a ``RAY_ADDRESS`` set) and the log to read, instead
    of Ray's traceback; whatever of it had started is shut down."""
    try:
        yield
    except (StudyError, StudyFailedError):
        raise
    except Exception as err:
        if address:
            raise
        with contextlib.suppress(Exception):
            import ray

            ray.shutdown()
        raise RayStartError(_ray_start_words(_ray_start_cause(err))) from err


def _ray_start_cause(err: Exception) -> str:
    """What made Ray fail, in words, and where to read more."""
    said = " ".join(str(err).split())[:300]
    if "AF_UNIX path length" in said:
        return ray_socket_problem(local_ray_temp_dir()) or said
    if os.environ.get("RAY_ADDRESS"):  # ray.init joins the cluster it names, not a new Ray
        return (f"RAY_ADDRESS is set ({os.environ['RAY_ADDRESS']}), so Ray tried to join that "
                f"cluster instead of starting one here ({type(err).__name__}: {said}); unset "
                "it, or give --address to run the study on that cluster")  # fmt: skip
    timed = "timed out" in said.lower() or isinstance(err, TimeoutError)
    logs = os.path.join(local_ray_temp_dir(), "session_latest", "logs")
    how = "it did not come up in time" if timed else "it failed"
    return f"{how} ({type(err).__name__}: {said}); read raylet.out and gcs_server.out in {logs}"


def _ray_start_words(cause: str) -> str:
    """The paragraph; a new study's store, experiment and storage folders that this run made
    are removed by the caller (:class:`study.leftovers.Leftovers`), a resumed one's record kept."""
    return f"Ray did not start on this machine: {cause}. No trial ran"


# Ray Train's settings for this machine's own Ray, where its workers and the driver share a
# machine (data-parallel trials, ``resources.workers`` > 1); set before Ray starts, so that every
# worker inherits them. A cluster joined at an address keeps its own.
LOCAL_RAY_TRAIN_SETTINGS = {
    # an actor per trial watches for node preemption (spot instances of a cluster): no node of
    # this machine's Ray is preempted
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
    # the controller polls its workers every 2 s by default, and a worker's report waits for
    # the poll: a 2-trial study of 2 workers on 2 cores took 90 s, 67 s at 0.25 s. Polling two
    # local workers four times a second costs no measurable CPU
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.25",
}


def _inherited_environment() -> dict[str, str] | None:
    """The environment the workers of this process's Ray inherited, when this process started
    that Ray (not a Ray started since by someone else, nor one joined)."""
    import ray

    if _LOCAL_RAY_ENV is None or not ray.is_initialized():
        return None
    node, environment = _LOCAL_RAY_ENV
    return environment if ray.get_runtime_context().get_node_id() == node else None


def _forget_local_ray() -> None:
    global _LOCAL_RAY_ENV
    _LOCAL_RAY_ENV = None


def _preloaded(spec: StudySpec | None) -> list[str]:
    """What every worker process of a local Ray imports as it starts: the trial's module (torch,
    seconds of CPU) where it saves the trials that time. Not for data-parallel trials: Ray Train
    starts six helper actors per trial (its controller, a queue, a synchroniser, …), each in a
    fresh worker, none of which needs torch (a 2-trial study of 2 workers on 2 cores: 99 s with
    it, 79 s without)."""
    if spec is not None and spec.resources.workers > 1:
        return []
    return [*TRIAL_MODULES, *(DIGITS_MODULES if _digits_to_make(spec) else [])]


def _digits_to_make(spec: StudySpec | None) -> bool:
    """Whether the study's trials read digits that this node's data cache does not hold yet
    (for any of its data seeds): only then do they import scikit-learn."""
    from trainables.sources import digits_cache_path

    if spec is None:
        return True
    if "digits" not in {spec.trial.get("dataset", "digits"), *_levels(spec, "dataset")}:
        return False
    seeds = _levels(spec, "data_seed") or [spec.trial.get("data_seed", 0)]
    return not all(digits_cache_path(int(seed)).exists() for seed in seeds)


def _levels(spec: StudySpec, name: str) -> list:
    """The levels of the study's factor ``name``, when it has one."""
    factor = spec.factors.get(name)
    return list(factor.levels or []) if factor is not None else []


# Ray (2.52 on) enables token authentication for a cluster that ray.init starts, and says so at
# every start ("Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled
# to opt out ..."). The authentication stays exactly as Ray sets it up; only that notice is
# dropped for a study's own single-node Ray. The warning that it is *disabled* still shows.
# Its logger: study.internals.ray.TOKEN_AUTH_LOGGER.
TOKEN_AUTH_NOTICE = "Token authentication is enabled for this Ray cluster"


class _DropTokenAuthNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(TOKEN_AUTH_NOTICE)


def quiet_token_auth_notice() -> None:
    """Drop Ray's 'Token authentication is enabled' notice (once; nothing else changes)."""
    logger = logging.getLogger(TOKEN_AUTH_LOGGER)
    if not any(isinstance(f, _DropTokenAuthNotice) for f in logger.filters):
        logger.addFilter(_DropTokenAuthNotice())


# The local Ray started by this process (its node id) and the environment it was started with,
# which every worker process it starts inherits; None when this process started none.
_LOCAL_RAY_ENV: tuple[str, dict[str, str]] | None = None


def _trial_actors_take_idle_workers() -> None:
    """Tune gives every trial actor a runtime_env, ``{"env_vars": {"PL_DISABLE_FORK": "1"}}``
    (for PyTorch Lightning, which no trial uses); an actor with env vars of its own cannot take
    one of Ray's idle workers and waits for a fresh process to start and import torch. Without
    that default it takes an idle worker, already warm on a local Ray (:func:`start_ray`). Env
    vars a user set for Tune to propagate still go with the actor (see
    :func:`_propagated_env_vars`)."""
    drop_tune_default_env_var("PL_DISABLE_FORK")  # another Ray: trials start as before


@contextlib.contextmanager
def _propagated_env_vars(copied: set[str] | None):
    """While Tune creates the trial actors: of the variables Tune copies from this process into
    every actor's runtime_env (``AWS_*``, ``RAY_TRAIN_*``, ...), only ``copied``
    (:func:`_env_vars_to_copy`); None: as Tune does (a Ray without the setting)."""
    names = tune_propagated_env_vars()
    if names is None or copied is None:
        yield
        return
    set_tune_propagated_env_vars(copied)
    try:
        yield
    finally:
        set_tune_propagated_env_vars(names)


def _env_vars_to_copy(address: str | None) -> set[str] | None:
    """Of the variables Tune would copy into every trial actor's runtime_env, those the actors
    lack. A local Ray this process started: those whose value differs from what it was started
    with (its workers inherited that environment, and a variable copied all the same gives the
    actor a runtime_env of its own, so it cannot take an idle, warm worker and waits for a fresh
    process: seconds of torch import, for every trial of a study whose storage is a bucket).
    Any other Ray (a cluster): those its nodes lack (:func:`study.node_env.to_copy`, which
    refuses a secret some node lacks: Ray's runtime-env agent would log its value in clear).
    None on a Ray without the setting: Tune copies as it always does.

    Raises:
        StudyError: a secret the cluster's nodes lack.
    """
    names = tune_propagated_env_vars()
    if names is None:
        return None
    present = {n for n in names if n in os.environ}
    inherited = _inherited_environment()
    if inherited is not None and not address:
        return {n for n in present if os.environ[n] != inherited.get(n)}
    from study.node_env import to_copy

    return to_copy(present)


class DriverRay:
    """This driver's Ray: started (or joined) at most once, and shut down on leaving only when
    it was started here."""

    def __init__(self, address: str | None, spec: StudySpec, concurrency: int | None) -> None:
        self.address, self.spec, self.concurrency = address, spec, concurrency
        self.started = False

    def start(self) -> None:
        with ray_start_explained(self.address):
            self.started = start_ray(self.address, self.spec, self.concurrency) or self.started
        catch_stop_signals()  # ray.init set SIGTERM to sys.exit: a stop is a stop

    def stop(self) -> None:
        if self.started:
            import ray

            self.started = False
            ray.shutdown()
            catch_stop_signals()  # Ray's shutdown set SIGTERM to the default action (kill)
            _forget_local_ray()

    def __enter__(self) -> DriverRay:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


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
    """Run what the schedule proposes on Ray Tune, with Ray started (:func:`start_ray`); returns
    the summed wall time of the trials.

    Raises:
        StudyFailedError: Tune itself failed (every trial's own failure is recorded, not raised).
    """
    from ray import tune
    from ray.tune.logger import JsonLoggerCallback

    from study.trainable import run_study_trial

    _trial_actors_take_idle_workers()
    if address:
        check_resources(spec, cluster_capacity(), f"the cluster at {address}", cluster_total())
    trials = study.sub("trials")
    existing = record.trial_runs()
    still_held()
    run_ids = {
        p.key: record.ensure_trial_run(p, parent_id, spec.sha, existing) for p in schedule.known
    }

    def new_run(payload: dict) -> str:
        return record.ensure_trial_run(TrialPlan.from_payload(payload), parent_id, spec.sha)

    concurrency = max_concurrent or spec.max_concurrent
    resources = {"cpu": spec.resources.cpu, "gpu": spec.resources.gpu}
    if spec.resources.memory:  # Ray's memory resource, in bytes: Ray packs trials by it
        resources["memory"] = spec.resources.memory
    if spec.resources.workers > 1:
        # The Tune trial only drives its Ray Train run, whose workers hold the resources (W ×
        # the per-worker ask): the trial holds none itself (one byte of memory, as Tune needs a
        # non-empty request), and Tune runs no more trials at once than the cluster holds.
        resources = {"cpu": 0, "gpu": 0, "memory": 1}
        concurrency = _slots(spec, concurrency)
    recorder = _recorder_class()(record, parent_id, run_ids, new_run, study)
    progress = StudyProgress(
        spec.study, schedule.total, schedule.done, _slots(spec, concurrency),
        spec.target.metric, spec.target.mode,
    )  # fmt: skip
    progress.seed({key: run.data.metrics.get(spec.target.metric)
                   for key, run in existing.items() if run.info.status == "FINISHED"})  # fmt: skip
    view = ProgressView(progress, trial_key)
    # Tune lets a custom searcher hold one pending trial at a time unless told otherwise;
    # every free slot may hold one, so concurrent trials start together.
    os.environ["TUNE_MAX_PENDING_TRIALS_PG"] = _USER_PENDING or str(_slots(spec, concurrency))
    # Tune's own SIGINT handler absorbs the interrupt and returns as if the study had ended;
    # without it, Ctrl-C raises KeyboardInterrupt here, and run_study ends every run KILLED
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
    # Tune's own CSV and TensorBoard logs of every report repeat what the record holds, and are
    # written at every report (to the bucket, for a bucket's study); its TensorBoard logger
    # alone imports torch into the driver. Its JSON log stays: Tune's results read it
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    tuner = tune.Tuner(
        tune.with_resources(run_study_trial, resources),
        tune_config=tune.TuneConfig(
            search_alg=_searcher(schedule, trials, spec.resources),
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
            callbacks=[JsonLoggerCallback(), recorder, *([] if quiet else [view])],
            verbose=0,
        ),
    )
    copied = _env_vars_to_copy(address)  # refuses a secret a cluster's nodes lack
    try:
        with _propagated_env_vars(copied):
            results = tuner.fit()
    except StorageLostError as err:
        raise StudyFailedError(str(err)) from err
    except Exception as err:  # Tune's own failure, not a trial's: nothing stays RUNNING
        held = store_held(record.client)
        if held is not None:  # Tune wraps a callback's error in its own: the cause is this
            raise StudyFailedError(str(held)) from err
        with contextlib.suppress(StorageLostError):
            storage_lost(study)  # the usual reason Tune itself fails mid-study: say it
            raise StudyFailedError(f"Ray Tune failed: {type(err).__name__}: {err}") from err
        raise StudyFailedError(_lost_words(study)) from err
    finally:
        if not quiet:
            view.close()
    return sum(float(r.metrics.get("wall_s", 0.0) or 0.0) for r in results if r.metrics)


def _report(
    record: StudyRecord,
    results: Path,
    tracking_uri: str,
    folder: Path,
    study: Storage,
    figures: bool = True,
) -> list[str] | None:
    """The analysis report of a finished study, written to ``folder``; returns its headline's
    terminal lines, or None when it failed (said, with the command that writes it again): that
    never loses the record."""
    from study.reporting import make_report

    try:
        stored_as = study.uri_of(REPORT_DIR, "report.html")
        summary, _ = make_report(
            record,
            results,
            folder,
            tracking_uri=tracking_uri,
            stored_as=stored_as,
            figures=figures,
            from_record=True,  # the results were exported from the record a moment ago
        )
        return list(summary["headline"]["lines"])
    except Exception as err:  # the study itself is complete and recorded
        again = shell_command(
            tool("study"), "report", "--results", study.uri_of(RESULTS_FILE), "--out",
            study.uri_of(REPORT_DIR) if study.is_local else REPORT_DIR, "--tracking-uri",
            tracking_uri,
        )  # fmt: skip
        say(
            f"report not written: {type(err).__name__}: {err}\n"
            f"The study and its results are recorded; write the report again with: {again}"
        )
        return None


def run_study(
    spec_path: str | Path | None = None,
    *,
    address: str | None = None,
    tracking_uri: str | None = None,
    storage: str | Path | None = None,
    max_concurrent: int | None = None,
    smoke: bool = False,
    quiet: bool = False,
    figures: bool = True,
) -> StudyOutcome:
    """``study run``: validate, record, run what is missing, export. See the module docstring.

    Raises:
        StudyError: the study file, data, store or resources are wrong; nothing was written.
        StudyFailedError: the driver failed after recording began; every run of the study is ended
            (none left RUNNING), what was logged stays, and the message says what to run next.
    """
    t0 = time.perf_counter()
    new_study()  # a stop of an earlier study in this process is not this one's
    spec = load_spec(spec_path)
    source = Path(spec_path) if spec_path else None
    source_text = (
        read_study_text(source) if source and source.is_file() else yaml.safe_dump(spec.canonical())
    )
    try:
        if smoke:
            spec = smoke_spec(spec)
        design = build_design(spec)
    except StudyError as err:
        raise in_file(err, spec_path) from None
    tracking_uri = tracking_uri or default_tracking_uri()
    recorded = preflight(spec, design, tracking_uri, address)
    typed_address = address
    if address:  # the cluster is reached before anything is recorded: refused in seconds
        address = reach_cluster(address)
    check_local_ray(address)  # a Ray that cannot start is said before anything is made
    made = Leftovers.before(tracking_uri, spec.study, storage)  # removed should Ray not start
    storage = checked_storage(storage)
    study = storage.sub(spec.study)
    rerun = _rerun_command(spec_path, smoke, tracking_uri, storage, figures, typed_address)
    artifacts = storage.uri_of("mlartifacts") if tracking_uri.startswith("sqlite") else None

    # the lease comes before anything is run or ended: a live driver's runs are its own
    def make_record() -> StudyRecord:
        return StudyRecord(tracking_uri, spec.study, artifacts)

    lease = study_lease(study, tracking_uri, spec.study, make_record,
                        functools.partial(_load_report_modules, figures))  # fmt: skip
    lease.on_lost = _lease_lost
    ray_here = DriverRay(address, spec, max_concurrent or spec.max_concurrent)
    # a new study runs every trial: its Ray starts while the lease is taken (see entered_beside)
    with (
        made.removed_on(RayStartError),
        ray_here,
        entered_beside(lease, None if recorded else ray_here.start),
        _held(lease),
    ):
        opened: list[tuple[StudyRecord, str]] = []  # the record and parent, once open
        interrupted = False
        try:
            with ray_here:  # Ray stops before the lease is let go: no trial outlives it
                record, parent_id = _open_record(
                    tracking_uri, spec, design, source_text, artifacts, rerun
                )
                opened.append((record, parent_id))
                record.client.set_tag(parent_id, STORAGE_TAG, redacted(storage.uri))  # found again
                _open_study.append((record, parent_id, functools.partial(
                    _interrupted, spec, rerun, True)))  # fmt: skip
                measure_for_study(spec, design, record, parent_id, quiet)
                schedule, trial_s = _run_trials(
                    spec, design, record, parent_id, ray_here, study=study,
                    max_concurrent=max_concurrent, quiet=quiet, tracking_uri=tracking_uri,
                    rerun=rerun,
                )  # fmt: skip
                tail_from = time.perf_counter()
                still_held()
                # Ray shuts down first, here: its shutdown sets SIGTERM back to the default
                # action at the C level (a SIGTERM after it killed the driver mid-report, the
                # parent left RUNNING), so the stop signals are caught again at once, before the
                # results are exported and the report drawn (in the main thread, where an
                # interrupt stops them at once)
                ray_here.stop()
                results, findings = _export_and_report(
                    record, parent_id, study, spec, tracking_uri, rerun, figures
                )
                if findings is not None:  # reported with these aims: the cheap answer's check
                    record.client.set_tag(parent_id, AIMS_TAG, aims_fingerprint(spec))
            counts = record.status_counts()
            ok = set(counts) <= {"FINISHED"} and counts.get("FINISHED", 0) == design.total
            still_held()
            record_session(record, parent_id, time.perf_counter() - t0)  # its own time, fixed cost
            record.finish_parent(parent_id, ok=ok)
            record_closed(record)  # ended: a stop from now on leaves its runs as they are
        except (KeyboardInterrupt, SystemExit):
            interrupted = hold_sigint()  # the runs are ended below, outside the interrupted frames
        if interrupted:
            for record, parent_id in opened:
                end_runs(record, parent_id, "KILLED")
            _cleaned.set()  # the watchdog has nothing left to do
            release_sigint()
            signum = stopped_by()
            raise StudyInterruptedError(_interrupted(spec, rerun, bool(opened), signum), signum)
    outcome = StudyOutcome(
        spec.study, tracking_uri, parent_id, results, counts, schedule.remaining,
        time.perf_counter() - t0, record.logging_s, trial_s, time.perf_counter() - tail_from,
    )  # fmt: skip
    if not quiet:
        _print_ending(outcome, findings, study.uri_of(REPORT_DIR, "report.html"), record, spec,
                      storage.uri)  # fmt: skip
    return outcome


def _print_ending(
    outcome: StudyOutcome, findings: list[str] | None, report: str, record: StudyRecord,
    spec: StudySpec, storage: str = "studies",
) -> None:  # fmt: skip
    """What ``study run`` says last: the findings (at most six lines: the headline of the
    report, ``analysis.findings.headline``), then where everything is (the store and the
    storage too when either is not in the current folder)."""
    for line in findings or [f"study {spec.study}: {outcome.counts}"]:
        say(line)
    if findings is not None:
        say(f"report: {report}")
    say(f"results: {outcome.results}")
    for line in places_lines(outcome.tracking_uri, storage):
        say(line)
    say(f"MLflow UI: {ui_command(outcome.tracking_uri)}")
    table = ui_url(outcome.tracking_uri) + view_link(record.experiment_id, TRIALS_VIEW)
    say(f"its trials, factors and key metrics, sorted by {spec.target.metric}: {table}")


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
            with _cluster_watched(ray_here.address, spec, rerun):
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
            steps = _next_steps(spec, tracking_uri, rerun, ended)
            if isinstance(err, StudyFailedError | StoreHeldError):
                raise StudyFailedError(f"{err}\n{steps}") from err
            if isinstance(err, Exception):
                raise StudyFailedError(f"{type(err).__name__}: {err}\n{steps}") from err
            raise
    if interrupted:
        end_runs(record, parent_id, "KILLED")
        raise KeyboardInterrupt  # SIGINT stays held: run_study ends the rest and releases it


@contextlib.contextmanager
def _cluster_watched(address: str | None, spec: StudySpec, rerun: str):
    """While the trials run on a cluster joined at ``address``: should its head stop answering,
    every unfinished run of the study is ended KILLED, the driver says so with the command that
    resumes it, and exits 1, as a stop signal's watchdog does, in seconds rather than Ray's 60 s
    wait, after which Ray's core would end the process with every run left RUNNING."""
    if not address:
        yield
        return

    def lost() -> None:
        if _cleaned.is_set() or not _open_study:
            return
        record, parent_id, _ = _open_study[-1]
        with contextlib.suppress(Exception):
            record.end_unfinished(parent_id, "KILLED")
        _cleaned.set()
        say(_cluster_lost_words(spec, address, rerun), err=True, flush=True)
        exit_now(1)

    stop = watch_cluster(address, lost)
    try:
        yield
    finally:
        stop.set()


def _cluster_lost_words(spec: StudySpec, address: str, rerun: str) -> str:
    return (
        f"study {spec.study!r} stopped: the Ray cluster at {address} stopped answering mid-study "
        f"(its head is gone for {LOST_AFTER_S:g} s); every run of it that was not finished "
        "ended KILLED (none is left RUNNING). Resume it once the cluster is back (finished "
        f"trials are kept, the others continue from their checkpoints): {rerun}"
    )


def end_runs(record: StudyRecord, parent_id: str, status: str, tries: int = 3) -> bool:
    """End every unfinished run of the study ``status``, with SIGINT ignored (a second Ctrl-C
    must not leave one RUNNING); False when the store stays locked (another process holds it,
    :class:`study.store_locks.StoreHeldError`): the next ``study run`` ends them. An interrupt
    can land inside one of this process's own SQLite writes: the garbage of the interrupted
    frames is collected first, and a store still locked is disposed of and tried again, each
    try without the driver's long wait for a lock (:func:`study.store_locks.impatient`): a
    driver being stopped does not wait minutes for a lock that may be its own."""
    import gc

    from mlflow.exceptions import MlflowException

    still_held()  # a driver whose lease was taken over ends nothing: the runs are not its own
    with sigint_ignored():
        for attempt in range(tries):
            gc.collect()  # an interrupted session's connection goes back to the pool, rolled back
            try:
                with impatient(record.client):
                    record.end_unfinished(parent_id, status)
                return True
            except (MlflowException, StoreHeldError) as err:
                if attempt == tries - 1:
                    if isinstance(err, StoreHeldError):
                        return False
                    raise
                engine = store_engine(record.client)
                if engine is not None:
                    engine.dispose()


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
    tracking_uri: str, spec: StudySpec, design, source_text: str, artifacts: Path | None,
    rerun: str,
) -> tuple[StudyRecord, str]:  # fmt: skip
    """The study's record, with runs a dead driver left RUNNING ended (this driver holds the
    lease: no live one runs them) and the parent started. The command that resumes the study is
    kept with it, for what reads the record to print should this driver be killed outright."""
    record = StudyRecord(tracking_uri, spec.study, artifacts)
    record_opened(record)  # a stop from now on ends its unfinished runs at once
    orphans = record.end_orphans()
    if orphans:
        say(f"study {spec.study}: {len(orphans)} run{'s' * (len(orphans) != 1)} left RUNNING or "
            "SCHEDULED by a driver that is gone ended KILLED; they resume now", err=True,
            flush=True)  # fmt: skip
    record.client.set_experiment_tag(record.experiment_id, RUN_COMMAND_TAG, rerun)
    parent_id = start_described_parent(record, spec, design, source_text)
    return record, parent_id


def _load_report_modules(figures: bool = True) -> None:
    """The report's modules (the analysis, and matplotlib when the figures will be drawn: a
    second or two of CPU), loaded while the driver's lease settles, a second the driver would
    otherwise sleep, rather than later beside Ray's start, where they would take CPU from Ray
    and from the first trial's worker. Should this fail, the report's own import fails the same
    way, and ``_report`` says so."""
    import study.reporting  # noqa: F401

    if figures:
        import analysis.report.plots  # noqa: F401


def _export_and_report(
    record: StudyRecord, parent_id: str, study: Storage, spec: StudySpec, tracking_uri: str,
    rerun: str, figures: bool = True,
) -> tuple[str, list[str] | None]:  # fmt: skip
    """Export the results and write the report in a local staging folder (the parent run gets
    both from there), then copy them to the study's storage; returns the results' URI there
    and the headline's lines (None when the report failed)."""
    with tempfile.TemporaryDirectory(prefix="study-out-") as staging:
        local = Path(staging) / RESULTS_FILE
        _export(record, parent_id, local, study, spec, tracking_uri, rerun)
        _summarise(record, parent_id, local, spec)
        findings = _report(record, local, tracking_uri, Path(staging) / REPORT_DIR, study, figures)
        if findings is not None:
            _store(study, Path(staging) / REPORT_DIR, REPORT_DIR)
    return study.uri_of(RESULTS_FILE), findings


def _store(study: Storage, local: Path, name: str) -> None:
    """Copy the local file or folder to ``name`` in the study's storage: a file overwrites the
    file there (and fails where a folder stands: nothing of the user's is deleted), a folder
    replaces the folder there (the previous report)."""
    if local.is_dir():
        study.delete(name)
    study.upload(local, name)


def _summarise(record: StudyRecord, parent_id: str, results: Path, spec: StudySpec) -> None:
    """The parent run's summary metrics (trials finished, the best point's mean and interval)
    from the results table just exported; a failure here never loses the record."""
    from analysis.reading.load import read_results
    from study.reporting import study_outcomes

    try:
        outcomes = study_outcomes(record, record.uri)
        summary = study_summary(read_results(results), spec.target.metric, spec.target.mode,
                                outcomes)  # fmt: skip
        record.log_summary(parent_id, summary)
    except Exception as err:  # the study itself is complete and recorded
        say(f"the parent run's summary was not logged: {type(err).__name__}: {err}")


def _interrupted(spec: StudySpec, rerun: str, recorded: bool, signum: int = signal.SIGINT) -> str:
    """What ``study run`` says when stopped by a signal."""
    by = "" if signum == signal.SIGINT else f" by {signal.Signals(signum).name}"
    if not recorded:
        return (f"study {spec.study!r} interrupted{by} before anything was recorded. Run it: "
                f"{rerun}")  # fmt: skip
    return (
        f"study {spec.study!r} interrupted{by}: its trials were stopped and every run of it that "
        "was not finished ended KILLED (none is left RUNNING); no result or report was written "
        "for this run. Resume it (finished trials are kept, the others continue from their "
        f"checkpoints): {rerun}"
    )


def _rerun_command(
    spec_path: str | Path | None, smoke: bool, tracking_uri: str, storage: Storage,
    figures: bool = True, address: str | None = None,
) -> str:  # fmt: skip
    argv = [tool("study"), "run"]
    if spec_path is not None:
        argv.append(str(Path(spec_path).resolve()) if Path(spec_path).exists() else str(spec_path))
    if address:  # as typed: `auto` finds the cluster again wherever its head now is
        argv += ["--address", address]
    if smoke:
        argv.append("--smoke")
    if not figures:
        argv.append("--no-figures")
    argv += ["--tracking-uri", tracking_uri, "--storage", storage.uri]
    return shell_command(*argv)


def _next_steps(spec: StudySpec, tracking_uri: str, rerun: str, ended: bool = True) -> str:
    status = shell_command(tool("study"), "status", spec.study, "--tracking-uri", tracking_uri)
    runs = f"Every run of study {spec.study!r} was ended (none is left RUNNING)"
    if not ended:  # the store was held past every wait
        runs = f"The unfinished runs of study {spec.study!r} are ended when it is resumed"
    return (
        f"{runs} and everything logged is kept in {redacted(tracking_uri)}.\n"
        f"See its trials: {status}\n"
        f"Resume it (finished trials are kept, the others continue from their checkpoints): "
        f"{rerun}"
    )


def _export(
    record: StudyRecord, parent_id: str, out: Path, study: Storage, spec: StudySpec,
    tracking_uri: str, rerun: str,
) -> None:  # fmt: skip
    """Write the Parquet file to ``out``, attach it and copy it to the study's storage; on
    failure the parent is ended FAILED, never left RUNNING, the trials stay recorded, and the
    error says how to export again."""
    try:
        export_parquet(record, out, spec.sha)
        record.log_parent_artifact(parent_id, out)
        _store(study, out, RESULTS_FILE)
    except Exception as err:
        record.end_unfinished(parent_id, "FAILED")
        target = study.uri_of(RESULTS_FILE)
        export = shell_command(
            tool("study"), "export", spec.study, "--out", target, "--tracking-uri", tracking_uri
        )
        raise StudyFailedError(
            f"the trials of study {spec.study!r} are recorded, but writing {target} failed: "
            f"{type(err).__name__}: {err}\nNothing logged was lost. Export again with: {export}\n"
            f"or run the study again (it exports and reports without rerunning finished "
            f"trials): {rerun}"
        ) from err
