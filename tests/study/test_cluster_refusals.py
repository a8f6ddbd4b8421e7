"""A cluster's own failures, refused cleanly: ``study run --address`` reaches the cluster before
anything is recorded, and a cluster lost mid-study ends every run KILLED with the command that
resumes it.

Every refusal: exit 2, no traceback, the option named with its fix, nothing created (no store,
no storage folder), within 30 s. The clusters are real Ray nodes on 127.0.0.1 with token
authentication on (tests/kits/raynodes.py); a driver runs as its own process, as a user runs it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from raynodes import free_port, token_cluster
from studykit import STUDY, child_runs, parent_runs, wait_for, write_spec

from study.cluster import LOST_AFTER_S

TOY = {"temperature": {"levels": [0.1, 0.5], "scale": "log"}}


def run_refused(
    workdir: Path, address: str, env: dict
) -> tuple[subprocess.CompletedProcess, float]:
    spec = write_spec(workdir / "toy.yaml", "cluster-toy", factors=TOY)
    started = time.monotonic()
    done = subprocess.run(
        [STUDY, "run", str(spec), "--address", address, "--no-figures",
         "--tracking-uri", f"sqlite:///{workdir / 'mlflow.db'}",
         "--storage", str(workdir / "studies")],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return done, time.monotonic() - started


def assert_refused(done, seconds: float, workdir: Path, *words: str) -> None:
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    assert "Traceback" not in out
    assert "--address" in out
    for word in words:
        assert word in out, out
    assert seconds < 30, f"refused after {seconds:.1f} s"
    assert not (workdir / "mlflow.db").exists()  # nothing recorded
    assert not (workdir / "studies").exists()  # nothing stored


@pytest.fixture
def driver_env(tmp_path, monkeypatch):
    """A driver's environment on a node where no cluster was started: its own empty Ray temp
    folder (no record of a `ray start`), no RAY_ADDRESS, no token."""
    import os

    ray_dir = tmp_path / "ray"
    ray_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_ADDRESS", "RAY_AUTH"))}
    return env | {"RAY_TMPDIR": str(ray_dir), "HOME": str(tmp_path)}


def test_an_address_where_nothing_listens_is_refused_at_once(workdir, driver_env):
    port = free_port()
    done, seconds = run_refused(workdir, f"127.0.0.1:{port}", driver_env)
    assert_refused(done, seconds, workdir, f"no Ray cluster answers at 127.0.0.1:{port}",
                   f"ray start --head --port {port}", "leave --address out")  # fmt: skip


def test_a_host_that_does_not_resolve_is_refused_naming_it(workdir, driver_env):
    done, seconds = run_refused(workdir, "no-such-head.invalid:6379", driver_env)
    assert_refused(done, seconds, workdir, "no-such-head.invalid:6379")


@pytest.mark.parametrize("address", ["head-without-port", "head:port", "10.0.0.1:70000"])
def test_an_address_that_is_not_host_and_port_is_refused(workdir, driver_env, address):
    done, seconds = run_refused(workdir, address, driver_env)
    assert_refused(done, seconds, workdir, f"--address {address}: not HOST:PORT")


def test_auto_with_no_cluster_on_this_node_is_refused(workdir, driver_env):
    done, seconds = run_refused(workdir, "auto", driver_env)
    assert_refused(done, seconds, workdir, "--address auto: no Ray cluster runs on this node",
                   "ray start --head")  # fmt: skip


def test_auto_with_a_stale_record_of_a_gone_cluster_is_refused_naming_it(workdir, driver_env):
    gone = f"127.0.0.1:{free_port()}"
    record = Path(driver_env["RAY_TMPDIR"]) / "ray" / "ray_current_cluster"  # what Ray reads
    record.parent.mkdir()
    record.write_text(gone)
    done, seconds = run_refused(workdir, "auto", driver_env)
    assert_refused(done, seconds, workdir, f"no Ray cluster answers at {gone}",
                   "the cluster `ray start` last recorded on this node")  # fmt: skip


@pytest.mark.parametrize("planted", ["another-users", "fifo", "symlink"])
def test_auto_never_reads_a_record_this_user_did_not_write(workdir, driver_env, planted):
    """/tmp/ray is shared: a ray_current_cluster another user wrote names their cluster, not
    this user's; a FIFO there must not make the driver wait (issue 57, item 1)."""
    record = Path(driver_env["RAY_TMPDIR"]) / "ray" / "ray_current_cluster"
    record.parent.mkdir()
    if planted == "fifo":
        os.mkfifo(record)
    elif planted == "symlink":
        (record.parent / "elsewhere").write_text(f"127.0.0.1:{free_port()}")
        record.symlink_to(record.parent / "elsewhere")
    else:
        if os.getuid() != 0:
            pytest.skip("only root can give a file another owner here")
        record.write_text(f"127.0.0.1:{free_port()}")
        os.chown(record, 65534, 65534)
    done, seconds = run_refused(workdir, "auto", driver_env)
    assert_refused(done, seconds, workdir, "--address auto: no Ray cluster runs on this node")


def test_auto_with_ray_address_set_uses_it(workdir, driver_env):
    gone = f"127.0.0.1:{free_port()}"
    done, seconds = run_refused(workdir, "auto", driver_env | {"RAY_ADDRESS": gone})
    assert_refused(done, seconds, workdir, f"RAY_ADDRESS={gone}")


