"""study.starting on a shared machine (issue 57, item 1): the announcement folder in ``/tmp`` is
used only when this user made it alone, a write never follows a planted link, a planted FIFO
never makes ``study status`` wait, and an announcement is believed only when its pid is the
live process that wrote it (started at the announced moment), for the store status reads.
Each test has a ``/tmp`` of its own (``TMPDIR``), so nothing is planted in the machine's."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

STUDY = str(Path(sys.executable).with_name("study"))
REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "TMPDIR")}
    return env | {"TMPDIR": str(tmp)} | extra


def _folder(tmp_path: Path) -> Path:
    return tmp_path / "tmp" / f"study-drivers-{os.getuid()}"


def _store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


class Driver:
    """A process that announces study ``name`` in ``store`` and lives until stopped."""

    def __init__(self, tmp_path: Path, name: str, store: str, env: dict[str, str]) -> None:
        script = ("import time\nfrom study.starting import announce\n"
                  f"announce({name!r}, {store!r})\nprint('ready', flush=True)\n"
                  "time.sleep(120)\n")  # fmt: skip
        self.process = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, env=env,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True)  # fmt: skip
        assert self.process.stdout.readline().strip() == "ready", self.process.stderr.read()

    def stop(self) -> str:
        self.process.kill()
        return self.process.communicate()[1]


def _status(tmp_path: Path, name: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([STUDY, "status", name], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def _as_nobody(path: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("only root can give a path another owner here")
    os.chown(path, NOBODY, NOBODY, follow_symlinks=False)


def test_the_folder_is_made_0700_under_a_group_umask(tmp_path):
    env = _env(tmp_path)
    old = os.umask(0o002)
    try:
        driver = Driver(tmp_path, "mine", _store(tmp_path), env)
    finally:
        os.umask(old)
    try:
        folder = _folder(tmp_path)
        assert (folder.stat().st_mode & 0o777) == 0o700
        assert ((folder / "mine.json").stat().st_mode & 0o777) == 0o600
        assert _status(tmp_path, "mine", env).stdout.startswith("study mine: starting")
    finally:
        driver.stop()


def test_a_folder_another_user_made_first_is_not_used_and_no_file_is_overwritten(tmp_path):
    """The attack of the issue: another user makes the folder first, with a symlink for every
    scratch name the announcement could use, pointing at a file of the victim's."""
    folder = _folder(tmp_path)
    folder.parent.mkdir()
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    victim = tmp_path / "thesis.tex"
    victim.write_text("years of work")
    for pid in range(os.getpid(), os.getpid() + 2000):
        (folder / f"planted.{pid}.tmp").symlink_to(victim)
    (folder / "planted.json").symlink_to(victim)
    _as_nobody(folder)
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = _env(tmp_path, XDG_RUNTIME_DIR=str(runtime))
    driver = Driver(tmp_path, "planted", _store(tmp_path), env)
    try:
        said = _status(tmp_path, "planted", env)
        assert said.stdout.startswith("study planted: starting"), said  # found where it went
        assert (runtime / "study-drivers" / "planted.json").is_file()
    finally:
        err = driver.stop()
    assert victim.read_text() == "years of work"
    assert f"{folder}: not used, it is owned by uid {NOBODY}" in err  # said, once
    assert err.count("not used") == 1


def test_a_plain_file_at_the_folders_path_is_said_not_silent(tmp_path):
    _folder(tmp_path).parent.mkdir()
    _folder(tmp_path).write_text("")
    env = _env(tmp_path)
    driver = Driver(tmp_path, "blocked", _store(tmp_path), env)
    err = driver.stop()
    assert f"{_folder(tmp_path)}: not used, it is not a folder" in err


def test_a_planted_fifo_never_makes_status_wait(tmp_path):
    """A FIFO where the announcement (or the lease) would be: status answers at once."""
    env = _env(tmp_path)
    folder = _folder(tmp_path)
    folder.mkdir(mode=0o700)
    os.mkfifo(folder / "fifo-study.json")
    lease = tmp_path / "studies" / "fifo-study"
    lease.mkdir(parents=True)
    os.mkfifo(lease / "driver.lock")
    said = _status(tmp_path, "fifo-study", env)  # the timeout (60 s) fails a hang
    assert said.returncode == 2 and "starting" not in said.stdout


@pytest.mark.parametrize("forged", ["no-start", "reused-pid", "other-host", "other-store"])
def test_an_announcement_is_believed_only_from_its_own_live_driver_and_store(tmp_path, forged):
    """A stale announcement whose pid now names another process (its start differs), one of
    another host, or one naming another store is not believed."""
    env = _env(tmp_path)
    folder = _folder(tmp_path)
    folder.mkdir(mode=0o700)
    alive = subprocess.Popen(["sleep", "60"])  # a live process that is no driver
    try:
        from study.private import process_start

        record = {"pid": alive.pid, "started": process_start(alive.pid),
                  "host": socket.gethostname(), "since": 0.0, "cwd": str(tmp_path),
                  "store": _store(tmp_path)}  # fmt: skip
        assert _believed_by_status(tmp_path, folder, record, env)  # the control: believed
        record |= {"no-start": {"started": None}, "reused-pid": {"started": 1},
                   "other-host": {"host": "elsewhere"},
                   "other-store": {"store": f"sqlite:///{tmp_path / 'other' / 'mlflow.db'}"},
                   }[forged]  # fmt: skip
        assert not _believed_by_status(tmp_path, folder, record, env)
    finally:
        alive.kill()
        alive.wait()


def _believed_by_status(tmp_path: Path, folder: Path, record: dict, env: dict) -> bool:
    (folder / "forged.json").write_text(json.dumps(record))
    said = _status(tmp_path, "forged", env)
    return said.stdout.startswith("study forged: starting")
