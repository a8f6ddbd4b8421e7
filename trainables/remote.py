"""A ``data_root`` in a bucket: listed where it lies, downloaded once per node into a local cache.

A ``data_root`` may be a URI (``s3://bucket/prefix``, ``gs://bucket/prefix`` or any other that
``pyarrow.fs.FileSystem.from_uri`` resolves) instead of a folder. :func:`snapshot` lists every
object under it; its ``key`` is the sha256 of the URI and every object's path below the URI,
size and modification time, so a new, removed, resized or rewritten object is a new key.
:func:`local_data_root` downloads the tree once per key into
``${CONTRASTIVE_DATA_CACHE:-~/.cache/contrastive-studies/data}/<key>/``: into a temporary
sibling first, renamed into place when complete, under a file lock on ``<key>.lock`` so that
trials starting together on one node download it once. ``<key>.json`` beside the folder
records the URI, its objects and bytes and when they were downloaded. ``file://`` URIs are the
local folder they name, neither listed nor copied.

pyarrow is imported inside the functions that list or copy, never at import: a trial on a plain
folder runs where pyarrow is not installed.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

log = logging.getLogger(__name__)

CACHE_ENV = "CONTRASTIVE_DATA_CACHE"
DEFAULT_CACHE = Path("~/.cache/contrastive-studies/data")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
download_count = 0  # downloads this process made (each also writes its <key>.json)
_ATTEMPTS = 3  # listings and downloads of a tree that keeps changing while it is copied


def is_uri(text: str | None) -> bool:
    """Whether ``text`` is a URI (``scheme://…``) rather than a plain path."""
    return bool(text) and _SCHEME.match(text) is not None


def is_remote(text: str | None) -> bool:
    """Whether ``text`` is a URI of a remote filesystem: any scheme but ``file``."""
    match = _SCHEME.match(text or "")
    return match is not None and match.group(1).lower() != "file"


# The password of a URI's userinfo (``scheme://user:password@host``), as clients parse it: up to
# the netloc's last ``@`` (an unquoted ``@`` may sit in the password), never past the first ``/``.
_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]*):[^/\s]*@")


def redacted(text: str | os.PathLike | None) -> str:
    """``text`` with the password of every URI in it shown as ``***``
    (``http://alice:***@host:5000``): what the product prints, logs or records of a tracking,
    storage or data URI goes through here, since userinfo is a place clients take credentials
    from."""
    return _PASSWORD.sub(r"\1:***@", str(text or ""))


