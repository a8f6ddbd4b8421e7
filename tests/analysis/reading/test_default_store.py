"""Which MLflow store is read or recorded in when none is named: one rule for the CLI, the
notebook and ``analysis.load_study`` (``analysis.reading.load.default_store``)."""

from __future__ import annotations

import pytest

from analysis.reading.load import default_store, load_study
from study.tracking_store import default_tracking_uri


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """root/mlflow.db (an empty file stands for a store) and root/analysis/notebooks."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (tmp_path / "mlflow.db").touch()
    (tmp_path / "analysis" / "notebooks").mkdir(parents=True)
    return tmp_path


def test_the_nearest_store_at_or_above_the_folder(tree, monkeypatch):
    notebooks = tree / "analysis" / "notebooks"
    assert default_store(notebooks) == f"sqlite:///{tree / 'mlflow.db'}"
    (tree / "analysis" / "mlflow.db").touch()
    assert default_store(notebooks) == f"sqlite:///{tree / 'analysis' / 'mlflow.db'}"
    monkeypatch.chdir(notebooks)
    assert default_store() == default_tracking_uri() == f"sqlite:///{tree / 'analysis/mlflow.db'}"


def test_the_environment_names_the_store(tree, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    assert default_store(tree) == default_tracking_uri(tree) == "http://127.0.0.1:5000"


def test_with_no_store_above_it_is_the_folders_own_and_reading_creates_none(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    folder = tmp_path / "new"
    folder.mkdir()
    monkeypatch.chdir(folder)
    assert default_store() == f"sqlite:///{folder / 'mlflow.db'}"
    with pytest.raises(LookupError, match=f"there is no MLflow store at sqlite:///{folder}/mlf"):
        load_study("default-digits")
    assert list(folder.iterdir()) == []


def test_the_search_stops_at_the_projects_root(tmp_path, monkeypatch):
    """A store above the project (say ~/mlflow.db) is someone else's: a project without its own
    store records in the working folder, never in a stranger's."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (tmp_path / "mlflow.db").touch()
    project = tmp_path / "project"
    (project / "analysis" / "notebooks").mkdir(parents=True)
    (project / "pyproject.toml").touch()
    notebooks = project / "analysis" / "notebooks"
    assert default_store(notebooks) == f"sqlite:///{notebooks / 'mlflow.db'}"
    (project / "mlflow.db").touch()
    assert default_store(notebooks) == f"sqlite:///{project / 'mlflow.db'}"
