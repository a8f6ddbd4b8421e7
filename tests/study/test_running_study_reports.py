"""Reports of a study that is not finished (issue 58, item 5): ``study report``, ``export``,
``next``, ``augment``, ``power`` and the notebook's ``analyse`` on a study whose driver is alive
say so ("7 of 8 trials not finished; driver pid N on HOST"), give no "Next" (and so no "did not
vary") and never count a running trial's partial metrics as its result; on a study whose driver
is gone (runs left RUNNING, no live lease holder) they say "driver gone (pid N on HOST)".

A recorded study (tests/kits/recordkit.py: a real embedded store, no training) is planted
running: 1 of its 8 trials FINISHED, the others and the parent RUNNING, the lease tag naming a
live process of this host (a running driver) or a dead one (a driver gone)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from recordkit import NAME, plant_running, record_study

STUDY = str(Path(sys.executable).with_name("study"))
HOST = socket.gethostname()


def _run(folder: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([STUDY, *argv], cwd=folder, capture_output=True, text=True, timeout=300)


@pytest.fixture
def live_pid():
    """A live process of this host: the planted driver."""
    driver = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield driver.pid
    driver.kill()
    driver.wait()


@pytest.fixture
def dead_pid():
    """A pid of this host whose process is gone: a driver that was SIGKILLed."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    return gone.pid


def _planted(folder: Path, pid: int | None) -> tuple[str, list[str]]:
    uri = record_study(folder)
    return uri, plant_running(uri, finished=1, pid=pid)


@pytest.mark.parametrize("driver", ["running", "gone"])
def test_a_report_of_an_unfinished_study_says_so_and_gives_no_next(tmp_path, driver, request):
    pid = request.getfixturevalue("live_pid" if driver == "running" else "dead_pid")
    uri, _ = _planted(tmp_path, pid)
    done = _run(tmp_path, "report", NAME, "--json", "--no-figures", "--tracking-uri", uri)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    said = "\n".join(summary["headline"]["lines"])
    if driver == "running":
        assert f"7 of 8 trials not finished; driver pid {pid} on {HOST}" in said
    else:
        assert f"7 of 8 trials not finished; driver gone (pid {pid} on {HOST})" in said
    assert "Next:" not in said and "did not vary" not in said
    assert summary["headline"]["next_step"] is None
    assert summary["next_step"]["kind"] == "none"  # `study next` refuses on it
    assert "8 trials, 1 finished" in summary["headline"]["sentence"]
    # the best point rests on the one finished trial (p000-r0), not on the running ones' values
    assert summary["best_point"]["replicates"] == 1
    # the same words on the terminal
    terminal = _run(tmp_path, "report", NAME, "--no-figures", "--tracking-uri", uri)
    assert terminal.returncode == 0, terminal.stderr
    assert "trials not finished" in terminal.stdout and "Next:" not in terminal.stdout


def test_a_report_of_a_finished_study_says_nothing_of_the_kind(tmp_path):
    uri = record_study(tmp_path)
    done = _run(tmp_path, "report", NAME, "--json", "--no-figures", "--tracking-uri", uri)
    assert done.returncode == 0, done.stderr
    headline = json.loads(done.stdout)["headline"]
    assert headline["unfinished"] is None and headline["next_step"]


def test_the_notebook_analysis_of_a_running_study_says_so_and_shows_no_partial_result(
    tmp_path, live_pid
):
    from analysis import analyse, load_study

    uri, running = _planted(tmp_path, live_pid)
    df = load_study(NAME, uri)
    rows = df.set_index("trial_key")
    # a running trial's row is no result: its metrics are blank, its status says it runs
    assert rows.loc[running, "probe/knn_top1_h"].isna().all()
    assert set(rows.loc[running, "status"]) == {"running"}
    assert rows.drop(index=running)["probe/knn_top1_h"].notna().all()
    result = analyse(df)
    lines = result.headline.lines()
    assert lines[1].startswith(f"Still running: 7 of 8 trials not finished; driver pid {live_pid}")
    assert not any(line.startswith("Next:") or "did not vary" in line for line in lines)
    assert result.best is not None and result.best.n == 1


def test_the_other_commands_on_a_running_study_say_so(tmp_path, live_pid):
    uri, _ = _planted(tmp_path, live_pid)
    words = f"7 of 8 trials not finished; driver pid {live_pid} on {HOST}"
    export = _run(tmp_path, "export", NAME, "--out", str(tmp_path / "r.parquet"),
                  "--tracking-uri", uri)  # fmt: skip
    assert export.returncode == 0, export.stderr
    assert f"study {NAME}: {words}: the unfinished trials' rows have no results yet" in (
        export.stdout)  # fmt: skip
    power = _run(tmp_path, "power", NAME, "--metric", "probe/knn_top1_h", "--effect", "1",
                 "--tracking-uri", uri)  # fmt: skip
    assert words in power.stdout + power.stderr
    for command in (["next", "default", "--out", str(tmp_path / "next.yaml")],
                    ["augment", "default", "--out", str(tmp_path / "ccd.yaml")]):  # fmt: skip
        refused = _run(tmp_path, *command, "--tracking-uri", uri)
        assert refused.returncode == 2, refused.stdout
        assert words in refused.stderr and "wait for its driver to finish it" in refused.stderr
        assert "Next" not in refused.stdout + refused.stderr
    assert not (tmp_path / "next.yaml").exists() and not (tmp_path / "ccd.yaml").exists()


