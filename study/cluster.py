"""Reaching the Ray cluster ``--address`` names, before anything of the study is recorded.

``study run --address`` used to hand the address to ``ray.init`` after the record was opened and
the baselines measured. A cluster that was not there then cost minutes: Ray retries a port where
nothing listens for over two minutes (printing the machine's own address in place of the one
typed), ``auto`` with a stale record of a gone cluster waits 60 s, and a cluster that refuses the
driver's token retries for 20 s; each left a parent run behind. :func:`reach_cluster` asks the
three questions in order, each in seconds, and refuses with the option, what it found and the
fix (exit 2, nothing created):

1. which address (``auto``: ``RAY_ADDRESS``, else the cluster ``ray start`` last recorded on this
   node; never "any Ray process on this machine", Ray's legacy fallback, which would join another
   study's own local Ray);
2. whether anything listens there (a TCP connection to the head's GCS port);
3. whether the cluster takes this driver's token (Ray's GCS client: one authenticated call).

The answer, ``host:port``, is what ``ray.init`` then joins.
"""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
import threading
import time

from search_spaces.spec import StudyError

CONNECT_TIMEOUT_S = 5.0  # a head that does not accept a TCP connection in 5 s is not there
RUN_HERE = "or leave --address out to run the study on this machine"
# the first Ray with token authentication (RAY_AUTH_MODE=token): pyproject.toml's floor. An
# older Ray ignores the variable, so a cluster asked to require a token would run without one
TOKEN_AUTH_RAY = "2.52.0"


def check_token_auth_ray(version: str | None = None) -> None:
    """Refuse ``RAY_AUTH_MODE=token`` on a Ray older than :data:`TOKEN_AUTH_RAY` (``version``:
    the installed Ray's, read when None): that Ray would silently start or join a cluster with no
    authentication at all, the docs' promise broken.

    Raises:
        StudyError: naming RAY_AUTH_MODE, the installed Ray's version and the one needed.
    """
    if os.environ.get("RAY_AUTH_MODE", "").strip().lower() != "token":
        return
    from packaging.version import Version

    if version is None:
        from importlib.metadata import version as installed

        version = installed("ray")
    if Version(version) < Version(TOKEN_AUTH_RAY):
        raise StudyError(
            f"RAY_AUTH_MODE=token: the installed Ray {version} has no token authentication "
            f"(it came in Ray {TOKEN_AUTH_RAY}) and would run the cluster without any; install "
            f"a newer Ray (pip install 'ray[tune]>={TOKEN_AUTH_RAY}'), as pyproject.toml asks"
        )


def reach_cluster(address: str) -> str:
    """The cluster at ``address`` (``host:port``, ``auto`` or ``ray://host:port``), checked;
    returns the address ``ray.init`` joins.

    Raises:
        StudyError: naming ``--address``, what was found there, and the fix.
    """
    if address.startswith("ray://"):  # Ray Client: its own protocol, checked for a listener
        host, port = _host_port(address.removeprefix("ray://"), address)
        _listening(host, port, address, found="")
        return address
    resolved, found = _resolved(address)
    host, port = _host_port(resolved, address)
    _listening(host, port, address, found)
    _token_taken(resolved, address)
    return resolved


def _resolved(address: str) -> tuple[str, str]:
    """``address`` itself, or what ``auto`` means on this node, with the words that say so."""
    if address != "auto":
        return address, ""
    from study.internals.ray import recorded_cluster_address

    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"], f" (auto: RAY_ADDRESS={os.environ['RAY_ADDRESS']})"
    recorded = recorded_cluster_address()
    if not recorded:
        raise StudyError(
            "--address auto: no Ray cluster runs on this node (no `ray start` recorded one here "
            "and RAY_ADDRESS is unset); start its head with `ray start --head`, give the head's "
            f"address (--address HOST:6379), {RUN_HERE}"
        )
    return recorded, f" (auto: the cluster `ray start` last recorded on this node, {recorded})"


