"""One experiment per study, whatever MLflow's UI did to it (mlflow PR #2357: an experiment
renamed in the UI): a study is found by its recorded identity (the experiment's study.name tag,
or its runs' for a record older than that tag), never recorded twice; a deleted one is refused
with the command that restores it. A real embedded store, renamed and deleted through MLflow's
own API; the study's results planted (tests/kits/recordkit.py), so nothing trains."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from recordkit import record_study

from analysis.reading.load import load_study
from analysis.reading.record import STUDY_TAG

STUDY = str(Path(sys.executable).with_name("study"))


@pytest.fixture
def renamed(tmp_path):
    uri = record_study(tmp_path, "default-digits")
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("default-digits")
    client.rename_experiment(experiment.experiment_id, "my digits (renamed in the UI)")
    return tmp_path, uri, client, experiment.experiment_id


def _experiments(client) -> list:
    return [e for e in client.search_experiments() if e.name != "Default"]


@pytest.mark.parametrize("tagged", [True, False], ids=["tagged", "older-record"])
def test_a_renamed_experiment_is_found_and_used_never_duplicated(renamed, tagged):
    folder, uri, client, eid = renamed
    if not tagged:  # a record made before experiments carried the study's name
        client.delete_experiment_tag(eid, STUDY_TAG)
    df = load_study("default-digits", uri)
    assert len(df) == 8 and set(df["status"]) == {"finished"}
    status = subprocess.run([STUDY, "status", "default-digits", "--tracking-uri", uri],
                            cwd=folder, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert status.returncode == 0, status.stderr
    done = subprocess.run([STUDY, "run", "--tracking-uri", uri, "--no-figures"], cwd=folder,
                          capture_output=True, text=True, timeout=400)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert ("its MLflow experiment (id " + eid + ") is named 'my digits (renamed in the UI)' "
            "now; recording into it") in done.stdout  # fmt: skip
    assert "all 8 trials FINISHED; nothing to run" in done.stdout
    assert [e.experiment_id for e in _experiments(client)] == [eid]  # no second experiment
    assert client.get_experiment(eid).tags[STUDY_TAG] == "default-digits"


def test_a_deleted_experiment_is_refused_with_the_restore_command(renamed):
    folder, uri, client, eid = renamed
    client.delete_experiment(eid)
    done = subprocess.run([STUDY, "run", "--tracking-uri", uri], cwd=folder,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"its MLflow experiment (id {eid}) was deleted" in done.stderr
    assert "experiments restore --experiment-id " + eid in done.stderr
    assert _experiments(client) == []  # nothing recorded: no new experiment either
