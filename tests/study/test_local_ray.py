"""The driver's own Ray: what its trial actors carry, so that they start in its warm workers.

End to end, ``test_a_killed_worker_then_a_killed_driver_and_a_rerun_lose_nothing``
(test_killed_processes.py) checks that a study's first trial ran in a worker Ray started before
the study asked for one, with a variable in the driver's environment that Tune copies into every
actor."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from ray.tune.execution import class_cache

from search_spaces.spec import StudyError
from study import local_ray
from study.local_ray import LOCAL_RAY_TRAIN_SETTINGS, env_vars_to_copy, propagated_env_vars
from trainables.arithmetic import has_avx2

REPO = Path(__file__).resolve().parents[2]
PREEMPTION = "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER"  # set by start_ray before Ray starts


def test_trial_actors_carry_only_the_variables_their_workers_did_not_inherit(
    shared_ray, monkeypatch
):
    names = class_cache.ENV_VARS_TO_PROPAGATE
    assert {PREEMPTION, "AWS_SESSION_TOKEN"} <= names  # what Tune would copy
    monkeypatch.setenv("AWS_SESSION_TOKEN", "set-after-ray-started")
    with propagated_env_vars(env_vars_to_copy(None)):
        copied = class_cache.ENV_VARS_TO_PROPAGATE
        assert "AWS_SESSION_TOKEN" in copied  # the workers lack this value: it goes
        assert PREEMPTION not in copied  # inherited by every worker: an actor needs no env
    assert class_cache.ENV_VARS_TO_PROPAGATE is names  # as Tune had it, afterwards


@pytest.mark.parametrize("ray_is", ["a cluster's", "joined"])
def test_on_a_cluster_or_a_ray_started_elsewhere_its_nodes_are_asked_what_they_lack(
    shared_ray, monkeypatch, ray_is
):
    """Each node is asked for a hash of its own value: one it holds is not copied, one it lacks
    is, unless it is a secret (Ray's runtime-env agent would log it): that is refused."""
    address = "127.0.0.1:6379" if ray_is == "a cluster's" else None
    if ray_is == "joined":  # a Ray not started here: what its workers inherited is unknown
        monkeypatch.setattr(local_ray, "_LOCAL_RAY_ENV", None)
    assert PREEMPTION not in env_vars_to_copy(address)  # the node has it, with this value
    monkeypatch.setenv("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.5")  # the node holds 0.25
    assert "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S" in env_vars_to_copy(address)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "planted-secret-unit")
    with pytest.raises(StudyError, match="AWS_SECRET_ACCESS_KEY") as refused:
        env_vars_to_copy(address)
    assert "planted-secret-unit" not in str(refused.value)


@pytest.mark.slow
def test_a_local_ray_keeps_token_auth_without_its_notice_and_its_workers_get_its_settings(
    ray_tmp, tmp_path
):
    """Ray Train's settings for a local Ray reach its workers (where Train's controller runs);
    a value the user set wins."""
    script = (
        "import os, ray\n"
        "from study.local_ray import LOCAL_RAY_TRAIN_SETTINGS, start_ray\n"
        "from ray._raylet import AuthenticationMode, get_authentication_mode\n"
        "assert start_ray(None)\n"
        "print('token' if get_authentication_mode() == AuthenticationMode.TOKEN else 'off')\n"
        "seen = ray.get(ray.remote(lambda names: [os.environ.get(n) for n in names])"
        ".remote(sorted(LOCAL_RAY_TRAIN_SETTINGS)))\n"
        "print(*seen)\n"
        "print(ray.get(ray.remote(lambda: os.environ.get('MKL_CBWR', '-')).remote()))\n"
        "ray.shutdown()\n"
    )
    env = dict(os.environ, HOME=str(tmp_path))  # a new token is made in this home
    env.pop("MKL_CBWR", None)  # set by trainables.arithmetic as the driver imports it
    env.pop("RAY_AUTH_MODE", None)
    for name in LOCAL_RAY_TRAIN_SETTINGS:
        env.pop(name, None)
    env["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"] = "1.5"  # the user's own
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=300, cwd=Path(__file__).parents[2])  # fmt: skip
    assert done.returncode == 0, done.stderr
    auth, *seen, mkl = done.stdout.split()
    assert mkl == ("AVX2" if has_avx2() else "-")  # one MKL branch in every trial process
    assert auth == "token"  # the security Ray sets up stays
    assert "Token authentication is enabled" not in done.stderr + done.stdout
    assert (tmp_path / ".ray" / "auth_token").is_file()
    expected = LOCAL_RAY_TRAIN_SETTINGS | {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "1.5"}
    assert seen == [expected[n] for n in sorted(expected)]


_WHERE_RAY_WENT = (
    "import ray\n"
    "from study.local_ray import start_ray\n"
    "assert start_ray(None)\n"
    "print(ray._private.worker._global_node.get_temp_dir_path(), flush=True)\n"
    "ray.shutdown()\n"
)


@pytest.mark.slow
@pytest.mark.parametrize("planted", [False, True], ids=["fresh", "planted-by-another-user"])
def test_a_local_ray_keeps_its_temp_dir_in_a_folder_of_this_users_alone(tmp_path, planted):
    """Ray's default temp dir, /tmp/ray, is shared and predictable, and Ray makes it mode 777
    and joins whatever cluster its ``ray_current_cluster`` names (issue 57, item 1). The local
    Ray's goes in ``<tmp>/study-ray-<uid>`` (0700); one another user made first is not used
    (said once), nor the cluster it names."""
    import tempfile

    from processkit import kill_processes_mentioning

    short = Path(tempfile.mkdtemp(prefix="rp", dir="/tmp"))  # Unix socket paths: ~107 bytes
    shared = short / f"study-ray-{os.getuid()}"
    runtime = short / "run"
    runtime.mkdir(mode=0o700)
    if planted:
        if os.getuid() != 0:
            pytest.skip("only root can give a folder another owner here")
        (shared / "ray").mkdir(parents=True)
        (shared / "ray" / "ray_current_cluster").write_text("127.0.0.1:1")  # nobody listens
        shared.chmod(0o777)
        os.chown(shared, 65534, 65534)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_TMPDIR", "RAY_ADDRESS")}
    env |= {"TMPDIR": str(short), "XDG_RUNTIME_DIR": str(runtime), "HOME": str(tmp_path)}
    try:
        done = subprocess.run([sys.executable, "-c", _WHERE_RAY_WENT], capture_output=True,
                              text=True, env=env, timeout=300, cwd=REPO)  # fmt: skip
    finally:
        kill_processes_mentioning(str(short))
    assert done.returncode == 0, done.stderr
    temp = Path(done.stdout.split()[-1])
    expected = (runtime / "study-ray") if planted else shared
    assert temp == expected / "ray"
    assert (expected.stat().st_mode & 0o777) == 0o700
    assert any(temp.glob("session_*")), list(temp.iterdir())
    said = done.stderr.count(f"Ray's temp dir: {shared}: not used, it is owned by uid 65534")
    assert said == (1 if planted else 0), done.stderr
    if planted:
        assert sorted(p.name for p in (shared / "ray").iterdir()) == ["ray_current_cluster"]
