"""study.private: a folder at a shared path is used only when this user made it alone; files in
it are written without following a planted link and read only when regular (issue 57, item 1).
A second user is faked by ``os.chown`` to nobody (65534) in a scratch folder, as root."""

from __future__ import annotations

import os
import stat
import threading
import time

import pytest

from study.private import (
    UntrustedPathError,
    distrust,
    private_folder,
    process_start,
    read_regular,
    shared_or_private,
    write_private,
)

NOBODY = 65534


def _as_nobody(path) -> None:
    if os.getuid() != 0:
        pytest.skip("only root can give a path another owner here")
    os.chown(path, NOBODY, NOBODY, follow_symlinks=False)


def test_a_new_folder_is_0700_whatever_the_umask(tmp_path):
    old = os.umask(0o002)
    try:
        made = private_folder(tmp_path / "mine")
    finally:
        os.umask(old)
    assert stat.S_IMODE(made.stat().st_mode) == 0o700 and distrust(made) is None


@pytest.mark.parametrize(
    ("plant", "said"),
    [
        ("other-owner", "owned by uid 65534"),
        ("group-writable", "its group or others may write in it (mode 0770)"),
        ("other-writable", "(mode 1777)"),
        ("symlink", "it is a symbolic link"),
        ("file", "it is not a folder"),
        ("fifo", "it is not a folder"),
    ],
)
def test_an_existing_path_not_this_users_alone_is_refused(tmp_path, plant, said):
    path = tmp_path / "shared"
    if plant == "symlink":
        (tmp_path / "target").mkdir(mode=0o700)
        path.symlink_to(tmp_path / "target")
    elif plant == "file":
        path.write_text("")
    elif plant == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir(mode=0o700)
        path.chmod({"group-writable": 0o770, "other-writable": 0o1777}.get(plant, 0o700))
        if plant == "other-owner":
            _as_nobody(path)
    with pytest.raises(UntrustedPathError) as refused:
        private_folder(path)
    assert str(path) in str(refused.value) and said in str(refused.value)


def test_an_untrusted_folder_falls_back_to_a_private_one_said_once(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    planted = tmp_path / "planted"
    planted.mkdir(mode=0o777)
    planted.chmod(0o777)
    first = shared_or_private(planted, "fallback-test", "the test's folder")
    second = shared_or_private(planted, "fallback-test", "the test's folder")
    assert first == second != planted and distrust(first) is None
    said = capsys.readouterr().err
    assert said.count(f"the test's folder: {planted}: not used") == 1  # once per process
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    assert shared_or_private(tmp_path / "x" / "y", "fallback-test", "another") == (
        runtime / "fallback-test"
    )  # a missing parent: the runtime folder, when there is one


def test_a_write_never_follows_a_planted_symlink(tmp_path):
    folder = private_folder(tmp_path / "mine")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (folder / "note.json").symlink_to(victim)
    for n in range(64):  # every scratch name a planter could guess, too
        (folder / f".note.json.{os.getpid()}.{n}").symlink_to(victim)
    write_private(folder, "note.json", b"{}")
    assert victim.read_text() == "keep me"
    assert not (folder / "note.json").is_symlink() and (folder / "note.json").read_bytes() == b"{}"
    assert stat.S_IMODE((folder / "note.json").stat().st_mode) == 0o600


def test_a_read_takes_only_a_regular_file_and_never_blocks(tmp_path):
    regular = tmp_path / "regular"
    regular.write_bytes(b"x" * 10)
    assert read_regular(regular) == b"x" * 10
    assert read_regular(regular, limit=9) is None  # too big
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link"
    link.symlink_to(regular)
    result: dict = {}
    reader = threading.Thread(
        target=lambda: result.update(
            fifo=read_regular(fifo), link=read_regular(link), missing=read_regular(tmp_path / "no")
        )
    )
    reader.start()
    reader.join(5)
    assert not reader.is_alive(), "a FIFO made the reader wait"
    assert result == {"fifo": None, "link": None, "missing": None}


def test_a_process_is_named_by_its_pid_and_its_start(tmp_path):
    import subprocess

    mine = process_start(os.getpid())
    assert isinstance(mine, int) and mine > 0
    child = subprocess.Popen(["sleep", "30"])
    try:
        started = process_start(child.pid)
        assert started is not None and started >= mine
        time.sleep(0.05)
        assert process_start(child.pid) == started  # the same process, the same start
    finally:
        child.kill()
        child.wait()
    assert process_start(child.pid) is None
