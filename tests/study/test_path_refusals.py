"""Every path a command is given, refused cleanly (issue 57, item 4): a file where a folder is
needed, a folder where a file is, a missing parent, a folder that cannot be written, a path
inside the product's own folders: exit 2, one line naming the option and the path, no
traceback, nothing made. And a Ray that cannot start here: exit 1, one paragraph naming the
cause, and no store, experiment or storage folder left.

Each runs the real ``study`` command. A folder that cannot be written is a folder of mode 0555;
as root, whom modes do not stop, the command runs without the capabilities that let root write
anywhere (``setpriv --bounding-set -dac_override,-dac_read_search``), as another user would."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from processkit import kill_processes_mentioning
from studykit import store_with

ROOT = Path(__file__).resolve().parents[2]
STUDY = str(Path(sys.executable).with_name("study"))
TOY = str(ROOT / "search_spaces" / "toy_phase_diagram.yaml")
WITHOUT_ROOTS_POWERS = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]


def study(*argv: str, cwd: Path, unprivileged: bool = False, env: dict | None = None):
    prefix = []
    if unprivileged and os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("as root, a folder's mode stops a write only without root's powers")
        prefix = WITHOUT_ROOTS_POWERS
    return subprocess.run([*prefix, STUDY, *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**os.environ, **(env or {})})  # fmt: skip


def tree(folder: Path) -> dict[str, tuple]:
    """Every path under ``folder`` with its kind, size and modification time."""
    found = {}
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        found[str(path.relative_to(folder))] = (path.is_dir(), info.st_size, info.st_mtime_ns)
    return found


def refused(done, option: str, path: str) -> None:
    """Exit 2, one line naming the option and the path, and what to do (no traceback)."""
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"error: {option} {path!r}: "), lines[0]
    assert "; " in lines[0] and lines[0].endswith("(nothing was written)"), lines[0]


@pytest.fixture
def places(tmp_path) -> Path:
    """A working folder holding a file, a folder and a folder nobody but root may write."""
    (tmp_path / "a-file").write_text("kept\n")
    (tmp_path / "a-folder").mkdir()
    (tmp_path / "read-only").mkdir(mode=0o555)
    (tmp_path / "read-only").chmod(0o555)
    yield tmp_path
    (tmp_path / "read-only").chmod(0o755)


# (command line, the option, the path it names; "{w}" stands for the working folder)
OUTS = {
    "report --out a file": (["report", "x", "--out", "a-file"], "--out", "a-file"),
    "report --out, parent missing": (["report", "x", "--out", "none/r"], "--out", "none/r"),
    "report --out under a file": (["report", "x", "--out", "a-file/r"], "--out", "a-file/r"),
    "next --out a folder": (["next", "digits_tau_batch", "--out", "a-folder"], "--out",
                            "a-folder"),
    "next --out, parent missing": (["next", "digits_tau_batch", "--out", "none/n.yaml"],
                                   "--out", "none/n.yaml"),
    "augment --out a folder": (["augment", "digits_tau_batch", "--out", "a-folder"], "--out",
                               "a-folder"),
    "augment --out, parent missing": (["augment", "digits_tau_batch", "--out", "none/a.yaml"],
                                      "--out", "none/a.yaml"),
    "export --out, parent missing": (["export", "x", "--out", "none/r.parquet"], "--out",
                                     "none/r.parquet"),
    "export --out under a file": (["export", "x", "--out", "a-file/r.parquet"], "--out",
                                  "a-file/r.parquet"),
    "run --storage a file": (["run", TOY, "--smoke", "--storage", "a-file"], "--storage",
                             "{w}/a-file"),
    "run --storage, parent missing": (["run", TOY, "--smoke", "--storage", "none/s"],
                                      "--storage", "{w}/none/s"),
    "run --tracking-uri, folder missing": (
        ["run", TOY, "--smoke", "--tracking-uri", "sqlite:///{w}/none/m.db"], "--tracking-uri",
        "sqlite:///{w}/none/m.db"),
    "run --tracking-uri a folder": (
        ["run", TOY, "--smoke", "--tracking-uri", "sqlite:///{w}/a-folder"], "--tracking-uri",
        "sqlite:///{w}/a-folder"),
    "run --tracking-uri under a file": (
        ["run", TOY, "--smoke", "--tracking-uri", "sqlite:///{w}/a-file/m.db"],
        "--tracking-uri", "sqlite:///{w}/a-file/m.db"),
    "plan --tracking-uri, folder missing": (
        ["plan", TOY, "--tracking-uri", "sqlite:///{w}/none/m.db"], "--tracking-uri",
        "sqlite:///{w}/none/m.db"),
    "plan --tracking-uri a folder": (
        ["plan", TOY, "--tracking-uri", "sqlite:///{w}/a-folder"], "--tracking-uri",
        "sqlite:///{w}/a-folder"),
    "status --tracking-uri, folder missing": (
        ["status", "x", "--tracking-uri", "sqlite:///{w}/none/m.db"], "--tracking-uri",
        "sqlite:///{w}/none/m.db"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(OUTS))
def test_a_path_of_the_wrong_kind_or_without_its_folder_is_refused_naming_it(places, case):
    argv, option, path = OUTS[case]
    argv = [a.replace("{w}", str(places)) for a in argv]
    before = tree(places)
    done = study(*argv, cwd=places)
    refused(done, option, path.replace("{w}", str(places)))
    assert tree(places) == before


UNWRITABLE = {
    "report --out": (["report", "x", "--out", "read-only/r"], "--out", "read-only/r"),
    "report --out itself": (["report", "x", "--out", "read-only"], "--out", "read-only"),
    "next --out": (["next", "digits_tau_batch", "--out", "read-only/n.yaml"], "--out",
                   "read-only/n.yaml"),
    "augment --out": (["augment", "digits_tau_batch", "--out", "read-only/a.yaml"], "--out",
                      "read-only/a.yaml"),
    "export --out": (["export", "x", "--out", "read-only/r.parquet"], "--out",
                     "read-only/r.parquet"),
    "run --storage": (["run", TOY, "--smoke", "--storage", "read-only/s"], "--storage",
                      "{w}/read-only/s"),
    "run --storage itself": (["run", TOY, "--smoke", "--storage", "read-only"], "--storage",
                             "{w}/read-only"),
    "run --tracking-uri, a new store": (
        ["run", TOY, "--smoke", "--tracking-uri", "sqlite:///{w}/read-only/m.db"],
        "--tracking-uri", "sqlite:///{w}/read-only/m.db"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(UNWRITABLE))
def test_a_folder_this_user_cannot_write_is_refused_naming_it(places, case):
    """It used to be a PermissionError's traceback (a new store in such a folder: from the store
    template, with an empty studies/ left behind)."""
    argv, option, path = UNWRITABLE[case]
    argv = [a.replace("{w}", str(places)) for a in argv]
    before = tree(places)
    done = study(*argv, cwd=places, unprivileged=True)
    refused(done, option, path.replace("{w}", str(places)))
    assert "cannot be written by this user" in done.stderr
    assert tree(places) == before


def test_a_report_inside_the_storage_is_refused_naming_it(places):
    (places / "studies").mkdir()
    before = tree(places)
    done = study("report", "--results", "r.parquet", "--out", "studies/mine", cwd=places)
    refused(done, "--out", "studies/mine")
    assert "lies inside" in done.stderr
    assert tree(places) == before


def _download_study(folder: Path, data_root: str) -> str:
    text = (ROOT / "search_spaces" / "toy_phase_diagram.yaml").read_text()
    text = text.replace("  dataset: toy\n", f"  dataset: cifar10\n  download: true\n"
                        f"  data_root: {data_root}\n  image_size: 32\n")  # fmt: skip
    path = folder.parent / f"{folder.name}-download.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("root", "unprivileged"), [("a-file", False), ("none/cifar", False), ("read-only/cifar", True)]
)
def test_a_data_root_to_download_into_that_will_not_take_it_is_refused(places, root, unprivileged):
    """download: true writes the dataset into data_root, inside every trial: a file there, a
    missing parent or a folder this user cannot write is said before the study is recorded."""
    spec = _download_study(places, str(places / root))
    before = tree(places)
    done = study("run", spec, "--smoke", cwd=places, unprivileged=unprivileged)
    refused(done, "trial.data_root", str(places / root))
    assert tree(places) == before


def _experiments(uri: str) -> list[str]:
    with sqlite3.connect(uri.removeprefix("sqlite:///")) as db:
        return sorted(name for (name,) in db.execute("SELECT name FROM experiments"))


def test_a_ray_whose_sockets_would_be_too_long_is_said_and_nothing_is_made(tmp_path):
    """RAY_TMPDIR deep enough that Ray's socket paths pass the kernel's 107 bytes: exit 1, one
    paragraph with the length and the limit; no store, experiment or studies/ (it used to be a
    23-frame traceback and an experiment without runs)."""
    work = tmp_path / "work"
    work.mkdir()
    deep = tmp_path / ("d" * 90)
    deep.mkdir()
    done = study("run", TOY, "--smoke", cwd=work, env={"RAY_TMPDIR": str(deep)})
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Ray did not start on this machine: its socket paths would be" in done.stderr
    assert "over the 107-byte limit" in done.stderr and "RAY_TMPDIR" in done.stderr
    assert list(work.iterdir()) == []


@pytest.fixture
def no_ray():
    """RAY_ADDRESS naming a cluster that is not there: ray.init, asked to start a Ray with its
    CPUs, fails at once, as a start failing for any other reason would. Ray's temp dir is a
    short one of the test's own (pytest's folders are too deep for Ray's sockets)."""
    ray_tmp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    yield {"RAY_ADDRESS": "127.0.0.1:1", "RAY_TMPDIR": ray_tmp}
    kill_processes_mentioning(ray_tmp)
    shutil.rmtree(ray_tmp, ignore_errors=True)


