"""IDX files, the format of MNIST and Fashion-MNIST: read, checked, and written for tests.

An IDX file is a header then the array, row-major: two zero bytes, a type code (0x08 unsigned
byte, 0x09 signed byte, 0x0B int16, 0x0C int32, 0x0D float32, 0x0E float64), the number of
dimensions, each dimension as a big-endian uint32, then the values, big-endian. A dataset folder
holds four of them (:data:`FILES`), each gzipped (``NAME.gz``) or plain (``NAME``).

Everything here is numpy: no torchvision, no download, nothing but the files. Every refusal is a
ValueError naming the file, so a truncated download or a wrong file says which one.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

# type code -> numpy dtype (big-endian where it matters)
DTYPES = {
    0x08: np.dtype("u1"), 0x09: np.dtype("i1"), 0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"), 0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8"),
}  # fmt: skip
# split -> (images, labels): the file names every MNIST-format folder uses
FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
NAMES = tuple(name for pair in FILES.values() for name in pair)
_GZIP_MAGIC = b"\x1f\x8b"


def expected_files() -> str:
    """The four names as a refusal lists them."""
    return ", ".join(NAMES) + " (each gzipped as NAME.gz or plain)"


def find(folder: Path, name: str) -> Path | None:
    """``folder/name.gz`` or else ``folder/name``; None when neither is a file."""
    for candidate in (folder / f"{name}.gz", folder / name):
        if candidate.is_file():
            return candidate
    return None


def missing(present: set[str]) -> list[str]:
    """Which of :data:`NAMES` have neither variant among the file names ``present``."""
    return [name for name in NAMES if not {name, f"{name}.gz"} & present]


def _raw(path: Path) -> bytes:
    """The file's bytes, gunzipped when they are gzip (by their magic, not the name)."""
    raw = path.read_bytes()
    if raw[:2] != _GZIP_MAGIC:
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError) as err:  # BadGzipFile is an OSError
        raise ValueError(f"{path}: not a readable gzip file ({err})") from None


def decode(raw: bytes, path: Path | str = "<bytes>") -> np.ndarray:
    """An IDX file's bytes -> its array (native byte order). ValueError naming ``path`` when
    the header is malformed or the data's length is not what the header says."""
    if len(raw) < 4 or raw[:2] != b"\0\0":
        raise ValueError(f"{path}: not an IDX file (its first two bytes must be zero)")
    code, ndim = raw[2], raw[3]
    if code not in DTYPES:
        raise ValueError(
            f"{path}: unknown IDX type code 0x{code:02X} (known: "
            f"{', '.join(f'0x{c:02X}' for c in DTYPES)})"
        )
    start = 4 + 4 * ndim
    if ndim == 0 or len(raw) < start:
        raise ValueError(f"{path}: IDX header says {ndim} dimensions; the file is too short")
    dims = tuple(int(d) for d in np.frombuffer(raw, ">u4", ndim, offset=4))
    dtype = DTYPES[code]
    want = int(np.prod(dims)) * dtype.itemsize
    if len(raw) - start != want:
        raise ValueError(
            f"{path}: IDX header says {dims} of {dtype.name} ({want} bytes of data); "
            f"the file holds {len(raw) - start}"
        )
    return np.frombuffer(raw, dtype, offset=start).reshape(dims).astype(dtype.newbyteorder("="))


def read_idx(path: Path) -> np.ndarray:
    """The array in the IDX file ``path`` (gzipped or plain)."""
    return decode(_raw(Path(path)), path)


