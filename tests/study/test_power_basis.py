"""``study power`` answers from the planning basis the study's report left on its parent run
(analysis.stats.power): the same answer a fit gives, without statsmodels, pandas or MLflow, and only
while the record holds exactly the trials the report was made from."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from recordkit import NAME, record_study
from studykit import child_runs
from typer.testing import CliRunner

from analysis.stats import power
from study.cli import app
from study.record import StudyRecord
from study.reporting import make_report

ASK = ("power", NAME, "--metric", "probe/knn_top1_h", "--effect", "1")


@pytest.fixture
def reported(workdir) -> str:
    """The planted default study, finished, with its report (no figures) on its parent run."""
    uri = record_study(workdir)
    make_report(StudyRecord.existing(uri, NAME), None, workdir / "report", tracking_uri=uri,
                figures=False)  # fmt: skip
    return uri


def ask(uri: str, *extra: str):
    done = CliRunner().invoke(app, [*ASK, *extra, "--tracking-uri", uri])
    assert done.exit_code == 0, done.output
    return done.stdout


def basis_file(uri: str) -> Path:
    parent = StudyRecord.existing(uri, NAME).parent()
    return Path(parent.info.artifact_uri.removeprefix("file://")) / "report" / power.BASIS_FILE


def fitted(uri: str, monkeypatch, *extra: str) -> str:
    """The answer with no basis usable (another version's): the surface fitted afresh."""
    with monkeypatch.context() as patched:
        patched.setattr(power, "BASIS_VERSION", power.BASIS_VERSION + 1)
        return ask(uri, *extra)


def test_power_from_the_reports_basis_is_the_fitted_answer(reported, monkeypatch):
    assert basis_file(reported).is_file()
    for extra in ((), ("--power", "0.95", "--alpha", "0.001"), ("--effect", "0.2")):
        from_basis = ask(reported, *extra)
        assert "replicates per point" in from_basis
        assert from_basis == fitted(reported, monkeypatch, *extra)


def test_power_from_the_basis_imports_no_fitting_and_no_mlflow(reported):
    code = ("import sys; from typer.testing import CliRunner; from study.cli import app; "
            f"done = CliRunner().invoke(app, {[*ASK, '--tracking-uri', reported]!r}); "
            "print(done.exit_code, *(m in sys.modules for m in "
            "('statsmodels', 'pandas', 'scipy.stats', 'mlflow', 'torch')))")  # fmt: skip
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert done.stdout.split() == ["0"] + ["False"] * 5, done.stderr[-2000:]


def test_a_basis_is_read_only_for_the_trials_it_was_made_from(reported, monkeypatch):
    """A basis with the same trials is what answers (a doubled standard error shows); once the
    record's trials change, it is ignored and the answer is the fit of the trials now there."""
    path = basis_file(reported)
    honest = ask(reported)
    data = json.loads(path.read_text())
    for effect in data["responses"]["probe/knn_top1_h"]["effects"]:
        effect["std_err"] *= 2
    path.write_text(json.dumps(data))
    assert ask(reported) != honest  # the (altered) basis is what answered

    gone = child_runs(reported, NAME)[0].info.run_id
    MlflowClient(reported).delete_run(gone)  # one trial fewer than the report saw
    now = ask(reported)
    assert now != honest and now == fitted(reported, monkeypatch)


@pytest.mark.parametrize(
    ("uri", "folder"),
    [
        ("file:///tmp/sp%20ace%231/artifacts", "/tmp/sp ace#1/artifacts"),
        ("file://localhost/tmp/a", "/tmp/a"),
        ("/tmp/plain/artifacts", "/tmp/plain/artifacts"),
        ("file://otherhost/tmp/a", None),  # another machine's (mlflow#16133)
        ("s3://bucket/runs/artifacts", None),
        ("mlflow-artifacts:/1/abc/artifacts", None),  # a server's proxied store
        ("relative/artifacts", None),
        (None, None),
    ],
)
def test_only_artifacts_on_this_machine_are_read_for_a_basis(uri, folder):
    from study.services.power_answer import local_folder

    assert local_folder(uri) == (None if folder is None else Path(folder))
