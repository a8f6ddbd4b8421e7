"""This process's Ray: started here or joined at an address (:func:`start_ray`,
:class:`DriverRay`), a start that fails said as one paragraph (:func:`ray_start_explained`),
what its workers preload and inherit, and which of this process's variables Tune copies into
every trial actor (:func:`env_vars_to_copy`). ``import ray`` happens only inside these
functions: a command that runs no trial never imports it.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import math
import os
import sys
import tempfile
from pathlib import Path

from search_spaces.spec import StudyError, StudySpec
from study.capacity import LOCAL_OBJECT_STORE, fitting_trials, local_capacity
from study.ending import StudyFailedError
from study.internals.ray import (
    TOKEN_AUTH_LOGGER,
    drop_tune_default_env_var,
    set_tune_propagated_env_vars,
    system_config,
    tune_propagated_env_vars,
)
from study.internals.torch import DYNAMO_MODULE
from study.stop_signals import catch_stop_signals

# what a trial's worker imports: the trainable, the trial's loop with torch, and what the first
# optimizer of every trial imports (study.internals.torch)
TRIAL_MODULES = ["study.trainable", "trainables.train", DYNAMO_MODULE]
# and where the study's trials read digits not yet in this node's data cache: scikit-learn's
# loader and its stratified split (trainables.data.digits_split)
DIGITS_MODULES = ["sklearn.datasets", "sklearn.model_selection"]


class RayStartError(StudyFailedError):
    """This machine's Ray did not start (:func:`ray_start_explained`); the message is one
    paragraph naming the cause and where Ray's logs are."""


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
    (see :func:`trial_actors_take_idle_workers`). Idle workers beyond the study's slots are let
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


def trial_actors_take_idle_workers() -> None:
    """Tune gives every trial actor a runtime_env, ``{"env_vars": {"PL_DISABLE_FORK": "1"}}``
    (for PyTorch Lightning, which no trial uses); an actor with env vars of its own cannot take
    one of Ray's idle workers and waits for a fresh process to start and import torch. Without
    that default it takes an idle worker, already warm on a local Ray (:func:`start_ray`). Env
    vars a user set for Tune to propagate still go with the actor (see
    :func:`propagated_env_vars`)."""
    drop_tune_default_env_var("PL_DISABLE_FORK")  # another Ray: trials start as before


@contextlib.contextmanager
def propagated_env_vars(copied: set[str] | None):
    """While Tune creates the trial actors: of the variables Tune copies from this process into
    every actor's runtime_env (``AWS_*``, ``RAY_TRAIN_*``, ...), only ``copied``
    (:func:`env_vars_to_copy`); None: as Tune does (a Ray without the setting)."""
    names = tune_propagated_env_vars()
    if names is None or copied is None:
        yield
        return
    set_tune_propagated_env_vars(copied)
    try:
        yield
    finally:
        set_tune_propagated_env_vars(names)


def env_vars_to_copy(address: str | None) -> set[str] | None:
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