def without_credentials(uri: str) -> str:
    """``uri`` with no userinfo at all: a link to open in a browser, which asks for them."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.\-]*://)[^/\s]*@", r"\1", uri)


def cache_root() -> Path:
    """The node-local cache folder: ``$CONTRASTIVE_DATA_CACHE``, else
    ``~/.cache/contrastive-studies/data``."""
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE).expanduser()


def _file_path(uri: str) -> Path:
    parsed = urlparse(uri)
    if parsed.netloc not in ("", "localhost"):
        raise ValueError(
            f"data_root={uri!r}: a file:// URI names a folder on this machine, not on "
            f"{parsed.netloc!r}"
        )
    return Path(unquote(parsed.path))


@dataclass(frozen=True)
class Snapshot:
    """What a listing found under ``uri``: ``files`` maps each object's path below ``base``
    (``/``-separated) to (size, modification time in ns or None); ``key`` fingerprints them."""

    uri: str
    base: str
    files: dict[str, tuple[int, int | None]]
    key: str
    filesystem: object  # pyarrow.fs.FileSystem

    @property
    def bytes(self) -> int:
        return sum(size for size, _ in self.files.values())


def _fail(uri: str, reason: str) -> ValueError:
    return ValueError(f"data_root={redacted(uri)!r}: {redacted(reason)}")


# A bucket's listings kept while listings_kept() holds (``study run``): URI -> its listing
_KEPT: dict[str, Snapshot] | None = None


@contextmanager
def listings_kept() -> Iterator[None]:
    """Within the block, each bucket is listed once (:func:`bucket_snapshot`): its listing is
    kept and given again, as ``study run`` reads its data several times before its launch (the
    target metric's evidence, the preflight's check, the baselines' data key). Outside it every
    call lists afresh, so a long-lived process never serves a stale listing."""
    global _KEPT
    outer = _KEPT
    if outer is None:
        _KEPT = {}
    try:
        yield
    finally:
        if outer is None:
            _KEPT = None


def bucket_snapshot(uri: str | None) -> Snapshot | None:
    """The listing of ``uri`` when it names a remote filesystem (:func:`snapshot`; within
    :func:`listings_kept`, the one already taken), None for a local folder or a ``file://``
    URI."""
    if not is_remote(uri):
        return None
    kept = _KEPT
    if kept is None:
        return snapshot(uri)
    if uri not in kept:
        kept[uri] = snapshot(uri)
    return kept[uri]


def snapshot(uri: str) -> Snapshot:
    """List every object under ``uri`` (no data is read). Raises ValueError naming
    ``data_root`` and the URI when pyarrow cannot resolve it, the storage cannot be reached,
    nothing is there or it holds no objects."""
    try:
        import pyarrow.fs as pafs
    except ImportError as err:
        raise _fail(uri, f"reading a URI needs pyarrow ({err})") from None
    try:
        filesystem, base = pafs.FileSystem.from_uri(uri)
    except (ValueError, OSError, TypeError) as err:  # ArrowInvalid is a ValueError
        raise _fail(uri, f"not a URI pyarrow can open ({err})") from None
    base = base.rstrip("/")
    try:
        infos = filesystem.get_file_info(pafs.FileSelector(base, recursive=True))
    except FileNotFoundError:
        raise _fail(uri, "nothing is stored under this URI (no such prefix)") from None
    except NotADirectoryError:
        raise _fail(uri, "names one object; data_root must be a prefix (a folder)") from None
    except (OSError, ValueError) as err:
        raise _fail(uri, f"could not list the objects under it ({err})") from None
    files = {
        info.path[len(base) + 1 :] if base else info.path: (info.size, info.mtime_ns)
        for info in infos
        if info.type == pafs.FileType.File
    }
    if not files:
        raise _fail(uri, "holds no objects (only empty folders)")
    files = dict(sorted(files.items()))
    text = json.dumps({"uri": uri.rstrip("/"), "files": files}, sort_keys=True)
    key = hashlib.sha256(text.encode()).hexdigest()[:32]
    return Snapshot(uri, base, files, key, filesystem)


def content_key(uri: str) -> str:
    """The cache key of what is under ``uri`` now (a listing; nothing is downloaded)."""
    return snapshot(uri).key


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _local_files(folder: Path) -> dict[str, int]:
    return {
        p.relative_to(folder).as_posix(): p.stat().st_size for p in folder.rglob("*") if p.is_file()
    }


def local_data_root(uri: str, listed: Snapshot | None = None) -> Path:
    """The local folder holding the tree under ``uri``.

    A ``file://`` URI is its own folder. Any other is listed (or ``listed``, a
    :func:`snapshot` of it already taken) and its tree downloaded once into the node's cache
    under its content key; a later call with the same content returns that folder without
    downloading. Raises ValueError naming ``data_root`` and the URI when it cannot be listed or
    copied."""
    if not is_remote(uri):
        return _file_path(uri) if is_uri(uri) else Path(uri).expanduser()
    cache = cache_root()
    cache.mkdir(parents=True, exist_ok=True)
    for _ in range(_ATTEMPTS):
        listed = listed or snapshot(uri)
        folder = cache / listed.key
        if folder.is_dir():
            return folder
        with _locked(cache / f"{listed.key}.lock"):
            if folder.is_dir():  # another process downloaded it while this one waited
                return folder
            if _download(listed, folder):
                return folder
        listed = None  # the tree changed while it was copied: list it again
    raise _fail(uri, f"the objects kept changing while they were downloaded ({_ATTEMPTS} tries)")


def _download(listed: Snapshot, folder: Path) -> bool:
    """Copy ``listed``'s tree into ``folder`` through a temporary sibling; False when what
    arrived is not what was listed (the tree changed meanwhile). Call under the key's lock."""
    global download_count
    import pyarrow.fs as pafs

    cache = folder.parent
    for stale in cache.glob(f".{listed.key}.*"):  # left by a download that died; we hold the lock
        shutil.rmtree(stale, ignore_errors=True)
    temp = Path(tempfile.mkdtemp(prefix=f".{listed.key}.", dir=cache))
    started = time.monotonic()
    try:
        try:
            pafs.copy_files(
                listed.base, str(temp), source_filesystem=listed.filesystem,
                destination_filesystem=pafs.LocalFileSystem(),
            )  # fmt: skip
        except (OSError, ValueError) as err:
            raise _fail(listed.uri, f"could not download its objects ({err})") from None
        if _local_files(temp) != {name: size for name, (size, _) in listed.files.items()}:
            return False
        temp.chmod(0o755)  # mkdtemp's folder is private; the copy is as readable as any download
        os.rename(temp, folder)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    download_count += 1
    seconds = time.monotonic() - started
    record = {
        "uri": redacted(listed.uri), "key": listed.key, "objects": len(listed.files),
        "bytes": listed.bytes, "downloaded_at": time.time(), "seconds": round(seconds, 3),
        "pid": os.getpid(),
    }  # fmt: skip
    (cache / f"{listed.key}.json").write_text(json.dumps(record, indent=1))
    log.info(
        "data_root=%s: downloaded %d objects (%d bytes) in %.1f s into %s",
        redacted(listed.uri), len(listed.files), listed.bytes, seconds, folder,
    )  # fmt: skip
    return True
