"""A data_root in a bucket: listed where it lies, downloaded once per node into a
cache keyed by its content, loaded as the same folder on disk would be.

The bucket is a real S3 API (moto's server on 127.0.0.1, ``tests/kits/s3kit.py``) holding an
imagefolder of PNG files; every test's cache is a folder of its own (``CONTRASTIVE_DATA_CACHE``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from datakit import write_images
from distkit import free_port
from PIL import Image
from s3kit import AWS_ENV, make_bucket, s3_client, s3_server, upload  # noqa: F401

import trainables.data as data_module
from trainables import remote
from trainables.config import TrialConfig
from trainables.data import load_data
from trainables.sources import check_data, data_key, has_groups

ROOT = Path(__file__).resolve().parents[2]
URI = "s3://pics/imgs"


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    """This test's node-local cache; nothing lands in ~/.cache. The process's dataset cache
    starts empty, as in a fresh worker."""
    folder = tmp_path / "cache"
    monkeypatch.setenv(remote.CACHE_ENV, str(folder))
    data_module._CACHE.clear()
    yield folder
    data_module._CACHE.clear()


@pytest.fixture
def bucket_images(s3_server, tmp_path) -> Path:  # noqa: F811
    """The local imagefolder that was uploaded to ``URI``."""
    local = write_images(tmp_path / "local")
    make_bucket("pics")
    assert upload(local, "pics", "imgs") == 21
    return local


def config(root: str) -> TrialConfig:
    return TrialConfig(dataset="imagefolder", data_root=root, image_size=16)


def downloads(cache: Path) -> dict[str, dict]:
    """The cache's download records (``<key>.json``), by key."""
    return {p.stem: json.loads(p.read_text()) for p in sorted(cache.glob("*.json"))}


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    environment = os.environ | {"PYTHONPATH": str(ROOT)} | env
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=environment,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


LOAD_IN_A_NEW_PROCESS = f"""
import json
from trainables import remote
from trainables.config import TrialConfig
from trainables.data import load_data
data = load_data(TrialConfig(dataset="imagefolder", data_root={URI!r}, image_size=16))
print(json.dumps({{"train": len(data.train_x), "downloads": remote.download_count}}))
"""


def test_a_bucket_data_root_loads_as_the_same_folder_on_disk(bucket_images, cache):
    before = remote.download_count
    cfg = config(URI)
    check_data(cfg)  # the preflight's check lists the bucket and downloads nothing
    assert remote.download_count == before and not cache.exists()
    assert has_groups(cfg)  # groups.csv seen in the listing, still no download
    assert remote.download_count == before and not cache.exists()

    data = load_data(cfg)
    assert remote.download_count == before + 1
    assert data.train_x.shape == (16, 3, 16, 16) and data.heldout_x.shape == (4, 3, 16, 16)
    assert data.num_classes == 2 and data.train_groups is not None
    key = remote.content_key(URI)
    assert data_key(cfg)[-1] == key and list(downloads(cache)) == [key]
    record = downloads(cache)[key]
    assert record["uri"] == URI and record["objects"] == 21
    assert sorted(p.name for p in (cache / key).iterdir()) == ["cats", "dogs", "groups.csv"]

    local = load_data(config(str(bucket_images)))  # the same images read from the local folder
    for name in ("train_x", "train_y", "heldout_x", "heldout_y", "train_groups"):
        assert torch.equal(getattr(data, name), getattr(local, name)), name


def test_a_second_trial_on_the_node_reuses_the_download(bucket_images, cache):
    load_data(config(URI))
    first = downloads(cache)
    (key,) = first
    stamp = (cache / key).stat().st_ino, (cache / key).stat().st_mtime_ns
    count = remote.download_count

    data_module._CACHE.clear()  # a new trial in a fresh worker of this process
    again = load_data(config(URI))
    assert remote.download_count == count and len(again.train_x) == 16

    done = run_python(LOAD_IN_A_NEW_PROCESS)  # another process on the same node
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"train": 16, "downloads": 0}
    assert downloads(cache) == first  # no new download record, none rewritten
    assert ((cache / key).stat().st_ino, (cache / key).stat().st_mtime_ns) == stamp


