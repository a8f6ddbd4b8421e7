"""Places recorded once (issue 58, item 6): a study run with ``--storage X`` keeps X on its
parent run (``study.storage``), and the commands that come after it (report, next, status) find
the study's storage there, not in the folder they run in; ``study run`` says which store and
storage it used when either is not in the current folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from recordkit import NAME, record_study

STUDY = str(Path(sys.executable).with_name("study"))


def _run(folder: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([STUDY, *argv], cwd=folder, capture_output=True, text=True, timeout=600)


def _tag_storage(uri: str, storage: Path) -> None:
    """Record ``storage`` on the study's parent run, as ``study run --storage`` does."""
    from mlflow.tracking import MlflowClient

    from analysis.reading.state import STORAGE_TAG

    client = MlflowClient(uri)
    parent = client.search_runs([client.get_experiment_by_name(NAME).experiment_id],
                                filter_string="tags.`study.role` = 'parent'")[0]  # fmt: skip
    client.set_tag(parent.info.run_id, STORAGE_TAG, str(storage))


def test_report_writes_into_the_storage_its_record_names(tmp_path):
    uri = record_study(tmp_path)
    storage, elsewhere = tmp_path / "kept" / "runs", tmp_path / "elsewhere"
    elsewhere.mkdir()
    _tag_storage(uri, storage)
    done = _run(elsewhere, "report", NAME, "--no-figures", "--tracking-uri", uri)
    assert done.returncode == 0, done.stderr
    report = storage / NAME / "report" / "report.html"
    assert done.stdout.splitlines()[-1] == f"wrote {report}"
    assert report.is_file() and not (elsewhere / "studies").exists()


def test_a_study_recorded_before_its_storage_was_kept_reports_into_studies_here(tmp_path):
    uri = record_study(tmp_path)
    done = _run(tmp_path, "report", NAME, "--no-figures", "--tracking-uri", uri)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "studies" / NAME / "report" / "report.html").is_file()


def test_a_study_run_with_its_storage_elsewhere_is_found_there_afterwards(tmp_path, ray_tmp):
    """One real tiny study run from one folder with --storage in another; then report, status
    and next's follow-up command from a third folder, and a rerun with a new description: the
    ordinary way (the description reaches MLflow), then the cheap answer again."""
    from mlflow.tracking import MlflowClient
    from studykit import write_spec

    from study.services.recorded import storage_options

    here, storage, elsewhere = tmp_path / "here", tmp_path / "kept" / "runs", tmp_path / "other"
    for folder in (here, storage.parent, elsewhere):
        folder.mkdir()
    name = "placed"
    spec = write_spec(here / "placed.yaml", name,
                      factors={"temperature": {"levels": [0.1, 0.5], "scale": "log"}})  # fmt: skip
    uri = f"sqlite:///{here / 'mlflow.db'}"
    ran = _run(here, "run", str(spec), "--no-figures", "--tracking-uri", uri,
               "--storage", str(storage))  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert f"store: {uri}; storage: {storage}" in ran.stdout.splitlines()
    assert not (here / "studies").exists()

    report = _run(elsewhere, "report", name, "--no-figures", "--tracking-uri", uri)
    assert report.returncode == 0, report.stderr
    assert report.stdout.splitlines()[-1] == f"wrote {storage / name / 'report' / 'report.html'}"
    assert not (elsewhere / "studies").exists()
    status = _run(elsewhere, "status", name, "--tracking-uri", uri)
    assert status.returncode == 0 and "2 finished" in status.stdout, status.stderr
    assert storage_options(name, uri) == ["--storage", str(storage)]  # next's `run it:`

    spec.write_text(spec.read_text().replace("description:", "description: Moved. ", 1))
    again = _run(here, "run", str(spec), "--no-figures", "--tracking-uri", uri,
                 "--storage", str(storage))  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    assert "the findings below are the stored report's" not in again.stdout  # the ordinary way
    client = MlflowClient(uri)
    note = client.get_experiment_by_name(name).tags["mlflow.note.content"]
    assert "Moved." in note  # the new description reached MLflow
    cheap = _run(here, "run", str(spec), "--no-figures", "--tracking-uri", uri,
                 "--storage", str(storage))  # fmt: skip
    assert cheap.returncode == 0, cheap.stderr[-3000:]
    assert "nothing to run (the findings below are the stored report's" in cheap.stdout
    assert f"store: {uri}; storage: {storage}" in cheap.stdout.splitlines()
