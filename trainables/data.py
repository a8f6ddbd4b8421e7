"""Datasets, fixed held-out splits, the example stream and two-view batches.

Every dataset loads into a :class:`DataBundle`: pretraining inputs, their labels (for probes and
diagnostics only; the loss never sees them), a fixed held-out split, and optional ``groups`` (a
semantic identity above the source, for the objective's ``group_policy``). Splits depend on
``data_seed`` only, never on the trial's ``seed``, so every trial of a study is scored on the same
held-out data.

The example stream draws a fresh permutation every epoch and cuts it into full batches of
``batch_size``; a batch that straddles an epoch boundary takes the tail of one permutation and the
head of the next, with the next permutation reordered so that no source appears twice in one
batch. Everything random is a function of (seed, step), so a resumed trial sees the same batches
and the same views.
"""

from __future__ import annotations

import csv
import hashlib
import os
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from trainables import idx as idx_files
from trainables import remote
from trainables.config import (
    ON_DISK_DATASETS,
    TrialConfig,
)
from trainables.sources import check_data, data_dir, data_key, digits_cache_path, has_groups
from trainables.views import ViewAugment, constant

# (mean, std) per channel of [0, 1] pixels, applied after augmentation.
_NORMALISATION = {
    "digits": ((0.3051,), (0.3812,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    "stl10": ((0.4467, 0.4398, 0.4066), (0.2603, 0.2566, 0.2713)),
    "imagefolder": ((0.5, 0.5, 0.5), (0.25, 0.25, 0.25)),
    "fashion_mnist": ((0.2860,), (0.3530,)),
    "mnist_idx": ((0.1307,), (0.3081,)),  # MNIST's own; another MNIST-format set differs a little
}


@dataclass(frozen=True)
class DataBundle:
    """A dataset in memory. Images are (N, C, H, W) uint8 or float in [0, 1]; vectors (N, D)."""

    name: str
    kind: str  # "image" | "vector"
    train_x: Tensor
    train_y: Tensor  # (N,) labels, -1 where unlabelled; probes and diagnostics only
    heldout_x: Tensor
    heldout_y: Tensor
    probe_index: Tensor  # (P,) rows of train_x that fit the probes (labelled ones)
    train_groups: Tensor | None = None
    mean: tuple[float, ...] = ()
    std: tuple[float, ...] = ()
    vector_noise: float = 0.0
    # (Nh,) group ids of the held-out rows, for per-group evidence only (never trained on);
    # negative where a row has no group. None exactly when ``has_groups(config)`` is False.
    heldout_groups: Tensor | None = None
    # (Nh,) int64 id of each held-out row: its index in the dataset's held-out pool (the same
    # rows get the same ids in every trial and baseline of a study), so per-item outcomes
    # (trainables.outcomes) pair item by item. None where the loader has no such index (toy
    # data, image folders): then the ids are the rows' positions, 0 .. Nh - 1.
    heldout_ids: Tensor | None = None

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.train_x.shape[1:])

    @property
    def num_classes(self) -> int:
        return int(max(self.train_y.max(), self.heldout_y.max())) + 1

    def prepare(self, x: Tensor) -> Tensor:
        """Raw stored rows -> float model inputs in [0, 1] (images) or as stored (vectors)."""
        if x.dtype == torch.uint8:
            return x.float().div_(255)
        return x.float()

    def normalise(self, x: Tensor) -> Tensor:
        """Augmented [0, 1] images -> standardised model inputs; vectors pass through."""
        if self.kind != "image":
            return x
        mean = constant(self.mean, str(x.device), x.dtype).view(1, -1, 1, 1)
        std = constant(self.std, str(x.device), x.dtype).view(1, -1, 1, 1)
        return (x - mean) / std


# ---------------------------------------------------------------------------------------------
# loading
# ---------------------------------------------------------------------------------------------
_CACHE: dict[tuple, DataBundle] = {}  # one dataset per process: the last one loaded


def load_data(config: TrialConfig) -> DataBundle:
    """Load the trial's dataset with its fixed held-out split.

    A process keeps the last dataset it loaded: the next trial in the same worker (Ray Tune
    reuses its workers) with the same :func:`data_key` gets it without reading the disk again.
    Bundles are immutable; nothing writes into their tensors.
    """
    listed = check_data(config)  # a bucket URI is listed once, here
    key = data_key(config, listed)
    if key not in _CACHE:
        _CACHE.clear()  # one at a time: a worker's memory holds one dataset
        _CACHE[key] = _load(config, listed)
    return _CACHE[key]


def _load(config: TrialConfig, listed: remote.Snapshot | None = None) -> DataBundle:
    if config.dataset not in ON_DISK_DATASETS:
        return (_digits if config.dataset == "digits" else _toy)(config)
    loader = {
        "cifar10": _torchvision_cifar,
        "cifar100": _torchvision_cifar,
        "stl10": _stl10,
        "imagefolder": _imagefolder,
        "fashion_mnist": _idx_images,
        "mnist_idx": _idx_images,
    }[config.dataset]
    return loader(config, data_dir(config, listed))


def _generator(*keys: int | str) -> torch.Generator:
    digest = hashlib.sha256(repr(keys).encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))