def read_split(folder: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """One split of an MNIST-format folder: (images (N, 1, H, W) uint8, labels (N,) int64).
    ValueError naming the file when one is missing, is not unsigned bytes of the right rank,
    or when the two files disagree on N."""
    images_name, labels_name = FILES[split]
    paths = [find(folder, images_name), find(folder, labels_name)]
    for name, path in zip((images_name, labels_name), paths, strict=True):
        if path is None:
            raise ValueError(f"{folder / name}: no such file (nor {name}.gz)")
    images, labels = read_idx(paths[0]), read_idx(paths[1])
    for path, array, ndim in ((paths[0], images, 3), (paths[1], labels, 1)):
        if array.dtype != np.uint8 or array.ndim != ndim:
            raise ValueError(
                f"{path}: expected {ndim}-D unsigned bytes (type 0x08), got {array.ndim}-D "
                f"{array.dtype.name}"
            )
    if len(images) != len(labels):
        raise ValueError(
            f"{paths[0]} holds {len(images)} images but {paths[1]} holds {len(labels)} labels"
        )
    return images[:, None], labels.astype(np.int64)


def header(path: Path) -> tuple[int, tuple[int, ...]]:
    """(type code, dimensions) of the IDX file ``path``, read from its first bytes only (through
    gzip when it is gzip, by its magic): cheap enough for a preflight. ValueError naming the file
    when the header is malformed."""
    path = Path(path)
    with open(path, "rb") as f:
        gz = f.read(2) == _GZIP_MAGIC
    try:
        with gzip.open(path, "rb") if gz else open(path, "rb") as f:
            head = f.read(4)
            if len(head) < 4 or head[:2] != b"\0\0":
                raise ValueError(f"{path}: not an IDX file (its first two bytes must be zero)")
            code, ndim = head[2], head[3]
            dims = f.read(4 * ndim)
    except (OSError, EOFError) as err:  # BadGzipFile is an OSError
        raise ValueError(f"{path}: not a readable gzip file ({err})") from None
    if code not in DTYPES:
        raise ValueError(f"{path}: unknown IDX type code 0x{code:02X}")
    if ndim == 0 or len(dims) < 4 * ndim:
        raise ValueError(f"{path}: IDX header says {ndim} dimensions; the file is too short")
    return code, tuple(int(d) for d in np.frombuffer(dims, ">u4", ndim))


def folder_problem(present: set[str], folder: Path | None, where: str) -> str | None:
    """Why the IDX files of a dataset are not usable, or None: one of the four is missing from
    ``present`` (the file names of ``where``: a folder, or a bucket's listing), or, for a local
    ``folder``, a split's headers are not images and labels of the same rows
    (:func:`check_headers`). The preflight's one question to this format."""
    absent = missing(present)
    if absent:
        return f"{where} lacks {', '.join(absent)}"
    if folder is not None:
        try:
            check_headers(folder)
        except ValueError as err:
            return str(err)
    return None


def check_headers(folder: Path) -> None:
    """The preflight's look at an MNIST-format folder: each split's images are 3-D and its labels
    1-D unsigned bytes, and they count the same rows (the data themselves are read at load)."""
    for split, (images_name, labels_name) in FILES.items():
        paths = [find(folder, images_name), find(folder, labels_name)]
        if None in paths:
            raise ValueError(f"{folder}: the {split} split lacks {images_name} or {labels_name}")
        heads = [header(path) for path in paths]
        for path, (code, dims), ndim in zip(paths, heads, (3, 1), strict=True):
            if code != 0x08 or len(dims) != ndim:
                raise ValueError(
                    f"{path}: expected {ndim}-D unsigned bytes (type 0x08), got {len(dims)}-D "
                    f"type 0x{code:02X}"
                )
        if heads[0][1][0] != heads[1][1][0]:
            raise ValueError(
                f"{paths[0]} holds {heads[0][1][0]} images but {paths[1]} holds "
                f"{heads[1][1][0]} labels"
            )


def encode(array: np.ndarray) -> bytes:
    """An array -> the bytes of its IDX file (the inverse of :func:`decode`)."""
    code = {dtype: code for code, dtype in DTYPES.items()}[array.dtype.newbyteorder(">")]
    header = bytes([0, 0, code, array.ndim]) + np.asarray(array.shape, ">u4").tobytes()
    return header + np.ascontiguousarray(array, array.dtype.newbyteorder(">")).tobytes()


def write_idx(
    folder: str | Path, n_train: int, n_test: int, gz: bool = True, seed: int = 0
) -> Path:
    """Write an MNIST-format folder: the four files of :data:`FILES` (``.gz`` when ``gz``) with
    random 28 × 28 uint8 images and labels 0-9 (each class equally often, shuffled); returns
    ``folder``. For tests and benchmarks that need the real format without the real data."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for split, n in (("train", n_train), ("test", n_test)):
        images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        labels = rng.permutation(np.arange(n) % 10).astype(np.uint8)
        for name, array in zip(FILES[split], (images, labels), strict=True):
            raw = encode(array)
            path = folder / (f"{name}.gz" if gz else name)
            path.write_bytes(gzip.compress(raw, mtime=0) if gz else raw)
    return folder
