"""A new embedded MLflow store in milliseconds: a copy of the first one MLflow built.

MLflow builds a new SQLite store by running every schema migration since its first release (about
70 alembic scripts, 2–3 s of CPU), and every new study store, every test's store, pays it again.
The store it builds holds nothing but its schema, the ``default`` workspace and the Default
experiment, whose artifact location and times depend on where and when it was built. So the
first store built for an MLflow version and schema is kept as a template
(``$CONTRASTIVE_STORE_CACHE``, else ``~/.cache/contrastive-studies/mlflow``), and the next is a
copy of it whose Default experiment is written as MLflow would write it here and now. A template
that is not a whole store of this MLflow's schema (``analysis.reading.store.store_problem``) is
never used: MLflow then builds the store, and the template anew.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import time
from pathlib import Path

from analysis.reading.store import mlflow_schema_head, store_problem
from study.internals.mlflow import server_artifact_root_env_var


def template_path() -> Path:
    """Where this MLflow version's template store is kept."""
    import mlflow

    default = Path.home() / ".cache" / "contrastive-studies" / "mlflow"
    root = Path(os.environ.get("CONTRASTIVE_STORE_CACHE") or default)
    return root / f"store-{mlflow.__version__}-{mlflow_schema_head()}.db"


def copy_template(target: Path) -> bool:
    """Write a new store at ``target`` from the template; False when there is no usable one
    (or MLflow's workspaces are on, whose stores this does not know)."""
    from mlflow.environment_variables import MLFLOW_ENABLE_WORKSPACES

    template = template_path()
    if MLFLOW_ENABLE_WORKSPACES.get() or not template.is_file():
        return False
    if store_problem(f"sqlite:///{template}") is not None:
        return False
    shutil.copyfile(template, target)
    _default_experiment_made_here_and_now(target)
    return True


def keep_as_template(store: Path) -> None:
    """Keep ``store``, just built by MLflow, as the template (atomically; a cache that cannot be
    written keeps none)."""
    template = template_path()
    with contextlib.suppress(OSError):
        template.parent.mkdir(parents=True, exist_ok=True)
        building = template.with_name(f".{template.name}.{os.getpid()}.{time.monotonic_ns()}")
        try:
            shutil.copyfile(store, building)
            os.replace(building, template)
        finally:
            building.unlink(missing_ok=True)


def _default_experiment_made_here_and_now(store: Path) -> None:
    """The Default experiment as MLflow's SqlAlchemyStore creates it in this process: its
    artifact location under the artifact root MLflow defaults to here, its times now."""
    from mlflow.store.tracking import DEFAULT_LOCAL_FILE_AND_ARTIFACT_PATH
    from mlflow.utils.time import get_current_time_millis
    from mlflow.utils.uri import append_to_uri_path, resolve_uri_if_local

    root = os.environ.get(server_artifact_root_env_var(), DEFAULT_LOCAL_FILE_AND_ARTIFACT_PATH)
    location = str(append_to_uri_path(resolve_uri_if_local(root), "0"))
    now = get_current_time_millis()
    with contextlib.closing(sqlite3.connect(store)) as db, db:
        db.execute(
            "UPDATE experiments SET artifact_location = ?, creation_time = ?, "
            "last_update_time = ? WHERE experiment_id = 0",
            (location, now, now),
        )
