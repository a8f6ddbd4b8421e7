"""study.paths, study.leftovers and the words of a Ray that did not start, in-process: each
path check's refusal (the option, the path, the fix), what passes, and what a failed start
removes (only what it made)."""

from __future__ import annotations

import os

import pytest
from studykit import store_with

from search_spaces.spec import StudyError
from study import paths
from study.leftovers import Leftovers
from trainables.config import TrialConfig


@pytest.fixture
def there(tmp_path):
    (tmp_path / "f").write_text("x")
    (tmp_path / "d").mkdir()
    os.mkfifo(tmp_path / "fifo")
    return tmp_path


def test_a_new_file_may_be_new_or_replace_a_file_in_a_folder_there(there):
    assert paths.new_file("--out", there / "new.yaml") == there / "new.yaml"
    assert paths.new_file("--out", there / "f") == there / "f"
    assert not (there / "new.yaml").exists()  # checked, not made


@pytest.mark.parametrize(
    ("name", "said"),
    [("d", "is a folder, not a file; name a file in it, e.g. --out "),
     ("fifo", "is not a regular file"),
     ("none/x.yaml", "its folder '{w}/none' does not exist; make it first (mkdir -p {w}/none)"),
     ("f/x.yaml", "'{w}/f' is a file, not a folder")],
)  # fmt: skip
def test_a_new_file_that_cannot_be_is_refused_naming_option_path_and_fix(there, name, said):
    with pytest.raises(StudyError) as refused:
        paths.new_file("--out", there / name)
    message = str(refused.value)
    assert message.startswith(f"--out {str(there / name)!r}: ")
    assert said.replace("{w}", str(there)) in message
    assert message.endswith("(nothing was written)")


def test_a_folder_to_write_into_may_be_there_or_made_in_one_there(there):
    assert paths.writable_folder("--out", there / "d") == there / "d"
    assert paths.writable_folder("--out", there / "new") == there / "new"
    assert not (there / "new").exists()


@pytest.mark.parametrize(
    ("name", "said"),
    [("f", "is a file, not a folder; give a folder (one that does not exist yet is made)"),
     ("fifo", "is a file, not a folder"),
     ("none/r", "its folder '{w}/none' does not exist")],
)  # fmt: skip
def test_a_folder_that_cannot_be_is_refused(there, name, said):
    with pytest.raises(StudyError, match=r"^--storage ") as refused:
        paths.writable_folder("--storage", there / name)
    assert said.replace("{w}", str(there)) in str(refused.value)


def test_a_folder_the_kernel_will_not_let_this_user_write_is_refused(there, monkeypatch):
    """Asked of the kernel: as root a mode does not stop a write, so the answer is faked."""
    monkeypatch.setattr(paths.os, "access", lambda path, mode: False)
    for check, where in ((paths.writable_folder, there / "d"), (paths.new_file, there / "d/x")):
        with pytest.raises(StudyError, match=r"cannot be written by this user; give a folder"):
            check("--out", where)


