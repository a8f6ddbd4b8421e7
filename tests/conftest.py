from __future__ import annotations

import pytest
import torch
from processkit import kill_processes_mentioning
from s3kit import s3_server  # noqa: F401  (the fixture: a real moto S3 server on 127.0.0.1)


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, each worker's torch, and every process it starts (a driver, Ray's
    workers, a benchmark), computes on its share of the cores (cores // workers) instead of on
    all of them: N workers each running every core's worth of OpenMP threads oversubscribe the
    machine, and the spinning threads waste it (tests/trainables on 2 cores, 2 workers: 129 s
    with the default, 95 s with one thread each). A user's own OMP_NUM_THREADS wins."""
    import os

    _interruptible_children()
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1 and "OMP_NUM_THREADS" not in os.environ:
        share = max(1, (os.cpu_count() or 1) // workers)
        os.environ["OMP_NUM_THREADS"] = str(share)
        torch.set_num_threads(share)


def _interruptible_children() -> None:
    """SIGINT handled again when this test process inherited it ignored: a shell without job
    control (``cmd &`` in a script, CI runners) starts its background commands so, every process
    they start inherits the ignore across exec, and a driver a test Ctrl-Cs would then finish its
    study and exit 0 (two interrupt tests failed so). ``study run`` itself keeps an inherited
    ignore, as Unix programs do (``nohup``)."""
    import signal

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True, scope="session")
def _baseline_cache(tmp_path_factory):
    """Measured baselines, the template of new MLflow stores and the node's data cache (digits'
    arrays) go to the test run's own cache (every study a test runs, in this process or a
    child, finds it through the environment), never to the user's; a test of the data cache
    itself sets a folder of its own. The pytest-xdist workers of one run share it (a baseline,
    a template and digits' arrays are written atomically, so two writing at once both leave a
    whole file): each is made once per run, not once per worker."""
    import os

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's folder; each worker's basetemp lies under it
    cache = root / "baselines"
    cache.mkdir(exist_ok=True)
    os.environ["CONTRASTIVE_BASELINE_CACHE"] = str(cache)
    os.environ["CONTRASTIVE_STORE_CACHE"] = str(root / "mlflow-store")  # study.store_template
    os.environ["CONTRASTIVE_DATA_CACHE"] = str(root / "data")  # trainables.remote.cache_root


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _costliest_files_first(items)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _costliest_files_first(items: list[pytest.Item]) -> None:
    """The costliest files first, the order within a file kept: pytest-xdist deals whole files
    (``--dist=loadfile``) in collection order (``--no-loadscope-reorder``: by default it would
    deal them by their number of tests, most first), so the long end-to-end files start while every
    worker is free and the many quick files fill the end evenly, instead of a long file starting
    last on one worker while the other waits. A file's cost is guessed from its marks: a
    ``long`` test (a minute or more) counts 60 s, a ``slow`` one 5 s, any other 0.1 s."""
    cost: dict[str, float] = {}
    for item in items:
        weight = 60 if item.get_closest_marker("long") else 5 if item.get_closest_marker(
            "slow") else 0.1  # fmt: skip
        path = item.nodeid.split("::")[0]
        cost[path] = cost.get(path, 0) + weight
    items.sort(key=lambda item: -cost[item.nodeid.split("::")[0]])  # stable: file order kept


def _disconnect_ray() -> None:
    """Disconnect this process from its Ray (the shared one, or a test's own left connected by a
    failed study), which stops a Ray this process started."""
    import sys

    if "ray" in sys.modules:
        import ray

        if ray.is_initialized():
            ray.shutdown()


@pytest.fixture(scope="session")
def _shared_ray_dir():
    """The RAY_TMPDIR of this test process's shared Ray (see ``shared_ray``); at the end of the
    run that Ray is stopped and every process that refers to the folder is killed by PID."""
    import shutil
    import tempfile

    path = tempfile.mkdtemp(prefix="rs", dir="/tmp")
    yield path
    _disconnect_ray()
    kill_processes_mentioning(path)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def shared_ray(_shared_ray_dir):
    """One local Ray for every in-process study of this test process (of this pytest-xdist
    worker), started by the first test that asks and kept for the next: ``run_study`` finds this
    process connected and neither starts nor stops a Ray of its own, as it does on a cluster it
    joined. It saves each study Ray's start and stop and its workers' warm-up (~5 s, ~10 s of
    CPU). A test whose workers must see its own environment, or that signals Ray's processes,
    takes ``ray_tmp`` instead, which stops this one first."""
    import os

    import ray

    from study.local_ray import start_ray

    if not ray.is_initialized():
        before = os.environ.get("RAY_TMPDIR")
        os.environ["RAY_TMPDIR"] = _shared_ray_dir
        try:
            start_ray(None)
        finally:
            if before is None:
                os.environ.pop("RAY_TMPDIR", None)
            else:
                os.environ["RAY_TMPDIR"] = before
    return _shared_ray_dir


@pytest.fixture
def no_ray():
    """This process connected to no Ray (the shared one, if it holds it, is stopped first), for
    a test that checks nothing starts one: the shared Ray a test before it kept must not count."""
    _disconnect_ray()


@pytest.fixture
def ray_tmp(monkeypatch):
    """A short RAY_TMPDIR of the test's own (Unix socket paths are limited to ~107 bytes); at
    teardown every process that still refers to it (raylets, dashboards, agents, workers left by
    a killed driver) is killed by PID, then the folder goes. The shared Ray, if this process
    holds it, is stopped first: the test's studies start their own."""
    import shutil
    import tempfile

    _disconnect_ray()
    path = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    monkeypatch.setenv("RAY_TMPDIR", path)
    yield path
    # a study that failed mid-run may leave this process connected to the test's Ray, which is
    # about to be killed: disconnect, so the next test starts a live one instead of using it
    _disconnect_ray()
    kill_processes_mentioning(path)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """Run from an empty folder, as a fresh checkout would: the embedded store lands here."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(autouse=True, scope="session")
def _nothing_written_into_the_checkout():
    """No test leaves MLflow artifacts in the repository's own folder: an experiment made
    without an artifact location gets MLflow's default, ``./mlruns`` of the working folder, and
    tests run from the checkout (five tests once did, unnoticed, since it is git-ignored). At
    the end of the run, any file added there fails the run, naming a few."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "mlruns"
    before = {p for p in root.rglob("*") if p.is_file()} if root.exists() else set()
    yield
    added = sorted({p for p in root.rglob("*") if p.is_file()} - before) if root.exists() else []
    assert not added, f"tests wrote into the checkout's mlruns/: {[str(p) for p in added[:5]]}"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A baseline cache of the test's own (``CONTRASTIVE_BASELINE_CACHE``): measured afresh."""
    monkeypatch.setenv("CONTRASTIVE_BASELINE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"
