"""Datasets and the example stream: splits, real on-disk formats, full distinct batches."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from datakit import write_fake_cifar10
from PIL import Image

from trainables.config import TrialConfig
from trainables.data import ExampleStream, digits_split, load_data, toy_samples
from trainables.sources import digits_cache_path

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("n", "b"), [(100, 32), (97, 48), (1437, 128), (10, 5)])
def test_stream_gives_full_batches_of_distinct_sources(n, b):
    stream = ExampleStream(n, b, seed=3)
    steps = (5 * n) // b + 3
    seen = []
    for step in range(steps):
        batch = stream.batch(step)
        assert batch.shape == (b,)
        assert len(set(batch.tolist())) == b, f"duplicate source in step {step}"
        seen += batch.tolist()
    # over whole epochs, every example appears once per epoch (give or take the boundary swaps)
    counts = np.bincount(seen, minlength=n)
    assert counts.min() >= len(seen) // n - 1 and counts.max() <= len(seen) // n + 2


def test_stream_is_a_pure_function_of_seed_and_step():
    a, b = ExampleStream(500, 64, seed=1), ExampleStream(500, 64, seed=1)
    assert a.batch(37).tolist() == b.batch(37).tolist()  # no state: step 37 straight away
    assert a.batch(37).tolist() != ExampleStream(500, 64, seed=2).batch(37).tolist()


def test_stream_rejects_a_batch_larger_than_half_the_data():
    with pytest.raises(ValueError, match="batch_size=1000 needs at least 2000 training examples"):
        ExampleStream(1437, 1000, seed=0)


def test_digits_split_is_fixed_and_independent_of_the_trial_seed():
    a = load_data(TrialConfig(seed=1))
    b = load_data(TrialConfig(seed=2))
    assert a.train_x.shape == (1437, 1, 8, 8) and a.heldout_x.shape == (360, 1, 8, 8)
    torch.testing.assert_close(a.heldout_x, b.heldout_x)
    assert a.num_classes == 10
    c = load_data(TrialConfig(data_seed=1))
    assert not torch.equal(a.heldout_y, c.heldout_y)


def _sklearns_digits(data_seed: int):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    train, held = train_test_split(
        np.arange(len(y)), test_size=0.2, random_state=data_seed, stratify=y
    )
    return x, y, np.sort(train), np.sort(held)


@pytest.mark.parametrize("data_seed", [0, 3])
def test_digits_from_the_nodes_cache_are_scikit_learns_own(tmp_path, monkeypatch, data_seed):
    monkeypatch.setenv("CONTRASTIVE_DATA_CACHE", str(tmp_path))
    made, kept = digits_split(data_seed), digits_split(data_seed)  # made, then read back
    assert digits_cache_path(data_seed).is_file()
    for ours, again, theirs in zip(made, kept, _sklearns_digits(data_seed), strict=True):
        assert ours.dtype == again.dtype == theirs.dtype
        assert np.array_equal(ours, theirs) and np.array_equal(again, theirs)


def test_a_cached_digits_trial_imports_no_scikit_learn(tmp_path):
    """The node's later trials read the cached arrays: no ~1.2 s scikit-learn import."""
    env = os.environ | {"CONTRASTIVE_DATA_CACHE": str(tmp_path)}
    code = ("import sys; from trainables.config import TrialConfig; "
            "from trainables.data import load_data; load_data(TrialConfig(dataset='digits')); "
            "print('sklearn' in sys.modules)")  # fmt: skip
    first, later = (subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                                   capture_output=True, text=True) for _ in range(2))  # fmt: skip
    assert first.stdout.split()[-1:] == ["True"], first.stderr[-2000:]
    assert later.stdout.split()[-1:] == ["False"], later.stderr[-2000:]


def test_a_damaged_or_unwritable_digits_cache_still_gives_the_digits(tmp_path, monkeypatch):
    monkeypatch.setenv("CONTRASTIVE_DATA_CACHE", str(tmp_path))
    digits_cache_path(0).parent.mkdir(parents=True)
    digits_cache_path(0).write_bytes(b"PK\x03\x04 cut short")  # a damaged file is made again
    assert np.array_equal(digits_split(0)[2], _sklearns_digits(0)[2])
    assert np.load(digits_cache_path(0))["held"].shape == (360,)
    monkeypatch.setenv("CONTRASTIVE_DATA_CACHE", "/proc/no-such-cache")  # cannot be written
    assert np.array_equal(digits_split(0)[3], _sklearns_digits(0)[3])


def test_a_digits_cache_that_cannot_be_written_whole_keeps_no_part(tmp_path, monkeypatch):
    monkeypatch.setenv("CONTRASTIVE_DATA_CACHE", str(tmp_path))

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", disk_full)
    assert np.array_equal(digits_split(0)[2], _sklearns_digits(0)[2])
    assert list(digits_cache_path(0).parent.iterdir()) == []


def test_toy_generator_and_groups():
    cfg = TrialConfig(
        dataset="toy", encoder="mlp", augmentation="noise", toy_photos_per_item=4, toy_spread=0.3
    )
    x, y, groups = toy_samples(cfg, 40, "train")
    assert x.shape == (40, 8) and groups.tolist() == [i // 4 for i in range(40)]
    assert all(len(set(y[groups == g].tolist())) == 1 for g in range(10))  # one class per item
    data = load_data(cfg)
    assert data.train_groups is not None and data.kind == "vector"


def test_fake_cifar10_loads_through_torchvision(tmp_path):
    write_fake_cifar10(tmp_path)
    cfg = TrialConfig(dataset="cifar10", data_root=str(tmp_path), data_checksums=False)
    data = load_data(cfg)
    assert data.train_x.shape == (100, 3, 32, 32) and data.train_x.dtype == torch.uint8
    assert data.heldout_x.shape == (30, 3, 32, 32)
    # torchvision's reader: row-major 3072 = 3 planes of 32 × 32
    with open(tmp_path / "cifar-10-batches-py" / "data_batch_1", "rb") as f:
        first = pickle.load(f, encoding="latin1")["data"][0]
    assert data.train_x[0].flatten().tolist() == first.tolist()


def test_cifar10_with_checksums_reports_the_data_root(tmp_path):
    write_fake_cifar10(tmp_path)
    cfg = TrialConfig(dataset="cifar10", data_root=str(tmp_path))
    with pytest.raises(ValueError, match=rf"data_root='{tmp_path}': torchvision could not load"):
        load_data(cfg)


def test_missing_data_root(tmp_path):
    cfg = TrialConfig(dataset="cifar10", data_root=str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match=r"data_root=.*nowhere' does not exist"):
        load_data(cfg)


def test_imagefolder_with_groups(tmp_path):
    rng = np.random.default_rng(0)
    for cls in ("cats", "dogs"):
        (tmp_path / cls).mkdir()
        for i in range(10):
            pixels = rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(tmp_path / cls / f"{i}.png")
    (tmp_path / "groups.csv").write_text(
        "".join(f"{c}/{i}.png,{c}-{i // 2}\n" for c in ("cats", "dogs") for i in range(10))
    )
    cfg = TrialConfig(dataset="imagefolder", data_root=str(tmp_path), image_size=16)
    data = load_data(cfg)
    assert data.train_x.shape == (16, 3, 16, 16) and data.heldout_x.shape == (4, 3, 16, 16)
    assert data.train_groups is not None and data.train_groups.shape == (16,)
    assert data.num_classes == 2
