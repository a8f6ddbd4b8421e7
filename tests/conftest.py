from __future__ import annotations

import pytest
import torch
from processkit import kill_processes_mentioning
from s3kit import s3_server  # noqa: F401  (the fixture: a real moto S3 server on 127.0.0.1)


@pytest.fixture(autouse=True, scope="session")
def _baseline_cache(tmp_path_factory):
    """Measured baselines go to the test run's own cache (every study a test runs, in this
    process or a child, finds it through the environment), never to the user's."""
    import os

    os.environ["CONTRASTIVE_BASELINE_CACHE"] = str(tmp_path_factory.mktemp("baselines"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def ray_tmp(monkeypatch):
    """A short RAY_TMPDIR of the test's own (Unix socket paths are limited to ~107 bytes); at
    teardown every process that still refers to it (raylets, dashboards, agents, workers left by
    a killed driver) is killed by PID, then the folder goes."""
    import shutil
    import tempfile

    path = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    monkeypatch.setenv("RAY_TMPDIR", path)
    yield path
    kill_processes_mentioning(path)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """Run from an empty folder, as a fresh checkout would: the embedded store lands here."""
    monkeypatch.chdir(tmp_path)
    return tmp_path