@pytest.fixture
def cluster():
    one = token_cluster(nodes=[{"cpus": 1}])
    yield one
    one.stop()
    shutil.rmtree(one.root, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize("token", ["none", "another"])
def test_a_cluster_that_refuses_the_drivers_token_is_refused(workdir, driver_env, cluster, token):
    env = driver_env
    if token == "another":
        wrong = workdir.parent / "wrong_token"
        wrong.write_text("0" * 64)
        wrong.chmod(0o600)
        env = env | {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(wrong)}
    done, seconds = run_refused(workdir, cluster.address, env)
    assert_refused(done, seconds, workdir, "the cluster refused this driver's token",
                   "RAY_AUTH_TOKEN_PATH=<the head's token file>")  # fmt: skip
    assert "InvalidAuthToken" not in done.stderr  # Ray's own retries are kept off the terminal


@pytest.mark.slow
def test_auto_never_joins_a_ray_that_this_node_did_not_record(workdir, driver_env, cluster):
    """Ray's own ``auto`` falls back to any GCS process on the machine (ray-project/ray#26678,
    #60991): on a shared machine or a laptop, another user's cluster or another study's Ray."""
    done, seconds = run_refused(workdir, "auto", driver_env)
    assert_refused(done, seconds, workdir, "--address auto: no Ray cluster runs on this node")


@pytest.mark.long
def test_a_cluster_lost_mid_study_ends_every_run_killed_with_the_resume_command(
    workdir, cluster
):
    spec = write_spec(workdir / "toy.yaml", "cluster-lost", factors=TOY, replicates=2,
                      trial={"budget_examples": 30720, "eval_marks": 4})  # fmt: skip
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    driver = subprocess.Popen(
        [STUDY, "run", str(spec), "--address", cluster.address, "--no-figures",
         "--tracking-uri", uri, "--storage", str(workdir / "studies")],
        cwd=workdir, env=cluster.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        trials = workdir / "studies" / "cluster-lost" / "trials"
        wait_for(lambda: any(trials.glob("*/checkpoint_*/DONE")), 240,
                 "a trial's first checkpoint", driver)  # fmt: skip
        cluster.kill_head()
        killed_at = time.monotonic()
        _, err = driver.communicate(timeout=LOST_AFTER_S + 45)
        ended_after = time.monotonic() - killed_at
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 1, err
    assert ended_after < LOST_AFTER_S + 30  # well before Ray's own 60 s
    assert f"the Ray cluster at {cluster.address} stopped answering mid-study" in err
    assert f"--address {cluster.address}" in err  # the resume command joins it again
    assert "Traceback" not in err
    runs = child_runs(uri, "cluster-lost") + parent_runs(uri, "cluster-lost")
    statuses = {run.info.status for run in runs}
    assert "RUNNING" not in statuses and "KILLED" in statuses, statuses


# ---- token authentication needs a Ray that has it
def test_pyproject_asks_for_the_first_ray_with_token_authentication():
    import tomllib

    from study.cluster import TOKEN_AUTH_RAY

    config = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    ray = next(d for d in config["project"]["dependencies"] if d.startswith("ray["))
    assert f">={TOKEN_AUTH_RAY.removesuffix('.0')}," in ray


@pytest.mark.parametrize(("mode", "version", "refused"), [
    ("token", "2.51.1", True),    # asked for, and this Ray has none: refused
    ("TOKEN", "2.40.0", True),
    ("token", "2.52.0", False),   # the first Ray with it
    ("token", "2.60.0", False),
    ("disabled", "2.40.0", False),  # not asked for: an old Ray is no matter
    ("", "2.40.0", False),
])  # fmt: skip
def test_token_auth_on_a_ray_without_it_is_refused_naming_both_versions(
    monkeypatch, mode, version, refused
):
    from search_spaces.spec import StudyError
    from study.cluster import check_token_auth_ray

    monkeypatch.setenv("RAY_AUTH_MODE", mode)
    if not refused:
        check_token_auth_ray(version)
        return
    with pytest.raises(StudyError) as said:
        check_token_auth_ray(version)
    assert str(said.value).startswith(
        f"RAY_AUTH_MODE=token: the installed Ray {version} has no token authentication (it "
        "came in Ray 2.52.0)"
    )


def test_a_study_run_asking_for_a_token_of_an_older_ray_exits_2_and_records_nothing(tmp_path):
    """The refusal as a user meets it: the study's own process, with the installed Ray's
    version read as an older one (the one stand-in: this checkout's Ray is new enough)."""
    spec = write_spec(tmp_path / "toy.yaml", "cluster-toy", factors=TOY)
    code = (
        "import sys, importlib.metadata as m\n"
        "real = m.version\n"
        "m.version = lambda name: '2.51.0' if name == 'ray' else real(name)\n"
        "from study.cli import main\n"
        "sys.argv = ['study', 'run', *sys.argv[1:]]\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(spec), "--tracking-uri",
         f"sqlite:///{tmp_path / 'mlflow.db'}", "--storage", str(tmp_path / "studies")],
        cwd=tmp_path, env=dict(os.environ, RAY_AUTH_MODE="token"), capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    assert "RAY_AUTH_MODE=token: the installed Ray 2.51.0 has no token authentication" in (
        done.stderr
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["toy.yaml"]
