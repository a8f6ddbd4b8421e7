"""Helpers for the study integration tests: small study files and readers of the real record."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import yaml
from mlflow.tracking import MlflowClient

from search_spaces.designs import build_design
from search_spaces.spec import SPEC_DIR, load_spec
from study.record import StudyRecord


def default_spec_data() -> dict:
    return yaml.safe_load((SPEC_DIR / "default.yaml").read_text())


# A test's study runs one trial at a time unless running several is what it tests: each trial
# process a study starts costs ~6 s of CPU importing torch before its first step, and a second at
# once finishes a tiny study no sooner on 2 cores (6 toy trials: 19 s at concurrency 1 and at 2,
# 21 s of CPU against 27), while the suite's other worker needs those cores.
ONE_AT_A_TIME = {"max_concurrent": 1}


def write_spec(
    path: Path, name: str, *, factors: dict, trial: dict | None = None, replicates: int = 1, **top
) -> Path:
    """A digits study with a tiny budget, built from the default study's trial fields; one trial
    at a time unless ``max_concurrent`` says otherwise (see :data:`ONE_AT_A_TIME`)."""
    data = default_spec_data()
    data["study"] = name
    data["trial"] |= {
        "budget_examples": 1536,
        "eval_marks": 3,
        "heldout_size": 120,
        "probe_train_size": 200,
        "linear_probe_iters": 10,
    } | (trial or {})
    data["factors"] = factors
    data["design"] = {"kind": "full_factorial", "replicates": replicates}
    data |= ONE_AT_A_TIME | top
    path.write_text(yaml.safe_dump(data))
    return path


def child_runs(uri: str, study: str) -> list:
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(study)
    return client.search_runs(
        [experiment.experiment_id], filter_string="tags.`study.role` = 'trial'", max_results=1000
    )


def parent_runs(uri: str, study: str) -> list:
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(study)
    return client.search_runs(
        [experiment.experiment_id], filter_string="tags.`study.role` = 'parent'", max_results=1000
    )


def duplicated_metric_rows(db: Path) -> list[tuple]:
    """(run, key, step, count) for every metric row written more than once."""
    with sqlite3.connect(db) as con:
        return con.execute(
            "SELECT run_uuid, key, step, COUNT(*) FROM metrics "
            "GROUP BY run_uuid, key, step HAVING COUNT(*) > 1"
        ).fetchall()


def sqlite_companion(path: Path | str) -> bool:
    """Whether ``path`` is SQLite's write-ahead log or its index beside a store in WAL mode
    (``mlflow.db-wal``, ``mlflow.db-shm``): there while the store is open, and left by a
    read-only reader, which cannot remove them; the index changes as readers come and go, and
    holds no data. What "nothing written" means leaves them out."""
    return str(path).endswith(("-wal", "-shm"))


def metric_steps(uri: str, run_id: str, key: str = "train/examples_seen") -> list[int]:
    return sorted(int(m.step) for m in MlflowClient(uri).get_metric_history(run_id, key))


def wait_healthy(url: str, process, timeout: float = 90) -> int:
    """Poll ``url/health`` until it answers (its status), failing early if ``process`` ended."""
    import time
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=2) as reply:
                return reply.status
        except OSError:
            if process.poll() is not None:
                err = process.stderr.read() if process.stderr else b""
                raise AssertionError(f"{url} ended before answering: {err[-2000:]!r}") from None
            assert time.monotonic() < deadline, f"{url} did not answer in {timeout} s"
            time.sleep(0.5)


def stop_group(process) -> None:
    """SIGTERM a process started with start_new_session, and its whole group; SIGKILL if slow."""
    import subprocess

    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)


def start_driver(
    spec: Path, workdir: Path, uri: str, study: str, *, figures: bool = False,
    env: dict | None = None,
) -> tuple[list[str], object]:  # fmt: skip
    """``study run SPEC`` as its own process session (so a test can kill it whole), in ``env``
    (this process's environment by default); without figures unless told (few tests of a
    driver read them: seconds per study)."""
    import subprocess

    command = [
        study,
        "run",
        str(spec),
        *([] if figures else ["--no-figures"]),
        "--tracking-uri",
        uri,
        "--storage",
        str(workdir / "studies"),
    ]
    driver = subprocess.Popen(
        command, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    return command, driver


STUDY = str(Path(sys.executable).with_name("study"))


def wait_for(predicate, timeout: float, what: str, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            _, err = proc.communicate()
            raise AssertionError(
                f"driver ended (rc {proc.returncode}) before {what}: {err[-3000:]}"
            )
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def checkpoints(trial_dir: Path) -> list[Path]:
    """The trial's complete checkpoints (a folder counts once its DONE marker is written)."""
    return [p for p in trial_dir.glob("checkpoint_*") if (p / "DONE").is_file()]


def store_with(workdir: Path, *names: str) -> str:
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    for name in names:
        spec = load_spec(None).model_copy(update={"study": name})
        StudyRecord(uri, name).start_parent(spec, build_design(spec), "")
    return uri


def most_at_once(windows: list[tuple[int, int]]) -> int:
    """The most windows [start, end) open at one moment."""
    events = sorted([(s, 1) for s, _ in windows] + [(e, -1) for _, e in windows])
    held = most = 0
    for _, change in events:
        held += change
        most = max(most, held)
    return most