def _host_port(address: str, typed: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise StudyError(
            f"--address {typed}: not HOST:PORT (the head's address and its GCS port, e.g. "
            f"10.0.0.1:6379), auto, or ray://HOST:PORT"
        )
    return host.strip("[]"), int(port)


def _listening(host: str, port: int, typed: str, found: str) -> None:
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            return
    except OSError as err:
        reason = "no answer" if isinstance(err, TimeoutError) else (err.strerror or str(err))
    raise StudyError(
        f"--address {typed}: no Ray cluster answers at {host}:{port}{found} ({reason}); start "
        f"the cluster's head there (ray start --head --port {port}), check the address, "
        f"{RUN_HERE}"
    )


def _token_taken(address: str, typed: str) -> None:
    """One authenticated call to the cluster's GCS: a cluster that refuses this driver's token
    says so at once (Ray's own ``ray.init`` retries for 20 s, then says only that it failed to
    connect). Ray's C++ client logs each refused try to the process's stderr: those lines are
    kept out of the terminal, and the refusal says it in one sentence."""
    from study.internals.ray import AuthenticationError, gcs_node_count

    try:
        with _stderr_aside():
            gcs_node_count(address)
    except AuthenticationError:
        mode = os.environ.get("RAY_AUTH_MODE", "") or "unset"
        held = (
            f"RAY_AUTH_TOKEN_PATH={os.environ['RAY_AUTH_TOKEN_PATH']}"
            if os.environ.get("RAY_AUTH_TOKEN_PATH")
            else "RAY_AUTH_TOKEN"
            if os.environ.get("RAY_AUTH_TOKEN")
            else "no token"
        )
        raise StudyError(
            f"--address {typed}: the cluster refused this driver's token (RAY_AUTH_MODE "
            f"{mode}, {held}); give the driver the token its head was started with: export "
            "RAY_AUTH_MODE=token and RAY_AUTH_TOKEN_PATH=<the head's token file> (or "
            "RAY_AUTH_TOKEN)"
        ) from None
    except Exception as err:  # something listens there, but it does not answer as Ray does
        raise StudyError(
            f"--address {typed}: something listens there, but not a Ray cluster's GCS "
            f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}); check "
            f"the port (the head's --port, 6379 by default), {RUN_HERE}"
        ) from None


@contextlib.contextmanager
def _stderr_aside():
    """File descriptor 2 sent to a scratch file for the block (C++ writes there directly)."""
    saved = os.dup(2)
    with tempfile.TemporaryFile() as scratch:
        os.dup2(scratch.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


# ---------------------------------------------------------------------------------------------
# a cluster lost mid-study
# ---------------------------------------------------------------------------------------------
POLL_S = 1.0
LOST_AFTER_S = 15.0  # Ray's own driver gives up on a silent GCS after 60 s and exits with 1


def watch_cluster(address: str, on_lost) -> threading.Event:
    """Watch the head at ``address`` (``host:port``) while the study runs on it: when nothing
    has accepted a connection there for :data:`LOST_AFTER_S` seconds, call ``on_lost()`` (which
    ends the runs and the process). Ray's own driver would instead wait 60 s on the lost GCS and
    then end the process from C++, with status 1 and every run left RUNNING. Returns the event
    that stops the watch."""
    stop = threading.Event()
    if address.startswith("ray://"):
        address = address.removeprefix("ray://")
    host, port = _host_port(address, address)

    def watch() -> None:
        silent_since = None
        while not stop.wait(POLL_S):
            try:
                with socket.create_connection((host, port), timeout=2.0):
                    silent_since = None
            except OSError:
                silent_since = silent_since or time.monotonic()
                if time.monotonic() - silent_since >= LOST_AFTER_S and not stop.is_set():
                    on_lost()
                    return

    threading.Thread(target=watch, name="study-cluster-watch", daemon=True).start()
    return stop
