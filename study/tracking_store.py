"""Which MLflow store a study records into, whether it answers, and creating it whole.

An embedded store (``sqlite:///PATH``) is created atomically (built under a private name, then
linked into place, so no reader ever finds half a store) and opened only once whole; a tracking
server must answer ``/health`` first. The study's own runs in it are :mod:`study.record`.
"""

from __future__ import annotations

import base64
import glob
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from analysis.reading.store import default_store, store_exists, store_problem
from search_spaces.spec import StudyError
from study.internals.mlflow import sqlalchemy_store
from study.lease import pid_alive
from study.paths import store_file
from study.store_locks import PatientClient, settle_journal_mode
from study.store_template import copy_template, keep_as_template
from trainables.remote import redacted


def default_tracking_uri(workdir: str | Path | None = None) -> str:
    """The store used when none is named, the one the notebook and ``analysis.load_study``
    read (:func:`analysis.reading.load.default_store`): MLFLOW_TRACKING_URI, else the nearest
    ``mlflow.db`` at or above the working folder, else a new one in the working folder."""
    return default_store(workdir)


def check_tracking_uri(uri: str, timeout: float = 5.0, *, writing: bool = False) -> None:
    """Raise StudyError naming the URI (its password shown as ``***``) when the tracking store
    cannot be reached or created (``writing``: or, for an embedded one, written)."""
    shown = redacted(uri)
    if uri.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(health_request(uri), timeout=timeout) as reply:
                if reply.status != 200:
                    raise StudyError(f"--tracking-uri {shown!r}: /health answered {reply.status}")
        except urllib.error.HTTPError as err:
            raise StudyError(f"--tracking-uri {shown!r}: /health answered {err.code} "
                             f"{err.reason}{_credentials_hint(uri)}") from None  # fmt: skip
        except (urllib.error.URLError, OSError) as err:
            why = redacted(str(err))
            raise StudyError(
                f"--tracking-uri {shown!r} does not answer: {why}{_credentials_hint(uri)}"
            ) from None
    elif uri.startswith("sqlite:///"):
        store_file(uri, writing=writing)  # its folder there (and writable), not a folder itself
        problem = store_problem(uri)
        if problem:
            raise StudyError(f"--tracking-uri {uri!r}: {problem}")
    else:
        raise StudyError(
            f"--tracking-uri {shown!r}: expected sqlite:///PATH (embedded) or http(s)://HOST:PORT "
            "(an mlflow server); MLflow's file store is not supported"
        )


def health_request(uri: str) -> urllib.request.Request:
    """The server's ``/health``, asked with the credentials MLflow's client would send: HTTP
    basic auth from MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, else from the URI's
    userinfo (as ``requests`` takes it), or MLFLOW_TRACKING_TOKEN as a bearer token. urllib
    itself reads userinfo as part of the host name ("Name or service not known"), so the
    userinfo is taken off the address and sent as the header."""
    parts = urllib.parse.urlsplit(uri)
    netloc = parts.netloc.rpartition("@")[2]
    url = urllib.parse.urlunsplit(parts._replace(netloc=netloc)).rstrip("/") + "/health"
    user = os.environ.get("MLFLOW_TRACKING_USERNAME")
    password = os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if not (user and password) and parts.username is not None:
        user, password = (urllib.parse.unquote(parts.username),
                          urllib.parse.unquote(parts.password or ""))  # fmt: skip
    headers = {}
    if user or password:
        pair = base64.b64encode(f"{user or ''}:{password or ''}".encode()).decode()
        headers["Authorization"] = f"Basic {pair}"
    elif os.environ.get("MLFLOW_TRACKING_TOKEN"):
        headers["Authorization"] = f"Bearer {os.environ['MLFLOW_TRACKING_TOKEN']}"
    return urllib.request.Request(url, headers=headers)


def _credentials_hint(uri: str) -> str:
    """Where credentials for an mlflow server belong, when the URI carries some."""
    if urllib.parse.urlsplit(uri).password is None:
        return ""
    return (
        "; give the server's credentials in MLFLOW_TRACKING_USERNAME and "
        "MLFLOW_TRACKING_PASSWORD rather than in the URI (MLflow's client reads both)"
    )


def create_store(uri: str) -> None:
    """Make sure an embedded store exists, created whole or not at all; servers make their own.

    MLflow builds a new SQLite store by running its schema migrations one by one in the file
    itself, so a second process that opens the file meanwhile (a second driver refused by the
    lease, another study sharing the default store, ``study status``, ``mlflow ui``) runs the same
    migrations at once and fails, or migrates a store it only meant to read. The store is
    therefore built under a private name beside its place and linked there in one step: a process
    that finds the file finds it complete. Two creators race harmlessly: the first link wins and
    the other's copy is discarded. Within one process the creators take turns: alembic, which
    runs the migrations, keeps its context in a module global.
    """
    if not uri.startswith("sqlite:///"):
        return
    with _CREATING:
        _create_store(uri)


_CREATING = threading.Lock()


def _create_store(uri: str) -> None:
    path = Path(uri.removeprefix("sqlite:///"))
    if store_exists(uri) or path.exists():
        # another process's store, perhaps still being built in place (a notebook's MlflowClient
        # makes a new store where it is named): opened only once whole, or refused. MLflow would
        # otherwise run its migrations a second time on the tables being made (daizutabi/
        # hydraflow#245: "duplicate column name: step")
        if problem := store_problem(uri):
            raise StudyError(f"--tracking-uri {uri!r}: {problem}")
        if store_exists(uri):
            return
    _remove_dead_partials(path)
    partial = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.partial")
    try:
        _build_store(partial)
        settle_journal_mode(partial, uri)  # born in WAL mode: no reader ever finds it otherwise
        try:
            os.link(partial, path)  # atomic, and never replaces a store another process made
        except OSError:  # another creator's store, an empty file, or no hard links here
            if not store_exists(uri):
                os.replace(partial, path)  # atomic too; an empty file gives way to a store
    finally:
        partial.unlink(missing_ok=True)


def _build_store(partial: Path) -> None:
    """A new store at ``partial``, exactly the one MlflowClient would create (its Default
    experiment's artifact root included): a copy of the template MLflow's own builder made
    (study.store_template), or, the first time, MLflow's builder itself."""
    if copy_template(partial):
        return
    store = sqlalchemy_store(f"sqlite:///{partial}")
    store.engine.dispose()  # nothing keeps the private name open once it is linked
    keep_as_template(partial)


def writing_client(uri: str):
    """MLflow's client of ``uri`` for the driver's calls: on an embedded store, each one waits
    out another process's lock (:class:`study.store_locks.PatientClient`)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    return PatientClient(client, uri) if uri.startswith("sqlite:///") else client


def _remove_dead_partials(path: Path) -> None:
    """Remove the half-built stores of creators killed on this host (their pid is gone)."""
    for partial in path.parent.glob(f".{glob.escape(path.name)}.*.partial"):
        pid = partial.name.removeprefix(f".{path.name}.").split(".")[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            partial.unlink(missing_ok=True)


def quiet_run_links(uri: str) -> None:
    """MLflow's client prints "View run … at: URL" with the tracking URI as given, password and
    all, whenever a run of a server's ends: off for a URI that carries a password (the study
    prints its own links, without credentials: study.mlflow_views.ui_url)."""
    if redacted(uri) != uri:
        os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"
