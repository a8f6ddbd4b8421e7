"""MNIST-format data: the IDX reader, Fashion-MNIST from Debian's package folder, any
MNIST-format folder (``mnist_idx``), their refusals, a bucket data_root, and a trial on them.

IDX files are written here in the real format (``trainables.idx.write_idx``, and byte by byte
with ``struct`` where the format itself is under test). The real Fashion-MNIST tests skip where
``scripts/setup_data.sh`` has not installed it.
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from s3kit import make_bucket, s3_client, s3_server  # noqa: F401

import trainables.data as data_module
from trainables import idx, remote
from trainables.config import FASHION_MNIST_ROOT, TrialConfig
from trainables.data import load_data
from trainables.sources import check_data, data_key

REAL = Path(FASHION_MNIST_ROOT)
HAVE_REAL = all(idx.find(REAL, name) for name in idx.NAMES)
FILE_NAMES = ", ".join(idx.NAMES)


@pytest.fixture(autouse=True)
def fresh_cache():
    """Every test loads its own files: the process's one-dataset cache starts empty."""
    data_module._CACHE.clear()
    yield
    data_module._CACHE.clear()


def mnist(root: Path, **fields) -> TrialConfig:
    return TrialConfig(dataset="mnist_idx", data_root=str(root), **fields)


# ---------------------------------------------------------------------------------------------
# the reader
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("gz", [True, False])
def test_a_file_written_byte_by_byte_reads_back_exactly(tmp_path, gz):
    pixels = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4) * 10
    raw = struct.pack(">BBBBIII", 0, 0, 0x08, 3, 2, 3, 4) + pixels.tobytes()
    path = tmp_path / ("x.gz" if gz else "x")
    path.write_bytes(gzip.compress(raw) if gz else raw)
    got = idx.read_idx(path)
    assert got.dtype == np.uint8 and got.shape == (2, 3, 4)
    assert np.array_equal(got, pixels)
    wide = np.array([[1, -2], [300, 70000]], dtype=np.int32)  # 0x0C: big-endian int32
    (tmp_path / "w").write_bytes(
        struct.pack(">BBBBII", 0, 0, 0x0C, 2, 2, 2) + wide.byteswap().tobytes()
    )
    assert idx.read_idx(tmp_path / "w").tolist() == wide.tolist()
    assert idx.encode(pixels) == raw  # the writer makes the same bytes


@pytest.mark.parametrize("gz", [True, False])
def test_written_folders_round_trip_pixels_and_labels(tmp_path, gz):
    folder = idx.write_idx(tmp_path, n_train=30, n_test=20, gz=gz)
    suffix = ".gz" if gz else ""
    assert sorted(p.name for p in folder.iterdir()) == sorted(n + suffix for n in idx.NAMES)
    images, labels = idx.read_split(folder, "train")
    raw = (folder / f"train-images-idx3-ubyte{suffix}").read_bytes()
    raw = gzip.decompress(raw) if gz else raw
    assert struct.unpack(">BBBBIII", raw[:16]) == (0, 0, 8, 3, 30, 28, 28)
    assert images.shape == (30, 1, 28, 28) and images.dtype == np.uint8
    assert images.tobytes() == raw[16:]
    label_raw = (folder / f"train-labels-idx1-ubyte{suffix}").read_bytes()
    label_raw = gzip.decompress(label_raw) if gz else label_raw
    assert labels.dtype == np.int64 and labels.tolist() == list(label_raw[8:])
    assert sorted(np.bincount(labels).tolist()) == [3] * 10

    data = load_data(mnist(folder))  # and through the loader, as tensors
    assert data.kind == "image" and data.train_x.shape == (30, 1, 28, 28)
    assert data.train_x.dtype == torch.uint8 and data.heldout_x.shape == (20, 1, 28, 28)
    assert torch.equal(data.train_x, torch.from_numpy(images))
    assert (data.mean, data.std) == ((0.1307,), (0.3081,))


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda raw: b"\1" + raw[1:], "not an IDX file"),
        (lambda raw: raw[:2] + b"\x07" + raw[3:], "unknown IDX type code 0x07"),
        (lambda raw: raw[:-5], r"IDX header says \(30, 28, 28\) of uint8 \(23520 .* holds 23515"),
        (lambda raw: raw[:6], "IDX header says 3 dimensions; the file is too short"),
    ],
    ids=["magic", "type-code", "truncated-data", "truncated-header"],
)
def test_a_malformed_file_is_refused_naming_it(tmp_path, damage, reason):
    folder = idx.write_idx(tmp_path, 30, 20, gz=False)
    path = folder / "train-images-idx3-ubyte"
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(ValueError, match=rf"{path}: {reason}"):
        load_data(mnist(folder))


