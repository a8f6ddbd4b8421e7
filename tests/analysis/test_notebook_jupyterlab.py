"""The notebook in JupyterLab, opened by the README's command: ``jupyter lab`` from the venv,
started as the README says (headless here, on a port and with a token of the test's own), serves
the notebook; a session's kernel (the venv's Python) runs its cells over the websocket
JupyterLab uses, reads the study the command names, and prints the headline ``study report``
prints; ``POST /api/shutdown`` then ends the server and its kernel."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from jupyterkit import BIN, LEAKS, execute, jupyter_lab, lab_environment, stdout, stop
from recordkit import record_study

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = Path("analysis/notebooks/explore_study.ipynb")
# the README's command ("From a notebook"), run from the repository root on the walk-through's
# study, recorded in its scratch folder
SCRATCH = "/tmp/my-study"
COMMAND = (f"STUDY=my-first-study TRACKING_URI=sqlite:///{SCRATCH}/mlflow.db "
           f".venv/bin/jupyter lab {NOTEBOOK}")  # fmt: skip

pytestmark = pytest.mark.slow  # 40 to 55 s here on 2 cores, under a minute


def readme_command(scratch: Path) -> tuple[dict[str, str], list[str]]:
    """The README's command, its scratch folder ``scratch``: its settings and its arguments."""
    assert COMMAND in (ROOT / "README.md").read_text()
    words = shlex.split(COMMAND.replace(SCRATCH, str(scratch)))
    settings = dict(w.split("=", 1) for w in words[:2])
    assert words[2:4] == [".venv/bin/jupyter", "lab"]
    return settings, words[4:]


def test_jupyter_lab_opens_the_notebook_on_the_study_the_readme_names(tmp_path):
    repository, scratch = tmp_path / "repository", tmp_path / "my-study"
    (repository / NOTEBOOK.parent).mkdir(parents=True)
    shutil.copy(ROOT / NOTEBOOK, repository / NOTEBOOK)
    scratch.mkdir()
    record_study(scratch, name="my-first-study")
    settings, args = readme_command(scratch)
    cells = [cell for cell in json.loads((ROOT / NOTEBOOK).read_text())["cells"]
             if cell["cell_type"] == "code"]  # fmt: skip

    env = lab_environment(tmp_path / "home", **settings)
    with jupyter_lab(args, repository, env, tmp_path / "lab.log") as lab:
        # the README's file argument opens JupyterLab in the notebook's folder, on the notebook
        status, html = lab.page(f"/lab/tree/{NOTEBOOK.name}")
        assert status == 200 and "JupyterLab" in html
        opened = lab.request("GET", f"/api/contents/{NOTEBOOK.name}")
        assert opened["type"] == "notebook"
        assert [c["source"] for c in opened["content"]["cells"] if c["cell_type"] == "code"] == [
            "".join(c["source"]) for c in cells
        ]
        spec = lab.request("GET", "/api/kernelspecs")
        assert spec["default"] == "python3"

        session = lab.request("POST", "/api/sessions", {
            "path": NOTEBOOK.name, "type": "notebook", "name": NOTEBOOK.name,
            "kernel": {"name": "python3"}})  # fmt: skip
        kernel = session["kernel"]["id"]
        (where,) = execute(lab, kernel, ["import os, sys; print(sys.executable, sys.prefix, "
                                         "os.getcwd(), sep='\\n')"])  # fmt: skip
        executable, prefix, cwd = stdout(where).splitlines()
        # the kernel is the venv's Python (the server's own), in the notebook's folder
        assert Path(executable).parent == BIN and prefix == sys.prefix, (executable, prefix)
        assert Path(cwd) == repository / NOTEBOOK.parent
        kernels = lab.processes()
        assert kernels and all(p.is_running() for p in kernels)

        ran = execute(lab, kernel, ["".join(c["source"]) for c in cells])
        errors = [o for outputs in ran for o in outputs if o["output_type"] == "error"]
        assert not errors, "\n".join("\n".join(e["traceback"]) for e in errors)[-3000:]
        assert len(ran) == len(cells)
        assert f"Read study my-first-study from {settings['TRACKING_URI']}\n8 trials" in "".join(
            stdout(outputs) for outputs in ran
        )
        (headline,) = [i for i, c in enumerate(cells)
                       if "headline" in c["metadata"].get("tags", [])]  # fmt: skip
        printed = stdout(ran[headline]).strip()
        assert printed.startswith("my-first-study varied temperature")
        assert len([o for outputs in ran for o in outputs
                    if "image/png" in o.get("data", {})]) >= 4  # fmt: skip

        kernels = lab.processes()
        assert stop(lab), lab.logged()[-3000:]  # POST /api/shutdown alone ended it all
    assert lab.process.returncode is not None
    assert not [p.pid for p in kernels if p.is_running()]

    report = subprocess.run(
        [str(BIN / "study"), "report", "my-first-study", "--out", str(tmp_path / "report"),
         "--json", "--no-figures"],  # the words are compared
        cwd=scratch, env={k: v for k, v in os.environ.items() if k not in LEAKS},
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr[-3000:]
    assert printed == "\n".join(json.loads(report.stdout)["headline"]["lines"])
    assert (repository / NOTEBOOK).read_bytes() == (ROOT / NOTEBOOK).read_bytes()  # unsaved
