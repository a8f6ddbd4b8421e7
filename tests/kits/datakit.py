"""Data folders written for a test: an imagefolder of real PNG files with a groups.csv, and
CIFAR-10's real on-disk layout with random images."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from trainables.data import write_cifar10


def write_images(root: Path, per_class: int = 10) -> Path:
    """Class folders of real PNG files and a groups.csv (two images per group), as
    tests/trainables/test_datasets.py's imagefolder."""
    rng = np.random.default_rng(0)
    for cls in ("cats", "dogs"):
        (root / cls).mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / cls / f"{i}.png")
    (root / "groups.csv").write_text(
        "".join(f"{c}/{i}.png,{c}-{i // 2}\n" for c in ("cats", "dogs") for i in range(per_class))
    )
    return root


def write_fake_cifar10(root, per_batch: int = 20, test: int = 30) -> None:
    """CIFAR-10's real on-disk layout with random images (``trainables.data.write_cifar10``)."""
    write_cifar10(root, per_batch, test)
