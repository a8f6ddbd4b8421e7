"""Where a run's numbers came from: the code (git commit, or the package version), the entry
point, and the training data as an MLflow dataset input with its fingerprint."""

from __future__ import annotations

import functools
import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

from trainables.config import TrialConfig
from trainables.remote import is_remote
from trainables.sources import DATA_FIELDS, data_dir, data_key

# MLflow's tag names (mlflow.utils.mlflow_tags), written out: MLflow itself is imported on first
# use, since a command that only reads an embedded store does without it
MLFLOW_DATASET_CONTEXT = "mlflow.data.context"
MLFLOW_GIT_COMMIT = "mlflow.source.git.commit"


@functools.cache
def git_head() -> tuple[str, bool] | None:
    """(full commit, dirty?) of the checkout this code runs from; None outside a git checkout.
    Read once per process: the code a driver runs is the code it loaded."""
    root = Path(__file__).resolve().parents[1]
    try:
        sha = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=5,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return (sha, bool(dirty)) if sha else None


def code_version() -> str:
    head = git_head()
    if head is not None:
        return head[0][:7] + ("-dirty" if head[1] else "")
    from importlib.metadata import version

    return version("contrastive-studies")


def source_tags() -> dict[str, str]:
    """MLflow's standard source tags, as ``mlflow.start_run`` writes them (``MlflowClient``
    writes none): the user, the entry point (``sys.argv[0]``, e.g. the ``study`` command), the
    source type LOCAL, and the git commit when the code runs from a git checkout."""
    from mlflow.tracking.context.default_context import DefaultRunContext

    tags = dict(DefaultRunContext().tags())
    head = git_head()
    if head is not None:
        tags[MLFLOW_GIT_COMMIT] = head[0]
    return tags


def data_fields(config: TrialConfig) -> dict[str, Any]:
    """The TrialConfig fields the training data depends on (``trainables.sources.DATA_FIELDS``)."""
    return {name: getattr(config, name) for name in DATA_FIELDS}


def training_dataset(config: TrialConfig):
    """The trial's training data as an MLflow dataset input (context ``training``), read without
    loading any data. Name: the ``dataset`` field; digest: a fingerprint of
    ``trainables.sources.data_key`` (the data fields and, for data on disk, the size and time of
    every file under ``data_root``, as the trainables key their cache of a dataset; for a bucket
    URI its objects' content key, from a listing); source: the data root (a bucket URI as it
    is), or the loader of digits and of the toy data; profile: the data fields."""
    from mlflow.data.code_dataset_source import CodeDatasetSource
    from mlflow.data.dataset_source_registry import (
        get_dataset_source_from_json,
        resolve_dataset_source,
    )
    from mlflow.data.meta_dataset import MetaDataset
    from mlflow.entities import Dataset, DatasetInput, InputTag
    from mlflow.exceptions import MlflowException

    if config.dataset == "digits":
        source = CodeDatasetSource({"loader": "sklearn.datasets.load_digits"})
    elif config.dataset == "toy":
        source = CodeDatasetSource({"loader": "trainables.data.toy_samples"})
    elif is_remote(config.data_root):
        try:  # s3://, gs://, hdfs://… have MLflow source types of their own
            source = resolve_dataset_source(config.data_root)
        except MlflowException:
            source = CodeDatasetSource({"uri": config.data_root})
    else:
        root = str(data_dir(config).resolve())  # a plain path or file:// URI: no download
        source = get_dataset_source_from_json(json.dumps({"uri": root}), "local")
    key = json.dumps(data_key(config), default=str)
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    meta = MetaDataset(source, name=config.dataset, digest=digest).to_dict()
    profile = {k: v for k, v in data_fields(config).items() if v is not None}
    dataset = Dataset(
        meta["name"], meta["digest"], meta["source_type"], meta["source"],
        profile=json.dumps(profile, default=str),
    )  # fmt: skip
    return DatasetInput(dataset, [InputTag(MLFLOW_DATASET_CONTEXT, "training")])
