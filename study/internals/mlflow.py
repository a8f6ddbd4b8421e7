"""MLflow's private parts the study's record uses (checked against MLflow 3.17.2).

Each is imported inside its function: MLflow's import takes seconds, and a command that only
reads an embedded store does without it (:mod:`analysis.reading.sqlite_reader`).
"""

from __future__ import annotations

from typing import Any


def sqlalchemy_store(uri: str) -> Any:
    """The SQLAlchemy tracking store of ``uri`` (``sqlite:///…``), built as ``MlflowClient(uri)``
    builds it: its schema migrations run and its Default experiment made with the artifact root
    MLflow gives it here. Why private: MLflow has no public call that creates a store without
    a client, and :func:`study.tracking_store.create_store` builds it under a private name
    before linking it into place (a client would also cache the store under that name)."""
    from mlflow.tracking._tracking_service.utils import _get_sqlalchemy_store

    return _get_sqlalchemy_store(uri, None)


def server_artifact_root_env_var() -> str:
    """The environment variable through which ``mlflow server --default-artifact-root`` gives
    a store its default artifact root (``_MLFLOW_SERVER_ARTIFACT_ROOT``). Why private: a store
    copied from the template (:mod:`study.store_template`) must get the Default experiment's
    artifact location that MLflow's own store would get in this process, and MLflow names this
    variable only in that private module."""
    from mlflow.tracking._tracking_service.utils import _SERVER_ARTIFACT_ROOT_ENV_VAR

    return _SERVER_ARTIFACT_ROOT_ENV_VAR


def store_engine(client: Any) -> Any | None:
    """The SQLAlchemy engine of ``client``'s store (an ``MlflowClient``), or None when it has none
    (a server's REST store, or an MLflow that keeps it elsewhere). Why private: after an
    interrupt lands inside one of the driver's own SQLite writes, the pool's connections are
    disposed of before the runs are ended again (:func:`study.ending.end_runs`), and the client
    keeps its store in the private ``_tracking_client``."""
    store = getattr(getattr(client, "_tracking_client", None), "store", None)
    return getattr(store, "engine", None)


def hard_delete_experiment(uri: str, experiment_id: str) -> None:
    """Remove an experiment of an embedded store for good, as ``mlflow gc`` does. Why private:
    MLflow's public delete only marks an experiment deleted, and a deleted experiment keeps its
    name taken; a study run that stopped before recording anything removes the experiment its
    lease made (:mod:`study.leftovers`), so that the study's name is free to run again."""
    store = sqlalchemy_store(uri)
    try:
        store.delete_experiment(experiment_id)  # gc removes only what is marked deleted
        store._hard_delete_experiment(experiment_id)
    finally:
        store.engine.dispose()
