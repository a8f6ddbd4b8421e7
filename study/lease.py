"""One live driver per study, wherever the drivers run: a lease with a heartbeat.

Two drivers of one study would run every trial twice into the same runs. They may share the
tracking store (one ``--tracking-uri``, different folders or hosts) or the storage (one bucket
as ``--storage``, different stores), so the lease is held in both places:

- the study's storage: ``<storage>/<study>/driver.lock``, a small JSON object;
- the tracking store: the study experiment's tag ``study.driver``, the same JSON.

The JSON names the holder: a random token, its host, pid, when it started and its last
heartbeat (seconds since the epoch). Neither place can compare and set, so a driver takes the
lease as in Fischer's timed mutual exclusion (Lamport, "A Fast Mutual Exclusion Algorithm",
1987): it first prepares every place (imports MLflow, creates the store and the study's
experiment), so that what follows is quick; then it reads both places and, when neither holds
another driver's live lease, writes its own to both within :attr:`DriverLease.SETTLE_S`, waits
that long and reads both back. Of two drivers that found the places free, the one whose token is
not there is refused. A driver whose own writes took longer than that may have overwritten a
driver that already holds the lease: it clears what it wrote, waits for that driver's heartbeat to
write its lease again, and tries again. While it runs, a thread renews the
heartbeat every :func:`heartbeat_s` seconds. A second driver is refused (``StudyError``: exit 2)
naming the holder, its host and since when; a lease whose heartbeat is older than
:func:`timeout_s` (a driver that was killed, a host that went away) is taken over, and the
takeover is said on the terminal and kept as the experiment tag ``study.driver_takeover``.
A lease written on another host counts as long as it beats; one written on this host by a
process that is gone (a driver killed and rerun at once) is taken over without waiting.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import threading
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from search_spaces.spec import StudyError
from study.storage import Storage
from study.terminal import say
from trainables.remote import redacted

LEASE_FILE = "driver.lock"
LEASE_TAG = "study.driver"
TAKEOVER_TAG = "study.driver_takeover"


def study_lease(
    study: Storage, tracking_uri: str, name: str, make_record, meanwhile=None
) -> DriverLease:
    """The lease of study ``name``, held in its storage ``study`` and in the tracking store
    (``make_record()`` makes the study's record, its experiment, when the lease is taken);
    ``meanwhile()`` is done while the lease settles (see :class:`DriverLease`)."""
    places = [StorageLease(study), TrackingLease(tracking_uri, name, make_record)]
    return DriverLease(name, places, meanwhile)


def heartbeat_s() -> float:
    """Seconds between heartbeats (``CONTRASTIVE_LEASE_HEARTBEAT_S``, default 10)."""
    return float(os.environ.get("CONTRASTIVE_LEASE_HEARTBEAT_S", "10"))


def timeout_s() -> float:
    """Seconds without a heartbeat after which a lease is taken over
    (``CONTRASTIVE_LEASE_TIMEOUT_S``, default 60: six missed heartbeats)."""
    return float(os.environ.get("CONTRASTIVE_LEASE_TIMEOUT_S", "60"))


@dataclass(frozen=True)
class Holder:
    """Who holds a study's lease."""

    token: str
    host: str
    pid: int
    since: float
    beat: float

    def to_text(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_text(cls, text: str | None) -> Holder | None:
        """The holder a place records; None when it holds none (or something unreadable, which
        no driver wrote)."""
        if not text:
            return None
        try:
            data = json.loads(text)
            return cls(str(data["token"]), str(data["host"]), int(data["pid"]),
                       float(data["since"]), float(data["beat"]))  # fmt: skip
        except (ValueError, KeyError, TypeError):
            return None

    def describe(self, now: float) -> str:
        started = datetime.fromtimestamp(self.since, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        return (f"host {self.host}, pid {self.pid}, since {started} (last heartbeat "
                f"{max(0.0, now - self.beat):.0f} s ago)")  # fmt: skip


class StorageLease:
    """The lease in the study's storage (a folder or a bucket)."""

    def __init__(self, study: Storage) -> None:
        self.study = study
        self.where = study.uri_of(LEASE_FILE)

    def read(self) -> Holder | None:
        if not self.study.exists(LEASE_FILE):
            return None
        with contextlib.suppress(OSError):
            return Holder.from_text(self.study.read_text(LEASE_FILE))
        return None

    def write(self, holder: Holder) -> None:
        self.study.write_text(holder.to_text(), LEASE_FILE)

    def clear(self) -> None:
        self.study.delete(LEASE_FILE)

    def prepare(self) -> None:
        """Nothing to prepare: a folder or a bucket is written at once."""


class TrackingLease:
    """The lease in the tracking store: a tag of the study's experiment. Reading never creates
    anything (no experiment: no lease); the first write creates the study's experiment, as the
    driver would next (``make_record``), so a refused driver leaves the store as it was."""

    def __init__(self, tracking_uri: str, study: str, make_record) -> None:
        self.uri, self.study, self.make_record = tracking_uri, study, make_record
        self.where = f"{redacted(tracking_uri)} (experiment {study!r}, tag {LEASE_TAG})"

    def _client(self):
        from mlflow.tracking import MlflowClient  # imported by the driver only (seconds)

        return MlflowClient(self.uri)  # one per call: the heartbeat runs in its own thread

    def experiment_id(self) -> str | None:
        if self.uri.startswith("sqlite:///") and not os.path.isfile(
            self.uri.removeprefix("sqlite:///")
        ):
            return None
        from analysis.reading.record import find_experiment

        experiment = find_experiment(self._client(), self.study)
        return None if experiment is None else experiment.experiment_id

    def prepare(self) -> None:
        """Import MLflow and create the store and the study's experiment (seconds for a new
        store), so that writing the lease is one quick tag."""
        if self.experiment_id() is None:
            self.make_record()

    def read(self) -> Holder | None:
        eid = self.experiment_id()
        if eid is None:
            return None
        return Holder.from_text(self._client().get_experiment(eid).tags.get(LEASE_TAG))

    def write(self, holder: Holder) -> None:
        eid = self.experiment_id() or self.make_record().experiment_id
        self._client().set_experiment_tag(eid, LEASE_TAG, holder.to_text())

    def clear(self) -> None:
        eid = self.experiment_id()
        if eid is not None:
            self._client().set_experiment_tag(eid, LEASE_TAG, "")


def pid_alive(pid: int) -> bool:
    """Whether a process of this host is alive (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def holder_alive(holder: Holder, now: float) -> bool:
    """Whether the driver a lease names still runs: on this host, while its process is alive; on
    another, while its heartbeat is younger than :func:`timeout_s`."""
    if holder.host == socket.gethostname():
        return pid_alive(holder.pid)
    return now - holder.beat < timeout_s()


class DriverLease:
    """The study's lease, held for the ``with`` block (see the module docstring).

    Raises on entry:
        StudyError: another driver holds a live lease (or took it at the same moment).
    """

    # every driver writes the lease within SETTLE_S of reading the places free, and waits
    # SETTLE_S before reading them back (Fischer's bound and delay); seconds, as a store or a
    # bucket on a busy machine answers within them
    SETTLE_S = 1.0
    ROUNDS = 3  # tries, each after a round whose writes took longer than SETTLE_S

    def __init__(self, study: str, places: list, meanwhile=None) -> None:
        """``meanwhile``: work for the driver's own later use, done while the lease settles
        instead of sleeping (the wait lasts at least SETTLE_S all the same); whatever it raises
        is left for that later use to meet."""
        self.study, self.places, self.meanwhile = study, places, meanwhile
        self.me = Holder(secrets.token_hex(8), socket.gethostname(), os.getpid(), time.time(),
                         time.time())  # fmt: skip
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost: Holder | None = None  # set when another driver took the lease from us

    def __enter__(self) -> DriverLease:
        self._stale_holders()  # refused before preparing: a refused driver creates nothing
        for place in self.places:
            place.prepare()
        for _ in range(self.ROUNDS):
            read_at = time.monotonic()
            stale = self._stale_holders()
            for place in self.places:
                place.write(self.me)
            if time.monotonic() - read_at < self.SETTLE_S:
                break
            self._withdraw()
        else:
            raise StudyError(
                f"study {self.study!r}: writing the driver's lease took longer than "
                f"{self.SETTLE_S:.0f} s in {self.ROUNDS} tries ({self._where()}), too slow to "
                "know that no other driver took it meanwhile. Nothing was run or recorded by "
                "this driver; run the study again"
            )
        settling = time.monotonic()
        if self.meanwhile is not None:
            with contextlib.suppress(Exception):
                self.meanwhile()
        time.sleep(max(0.0, self.SETTLE_S - (time.monotonic() - settling)))
        for place in self.places:
            holder = place.read()
            if holder is not None and holder.token != self.me.token:
                raise self._refusal(holder, place, time.time())
        for holder, place in stale:
            self._say_takeover(holder, place, time.time())
        self._thread = threading.Thread(target=self._beat, name="study-lease", daemon=True)
        self._thread.start()
        return self

    def _stale_holders(self) -> list[tuple[Holder, object]]:
        """The places' holders whose lease is dead (to be taken over, and said).

        Raises:
            StudyError: a place holds another driver's live lease.
        """
        now, stale = time.time(), []
        for place in self.places:
            holder = place.read()
            if holder is None or holder.token == self.me.token:
                continue
            if now - holder.beat < timeout_s() and not self._dead_here(holder):
                raise self._refusal(holder, place, now)
            stale.append((holder, place))
        return stale

    def _withdraw(self) -> None:
        """Clear this driver's lease where it is, after writes too slow to be sure of; then
        wait two heartbeats, so that a driver whose lease it overwrote writes it again."""
        self._clear_mine()
        time.sleep(2 * heartbeat_s() + self.SETTLE_S)

    def _clear_mine(self) -> None:
        """Clear the places that hold this driver's lease; a place gone away keeps it, stale."""
        for place in self.places:
            with contextlib.suppress(Exception):
                holder = place.read()
                if holder is not None and holder.token == self.me.token:
                    place.clear()

    def _where(self) -> str:
        return "; ".join(place.where for place in self.places)

    def _dead_here(self, holder: Holder) -> bool:
        """A holder on this host whose process is gone (a killed driver, rerun at once): its
        lease is dead now, without waiting out the heartbeat's timeout."""
        return holder.host == self.me.host and not pid_alive(holder.pid)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=heartbeat_s() + 5)
        self._clear_mine()

    def _beat(self) -> None:
        """Renew the heartbeat in every place until the block ends; a place another driver
        now holds (it took over a lease that looked dead) is left to it, and said once."""
        while not self._stop.wait(heartbeat_s()):
            self.me = Holder(self.me.token, self.me.host, self.me.pid, self.me.since, time.time())
            for place in self.places:
                try:
                    holder = place.read()
                    if holder is not None and holder.token != self.me.token:
                        if self.lost is None:
                            self.lost = holder
                            say(f"study {self.study}: another driver took this study's lease "
                                f"({holder.describe(time.time())}, {place.where})",
                                err=True)  # fmt: skip
                        continue
                    place.write(self.me)
                except Exception:  # a place briefly unreachable: the next beat tries again
                    continue

    def _refusal(self, holder: Holder, place, now: float) -> StudyError:
        return StudyError(
            f"study {self.study!r} is being run by another driver: {holder.describe(now)}; its "
            f"lease is {place.where}. Nothing was run or recorded by this driver. Wait for it "
            f"to finish or stop it (a driver whose heartbeat stops for {timeout_s():.0f} s is "
            "taken over by the next one)"
        )

    def _say_takeover(self, holder: Holder, place, now: float) -> None:
        silent = now - holder.beat
        why = (f"no heartbeat for {silent:.0f} s (more than {timeout_s():.0f} s)"
               if silent >= timeout_s() else "a process that is gone from this host")  # fmt: skip
        text = (f"took over the lease of a driver with {why}: {holder.describe(now)}; it was "
                f"{place.where}")  # fmt: skip
        say(f"study {self.study}: {text}", err=True)  # quiet or not: it matters
        for target in self.places:
            if isinstance(target, TrackingLease):
                stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
                with contextlib.suppress(Exception):
                    target._client().set_experiment_tag(
                        target.experiment_id(), TAKEOVER_TAG, f"{stamp}: {text}"[:5000]
                    )
