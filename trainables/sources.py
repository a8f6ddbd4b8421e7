"""Where a trial's data are, and what identifies them: ``data_root`` resolved (a local folder, or
a bucket's cached copy), the check that an on-disk dataset is there (a bucket is listed, not
downloaded), the fields and file stamps that key a dataset, and whether it carries groups.

No torch: the driver checks a study's data and the record names them before anything is loaded
(:mod:`trainables.data` loads them).
"""

from __future__ import annotations

import os
from pathlib import Path

from trainables import idx as idx_files
from trainables import remote
from trainables.config import (
    DEFAULT_DATA_ROOTS,
    FASHION_MNIST_PACKAGE,
    FASHION_MNIST_ROOT,
    IDX_DATASETS,
    ON_DISK_DATASETS,
    TrialConfig,
)


def data_root(config: TrialConfig) -> str:
    """``data_root`` as given, or where the dataset lives by default when it is None
    (fashion_mnist: :data:`FASHION_MNIST_ROOT`, Debian's package folder). The config keeps the
    user's None; this is the one place that resolves it."""
    return config.data_root or DEFAULT_DATA_ROOTS.get(config.dataset, "")


def data_dir(config: TrialConfig, listed: remote.Snapshot | None = None) -> Path:
    """The local folder of ``data_root`` (:func:`data_root`): a plain path (``~`` expanded), the
    folder a ``file://`` URI names, or for a bucket URI (``s3://…``, ``gs://…``) the node's cached
    copy of its objects, downloaded first if this node has not got that content yet
    (:func:`trainables.remote.local_data_root`; ``listed``: a listing of it already taken)."""
    root = data_root(config)
    if remote.is_uri(root):
        return remote.local_data_root(root, listed)
    return Path(root).expanduser()


def _listing(config: TrialConfig) -> remote.Snapshot | None:
    """A bucket ``data_root``'s listing (ValueError naming it when it cannot be listed, holds
    nothing, or download=True asks to write into it); None for digits, toy and data in a local
    folder."""
    if config.dataset not in ON_DISK_DATASETS:
        return None
    if config.download and remote.is_remote(config.data_root):
        raise ValueError(
            f"data_root={config.data_root!r} is a bucket URI, read-only here; download=True "
            "writes the dataset into data_root: upload it to the bucket, or use a local folder"
        )
    return remote.bucket_snapshot(config.data_root)


def check_data(config: TrialConfig) -> remote.Snapshot | None:
    """Raise ValueError naming ``data_root`` when an on-disk dataset is not where it should be.
    A bucket URI is listed, not downloaded: it must be reachable and hold objects (for an IDX
    dataset, its four files). Returns that listing (None for a local folder)."""
    if config.dataset not in ON_DISK_DATASETS:
        return None
    listed = _listing(config)
    root = None if listed is not None else data_dir(config)
    if config.dataset in IDX_DATASETS:
        if listed is not None:
            problem = idx_files.folder_problem(set(listed.files), None, "the bucket's listing")
        elif not root.is_dir():
            problem = "no such folder"
        else:
            present = {p.name for p in root.iterdir() if p.is_file()}
            problem = idx_files.folder_problem(present, root, "the folder")
        if problem:
            raise _idx_refusal(config, problem)
        return listed
    if listed is None and not root.is_dir() and not config.download:
        raise ValueError(
            f"data_root={config.data_root!r} does not exist or is not a directory "
            f"(dataset={config.dataset!r}, download=False)"
        )
    return listed


def _idx_refusal(config: TrialConfig, problem: str) -> ValueError:
    """The ValueError for an IDX dataset that is not there: data_root and its value (and the
    default it stands for when None), the files expected, and where fashion_mnist's come from."""
    value = f"data_root={config.data_root!r}"
    if config.data_root is None:
        value += f" (dataset={config.dataset!r} reads {data_root(config)!r} by default)"
    hint = (
        f"; Debian's package {FASHION_MNIST_PACKAGE} provides them in {FASHION_MNIST_ROOT} "
        "(bash scripts/setup_data.sh installs it), or set data_root to a folder holding them"
        if config.dataset == "fashion_mnist"
        else "; set data_root to a folder (or bucket prefix) holding them"
    )
    return ValueError(
        f"{value}: {problem}; dataset={config.dataset!r} expects the four IDX files "
        f"{idx_files.expected_files()}{hint}"
    )


# The TrialConfig fields a dataset and its splits depend on (the key of the per-process cache).
DATA_FIELDS = (
    "dataset", "data_root", "download", "data_checksums", "data_seed", "image_size",
    "heldout_size", "probe_train_size", "toy_classes", "toy_dim", "toy_spread", "toy_noise",
    "toy_train_size", "toy_photos_per_item",
)  # fmt: skip


def _files_stamp(root: Path) -> tuple:
    """(path, size, mtime) of every file under ``root``: a changed file is a new dataset."""
    stamp = []
    for folder, _, names in sorted(os.walk(root)):
        for name in sorted(names):
            stat = (Path(folder) / name).stat()
            stamp.append((folder, name, stat.st_size, stat.st_mtime_ns))
    return tuple(stamp)


def data_key(config: TrialConfig, listed: remote.Snapshot | None = None) -> tuple:
    """What identifies the trial's dataset and splits: :data:`DATA_FIELDS`, and for data on
    disk the size and modification time of every file under ``data_root`` (of an IDX dataset,
    the four files it reads: the folder may hold anything else); for a bucket URI
    the content key of its objects (``listed``, or a fresh listing: nothing is downloaded)."""
    key = tuple(getattr(config, name) for name in DATA_FIELDS)
    if config.dataset not in ON_DISK_DATASETS:
        return key
    if remote.is_remote(config.data_root):
        return (*key, (listed or _listing(config)).key)
    if config.dataset in IDX_DATASETS:  # the four files it reads, not the rest of the folder
        return (*key, _idx_stamp(data_dir(config)))
    return (*key, _files_stamp(data_dir(config)))


def _idx_stamp(root: Path) -> tuple:
    """(path, size, mtime) of each IDX file a load reads from ``root``; (name, None) where
    neither variant is there, so a file that appears later is a new dataset."""
    stamp = []
    for name in idx_files.NAMES:
        path = idx_files.find(root, name)
        stat = path.stat() if path else None
        stamp.append((str(path), stat.st_size, stat.st_mtime_ns) if stat else (name, None))
    return tuple(stamp)


def has_groups(config: TrialConfig, root: Path | None = None) -> bool:
    """Whether the trial's data have groups: toy data with ``toy_photos_per_item`` > 1 (the
    item), or an imagefolder with ``groups.csv``. Both splits then carry group ids. ``root``:
    the data's local folder when the caller has it; a bucket URI is otherwise listed, not
    downloaded."""
    if config.dataset == "toy":
        return config.toy_photos_per_item > 1
    if config.dataset == "imagefolder":
        listed = None if root is not None else remote.bucket_snapshot(config.data_root)
        if listed is not None:
            return "groups.csv" in listed.files
        return ((root or data_dir(config)) / "groups.csv").is_file()
    return False


def digits_cache_path(data_seed: int) -> Path:
    """Where a node keeps scikit-learn's digits and their split for ``data_seed``
    (``trainables.data.digits_split``): under the data cache (:func:`remote.cache_root`), named
    by the scikit-learn and NumPy versions that made it."""
    from importlib.metadata import version

    made_by = f"sklearn-{version('scikit-learn')}-numpy-{version('numpy')}"
    return remote.cache_root() / "digits" / f"{made_by}-seed-{data_seed}.npz"
