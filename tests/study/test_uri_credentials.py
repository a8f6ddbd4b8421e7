"""Credentials in a URI are used as MLflow's client uses them and never shown (issue 57, item 2):
the one redaction function, the store check's request, the commands and links the product
prints or records, and what a pickled record keeps. Integration: test_secrets_stay_put.py."""

from __future__ import annotations

import base64
import pickle

import pytest

from study.commands import mlflow_command, shell_command, ui_command
from study.mlflow_views import ui_url
from study.node_env import is_secret
from study.record import StudyRecord
from study.tracking_store import health_request
from trainables.remote import redacted, without_credentials

URI = "http://alice:S3CRET@mlflow.example:5000"


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        (URI, "http://alice:***@mlflow.example:5000"),
        ("https://alice:p@ss:w@h/x?a=b:c@d", "https://alice:***@h/x?a=b:c@d"),  # unquoted @, :
        ("s3://KEY:SECRET@bucket/prefix", "s3://KEY:***@bucket/prefix"),
        (
            f"--tracking-uri '{URI}' failed",
            "--tracking-uri 'http://alice:***@mlflow.example:5000' failed",
        ),
        ("sqlite:////srv/a:b@c/mlflow.db", "sqlite:////srv/a:b@c/mlflow.db"),  # a path, no host
        ("http://127.0.0.1:5000", "http://127.0.0.1:5000"),
    ],
)
def test_the_password_of_every_uri_in_a_text_is_shown_as_stars(given, shown):
    assert redacted(given) == shown


def auth(request) -> str:
    return base64.b64decode(request.get_header("Authorization").split()[1]).decode()


def test_the_store_check_sends_the_uris_credentials_as_basic_auth(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
    request = health_request("http://alice:p%40ss@127.0.0.1:5000/")
    assert request.full_url == "http://127.0.0.1:5000/health"  # not a host named alice:…
    assert auth(request) == "alice:p@ss"  # unquoted, as requests takes them
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "bob")  # MLflow's variables win
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "hunter2")
    assert auth(health_request("http://alice:p@127.0.0.1:5000")) == "bob:hunter2"


def test_printed_commands_and_links_carry_no_password():
    assert "S3CRET" not in shell_command("study", "status", "x", "--tracking-uri", URI)
    assert "S3CRET" not in mlflow_command(URI, "runs", "restore", "--run-id", "1")
    assert ui_command(URI) == "open http://mlflow.example:5000 in a browser (the MLflow " \
        "server's own UI)"  # fmt: skip
    assert ui_url(URI) == "http://mlflow.example:5000/"  # the browser asks for credentials


def test_a_pickled_record_keeps_no_password_and_this_process_gets_it_back():
    record = StudyRecord.__new__(StudyRecord)
    record.__dict__ = {"uri": "http://alice:S3CRET@elsewhere.example:1", "study": "s"}
    data = pickle.dumps(record)
    assert b"S3CRET" not in data and without_credentials(record.uri).encode() in data
    record._open(record.uri, "s", None, "1")  # this process opened it: the URI comes back
    assert pickle.loads(pickle.dumps(record)).uri == "http://alice:S3CRET@elsewhere.example:1"


@pytest.mark.parametrize(
    ("name", "secret"),
    [("AWS_SECRET_ACCESS_KEY", True), ("AWS_SESSION_TOKEN", True), ("AWS_ACCESS_KEY_ID", True),
     ("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", False), ("RAY_CHDIR_TO_TRIAL_DIR", False)],
)  # fmt: skip
def test_a_secret_is_told_by_its_name(name, secret):
    assert is_secret(name) is secret


def test_a_bucket_uri_with_credentials_is_never_shown_in_a_data_refusal():
    """pyarrow takes s3://KEY:SECRET@bucket; a refusal naming data_root shows no secret."""
    from trainables.remote import _fail

    said = str(_fail("s3://AKIAPLANTED:planted-secret@bucket/data", "could not list it "
                     "(s3://AKIAPLANTED:planted-secret@bucket/data: denied)"))  # fmt: skip
    assert "planted-secret" not in said and "s3://AKIAPLANTED:***@bucket/data" in said