def test_a_broken_gzip_and_a_count_mismatch_are_refused_naming_the_files(tmp_path):
    folder = idx.write_idx(tmp_path / "a", 30, 20)
    labels = folder / "t10k-labels-idx1-ubyte.gz"
    labels.write_bytes(labels.read_bytes()[:-8])
    with pytest.raises(ValueError, match=rf"{labels}: not a readable gzip file"):
        load_data(mnist(folder))

    folder = idx.write_idx(tmp_path / "b", 30, 20)
    other = idx.write_idx(tmp_path / "c", 40, 20)
    (other / "train-labels-idx1-ubyte.gz").replace(folder / "train-labels-idx1-ubyte.gz")
    images, labels = folder / "train-images-idx3-ubyte.gz", folder / "train-labels-idx1-ubyte.gz"
    with pytest.raises(ValueError, match=rf"{images} holds 30 images but {labels} holds 40"):
        load_data(mnist(folder))


# ---------------------------------------------------------------------------------------------
# refusals: the preflight's check_data
# ---------------------------------------------------------------------------------------------
def test_a_missing_folder_is_refused_naming_data_root_the_files_and_the_package(tmp_path):
    nowhere = tmp_path / "nowhere"
    for config, extra in [
        (TrialConfig(dataset="fashion_mnist", data_root=str(nowhere)), "dataset-fashion-mnist"),
        (mnist(nowhere), "set data_root to a folder"),
    ]:
        with pytest.raises(ValueError, match=rf"data_root='{nowhere}': no such folder") as err:
            check_data(config)
        message = str(err.value)
        assert FILE_NAMES in message and "NAME.gz or plain" in message and extra in message
    with pytest.raises(ValueError, match="data_root is required for dataset='mnist_idx'"):
        TrialConfig(dataset="mnist_idx")


def test_a_missing_file_is_refused_and_plain_files_pass(tmp_path):
    folder = idx.write_idx(tmp_path, 30, 20)
    (folder / "t10k-labels-idx1-ubyte.gz").unlink()
    config = TrialConfig(dataset="fashion_mnist", data_root=str(folder))
    message = rf"data_root='{folder}': the folder lacks t10k-labels-idx1-ubyte; "
    with pytest.raises(ValueError, match=message) as err:
        check_data(config)
    assert FILE_NAMES in str(err.value) and "dataset-fashion-mnist" in str(err.value)
    idx.write_idx(tmp_path, 30, 20, gz=False)  # plain files beside the gzipped ones
    assert check_data(config) is None


def test_fashion_mnist_defaults_to_the_debian_folder_and_keeps_data_root_none():
    config = TrialConfig(dataset="fashion_mnist")
    assert config.data_root is None and data_module.data_dir(config) == REAL
    if HAVE_REAL:
        assert check_data(config) is None
        return
    with pytest.raises(ValueError, match=r"data_root=None \(dataset='fashion_mnist' reads"):
        check_data(config)


@pytest.mark.skipif(not HAVE_REAL, reason="Fashion-MNIST is not installed: scripts/setup_data.sh")
def test_the_real_fashion_mnist():
    config = TrialConfig(dataset="fashion_mnist", heldout_size=2000, probe_train_size=500)
    data = load_data(config)
    assert data.train_x.shape == (60000, 1, 28, 28) and data.train_x.dtype == torch.uint8
    assert data.num_classes == 10 and data.train_y.bincount().tolist() == [6000] * 10
    assert data.heldout_x.shape == (2000, 1, 28, 28) and data.probe_index.shape == (500,)
    test_x, test_y = idx.read_split(REAL, "test")  # the held-out rows are test rows
    rows = data_module._subset(10000, 2000, "heldout", "fashion_mnist", 0)
    assert torch.equal(data.heldout_x, torch.from_numpy(test_x)[rows])
    assert torch.equal(data.heldout_y, torch.from_numpy(test_y)[rows])
    assert data.prepare(data.train_x).std().item() == pytest.approx(data.std[0], abs=1e-3)
    assert data_key(config)[-1][0][0].startswith(str(REAL))  # stamps of the files read