def test_trials_starting_together_download_once(bucket_images, cache):
    """Two processes list the bucket at the same moment and find no copy; each download takes
    a second longer than it would (a slow network), so without the lock both would download."""
    code = (
        "import sys, time; import pyarrow.fs; from trainables import remote\n"
        "copy = pyarrow.fs.copy_files\n"
        "pyarrow.fs.copy_files = lambda *a, **k: (time.sleep(1), copy(*a, **k))[1]\n"
        "time.sleep(max(0.0, float(sys.argv[1]) - time.time()))\n"
        f"remote.local_data_root({URI!r}); print(remote.download_count)\n"
    )
    start = f"{time.time() + 3:.3f}"  # both past their imports, then at once
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    args = {"cwd": ROOT, "env": env, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    procs = [subprocess.Popen([sys.executable, "-c", code, start], text=True, **args) for _ in "ab"]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
    assert sorted(int(out.split()[-1]) for out, _ in outs) == [0, 1]
    assert len(downloads(cache)) == 1
    assert not list(cache.glob(".*"))  # no temporary folder left behind


def test_changed_content_is_a_new_key_and_a_new_download(bucket_images, cache):
    load_data(config(URI))
    (first,) = downloads(cache)
    count = remote.download_count
    client = s3_client()

    extra = bucket_images / "cats" / "0.png"
    client.put_object(Bucket="pics", Key="imgs/cats/extra.png", Body=extra.read_bytes())
    data = load_data(config(URI))  # a new object
    assert remote.download_count == count + 1 and len(downloads(cache)) == 2
    assert len(data.train_x) + len(data.heldout_x) == 20 + 1  # 21 objects: 20 images, groups.csv

    image = Image.fromarray(np.zeros((20, 24, 3), dtype=np.uint8))  # a smaller PNG
    path = bucket_images / "black.png"
    image.save(path)
    assert path.stat().st_size != extra.stat().st_size
    client.put_object(Bucket="pics", Key="imgs/cats/extra.png", Body=path.read_bytes())
    load_data(config(URI))  # the same object, resized
    assert remote.download_count == count + 2 and len(downloads(cache)) == 3
    assert first in downloads(cache)  # the older content's copy is still there, untouched


@pytest.mark.parametrize(
    ("uri", "reason"),
    [
        ("s3://pics/no-such-prefix", "nothing is stored under this URI"),
        ("s3://no-such-bucket/imgs", "could not list the objects"),
    ],
)
def test_a_missing_prefix_or_bucket_names_data_root_and_the_uri(bucket_images, cache, uri, reason):
    message = rf"data_root='{uri}': {reason}"
    with pytest.raises(ValueError, match=message):
        check_data(config(uri))
    with pytest.raises(ValueError, match=message):
        load_data(config(uri))
    assert not cache.exists() or not any(cache.iterdir())


def test_an_unreachable_endpoint_fails_quickly_naming_data_root(monkeypatch, cache):
    for name, value in AWS_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # nothing there
    start = time.monotonic()
    with pytest.raises(ValueError, match=rf"data_root='{URI}': could not list the objects"):
        load_data(config(URI))
    assert time.monotonic() - start < 10
    assert not cache.exists() or not any(cache.iterdir())


def test_a_bucket_is_read_only_and_an_unknown_scheme_is_refused():
    with pytest.raises(ValueError, match=rf"data_root='{URI}' is a bucket URI, read-only"):
        check_data(TrialConfig(dataset="cifar10", data_root=URI, download=True))
    with pytest.raises(ValueError, match=r"data_root='nope://x/y': not a URI pyarrow can open"):
        check_data(config("nope://x/y"))


def test_a_file_uri_is_the_folder_it_names(tmp_path, cache):
    local = write_images(tmp_path / "local", per_class=5)
    assert remote.is_uri(local.as_uri()) and not remote.is_remote(local.as_uri())
    assert not remote.is_uri(str(local)) and not remote.is_uri("lab notes #3 (50%)")
    data = load_data(config(local.as_uri()))
    assert len(data.train_x) + len(data.heldout_x) == 10 and not cache.exists()


def test_trainables_import_and_train_without_pyarrow():
    """As where only torch, numpy, sklearn and pyyaml are installed: every import of pyarrow
    fails (a finder refuses it; ``sys.modules['pyarrow'] = None`` would trip sklearn, which
    looks pyarrow up in sys.modules)."""
    code = (
        "import sys\n"
        "class NoPyarrow:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'pyarrow':\n"
        "            raise ImportError('pyarrow is blocked')\n"
        "sys.meta_path.insert(0, NoPyarrow())\n"
        "import trainables.data, trainables.train\n"
        "from trainables.config import TrialConfig\n"
        "assert len(trainables.data.load_data(TrialConfig()).train_x) == 1437\n"
        "try:\n"
        "    trainables.sources.check_data(TrialConfig(dataset='cifar10', data_root='s3://b/c'))\n"
        "except ValueError as err:\n"
        "    print(err)\n"
        "assert 'pyarrow' not in sys.modules\n"
    )
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    assert "data_root='s3://b/c': reading a URI needs pyarrow" in done.stdout


def test_the_recorded_dataset_names_the_bucket_and_fingerprints_its_content(bucket_images, cache):
    from study.provenance import training_dataset

    first = training_dataset(config(URI)).dataset
    assert first.source_type == "s3" and json.loads(first.source) == {"uri": URI}
    assert training_dataset(config(URI)).dataset.digest == first.digest  # stable
    assert not cache.exists()  # fingerprinted from a listing, nothing downloaded
    s3_client().put_object(Bucket="pics", Key="imgs/dogs/notes.txt", Body=b"new")
    assert training_dataset(config(URI)).dataset.digest != first.digest


def test_within_listings_kept_a_bucket_is_listed_once_and_afresh_outside(
    bucket_images, monkeypatch
):
    """``study run`` reads the data's bucket three times before its launch (the target metric's
    evidence, the preflight's check, the baselines' data key): listed once, within
    ``listings_kept``; outside it, every read lists afresh (no stale listing in a long-lived
    process)."""
    listed = []
    real = remote.snapshot
    monkeypatch.setattr(remote, "snapshot", lambda uri: listed.append(uri) or real(uri))
    with remote.listings_kept():
        assert has_groups(config(URI))  # the images carry groups.csv
        check_data(config(URI))
        key = data_key(config(URI))
        with remote.listings_kept():  # nested: the outer run's listings still serve
            assert data_key(config(URI)) == key
    assert listed == [URI]
    assert data_key(config(URI)) == key
    data_key(config(URI))
    assert listed == [URI] * 3
