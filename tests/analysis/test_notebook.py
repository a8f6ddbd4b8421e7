"""The notebook runs where it lives: executed with ``jupyter nbconvert`` from its
own folder, as CI runs it, in a copy of the repository's layout whose root holds the study's
store. It finds that store the way the CLI does, says which store it read, prints the report's
own words for the response it shows, lists the studies the store holds when a name is wrong,
names the store it looked for when there is none, and writes nothing beside itself."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from recordkit import NAME, record_study

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "analysis" / "notebooks" / "explore_study.ipynb"
BIN = Path(sys.executable).parent
RESPONSE = "probe/knn_top1_h"
# what selects the store or the study: none of it may leak in from the shell running the tests
SETTINGS = ("MLFLOW_TRACKING_URI", "TRACKING_URI", "STUDY", "STUDY_RESULTS")
ANSI = re.compile(r"\x1b\[[0-9;]*m")

pytestmark = pytest.mark.slow


def layout(root: Path) -> Path:
    """``root`` laid out as the repository: the notebook in analysis/notebooks (returned)."""
    folder = root / "analysis" / "notebooks"
    folder.mkdir(parents=True)
    shutil.copy(NOTEBOOK, folder)
    return folder


def files(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*")}


def execute(folder: Path, out: Path, **settings: str) -> subprocess.CompletedProcess:
    """``jupyter nbconvert --to notebook --execute`` in ``folder``, the executed copy in ``out``."""
    env = {k: v for k, v in os.environ.items() if k not in SETTINGS} | settings
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(
        [str(BIN / "jupyter"), "nbconvert", "--to", "notebook", "--execute", NOTEBOOK.name,
         "--output-dir", str(out), "--ExecutePreprocessor.timeout=300"],
        cwd=folder, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout,
                                       ANSI.sub("", done.stderr))  # fmt: skip


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> Path:
    """A finished study in the store at the root of a repository-like folder, as ``study run``
    at the repository's root leaves it."""
    root = tmp_path_factory.mktemp("repository")
    record_study(root)
    layout(root)
    return root


def test_the_notebook_reads_the_repositorys_store_from_its_own_folder(repository, tmp_path):
    folder = repository / "analysis" / "notebooks"
    before = files(repository)
    done = execute(folder, tmp_path / "out")
    assert done.returncode == 0, done.stderr[-3000:]
    assert files(repository) == before  # no mlflow.db beside the notebook, no output written
    executed = nbformat.read(tmp_path / "out" / NOTEBOOK.name, as_version=4)
    cells = [cell for cell in executed.cells if cell.cell_type == "code"]
    outputs = [o for cell in cells for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert len([o for o in outputs if "image/png" in o.get("data", {})]) >= 4
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert f"Read study {NAME} from sqlite:///{repository / 'mlflow.db'}\n8 trials" in text

    # the notebook and the report agree: `study report` from the same folder finds the same
    # store, and says of the response what the notebook printed, word for word
    (shown,) = [cell for cell in cells if "summary" in cell.metadata.get("tags", [])]
    printed = "".join(o.text for o in shown.outputs if o.output_type == "stream").strip()
    report = subprocess.run(
        [str(BIN / "study"), "report", NAME, "--out", str(tmp_path / "report"), "--json",
         "--no-figures"],  # the words are compared; drawing the figures took most of its time
        cwd=folder, env={k: v for k, v in os.environ.items() if k not in SETTINGS},
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr[-3000:]
    summary = json.loads(report.stdout)["responses"][RESPONSE]["summary"]
    assert printed == summary
    assert "Block term: replicate is modelled as a block" in printed
    assert "Predicted optimum in the design region: temperature = 0.1" in printed
    assert not (folder / "mlflow.db").exists()


def test_a_wrong_name_stops_the_notebook_with_the_studies_the_store_holds(repository, tmp_path):
    folder = repository / "analysis" / "notebooks"
    before = files(repository)
    done = execute(folder, tmp_path / "out", STUDY="default-digit")
    assert done.returncode != 0
    assert (f"LookupError: no study named 'default-digit' in sqlite:///{repository / 'mlflow.db'}"
            f"; did you mean '{NAME}'? It holds: {NAME}") in done.stderr  # fmt: skip
    assert files(repository) == before


def test_without_a_store_the_notebook_names_the_one_it_looked_for_and_creates_none(tmp_path):
    folder = layout(tmp_path / "clone")
    done = execute(folder, tmp_path / "out")
    assert done.returncode != 0
    assert (f"no study named '{NAME}': there is no MLflow store at "
            f"sqlite:///{folder / 'mlflow.db'} (nothing was created)") in done.stderr  # fmt: skip
    assert files(tmp_path / "clone") == {Path("analysis"), Path("analysis/notebooks"),
                                         Path("analysis/notebooks") / NOTEBOOK.name}  # fmt: skip


def test_a_named_store_wins(repository, tmp_path):
    """TRACKING_URI names the store, wherever the notebook runs."""
    folder = layout(tmp_path / "elsewhere")
    uri = f"sqlite:///{repository / 'mlflow.db'}"
    done = execute(folder, tmp_path / "out", TRACKING_URI=uri, STUDY="nope")
    assert done.returncode != 0
    assert f"no study named 'nope' in {uri}" in done.stderr and f"It holds: {NAME}" in done.stderr


def test_the_notebook_and_the_report_agree_where_the_model_does_not_beat_the_mean(tmp_path):
    """A study whose target's model does not beat the mean: the report draws no contour of it
    and names no optimum; the notebook, which reads the same analysis, draws none either, and
    prints the report's headline word for word (its best point, selected among the points, and
    where it stands)."""

    def null(u, v, replicate, i):  # nothing moves the target: noise alone
        noise = (0.004, -0.003, -0.004, 0.003, 0.002, -0.002, 0.001, -0.001)[i % 8]
        return {RESPONSE: 0.9 + noise, "z/align": 0.2 + 0.1 * u + noise,
                "z/uniform": -3.4 + 0.1 * v - noise}  # fmt: skip

    root = tmp_path / "repository"
    root.mkdir()
    record_study(root, truth=null)
    folder = layout(root)
    done = execute(folder, tmp_path / "out")
    assert done.returncode == 0, done.stderr[-3000:]
    executed = nbformat.read(tmp_path / "out" / NOTEBOOK.name, as_version=4)
    cells = [cell for cell in executed.cells if cell.cell_type == "code"]
    text = "".join(o.get("text", "") for cell in cells for o in cell.outputs
                   if o.output_type == "stream")  # fmt: skip
    (headline,) = [cell for cell in cells if "headline" in cell.metadata.get("tags", [])]
    printed = "".join(o.text for o in headline.outputs if o.output_type == "stream").strip()
    report = subprocess.run(
        [str(BIN / "study"), "report", NAME, "--out", str(tmp_path / "report"), "--json"],
        cwd=folder, env={k: v for k, v in os.environ.items() if k not in SETTINGS},
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr[-3000:]
    summary = json.loads(report.stdout)
    assert printed == "\n".join(summary["headline"]["lines"])
    assert summary["responses"][RESPONSE]["beats_mean"] is False
    drawn = {p.stem for p in (tmp_path / "report" / "figures").glob("*.png")}
    assert not [n for n in drawn if n.startswith("contours_probe_knn_top1_h")]
    assert "contours_probe_knn_top1_h" not in text  # the notebook lists the figures it drew
    assert "contours_z_align" in text and any(n.startswith("contours_z_align") for n in drawn)