def test_next_on_a_study_whose_driver_is_gone_says_so_with_the_command_that_resumes_it(
    tmp_path, dead_pid
):
    uri, _ = _planted(tmp_path, dead_pid)
    refused = _run(tmp_path, "next", "default", "--out", str(tmp_path / "next.yaml"),
                   "--tracking-uri", uri)  # fmt: skip
    assert refused.returncode == 2
    assert f"7 of 8 trials not finished; driver gone (pid {dead_pid} on {HOST})" in (
        refused.stderr)  # fmt: skip
    assert "finish it first (re-running resumes it): " in refused.stderr


def test_a_lease_of_another_host_counts_while_it_beats(tmp_path, monkeypatch):
    """A driver on another host cannot be asked whether its process lives: its lease counts
    while its heartbeat is within the lease's timeout, as the lease itself judges it."""
    from analysis.reading.state import DRIVER_GONE, RUNNING, state_of

    uri, _ = _planted(tmp_path, None)
    from study.record import StudyRecord

    record = StudyRecord.existing(uri, NAME, read_only=True)
    parent, trials = record.parent(), record.trial_runs()

    def holder(beat: float) -> dict[str, str]:
        data = {"token": "t", "host": "elsewhere", "pid": 4242, "since": beat, "beat": beat}
        return {"study.driver": json.dumps(data)}

    monkeypatch.setenv("CONTRASTIVE_LEASE_TIMEOUT_S", "60")
    fresh = state_of(holder(1000.0), parent, trials, now=1030.0)
    stale = state_of(holder(1000.0), parent, trials, now=1090.0)
    assert (fresh.kind, fresh.words()) == (RUNNING, "7 of 8 trials not finished; driver pid "
                                                    "4242 on elsewhere")  # fmt: skip
    assert (stale.kind, stale.words()) == (DRIVER_GONE, "7 of 8 trials not finished; driver "
                                                        "gone (pid 4242 on elsewhere)")  # fmt: skip
    assert state_of({}, parent, trials).words() == "7 of 8 trials not finished; driver gone"


# ---------------------------------------------------------------------------------------------
# the finished study's cheap answer, given only while everything it rests on is unchanged
# ---------------------------------------------------------------------------------------------
def _reported(folder: Path) -> tuple[Path, str]:
    """A recorded finished study as `study run` leaves it: its report and results in
    studies/NAME, its study file, and the aims it was reported with on its parent run."""
    import yaml
    from mlflow.tracking import MlflowClient

    from search_spaces.spec import load_spec
    from study.finished import AIMS_TAG, aims_fingerprint

    uri = record_study(folder)
    assert _run(folder, "report", NAME, "--no-figures", "--tracking-uri", uri).returncode == 0
    results = folder / "studies" / NAME / "results.parquet"
    export = _run(folder, "export", NAME, "--out", str(results), "--tracking-uri", uri)
    assert export.returncode == 0, export.stderr
    file = folder / "study.yaml"
    file.write_text(yaml.safe_dump(load_spec(None).canonical(), sort_keys=False))
    client = MlflowClient(uri)
    parent = client.search_runs([client.get_experiment_by_name(NAME).experiment_id],
                                filter_string="tags.`study.role` = 'parent'")[0]  # fmt: skip
    client.set_tag(parent.info.run_id, AIMS_TAG, aims_fingerprint(load_spec(file)))
    return file, uri


def _cheap(file: Path, uri: str) -> list[str] | None:
    from study.finished import finished_run_lines
    from study.opened_study import open_study

    return finished_run_lines(open_study(str(file), False), tracking_uri=uri, storage=None)


def _log_final(uri: str, key: str, metric: str, value: float) -> None:
    """Change a trial's final value with MLflow's own client, as a user might."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    run = next(r for r in client.search_runs(
        [client.get_experiment_by_name(NAME).experiment_id],
        filter_string=f"tags.`study.trial_key` = '{key}'"))  # fmt: skip
    step = max(m.step for m in client.get_metric_history(run.info.run_id, metric))
    client.log_metric(run.info.run_id, metric, value, step=step)


def test_a_metric_changed_in_mlflow_is_never_answered_from_the_stored_report(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    file, uri = _reported(tmp_path)
    stored = _cheap(file, uri)
    assert stored is not None and "nothing to run" in stored[0]  # unchanged: the cheap answer
    assert any("observed at p000" in line for line in stored)
    for key in ("p001-r0", "p001-r1"):
        _log_final(uri, key, "probe/knn_top1_h", 1.0)
    assert _cheap(file, uri) is None  # the ordinary path: the record changed
    again = _run(tmp_path, "report", NAME, "--json", "--tracking-uri", uri)
    assert again.returncode == 0, again.stderr
    best = json.loads(again.stdout)["best_point"]
    assert (best["point_id"], best["mean"]) == ("p001", 1.0)  # the record's best, not the old


@pytest.mark.parametrize("edit", ["description", "goals", "baselines"])
def test_a_study_file_whose_unfingerprinted_parts_changed_goes_the_ordinary_way(
    tmp_path, monkeypatch, edit
):
    import yaml

    from search_spaces.spec import load_spec

    monkeypatch.chdir(tmp_path)
    file, uri = _reported(tmp_path)
    assert _cheap(file, uri) is not None
    data = yaml.safe_load(file.read_text())
    if edit == "description":
        data["description"] = "a new description, for MLflow"
    elif edit == "goals":
        data["goals"] = [{"metric": "probe/knn_top1_h", "goal": "max", "low": 0.9, "high": 1.0}]
    else:
        data["baselines"] = ["raw"]
    file.write_text(yaml.safe_dump(data, sort_keys=False))
    assert load_spec(file).sha == load_spec(None).sha  # outside the fingerprint: it resumes
    assert _cheap(file, uri) is None