def test_a_path_below_a_folder_that_cannot_be_searched_is_refused(there, monkeypatch):
    def denied(self, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(paths.Path, "stat", denied)
    with pytest.raises(StudyError, match=r"cannot be reached by this user"):
        paths.new_file("--out", there / "d" / "x")


def test_a_store_file_is_checked_where_it_lies(there, monkeypatch):
    paths.store_file(f"sqlite:///{there}/new.db", writing=True)
    paths.store_file("http://localhost:1", writing=True)  # a server checks its own
    with pytest.raises(StudyError, match=r"is a folder; name the store's file in it, e\.g\."):
        paths.store_file(f"sqlite:///{there}/d", writing=False)
    with pytest.raises(StudyError, match=r"folder '.*/none' does not exist; make it first"):
        paths.store_file(f"sqlite:///{there}/none/m.db", writing=False)
    with pytest.raises(StudyError, match=r"/f' is a file, not a folder"):
        paths.store_file(f"sqlite:///{there}/f/m.db", writing=False)
    monkeypatch.setattr(paths.os, "access", lambda path, mode: False)
    paths.store_file(f"sqlite:///{there}/new.db", writing=False)  # only read: it may be so
    with pytest.raises(StudyError, match=r"cannot be written by this user \(the store and its"):
        paths.store_file(f"sqlite:///{there}/new.db", writing=True)


def test_a_data_root_is_checked_only_where_the_trial_downloads_into_it(there):
    reads = TrialConfig(dataset="cifar10", data_root=str(there / "f"))
    paths.download_folder(reads)  # a folder only read: trainables.sources.check_data's
    paths.download_folder(TrialConfig(dataset="cifar10", data_root=str(there / "new"),
                                      download=True))  # fmt: skip
    with pytest.raises(StudyError, match=r"^trial\.data_root .*is a file, not a folder"):
        paths.download_folder(TrialConfig(dataset="cifar10", data_root=str(there / "f"),
                                          download=True))  # fmt: skip


def test_a_socket_path_over_the_kernels_limit_is_said_with_its_length():
    from study.local_ray import SOCKET_PATH_LIMIT, ray_socket_problem

    assert ray_socket_problem("/tmp/ray") is None
    problem = ray_socket_problem("/tmp/" + "x" * 80)
    assert f"over the {SOCKET_PATH_LIMIT}-byte limit" in problem
    assert "/sockets/plasma_store" in problem and "RAY_TMPDIR" in problem


def test_a_local_ray_that_fails_to_start_is_one_paragraph_naming_the_cause(monkeypatch):
    from study.local_ray import RayStartError, ray_start_explained

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(RayStartError) as failed, ray_start_explained(None):
        raise TimeoutError("Timed out after 30 seconds while waiting for node to startup.")
    words = str(failed.value)
    assert words.startswith("Ray did not start on this machine: it did not come up in time")
    assert "session_latest/logs" in words and "\n" not in words
    with pytest.raises(StudyError), ray_start_explained(None):  # a refusal stays a refusal
        raise StudyError("--storage: no")
    with pytest.raises(ConnectionError), ray_start_explained("10.0.0.1:6379"):  # a cluster's own
        raise ConnectionError("no cluster")


def test_what_a_failed_start_made_is_removed_and_nothing_else(workdir):
    from study.record import StudyRecord

    uri = store_with(workdir, "kept")
    made = Leftovers.before(uri, "new", None)
    assert made.new_experiment and not made.new_store
    assert made.new_study_folder == workdir / "studies" / "new"
    StudyRecord(uri, "new", workdir / "studies" / "mlartifacts")  # as the lease makes it
    (workdir / "studies" / "new").mkdir(parents=True)
    (workdir / "studies" / "new" / "driver.lock").write_text("{}")
    made.remove()
    from analysis.reading.record import find_experiment
    from analysis.reading.store import read_client

    assert find_experiment(read_client(uri), "new") is None  # gone for good: the name is free
    assert find_experiment(read_client(uri), "kept") is not None
    assert not (workdir / "studies").exists()
    Leftovers.before(uri, "kept", None).remove()  # it was there before: it stays
    assert find_experiment(read_client(uri), "kept") is not None


def test_a_new_store_made_by_a_failed_start_is_removed_unless_another_study_came(workdir):
    from study.record import StudyRecord

    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    made = Leftovers.before(uri, "new", None)
    StudyRecord(uri, "new", workdir / "studies" / "mlartifacts")
    made.remove()
    assert not (workdir / "mlflow.db").exists()
    # a second store (MLflow's client keeps the first one's connection in this process)
    uri = f"sqlite:///{workdir / 'shared.db'}"
    made = Leftovers.before(uri, "new", None)
    StudyRecord(uri, "new", workdir / "studies" / "mlartifacts")
    StudyRecord(uri, "other", workdir / "studies" / "mlartifacts")  # came meanwhile
    made.remove()
    assert (workdir / "shared.db").exists()
