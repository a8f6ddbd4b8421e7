"""A real S3-compatible server (moto's) on 127.0.0.1 for the object-storage tests.

``s3_server`` starts ``moto_server`` on a free port, points every AWS client of this process and
its children at it (``AWS_ENDPOINT_URL``, which boto3 and pyarrow's S3 filesystem both read, and
fixed test credentials), and stops it by PID at teardown. ``make_bucket`` creates a bucket
through the S3 API.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from distkit import free_port

MOTO = str(Path(sys.executable).with_name("moto_server"))
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",  # no instance-role lookup on a laptop or CI
}


def start_moto(port: int, log: Path) -> subprocess.Popen:
    # its request log goes to a file: a pipe nobody reads fills up and stalls the server
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [MOTO, "-H", "127.0.0.1", "-p", str(port)],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=1):
                return process
        except OSError:
            if process.poll() is not None:
                raise AssertionError(f"moto_server ended: {log.read_text()[-2000:]}") from None
            assert time.monotonic() < deadline, "moto_server did not answer in 30 s"
            time.sleep(0.1)


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture
def s3_server(monkeypatch, tmp_path_factory):
    """The endpoint URL of a fresh moto S3 server, with this process's AWS settings aimed at
    it; stopped by PID at teardown."""
    port = free_port()
    process = start_moto(port, tmp_path_factory.mktemp("moto") / "moto.log")
    endpoint = f"http://127.0.0.1:{port}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    for name, value in AWS_ENV.items():
        monkeypatch.setenv(name, value)
    try:
        yield endpoint
    finally:
        stop(process)


def s3_client():
    import boto3

    return boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])


def make_bucket(name: str) -> str:
    s3_client().create_bucket(Bucket=name)
    return name


def object_keys(bucket: str, prefix: str = "") -> list[str]:
    """Every object's key in ``bucket`` under ``prefix``, less the empty folder markers
    (``a/b/``) that pyarrow's ``create_dir`` writes."""
    pages = s3_client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    keys = (o["Key"] for page in pages for o in page.get("Contents", []))
    return sorted(k for k in keys if not k.endswith("/"))


def upload(folder: Path, bucket: str, prefix: str) -> int:
    client = s3_client()
    files = [p for p in sorted(folder.rglob("*")) if p.is_file()]
    for path in files:
        key = f"{prefix}/{path.relative_to(folder).as_posix()}"
        client.put_object(Bucket=bucket, Key=key, Body=path.read_bytes())
    return len(files)