def test_a_ray_that_fails_to_start_leaves_no_experiment_nor_storage(workdir, no_ray):
    """A start that fails after the lease made the study's experiment (here: RAY_ADDRESS set, so
    that ray.init joins a cluster that is not there): exit 1 naming the cause; the experiment
    this run made is removed, the study already in the store stays, and no storage is left."""
    uri = store_with(workdir, "default-digits")
    before, names = tree(workdir), _experiments(uri)
    done = study("run", TOY, "--smoke", "--tracking-uri", uri, cwd=workdir, env=no_ray)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Ray did not start on this machine: RAY_ADDRESS is set (127.0.0.1:1)" in done.stderr
    assert _experiments(uri) == names == ["Default", "default-digits"]
    after = tree(workdir)
    assert set(after) == set(before)  # no studies/, no experiment's folder
    assert {k: v for k, v in after.items() if "mlflow.db" not in k} == {
        k: v for k, v in before.items() if "mlflow.db" not in k}  # fmt: skip


def test_a_ray_that_fails_to_start_in_a_new_store_leaves_no_store(tmp_path, no_ray):
    done = study("run", TOY, "--smoke", cwd=tmp_path, env=no_ray)
    assert done.returncode == 1, done.stderr
    assert "RAY_ADDRESS is set" in done.stderr and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []
