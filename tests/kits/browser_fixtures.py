"""The browser tests' session-scoped fixtures: one smoke study, one ``mlflow server`` on its
record, one headless Chromium, shared by every browser test of the run. A test module loads
them with ``pytest_plugins = ["browser_fixtures"]``; the helpers they use are in browserkit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from browserkit import (
    UI,
    SmokeStudy,
    headless_chromium,
    quit_chromium,
    require_chromium,
    start_mlflow_server,
    stop_mlflow_server,
)


@pytest.fixture(scope="session")
def smoke_study(tmp_path_factory) -> Iterator[SmokeStudy]:
    """``study run --smoke`` through the real CLI in an empty folder, once per test run: its
    own short RAY_TMPDIR, every process that refers to it killed by PID at the end."""
    from mlflow.tracking import MlflowClient
    from processkit import kill_processes_mentioning
    from studykit import child_runs, parent_runs

    from search_spaces.spec import load_spec, smoke_spec

    name = smoke_spec(load_spec(None)).study
    folder = tmp_path_factory.mktemp("browser-study")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    storage = folder / "studies"
    ray_tmp = tempfile.mkdtemp(prefix="rb", dir="/tmp")
    # one trial at a time: each trial process costs seconds of CPU importing torch, and the
    # smoke study's four tiny trials finish no sooner two at once (tests/kits/studykit.py)
    command = [str(Path(sys.executable).with_name("study")), "run", "--smoke", "--max-concurrent",
               "1", "--tracking-uri", uri, "--storage", str(storage)]  # fmt: skip
    try:
        done = subprocess.run(command, cwd=folder, env=os.environ | {"RAY_TMPDIR": ray_tmp},
                              capture_output=True, text=True, timeout=600)  # fmt: skip
    finally:
        kill_processes_mentioning(ray_tmp)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stderr[-3000:]}"
    client = MlflowClient(uri)
    (parent,) = parent_runs(uri, name)
    children = sorted((client.get_run(r.info.run_id) for r in child_runs(uri, name)),
                      key=lambda r: r.info.run_name)  # fmt: skip
    yield SmokeStudy(
        folder, uri, name, parent.info.experiment_id, parent, children,
        artifacts=storage / "mlartifacts", report=storage / name / "report" / "report.html",
        stdout=done.stdout,
    )  # fmt: skip


@pytest.fixture(scope="session")
def mlflow_server(smoke_study: SmokeStudy) -> Iterator[str]:
    """``mlflow server`` on the smoke study's record and artifact folder; its URL. Stopped (it
    and its children, by PID) at the end of the run."""
    server, url = start_mlflow_server(
        smoke_study.uri, cwd=smoke_study.folder, artifacts_destination=smoke_study.artifacts,
        log=smoke_study.folder / "mlflow-server.log",
    )  # fmt: skip
    try:
        yield url
    finally:
        stop_mlflow_server(server)


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    """One headless Chromium for the run; fails (not skips) where it is not installed."""
    require_chromium()
    driver = headless_chromium()
    try:
        yield driver
    finally:
        quit_chromium(driver)


@pytest.fixture(scope="session")
def ui(browser, mlflow_server: str, smoke_study: SmokeStudy) -> UI:
    """The browser (asked for first, so a missing Chromium fails before the study runs), the
    server and the study."""
    return UI(browser, mlflow_server, smoke_study)
