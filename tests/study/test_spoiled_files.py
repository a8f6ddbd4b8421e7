"""Every file the product reads back, spoiled (truncated, overwritten with garbage, deleted):
each is named with what was done instead, and nothing is lost. Real ``study`` CLI subprocesses on
a real MLflow store (a study recorded in a second by tests/kits/recordkit.py where no training is
needed; a tiny real study, interrupted, for a trial's checkpoints)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from recordkit import NAME, record_study
from studykit import STUDY, child_runs

from analysis.reading.load import load_outcomes

HELD_OUT = 200  # items each planted trial's outcomes cover


def spoil(path: Path, how: str) -> None:
    """Truncate ``path`` to half, overwrite it with garbage bytes, or delete it."""
    if how == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif how == "garbage":
        path.write_bytes(b"\x00\xffnot what was written\n" * 40)
    else:
        path.unlink()


def study_cli(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([STUDY, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def trial_outcomes_file(uri: str, key: str) -> tuple[str, Path]:
    """(run id, its outcomes file) of the planted trial ``key``."""
    (run,) = [r for r in child_runs(uri, NAME) if r.data.tags["study.trial_key"] == key]
    folder = Path(run.info.artifact_uri.removeprefix("file://"))
    return run.info.run_id, folder / "evidence" / "outcomes.parquet"


@pytest.mark.parametrize("how", ["truncated", "garbage", "deleted"])
def test_a_spoiled_outcomes_file_is_named_and_the_best_point_keeps_its_line(tmp_path, how):
    uri = record_study(tmp_path, outcomes=HELD_OUT)
    # a replicate of the best point (p001, temperature 0.1 and batch size 256): its interval
    # can no longer count the items, and must say so rather than vanish
    run_id, victim = trial_outcomes_file(uri, "p001-r1")
    spoil(victim, how)

    out = tmp_path / "out"
    done = study_cli("report", NAME, "--no-figures", "--tracking-uri", uri, "--out", str(out),
                     cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    problem = "are missing" if how == "deleted" else "cannot be read"
    best = next(line for line in done.stdout.splitlines() if line.startswith("Highest"))
    assert "observed at p001" in best and "95% interval" in best
    assert f"counting seeds only (the per-item outcomes of p001-r1 {problem})" in best
    assert f"Note: The per-item outcomes of p001-r1 ({victim}) {problem}" in done.stdout

    report = json.loads((out / "report.json").read_text())
    (unread,) = report["unread_files"]
    assert (unread["system"], unread["run_id"], unread["file"]) == ("p001-r1", run_id, str(victim))
    assert (unread["problem"] == "missing") == (how == "deleted")
    assert report["best_point"]["point_id"] == "p001" and report["best_point"]["ci_low"]
    assert report["headline"]["notes"] and str(victim) in report["headline"]["notes"][0]
    assert str(victim) in (out / "report.html").read_text()
    parent = next(r for r in MlflowClient(uri).search_runs(
        [MlflowClient(uri).get_experiment_by_name(NAME).experiment_id],
        filter_string="tags.`study.role` = 'parent'"))  # fmt: skip
    assert "p001-r1" in parent.data.tags["mlflow.note.content"]
    # the other seven trials' outcomes are still read and used
    found = load_outcomes(NAME, uri)
    assert len(found.trials) == 7 and run_id not in found.trials
    assert report["measurement"]["items"] == HELD_OUT

