"""A command that only reads never writes: ``status``, ``export``, ``report`` and ``power`` of an
unknown study create no store and no experiment, and say which studies the store does hold;
``plan`` with a store present leaves it as it was."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient
from studykit import store_with
from typer.testing import CliRunner

from study.cli import app


def invoke(*argv: str):
    return CliRunner().invoke(app, list(argv))


READERS = {
    "status": ("status", "nope"),
    "export": ("export", "nope", "--out", "x.parquet"),
    "report": ("report", "nope"),
    "power": ("power", "nope", "--metric", "z/align", "--effect", "1"),
}


@pytest.mark.parametrize("argv", list(READERS.values()), ids=list(READERS))
def test_reading_an_unknown_study_where_no_store_is_creates_nothing(workdir, argv):
    done = invoke(*argv)
    assert done.exit_code == 2, done.output
    assert "no study named 'nope': there is no MLflow store at sqlite:///" in done.output
    assert list(workdir.iterdir()) == []  # no mlflow.db, no x.parquet, no report folder


def test_an_unknown_name_lists_the_studies_the_store_holds(workdir):
    uri = store_with(workdir, "default-digits", "toy-phase")
    before = [e.name for e in MlflowClient(uri).search_experiments()]
    for argv in (("status", "default-digit"), ("export", "default-digit", "--out", "x.parquet")):
        done = invoke(*argv, "--tracking-uri", uri)
        assert done.exit_code == 2
        assert "did you mean 'default-digits'?" in done.output
        assert "It holds: default-digits, toy-phase" in done.output
    assert [e.name for e in MlflowClient(uri).search_experiments()] == before
    assert not (workdir / "x.parquet").exists()


def test_plan_with_a_store_present_creates_no_experiment(workdir):
    uri = store_with(workdir, "something-else")
    before = sorted(e.name for e in MlflowClient(uri).search_experiments())
    done = invoke("plan", "toy_phase_diagram", "--tracking-uri", uri)
    assert done.exit_code == 0, done.output
    done = invoke("plan", "toy_phase_diagram")  # the embedded store in the working folder
    assert done.exit_code == 0, done.output
    assert sorted(e.name for e in MlflowClient(uri).search_experiments()) == before


def test_loading_from_a_store_that_is_not_there_creates_none(workdir):
    from analysis.reading.load import load_history, load_study

    for load in (load_study, load_history):
        with pytest.raises(LookupError, match="there is no MLflow store at sqlite:///"):
            load("default-digits")
    assert list(workdir.iterdir()) == []


@pytest.mark.parametrize("argv", [*READERS.values(), ("list",)], ids=[*READERS, "list"])
def test_reading_an_empty_store_file_leaves_it_empty(workdir, argv):
    """An empty file (`touch mlflow.db`) is a store with nothing in it: MLflow would write its
    whole schema into it on opening, so a command that only reads does not open it."""
    (workdir / "mlflow.db").touch()
    done = invoke(*argv, "--tracking-uri", f"sqlite:///{workdir / 'mlflow.db'}")
    assert done.exit_code == (0 if argv == ("list",) else 2), done.output
    assert "there is no MLflow store at sqlite:///" in done.output
    assert [(p.name, p.stat().st_size) for p in workdir.iterdir()] == [("mlflow.db", 0)]


@pytest.mark.parametrize(
    "argv", [("status", "default-digits"), ("list",), ("plan", "toy_phase_diagram")],
    ids=["status", "list", "plan"],
)  # fmt: skip
def test_status_list_and_plan_read_an_embedded_store_without_importing_mlflow(workdir, argv):
    """The commands that answer within a second (benchmarks/commands.py) read the embedded
    store through analysis.reading.sqlite_reader: importing MLflow alone takes seconds."""
    import subprocess
    import sys
    from pathlib import Path

    uri = store_with(workdir, "default-digits")
    code = ("import sys; from typer.testing import CliRunner; from study.cli import app; "
            f"done = CliRunner().invoke(app, {[*argv, '--tracking-uri', uri]!r}); "
            "print(done.exit_code, 'mlflow' in sys.modules, 'torch' in sys.modules)")  # fmt: skip
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert done.stdout.split() == ["0", "False", "False"], done.stderr[-2000:]


def test_a_recorded_study_file_is_checked_against_the_record_without_importing_mlflow(workdir):
    """check_store compares a study file with the one the study first ran (study run's
    preflight, study augment): it reads through analysis.reading.sqlite_reader, and MLflow is only
    imported to show the difference of a file that changed."""
    import subprocess
    import sys
    from pathlib import Path

    uri = store_with(workdir, "default-digits")
    code = ("import sys; from search_spaces.spec import load_spec; "
            "from study.record import check_store; "
            "spec = load_spec(None).model_copy(update={'study': 'default-digits'}); "
            f"print(check_store({uri!r}, 'default-digits', spec), "
            "'mlflow' in sys.modules)")  # fmt: skip
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert done.stdout.split() == ["True", "False"], done.stderr[-2000:]