def _subset(n: int, size: int | None, *keys) -> Tensor:
    if size is None or size >= n:
        return torch.arange(n)
    return torch.randperm(n, generator=_generator(*keys))[:size].sort().values


def digits_split(data_seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """scikit-learn's digits, x (1797, 64) and y, and their stratified 80/20 split for
    ``data_seed`` (train, held-out: sorted row indices).

    Made with scikit-learn once per node, scikit-learn and NumPy version and seed, and read from
    the node's data cache after that: every trial of a study needs the same arrays, and
    importing scikit-learn costs each trial's process ~1.2 s of CPU. Where the cache cannot be
    written, every call makes them."""
    path = digits_cache_path(data_seed)
    try:
        with np.load(path) as kept:
            return kept["x"], kept["y"], kept["train"], kept["held"]
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):
        pass  # not made yet on this node (or unreadable): make it
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    train, held = train_test_split(
        np.arange(len(y)), test_size=0.2, random_state=data_seed, stratify=y
    )
    arrays = {"x": x, "y": y, "train": np.sort(train), "held": np.sort(held)}
    _keep_whole(path, arrays)
    return arrays["x"], arrays["y"], arrays["train"], arrays["held"]


def _keep_whole(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` to ``path`` whole or not at all: written beside it, then renamed over it,
    so that trials making it at once each leave a whole file, and one reading it meanwhile
    keeps reading the file it opened (never one rewritten in place under it, numpy #22435).
    Nothing is kept where the folder cannot be written, not even a part."""
    part = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".npz", delete=False) as out:
            part = Path(out.name)
            np.savez(out, **arrays)
        os.replace(part, path)
    except OSError:
        if part is not None:
            part.unlink(missing_ok=True)


def _digits(config: TrialConfig) -> DataBundle:
    x, y, train, held = digits_split(config.data_seed)
    images = torch.tensor(x, dtype=torch.float32).view(-1, 1, 8, 8) / 16.0
    labels = torch.tensor(y, dtype=torch.long)
    train, held = torch.tensor(train), torch.tensor(held)
    held = held[_subset(len(held), config.heldout_size, "digits-heldout", config.data_seed)]
    probe = _subset(len(train), config.probe_train_size, "digits-probe", config.data_seed)
    mean, std = _NORMALISATION["digits"]
    return DataBundle(
        "digits", "image", images[train], labels[train], images[held], labels[held],
        probe, None, mean, std, heldout_ids=held.long(),
    )  # fmt: skip


def toy_samples(config: TrialConfig, n: int, stream: str) -> tuple[Tensor, Tensor, Tensor]:
    """The toy generator: latent classes in ``toy_dim`` with within-class spread.

    Returns (x (n, D), labels (n,), groups (n,)). Class centres are standard normal and depend
    on ``data_seed`` only; each sample adds its own offset of std ``toy_spread``. With
    ``toy_photos_per_item`` > 1, samples come in items (the group) of that many photos that share
    the item's offset and differ by a quarter of the spread. A view (augmentation ``noise``) adds
    independent noise of std ``toy_noise``.
    """
    centres = torch.randn(
        config.toy_classes, config.toy_dim, generator=_generator("toy", config.data_seed)
    )
    g = _generator("toy", stream, config.data_seed, config.toy_classes, config.toy_dim)
    photos = config.toy_photos_per_item
    items = -(-n // photos)
    item_class = torch.randint(0, config.toy_classes, (items,), generator=g)
    item_offset = config.toy_spread * torch.randn(items, config.toy_dim, generator=g)
    groups = torch.arange(items).repeat_interleave(photos)[:n]
    x = centres[item_class[groups]] + item_offset[groups]
    if photos > 1:
        x = x + 0.25 * config.toy_spread * torch.randn(n, config.toy_dim, generator=g)
    return x, item_class[groups], groups


def _toy(config: TrialConfig) -> DataBundle:
    x, y, groups = toy_samples(config, config.toy_train_size, "train")
    hx, hy, held_groups = toy_samples(config, config.heldout_size or 800, "heldout")
    probe = _subset(len(x), config.probe_train_size, "toy-probe", config.data_seed)
    grouped = has_groups(config)
    return DataBundle(
        "toy", "vector", x, y, hx, hy, probe, groups if grouped else None,
        vector_noise=config.toy_noise, heldout_groups=held_groups if grouped else None,
    )  # fmt: skip


def _cifar_class(config: TrialConfig):
    from torchvision.datasets import CIFAR10, CIFAR100

    base = CIFAR10 if config.dataset == "cifar10" else CIFAR100
    if config.data_checksums:
        return base

    class Unchecked(base):  # torchvision's own reader, without the md5 checks
        train_list = [[name, None] for name, _ in base.train_list]  # noqa: RUF012
        test_list = [[name, None] for name, _ in base.test_list]  # noqa: RUF012
        meta = {**base.meta, "md5": None}  # noqa: RUF012

    return Unchecked


def write_cifar10(root: str | Path, per_batch: int, test: int, seed: int = 0) -> Path:
    """Write CIFAR-10's on-disk layout under ``root``: ``cifar-10-batches-py`` with five pickled
    training batches of ``per_batch`` random uint8 images (N, 3072) and labels, a test batch of
    ``test``, and ``batches.meta``; returns ``root``. For tests and benchmarks that need real
    files without the real data (read them with ``data_checksums: false``).

    The real files are Python 2 pickles whose keys load as ``str`` under torchvision's
    ``encoding="latin1"``; protocol 2 with str keys reproduces that."""
    import pickle

    folder = Path(root) / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)

    def dump(name: str, n: int) -> None:
        rows = {
            "batch_label": name,
            "labels": rng.integers(0, 10, n).tolist(),
            "data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
            "filenames": [f"{name}_{i}.png" for i in range(n)],
        }
        with open(folder / name, "wb") as f:
            pickle.dump(rows, f, protocol=2)

    for i in range(1, 6):
        dump(f"data_batch_{i}", per_batch)
    dump("test_batch", test)
    with open(folder / "batches.meta", "wb") as f:
        names = ["airplane", "automobile", "bird", "cat", "deer"]
        names += ["dog", "frog", "horse", "ship", "truck"]
        pickle.dump({"label_names": names, "num_cases_per_batch": per_batch}, f, protocol=2)
    return Path(root)


def _torchvision_cifar(config: TrialConfig, root: Path) -> DataBundle:
    cls = _cifar_class(config)
    try:
        train = cls(str(root), train=True, download=config.download)
        test = cls(str(root), train=False, download=config.download)
    except RuntimeError as err:
        raise ValueError(
            f"data_root={config.data_root!r}: torchvision could not load {config.dataset} "
            f"({err}); download=False needs the extracted batches under data_root"
        ) from err
    to_tensor = lambda a: torch.from_numpy(np.ascontiguousarray(a)).permute(0, 3, 1, 2)  # noqa: E731
    held = _subset(
        len(test.targets), config.heldout_size, "heldout", config.dataset, config.data_seed
    )
    probe = _subset(
        len(train.targets), config.probe_train_size, "probe", config.dataset, config.data_seed
    )
    mean, std = _NORMALISATION[config.dataset]
    return DataBundle(
        config.dataset, "image",
        to_tensor(train.data), torch.tensor(train.targets),
        to_tensor(test.data)[held], torch.tensor(test.targets)[held],
        probe, None, mean, std, heldout_ids=held.long(),
    )  # fmt: skip


def resized(images: Tensor, size: int | None, chunk: int = 8192) -> Tensor:
    """(N, C, H, W) uint8 images at ``size`` × ``size`` (area averaging down, bilinear up),
    rounded back to uint8; unchanged when ``size`` is None or already theirs. Done once at load:
    a CPU study can train on 14 × 14 Fashion-MNIST at a quarter of the cost of 28 × 28."""
    if size is None or tuple(images.shape[-2:]) == (size, size):
        return images
    mode = "area" if size < images.shape[-1] else "bilinear"
    parts = []
    for a in range(0, len(images), chunk):
        x = images[a : a + chunk].float()
        y = torch.nn.functional.interpolate(x, size=(size, size), mode=mode)
        parts.append(y.round_().clamp_(0, 255).to(torch.uint8))
    return torch.cat(parts)


def _idx_images(config: TrialConfig, root: Path) -> DataBundle:
    """An MNIST-format folder (fashion_mnist, mnist_idx): the train files are the pretraining
    rows, the t10k files the held-out pool, both subset by ``data_seed`` as CIFAR's are.
    ``image_size`` resizes every image once (:func:`resized`); the default keeps 28 × 28."""
    train_x, train_y = idx_files.read_split(root, "train")
    test_x, test_y = idx_files.read_split(root, "test")
    held = _subset(len(test_y), config.heldout_size, "heldout", config.dataset, config.data_seed)
    probe = _subset(
        len(train_y), config.probe_train_size, "probe", config.dataset, config.data_seed
    )
    mean, std = _NORMALISATION[config.dataset]
    train_x, train_y, test_x, test_y = map(torch.from_numpy, (train_x, train_y, test_x, test_y))
    train_x, test_x = resized(train_x, config.image_size), resized(test_x, config.image_size)
    return DataBundle(
        config.dataset, "image", train_x, train_y, test_x[held], test_y[held], probe, None,
        mean, std, heldout_ids=held.long(),
    )  # fmt: skip


def _stl10(config: TrialConfig, root: Path) -> DataBundle:
    from torchvision.datasets import STL10

    try:
        train = STL10(str(root), split="train+unlabeled", download=config.download)
        test = STL10(str(root), split="test", download=config.download)
    except RuntimeError as err:
        raise ValueError(
            f"data_root={config.data_root!r}: torchvision could not load stl10 ({err})"
        ) from err
    labels = torch.tensor(train.labels, dtype=torch.long)  # -1 for the unlabelled split
    labelled = (labels >= 0).nonzero().flatten()
    probe = labelled[
        _subset(len(labelled), config.probe_train_size, "probe", "stl10", config.data_seed)
    ]
    held = _subset(len(test.labels), config.heldout_size, "heldout", "stl10", config.data_seed)
    mean, std = _NORMALISATION["stl10"]
    return DataBundle(
        "stl10", "image", torch.from_numpy(train.data), labels,
        torch.from_numpy(test.data)[held], torch.tensor(test.labels, dtype=torch.long)[held],
        probe, None, mean, std, heldout_ids=held.long(),
    )  # fmt: skip


def _imagefolder(config: TrialConfig, root: Path) -> DataBundle:
    """A user's images: ``root/train`` and ``root/val`` (or ``test``) class folders, or one class
    folder tree split 80/20 by ``data_seed``. An optional ``root/groups.csv`` (``path,group``,
    paths relative to root) gives each image a group."""
    from torchvision import transforms
    from torchvision.datasets import ImageFolder

    size = config.image_size or 32
    tf = transforms.Compose(
        [transforms.Resize(size), transforms.CenterCrop(size), transforms.PILToTensor()]
    )

    def load(folder: Path) -> tuple[Tensor, Tensor, list[str]]:
        ds = ImageFolder(str(folder), transform=tf)
        xs = torch.stack(
            [
                ds[i][0][:3] if ds[i][0].shape[0] >= 3 else ds[i][0].expand(3, -1, -1)
                for i in range(len(ds))
            ]
        )
        paths = [str(Path(p).resolve().relative_to(root.resolve())) for p, _ in ds.samples]
        return xs, torch.tensor(ds.targets), paths

    held_dir = next((root / d for d in ("val", "test") if (root / d).is_dir()), None)
    if (root / "train").is_dir() and held_dir is not None:
        train_x, train_y, train_paths = load(root / "train")
        held_x, held_y, held_paths = load(held_dir)
    else:
        x, y, paths = load(root)
        order = torch.randperm(len(y), generator=_generator("imagefolder", config.data_seed))
        cut = int(0.8 * len(y))
        tr, he = order[:cut].sort().values, order[cut:].sort().values
        train_x, train_y, train_paths = x[tr], y[tr], [paths[i] for i in tr]
        held_x, held_y, held_paths = x[he], y[he], [paths[i] for i in he]
    groups = held_groups = None
    if has_groups(config, root):
        with open(root / "groups.csv", newline="") as f:
            mapping = {row[0]: row[1] for row in csv.reader(f) if row}
        ids = {g: i for i, g in enumerate(sorted(set(mapping.values())))}
        # a path without a group is a group of its own (a negative id) in both splits
        group_ids = lambda paths: torch.tensor(  # noqa: E731
            [ids.get(mapping.get(p, ""), -1 - i) for i, p in enumerate(paths)], dtype=torch.long
        )
        groups, held_groups = group_ids(train_paths), group_ids(held_paths)
    probe = _subset(len(train_y), config.probe_train_size, "probe", "imagefolder", config.data_seed)
    mean, std = _NORMALISATION["imagefolder"]
    return DataBundle(
        "imagefolder", "image", train_x, train_y, held_x, held_y, probe, groups, mean, std,
        heldout_groups=held_groups,
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# the example stream and two-view batches
# ---------------------------------------------------------------------------------------------
class ExampleStream:
    """Full batches of distinct source indices, a pure function of (seed, step)."""

    def __init__(self, n: int, batch_size: int, seed: int) -> None:
        if batch_size * 2 > n:
            raise ValueError(
                f"batch_size={batch_size} needs at least {2 * batch_size} training examples "
                f"so that every batch holds distinct sources; the dataset has {n}"
            )
        self.n, self.batch_size, self.seed = n, batch_size, seed
        self._cache: dict[int, Tensor] = {}

    def _raw(self, epoch: int) -> Tensor:
        if epoch not in self._cache:
            self._cache = {e: p for e, p in self._cache.items() if e >= epoch - 1}
            self._cache[epoch] = torch.randperm(
                self.n, generator=_generator("epoch", self.seed, epoch)
            )
        return self._cache[epoch]

    def _boundary_tail(self, epoch: int) -> Tensor:
        """Indices of epoch - 1 that share a batch with the head of ``epoch``."""
        start = (
            epoch * self.n // self.batch_size
        ) * self.batch_size  # first position of that batch
        if epoch == 0 or start == epoch * self.n:
            return torch.empty(0, dtype=torch.long)
        return self._raw(epoch - 1)[start - (epoch - 1) * self.n :]

    def permutation(self, epoch: int) -> Tensor:
        """Epoch ``epoch``'s order: its raw permutation, with the boundary batch's head kept free
        of the previous epoch's tail (those move just after the head, order otherwise kept)."""
        perm, tail = self._raw(epoch), self._boundary_tail(epoch)
        if len(tail) == 0:
            return perm
        need = self.batch_size - len(tail)
        clash = torch.isin(perm, tail)
        free = perm[~clash]
        head = free[:need]
        rest_mask = torch.ones(self.n, dtype=torch.bool)
        rest_mask[(~clash).nonzero().flatten()[:need]] = False
        return torch.cat([head, perm[rest_mask]])

    def batch(self, step: int) -> Tensor:
        """(batch_size,) source indices of optimiser step ``step``."""
        start = step * self.batch_size
        epoch, offset = divmod(start, self.n)
        first = self.permutation(epoch)[offset : offset + self.batch_size]
        if len(first) == self.batch_size:
            return first
        return torch.cat([first, self.permutation(epoch + 1)[: self.batch_size - len(first)]])


def step_generator(seed: int, step: int, device: torch.device | str = "cpu") -> torch.Generator:
    """The generator of step ``step``'s augmentation: a pure function of (seed, step)."""
    digest = hashlib.sha256(f"views:{seed}:{step}".encode()).digest()
    return torch.Generator(device=device).manual_seed(int.from_bytes(digest[:8], "little") >> 1)


def make_augment(config: TrialConfig, data: DataBundle) -> ViewAugment:
    fill = None if data.kind != "image" else data.mean
    return ViewAugment(
        config.augmentation_components, config.aug_strength,
        kind=data.kind, vector_noise=data.vector_noise, fill=fill,
        crop_area_min=config.crop_area_min,
    )  # fmt: skip


def two_views(
    data: DataBundle, augment: ViewAugment, x: Tensor, g: torch.Generator
) -> tuple[Tensor, Tensor]:
    """(B, ...) raw rows -> two independently augmented, normalised views, each (B, ...)."""
    x = data.prepare(x)
    return data.normalise(augment(x, g)), data.normalise(augment(x, g))


class _ViewBatches(torch.utils.data.Dataset):
    """Item ``i`` is step ``start + i``'s (indices, view 1, view 2), built in a worker."""

    def __init__(
        self, data: DataBundle, augment: ViewAugment, stream: ExampleStream, start: int, stop: int
    ):
        self.data, self.augment, self.stream = data, augment, stream
        self.start, self.stop = start, stop

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor, Tensor]:
        step = self.start + i
        idx = self.stream.batch(step)
        v1, v2 = two_views(
            self.data, self.augment, self.data.train_x[idx], step_generator(self.stream.seed, step)
        )
        return idx, v1, v2


class ResidentData:
    """A dataset's tensors on a device, copied once: training rows (uint8 images stay uint8),
    groups, held-out rows and labels, and the probe's rows and labels.

    On CUDA the copies go through pinned memory. A trial indexes batches here, so no step copies
    examples from the host.
    """

    def __init__(self, data: DataBundle, device: torch.device) -> None:
        self.device = device
        self.train_x = self.put(data.train_x)
        self.train_groups = None if data.train_groups is None else self.put(data.train_groups)
        self.heldout_x, self.heldout_y = self.put(data.heldout_x), self.put(data.heldout_y)
        self.probe_x = self.put(data.train_x[data.probe_index])
        self.probe_y = self.put(data.train_y[data.probe_index])

    def put(self, x: Tensor) -> Tensor:
        if self.device.type == "cuda":
            return x.pin_memory().to(self.device, non_blocking=True)
        return x.to(self.device)


class DeviceStream:
    """:class:`ExampleStream`'s batches as indices on a device: each epoch's order is copied
    there once (pinned), and a batch is a slice of it, so a step copies nothing."""

    def __init__(self, stream: ExampleStream, device: torch.device) -> None:
        self.stream, self.device = stream, device
        self._orders: dict[int, Tensor] = {}

    def order(self, epoch: int) -> Tensor:
        if epoch not in self._orders:
            self._orders = {e: o for e, o in self._orders.items() if e >= epoch - 1}
            order = self.stream.permutation(epoch)
            if self.device.type == "cuda":
                order = order.pin_memory()
            self._orders[epoch] = order.to(self.device, non_blocking=True)
        return self._orders[epoch]

    def batch(self, step: int) -> Tensor:
        """(batch_size,) source indices of step ``step`` on the device: ``stream.batch(step)``."""
        b, n = self.stream.batch_size, self.stream.n
        epoch, offset = divmod(step * b, n)
        first = self.order(epoch)[offset : offset + b]
        if first.shape[0] == b:
            return first
        return torch.cat([first, self.order(epoch + 1)[: b - first.shape[0]]])


def resident_batches(
    config: TrialConfig, data: DataBundle, resident: ResidentData, start_step: int
) -> Iterator[tuple[int, Tensor, Tensor, Tensor]]:
    """:func:`view_batches` on data already on its device (``resident``): the same batches and
    views, augmented there with the step's generator on that device."""
    stream = DeviceStream(
        ExampleStream(len(data.train_x), config.batch_size, config.seed), resident.device
    )
    augment = make_augment(config, data)
    for step in range(start_step, config.steps):
        idx = stream.batch(step)
        g = step_generator(config.seed, step, resident.device)
        v1, v2 = two_views(data, augment, resident.train_x[idx], g)
        yield step, idx, v1, v2


def view_batches(
    config: TrialConfig, data: DataBundle, start_step: int, device: torch.device
) -> Iterator[tuple[int, Tensor, Tensor, Tensor]]:
    """Yield (step, source indices (B,), view 1, view 2) for steps start_step .. steps - 1.

    On CUDA the data go to the device once and batches are indexed and augmented there
    (:func:`resident_batches`); on the CPU batches are augmented in ``num_workers`` DataLoader
    workers (in-process when 0).
    """
    if device.type == "cuda":
        yield from resident_batches(config, data, ResidentData(data, device), start_step)
        return
    stream = ExampleStream(len(data.train_x), config.batch_size, config.seed)
    augment = make_augment(config, data)
    dataset = _ViewBatches(data, augment, stream, start_step, config.steps)
    if config.num_workers == 0:
        for i in range(len(dataset)):
            yield (start_step + i, *dataset[i])
        return
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=None, shuffle=False, num_workers=config.num_workers,
        persistent_workers=False, prefetch_factor=4,
    )  # fmt: skip
    for i, (idx, v1, v2) in enumerate(loader):
        yield start_step + i, idx, v1, v2