# ---------------------------------------------------------------------------------------------
# a bucket data_root, and a trial
# ---------------------------------------------------------------------------------------------
def test_a_bucket_data_root_is_checked_and_loads(s3_server, tmp_path, monkeypatch):  # noqa: F811
    """The listing must hold the four files; then the bucket loads as the same folder would."""
    monkeypatch.setenv(remote.CACHE_ENV, str(tmp_path / "cache"))
    folder = idx.write_idx(tmp_path / "local", 30, 20)
    make_bucket("idx")
    for path in sorted(folder.iterdir())[1:]:  # all but t10k-images: refused
        s3_client().put_object(Bucket="idx", Key=f"mnist/{path.name}", Body=path.read_bytes())
    config = TrialConfig(dataset="mnist_idx", data_root="s3://idx/mnist")
    with pytest.raises(ValueError, match="data_root='s3://idx/mnist': the bucket's listing lacks "
                       "t10k-images-idx3-ubyte;"):  # fmt: skip
        check_data(config)
    first = folder / "t10k-images-idx3-ubyte.gz"
    s3_client().put_object(Bucket="idx", Key=f"mnist/{first.name}", Body=first.read_bytes())
    before = remote.download_count
    assert check_data(config) is not None and remote.download_count == before  # listed only
    data = load_data(config)
    assert remote.download_count == before + 1
    assert torch.equal(data.train_x, load_data(mnist(folder)).train_x)
    assert data_key(config)[-1] == remote.content_key("s3://idx/mnist")


@pytest.mark.slow
def test_a_tiny_trial_on_written_idx_files(tmp_path):
    from trainables.train import run_trial

    folder = idx.write_idx(tmp_path, 256, 100)
    result = run_trial(
        mnist(folder, budget_examples=128, batch_size=32, heldout_size=50, probe_train_size=100,
              linear_probe_iters=5, eval_marks=1, device="cpu")
    )  # fmt: skip
    assert result["status"] == "finished" and result["examples_seen"] == 128
    assert 0 <= result["probe/knn_top1_h"] <= 1


# ---------------------------------------------------------------------------------------------
# failures reported against other MNIST readers, replayed here
# ---------------------------------------------------------------------------------------------
def test_gzip_bytes_under_a_plain_name_are_read_by_their_magic(tmp_path):
    """A file that starts with 1F 8B where 00 00 08 03 was expected (tolstikhin/adagan#1: a
    .gz saved without its suffix) is gunzipped, not refused as a broken header."""
    folder = idx.write_idx(tmp_path, 30, 20, gz=True)
    for name in idx.NAMES:
        (folder / f"{name}.gz").rename(folder / name)
    check_data(mnist(folder))
    assert load_data(mnist(folder)).train_x.shape == (30, 1, 28, 28)


@pytest.mark.parametrize("content", [b"", b"\x1f\x8b\x08\x00broken", b"\0\0\x08"])
def test_an_empty_or_broken_file_is_refused_at_the_preflight_naming_it(tmp_path, content):
    """datapythonista/mnist#19 ('file empty or does not contain a full header') and a gzip
    stream that ends early: refused by check_data, before anything is recorded, naming
    data_root and the file."""
    folder = idx.write_idx(tmp_path, 30, 20, gz=False)
    bad = folder / "t10k-labels-idx1-ubyte"
    bad.write_bytes(content)
    with pytest.raises(ValueError, match=rf"data_root=.*{bad}: (not an IDX|not a readable gzip)"):
        check_data(mnist(folder))


def test_labels_that_do_not_match_the_images_are_refused_at_the_preflight(tmp_path):
    folder = idx.write_idx(tmp_path / "a", 30, 20, gz=False)
    other = idx.write_idx(tmp_path / "b", 30, 25, gz=False)
    (other / "t10k-labels-idx1-ubyte").replace(folder / "t10k-labels-idx1-ubyte")
    with pytest.raises(ValueError, match=r"holds 20 images but .*t10k-labels-idx1-ubyte holds 25"):
        check_data(mnist(folder))
