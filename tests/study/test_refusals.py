"""Refused before anything runs, naming the option or the field: a concurrency below one, a
Latin hypercube of one sample, an export to a place that cannot take it, and a results file
that is not a study's export or places a finished trial at no design point."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from resultskit import planted
from s3kit import s3_server  # noqa: F401
from studykit import store_with
from typer.testing import CliRunner

from analysis.reading.record import rows_table
from search_spaces.spec import StudyError, load_spec, parse_spec
from study.cli import app

ROOT = Path(__file__).resolve().parents[2]


def invoke(*argv: str):
    return CliRunner().invoke(app, list(argv))


@pytest.mark.parametrize("value", ["0", "-1"])
def test_a_concurrency_below_one_is_refused_naming_the_option(workdir, value):
    done = invoke("run", "--smoke", "--max-concurrent", value)
    assert done.exit_code == 2
    assert "--max-concurrent" in done.output and "1" in done.output
    assert list(workdir.iterdir()) == []  # nothing recorded, nothing started


def test_a_latin_hypercube_of_one_sample_is_refused_naming_the_field():
    data = load_spec(None).canonical() | {"design": {"kind": "latin_hypercube", "samples": 1}}
    with pytest.raises(StudyError, match=r"design\.samples: a latin_hypercube needs at least 2"):
        parse_spec(data)
    data["design"]["samples"] = 2
    assert parse_spec(data).design.samples == 2


def test_an_export_to_a_folder_is_refused_naming_out(workdir):
    uri = store_with(workdir, "default-digits")
    (workdir / "there").mkdir()
    done = invoke("export", "default-digits", "--out", str(workdir / "there"),
                  "--tracking-uri", uri)  # fmt: skip
    assert done.exit_code == 2, done.output
    assert f"--out {workdir / 'there'}: cannot write the results there (a folder" in done.output
    assert list((workdir / "there").iterdir()) == []


def test_an_export_to_a_missing_bucket_is_refused_naming_out(workdir, s3_server):  # noqa: F811
    uri = store_with(workdir, "default-digits")
    done = invoke("export", "default-digits", "--out", "s3://no-such-bucket/x.parquet",
                  "--tracking-uri", uri)  # fmt: skip
    assert done.exit_code == 2, done.output
    assert "--out s3://no-such-bucket/x.parquet: cannot write the results there" in done.output
    assert "Traceback" not in done.output


def _results(path, df: pd.DataFrame) -> str:
    meta = {k: v if isinstance(v, str) else json.dumps(v) for k, v in df.attrs.items()}
    pq.write_table(rows_table(df.to_dict("records"), meta), path)
    return str(path)


def test_a_results_file_resaved_by_pandas_is_refused(workdir):
    written = _results(workdir / "results.parquet", planted(-0.02))
    pd.read_parquet(written).to_parquet(workdir / "resaved.parquet")  # the metadata is lost
    done = invoke("report", "--results", str(workdir / "resaved.parquet"))
    assert done.exit_code == 2
    assert "not a study's results export: its metadata" in done.output
    assert "study export STUDY --out FILE" in done.output
    assert not (workdir / "studies").exists()


def test_a_finished_trial_without_a_factor_value_is_refused_naming_both(workdir):
    df = planted(-0.02)
    df.loc[3, "batch_size"] = None
    key = f"{df.loc[3, 'point_id']}-r{df.loc[3, 'replicate']}"
    done = invoke("report", "--results", _results(workdir / "results.parquet", df))
    assert done.exit_code == 2
    assert f"factor 'batch_size' has no value for finished trial(s) {key}" in done.output
    assert "NaN to integer" not in done.output


@pytest.fixture(scope="module")
def not_stores(tmp_path_factory) -> dict[str, Path]:
    """Files a --tracking-uri may name that are no store this MLflow reads, built once: an
    Optuna storage (SQLite, other tables) and an MLflow store of an older schema version."""
    import sqlite3

    import optuna

    from study.record import StudyRecord

    folder = tmp_path_factory.mktemp("not-stores")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    optuna.create_study(storage=f"sqlite:///{folder / 'optuna.db'}", study_name="tuning")
    StudyRecord(f"sqlite:///{folder / 'old.db'}", "default-digits")
    db = sqlite3.connect(folder / "old.db")
    with db:  # MLflow 1.x's first schema revision
        db.execute("UPDATE alembic_version SET version_num = '451aebb31d03'")
    # an older MLflow's store is one file in rollback mode (this product's are in WAL mode, with
    # the latest writes in the -wal file until the store is closed): a copy of it, taken whole
    # through SQLite, then out of WAL while nothing else has it open
    old = sqlite3.connect(folder / "older.db")
    db.backup(old)
    db.close()
    old.execute("PRAGMA journal_mode=DELETE")
    old.close()
    return {"an Optuna storage": folder / "optuna.db",
            "an older MLflow's store": folder / "older.db"}  # fmt: skip


STORES = {
    "a text file": "is not an SQLite database",
    "a folder": "is a folder; name the store's file in it",
    "an Optuna storage": "is an SQLite database but not an MLflow store (its tables: ",
    "an older MLflow's store": "the store's schema is version 451aebb31d03, and MLflow ",
}


@pytest.mark.parametrize(
    "argv",
    [
        ("run", "search_spaces/toy_phase_diagram.yaml", "--smoke"),
        ("status", "default-digits"),
        ("export", "default-digits", "--out", "x.parquet"),
        ("report", "default-digits"),
        ("power", "default-digits", "--metric", "z/align", "--effect", "1"),
        ("list",),
    ],
    ids=["run", "status", "export", "report", "power", "list"],
)
@pytest.mark.parametrize("store", list(STORES))
def test_a_tracking_uri_that_is_no_store_of_this_mlflow_is_refused_naming_it(
    workdir, not_stores, argv, store
):
    """A --tracking-uri naming a file of something else, a folder, an SQLite database of
    another program or a store of another MLflow version is refused with exit 2 before
    anything is read or written. It used to end in a traceback (exit 1), and MLflow wrote its
    own tables into the Optuna storage even for a command that only reads."""
    path = workdir / "store.db"
    if store == "a folder":
        path.mkdir()
    elif store == "a text file":
        path.write_text("trial,accuracy\n")
    else:
        shutil.copyfile(not_stores[store], path)
    before = None if path.is_dir() else path.read_bytes()
    uri = f"sqlite:///{path}"
    argv = [str(ROOT / a) if a.endswith(".yaml") else a for a in argv]
    done = invoke(*argv, "--tracking-uri", uri)
    assert done.exit_code == 2, done.output
    assert f"--tracking-uri {uri!r}: " in done.output
    assert STORES[store] in " ".join(done.output.split())
    assert "Traceback" not in done.output
    assert sorted(p.name for p in workdir.iterdir()) == ["store.db"]
    assert path.is_dir() or path.read_bytes() == before


def test_a_notebook_reading_a_file_that_is_no_store_is_told_why_and_it_stays_as_it_was(
    workdir, not_stores
):
    from analysis.reading.load import load_history, load_study, recorded_studies

    for store, path in not_stores.items():
        before = path.read_bytes()
        uri = f"sqlite:///{path}"
        reads = ((load_study, ("default-digits", uri)), (load_history, ("default-digits", uri)),
                 (recorded_studies, (uri,)))  # fmt: skip
        for read, args in reads:
            with pytest.raises(ValueError, match=re.escape(STORES[store])):
                read(*args)
        assert path.read_bytes() == before


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda d: d / "missing.parquet", "missing.parquet: no such file"),
        (
            lambda d: (d / "r.csv").write_text("a,b\n1,2\n") and d / "r.csv",
            "r.csv: not a Parquet file (Could not open Parquet input source",
        ),
        (lambda d: (d / "folder").mkdir() or d / "folder", "folder: a folder, not a results"),
    ],
)
def test_report_results_that_are_no_parquet_export_are_refused_naming_the_file(
    tmp_path, make, said
):
    """study report --results on a missing file, a CSV or a folder: exit 2, the file named, no
    traceback, nothing written."""
    import subprocess
    import sys

    path = make(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    study = str(Path(sys.executable).with_name("study"))
    done = subprocess.run([study, "report", "--results", str(path), "--out", "report"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before
