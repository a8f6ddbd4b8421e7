"""Cheap questions answered cheaply: ``study report NAME --json`` on a record whose trials are
the ones its last report was made from answers from that report, without fitting, drawing or
writing anything, and says what a fresh report says (a real embedded store, planted results)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from recordkit import record_study
from studykit import sqlite_companion

STUDY = str(Path(sys.executable).with_name("study"))


def _run(folder: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([STUDY, *argv], cwd=folder, capture_output=True, text=True, timeout=300)


def _tree(folder: Path) -> dict[str, float]:
    return {str(p): p.stat().st_mtime for p in folder.rglob("*")
            if p.is_file() and not sqlite_companion(p)}  # fmt: skip


def test_report_json_on_an_unchanged_record_is_the_stored_answer(tmp_path):
    uri = record_study(tmp_path, "default-digits")
    first = _run(tmp_path, "report", "default-digits", "--no-figures", "--tracking-uri", uri)
    assert first.returncode == 0, first.stderr
    before = _tree(tmp_path)
    stored = _run(tmp_path, "report", "default-digits", "--json", "--tracking-uri", uri)
    assert stored.returncode == 0, stored.stderr
    assert _tree(tmp_path) == before  # nothing written: no report folder, no store change
    fresh = _run(tmp_path, "report", "default-digits", "--json", "--no-figures", "--out",
                 str(tmp_path / "fresh"), "--tracking-uri", uri)  # fmt: skip
    assert fresh.returncode == 0, fresh.stderr
    assert json.loads(stored.stdout) == json.loads(fresh.stdout)


def test_a_changed_record_is_reported_afresh(tmp_path):
    from mlflow.tracking import MlflowClient

    uri = record_study(tmp_path, "default-digits")
    assert _run(tmp_path, "report", "default-digits", "--no-figures", "--tracking-uri",
                uri).returncode == 0  # fmt: skip
    client = MlflowClient(uri)
    run = next(r for r in client.search_runs(
        [client.get_experiment_by_name("default-digits").experiment_id],
        filter_string="tags.`study.role` = 'trial'"))  # fmt: skip
    client.delete_run(run.info.run_id)
    again = _run(tmp_path, "report", "default-digits", "--json", "--no-figures",
                 "--tracking-uri", uri)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["n_trials"] == 7


def test_status_names_a_study_that_is_starting(tmp_path):
    """Between study run's start and its record: a live driver holds the lease in the default
    storage, and study status says the study is starting instead of 'no study named'."""
    import os
    import socket
    import time

    from study.lease import LEASE_FILE, Holder

    folder = tmp_path / "studies" / "warming-up"
    folder.mkdir(parents=True)
    now = time.time()
    driver = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (folder / LEASE_FILE).write_text(
            Holder("t", socket.gethostname(), driver.pid, now, now).to_text())  # fmt: skip
        done = _run(tmp_path, "status", "warming-up")
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"study warming-up: starting, its driver running (host "
                                      f"{socket.gethostname()}, pid {driver.pid}")  # fmt: skip
        assert not (tmp_path / "mlflow.db").exists()  # status only reads
    finally:
        driver.kill()
        driver.wait()
    gone = _run(tmp_path, "status", "warming-up")  # a dead driver's lease: no study there
    assert gone.returncode == 2 and "no study named 'warming-up'" in gone.stderr
    assert os.path.exists(folder / LEASE_FILE)


def _finished_study(tmp_path: Path) -> tuple[Path, str]:
    """A real finished study (two tiny trials run by `study run`): its spec and store."""
    from studykit import write_spec

    spec = write_spec(tmp_path / "tiny.yaml", "cheap-rerun",
                      factors={"temperature": {"levels": [0.1, 0.5], "scale": "log"}})  # fmt: skip
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    first = _run(tmp_path, "run", str(spec), "--no-figures", "--tracking-uri", uri)
    assert first.returncode == 0, first.stderr[-3000:]
    return spec, uri


def test_rerunning_a_finished_study_prints_the_stored_findings_and_writes_nothing(tmp_path):
    spec, uri = _finished_study(tmp_path)
    report = tmp_path / "studies" / "cheap-rerun" / "report" / "report.json"
    headline = json.loads(report.read_text())["headline"]["lines"]
    before = _tree(tmp_path)
    again = _run(tmp_path, "run", str(spec), "--no-figures", "--tracking-uri", uri)
    assert again.returncode == 0, again.stderr
    lines = again.stdout.splitlines()
    assert lines[0].startswith("study cheap-rerun: all 2 trials FINISHED; nothing to run")
    assert lines[1 : 1 + len(headline)] == headline  # the stored report's own words
    assert lines[-4].startswith("report: ") and lines[-3].startswith("results: ")
    assert _tree(tmp_path) == before  # nothing re-analysed, written, or leased


def test_a_finished_study_whose_file_changed_or_report_is_gone_goes_the_ordinary_way(tmp_path):
    spec, uri = _finished_study(tmp_path)
    (tmp_path / "studies" / "cheap-rerun" / "report" / "report.json").unlink()
    again = _run(tmp_path, "run", str(spec), "--no-figures", "--tracking-uri", uri)
    assert again.returncode == 0, again.stderr
    assert "(the findings below are the stored report's" not in again.stdout
    assert (tmp_path / "studies" / "cheap-rerun" / "report" / "report.json").is_file()  # anew
    spec.write_text(spec.read_text().replace("budget_examples: 1536", "budget_examples: 3072"))
    changed = _run(tmp_path, "run", str(spec), "--no-figures", "--tracking-uri", uri)
    assert changed.returncode == 2 and "nothing to run" not in changed.stdout  # refused, as ever


def test_status_names_a_study_its_driver_has_announced_and_forgets_a_dead_one(tmp_path):
    """A starting driver announces itself before its seconds of imports (study.starting);
    ``study status`` names the study from then on, and ignores the announcement once that
    process is gone."""
    import os
    import signal

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"  # the store status reads from tmp_path
    script = ("import time\nfrom study.starting import announce\n"
              f"announce('announced-x', {store!r})\nprint('ready', flush=True)\n"
              "time.sleep(120)\n")  # fmt: skip
    driver = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).parents[2])  # fmt: skip
    try:
        assert driver.stdout.readline().strip() == "ready"
        said = _run(tmp_path, "status", "announced-x")
        assert said.returncode == 0, said.stderr
        assert said.stdout.startswith("study announced-x: starting, its driver running")
        assert f"pid {driver.pid}" in said.stdout
    finally:
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
    gone = _run(tmp_path, "status", "announced-x")
    assert gone.returncode == 2 and "starting" not in gone.stdout


def test_study_run_announces_itself_and_withdraws_on_exit(tmp_path):
    import json
    import tempfile
    import time

    from studykit import write_spec

    spec = write_spec(tmp_path / "tiny.yaml", "announce-me",
                      factors={"temperature": {"levels": [0.1, 0.5], "scale": "log"}})  # fmt: skip
    note = Path(tempfile.gettempdir()) / f"study-drivers-{os.getuid()}" / "announce-me.json"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    driver = subprocess.Popen([STUDY, "run", str(spec), "--no-figures", "--tracking-uri", uri],
                              cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)  # fmt: skip
    seen = None
    while driver.poll() is None and seen is None:
        try:
            seen = json.loads(note.read_text())["pid"]
        except (OSError, ValueError):
            time.sleep(0.02)
    _, err = driver.communicate(timeout=300)
    assert driver.returncode == 0, err[-2000:]
    assert seen == driver.pid  # announced by the driver itself
    assert not note.exists()  # and withdrawn when it ended
