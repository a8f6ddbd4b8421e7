"""The private parts of its dependencies that the study reaches (``study/internals/``) still
resolve in the installed versions, and still do what the study takes them to do: a new MLflow,
Ray, PyTorch or Python that moved one fails here, by name, rather than somewhere in a study."""

from __future__ import annotations

import importlib.util
import inspect
import subprocess
import sys
from pathlib import Path

from study.internals import mlflow as mlflow_internals
from study.internals import ray as ray_internals
from study.internals import torch as torch_internals


# ---------------------------------------------------------------------------------------------
# MLflow
# ---------------------------------------------------------------------------------------------
def test_mlflow_builds_a_whole_store_and_its_client_shows_the_engine(tmp_path):
    import sqlite3

    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    store = mlflow_internals.sqlalchemy_store(uri)
    store.engine.dispose()
    with sqlite3.connect(tmp_path / "m.db") as db:  # every table, migrated to this MLflow's head
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"experiments", "runs", "alembic_version"} <= tables
    client = MlflowClient(uri)
    assert client.get_experiment("0").name == "Default"
    engine = mlflow_internals.store_engine(client)
    assert engine is not None and callable(engine.dispose)
    assert mlflow_internals.store_engine(object()) is None  # a client without one: None


def test_mlflow_names_the_server_artifact_root_variable():
    name = mlflow_internals.server_artifact_root_env_var()
    assert isinstance(name, str) and name.startswith("_MLFLOW_SERVER")


# ---------------------------------------------------------------------------------------------
# Ray
# ---------------------------------------------------------------------------------------------
def test_ray_still_logs_its_token_notice_from_that_module():
    from study.local_ray import TOKEN_AUTH_NOTICE

    spec = importlib.util.find_spec(ray_internals.TOKEN_AUTH_LOGGER)
    assert spec is not None, f"{ray_internals.TOKEN_AUTH_LOGGER} is gone"
    source = Path(spec.origin).read_text()
    assert "logging.getLogger(__name__)" in source  # its logger is named after the module
    assert TOKEN_AUTH_NOTICE in source


def test_ray_init_takes_the_system_config_and_the_raylet_knows_both_settings():
    import ray
    import ray._private.worker as worker

    assert "_system_config" in inspect.getsource(worker.init)
    kwargs = ray_internals.system_config(preload_python_modules=["m"], num_workers_soft_limit=2)
    assert kwargs == {"_system_config": {"preload_python_modules": ["m"],
                                         "num_workers_soft_limit": 2}}  # fmt: skip
    raylet = (Path(ray.__file__).parent / "_raylet.so").read_bytes()
    for setting in kwargs["_system_config"]:
        assert setting.encode() in raylet, setting


def test_tune_still_gives_its_trial_actors_these_env_vars():
    from ray.tune.execution import class_cache

    # Tune still sets the variable the runner takes out (a study run in this process has taken
    # it out of the module already: read what Tune ships)
    assert '"PL_DISABLE_FORK"' in inspect.getsource(class_cache)
    assert isinstance(class_cache.DEFAULT_ENV_VARS, dict)
    class_cache.DEFAULT_ENV_VARS["STUDY_TEST_ONLY"] = "1"
    ray_internals.drop_tune_default_env_var("STUDY_TEST_ONLY")
    assert "STUDY_TEST_ONLY" not in class_cache.DEFAULT_ENV_VARS
    names = ray_internals.tune_propagated_env_vars()
    assert names is class_cache.ENV_VARS_TO_PROPAGATE and "AWS_ACCESS_KEY_ID" in names
    try:
        ray_internals.set_tune_propagated_env_vars({"ONLY_THIS"})
        assert {"ONLY_THIS"} == class_cache.ENV_VARS_TO_PROPAGATE
    finally:
        ray_internals.set_tune_propagated_env_vars(names)
    assert class_cache.ENV_VARS_TO_PROPAGATE is names


# ---------------------------------------------------------------------------------------------
# PyTorch (found without importing torch, as the driver never does)
# ---------------------------------------------------------------------------------------------
def test_torch_still_has_the_module_its_optimizers_import():
    package, _, name = torch_internals.DYNAMO_MODULE.partition(".")
    (root,) = importlib.util.find_spec(package).submodule_search_locations
    assert (Path(root) / name / "__init__.py").is_file()


# ---------------------------------------------------------------------------------------------
# Python
# ---------------------------------------------------------------------------------------------
EXIT = """
import atexit, threading, time
from study.internals.python import exit_now, join_non_daemon_threads, run_exit_handlers

def late():
    time.sleep(0.3)
    print("thread", flush=True)

threading.Thread(target=late).start()
atexit.register(lambda: print("atexit", flush=True))
join_non_daemon_threads()
run_exit_handlers()
print("then", flush=True)
exit_now(3)
print("never", flush=True)
"""


def test_python_ends_the_process_as_the_interpreter_does_then_at_once():
    done = subprocess.run([sys.executable, "-c", EXIT], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2], timeout=60)  # fmt: skip
    assert done.returncode == 3, done.stderr[-2000:]
    assert done.stdout.split() == ["thread", "atexit", "then"]  # no atexit run twice
