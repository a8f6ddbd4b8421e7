"""One live driver per study, wherever the drivers run: a lease with a heartbeat.

Two drivers of one study would run every trial twice into the same runs. They may share the
tracking store (one ``--tracking-uri``, different folders or hosts) or the storage (one bucket
as ``--storage``, different stores), so the lease is held in both places:

- the study's storage: ``<storage>/<study>/driver.lock``, a small JSON object;
- the tracking store: the study experiment's tag ``study.driver``, the same JSON.

The JSON names the holder: a random token, its host, pid, the process's start
(``/proc/<pid>/stat``'s, so that a later process given the same pid is not taken for it), when
it took the lease and its last heartbeat (seconds since the epoch). Neither place can compare
and set, so a driver takes the lease as in Fischer's timed mutual exclusion (Lamport, "A Fast
Mutual Exclusion Algorithm", 1987): it first prepares every place (imports MLflow, creates the
store and the study's experiment), so that what follows is quick; then it reads both places
and, when neither holds another driver's live lease, writes its own to both within
:attr:`DriverLease.SETTLE_S`, waits that long and reads both back. Of two drivers that found
the places free, the one whose token is not there is refused. A driver whose own writes took
longer than that may have overwritten a driver that already holds the lease: it clears what it
wrote, waits for that driver's heartbeat to write its lease again, and tries again. While it
runs, a thread renews the heartbeat every :func:`heartbeat_s` seconds. A second driver is
refused (``StudyError``: exit 2) naming the holder, its host and since when. A lease written on
this host counts as long as its process lives, whatever its heartbeat: a driver suspended by
Ctrl-Z (SIGSTOP) beats no more, but wakes on SIGCONT and goes on, so a second driver would run
every trial again beside it; the refusal names the pid and says how to let it go on or stop it.
One written on this host by a process that is gone (a driver killed and rerun at once) is taken
over without waiting. A lease written on another host, whose process cannot be seen from here,
counts as long as it beats: one whose heartbeat is older than :func:`timeout_s` (a driver that
was killed or suspended, a host that went away) is taken over, and the takeover is said on the
terminal and kept as the experiment tag ``study.driver_takeover``.

A driver whose lease was taken over that way may wake again (SIGCONT, a host back from a
network partition). Its heartbeat reads the places before it writes them, so it finds the
other driver's lease there, and the driver's ``on_lost`` is called (``study run`` says who
holds the study and exits at once, without ending or writing any run: they are the other
driver's now). Its main thread asks :meth:`DriverLease.ensure_held` before each write to the
record; when the heartbeat has not confirmed the lease for two heartbeats (the process was
suspended), that reads the places itself, so no write lands between waking and the
heartbeat's next read.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import threading
import time
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime

from analysis.reading.state import pid_alive
from search_spaces.spec import StudyError
from study.private import process_start, process_stopped
from study.storage import Storage
from study.terminal import say
from trainables.remote import redacted

LEASE_FILE = "driver.lock"
LEASE_TAG = "study.driver"
TAKEOVER_TAG = "study.driver_takeover"


def study_lease(
    study: Storage, tracking_uri: str, name: str, make_record, meanwhile=None,
    experiment_id: str | None = None,
) -> DriverLease:  # fmt: skip
    """The lease of study ``name``, held in its storage ``study`` and in the tracking store
    (``make_record()`` makes the study's record, its experiment, when the lease is taken;
    ``experiment_id``: the study's experiment, when already found there);
    ``meanwhile()`` is done while the lease settles (see :class:`DriverLease`)."""
    places = [StorageLease(study), TrackingLease(tracking_uri, name, make_record, experiment_id)]
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
    start: int | None = None  # the process's start (process_start); None in older leases

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
            start = data.get("start")
            return cls(str(data["token"]), str(data["host"]), int(data["pid"]),
                       float(data["since"]), float(data["beat"]),
                       None if start is None else int(start))  # fmt: skip
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    def lives_here(self) -> bool:
        """Whether this holder's process, written on this host, is alive: its pid alive and,
        where the lease records its start, started then (a reused pid is another process)."""
        if not pid_alive(self.pid):
            return False
        start = process_start(self.pid)
        return self.start is None or start is None or start == self.start

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
            text = self.study.read_text(LEASE_FILE)
            holder = Holder.from_text(text)
            if holder is None and text.strip():
                self._set_aside(text)
            return holder
        return None

    def _set_aside(self, text: str) -> None:
        """A lease file that no driver wrote (garbage, a truncated copy: every driver writes
        it whole) holds no lease: it is renamed ``driver.lock.unreadable``, its bytes kept,
        and said, so that the lease taken next replaces nothing in silence."""
        aside = f"{LEASE_FILE}.unreadable"
        with contextlib.suppress(OSError):
            self.study.move(LEASE_FILE, aside)
            say(f"the lease file {redacted(self.where)} holds no lease a driver wrote "
                f"({len(text)} bytes that are not one); set aside as {aside}, the study's "
                "lease is taken afresh", err=True, flush=True)  # fmt: skip

    def write(self, holder: Holder) -> None:
        self.study.write_text(holder.to_text(), LEASE_FILE)

    def clear(self) -> None:
        self.study.delete(LEASE_FILE)

    def prepare(self) -> None:
        """Nothing to prepare: a folder or a bucket is written at once."""


class TrackingLease:
    """The lease in the tracking store: a tag of the study's experiment. Reading never creates
    anything (no experiment: no lease); the first write creates the study's experiment, as the
    driver would next (``make_record``), so a refused driver leaves the store as it was. The
    experiment, once found or made (or given: ``experiment_id``), is not looked up again while it
    is there (renamed or deleted, it keeps its id); one removed for good is looked up afresh."""

    def __init__(
        self, tracking_uri: str, study: str, make_record, experiment_id: str | None = None
    ) -> None:
        self.uri, self.study, self.make_record = tracking_uri, study, make_record
        self.where = f"{redacted(tracking_uri)} (experiment {study!r}, tag {LEASE_TAG})"
        self._said = False
        self._eid = experiment_id

    def _client(self):
        from mlflow.tracking import MlflowClient  # imported by the driver only (seconds)

        return MlflowClient(self.uri)  # one per call: the heartbeat runs in its own thread

    def experiment_id(self) -> str | None:
        if self._eid is not None:
            return self._eid
        if self.uri.startswith("sqlite:///") and not os.path.isfile(
            self.uri.removeprefix("sqlite:///")
        ):
            return None
        from analysis.reading.record import find_experiment

        experiment = find_experiment(self._client(), self.study)
        self._eid = None if experiment is None else experiment.experiment_id
        return self._eid

    def _made(self) -> str:
        """The study's experiment, made with its record (``make_record``)."""
        self._eid = self.make_record().experiment_id
        return self._eid

    def _experiment(self):
        """(a client, the study's experiment as the store holds it now); None for the
        experiment when there is none (one removed for good since it was found is looked up
        afresh). No client is made, and nothing created, where there is no store yet."""
        eid = self.experiment_id()
        if eid is None:
            return None, None
        from mlflow.exceptions import MlflowException

        client = self._client()
        try:
            return client, client.get_experiment(eid)
        except MlflowException as err:
            if err.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise
        self._eid = None
        eid = self.experiment_id()
        return client, None if eid is None else client.get_experiment(eid)

    def prepare(self) -> None:
        """Import MLflow and create the store and the study's experiment (seconds for a new
        store), so that writing the lease is one quick tag. Not found, the experiment is not
        looked up again here: the record looks for it before it creates it."""
        if self._eid is None:
            self._made()

    def read(self) -> Holder | None:
        _, experiment = self._experiment()
        if experiment is None:
            return None
        text = experiment.tags.get(LEASE_TAG)
        holder = Holder.from_text(text)
        if holder is None and text and text.strip() and not self._said:
            self._said = True  # the lease written next replaces it: said once, kept in words
            say(f"the lease in {self.where} holds no lease a driver wrote ({text[:200]!r}); "
                "the study's lease is taken afresh", err=True, flush=True)  # fmt: skip
        return holder

    def write(self, holder: Holder) -> None:
        client, experiment = self._experiment()
        eid = self._made() if experiment is None else experiment.experiment_id
        (client or self._client()).set_experiment_tag(eid, LEASE_TAG, holder.to_text())

    def clear(self) -> None:
        eid = self.experiment_id()
        if eid is not None:
            self._client().set_experiment_tag(eid, LEASE_TAG, "")


def holder_alive(holder: Holder, now: float) -> bool:
    """Whether the driver a lease names still runs (one rule, read by every reader of the
    record: :func:`analysis.reading.state.holder_alive`): on this host, while its process (the
    pid, started at the recorded moment) is alive; on another, while its heartbeat is younger
    than :func:`timeout_s`."""
    from analysis.reading.state import holder_alive as alive

    return alive(asdict(holder), now)


class LeaseLostError(RuntimeError):
    """Another driver took this driver's lease over (it woke after the lease's timeout): this
    driver must write nothing more to the study's record. Its message names the holder."""


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
                         time.time(), process_start(os.getpid()))  # fmt: skip
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost: Holder | None = None  # set when another driver took the lease from us
        self.lost_where = ""  # the place where it was found
        # what the driver does once its lease is lost (say so and exit); without it,
        # ensure_held raises LeaseLostError
        self.on_lost = None
        self._losing = threading.Lock()  # on_lost is called once, by whichever thread finds it
        self.confirmed = time.monotonic()  # when every place last held this driver's lease

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
        self.confirmed = time.monotonic()
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
            if self._live(holder, now):
                raise self._refusal(holder, place, now)
            stale.append((holder, place))
        return stale

    def _live(self, holder: Holder, now: float) -> bool:
        """Whether ``holder``'s lease is live. On this host its process is asked: alive, it is
        live whatever its heartbeat (a suspended driver wakes and goes on); on another host,
        its heartbeat within :func:`timeout_s` says so. A lease of this host that records no
        process start (written by an older driver) counts as alive only while it beats too."""
        beats = now - holder.beat < timeout_s()
        if holder.host != self.me.host:
            return beats
        return holder.lives_here() and (holder.start is not None or beats)

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
        return holder.host == self.me.host and not holder.lives_here()

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=heartbeat_s() + 5)
        self._clear_mine()

    def _beat(self) -> None:
        """Renew the heartbeat in every place until the block ends, or until a place is found
        held by another driver (it took over a lease that looked dead): then nothing more is
        written anywhere, and the lease is lost (:meth:`_lose`)."""
        while not self._stop.wait(heartbeat_s()):
            self.me = replace(self.me, beat=time.time())
            if not self._check_places(write=True):
                return

    def _check_places(self, write: bool) -> bool:
        """Read every place (and write this driver's heartbeat where ``write``); False once one
        holds another driver's lease, which is then lost. A place briefly unreachable is
        passed over: the next check tries it again."""
        confirmed = True
        for place in self.places:
            try:
                holder = place.read()
                if holder is not None and holder.token != self.me.token:
                    self._lose(holder, place)
                    return False
                if write:
                    place.write(self.me)
            except LeaseLostError:
                raise
            except Exception:
                confirmed = False
        if confirmed:
            self.confirmed = time.monotonic()
        return True

    def ensure_held(self) -> None:
        """Called before each write to the study's record: return only while this driver
        holds the lease. When the heartbeat has not confirmed it for two heartbeats (the
        process was suspended and has just woken, or the heartbeat thread has not yet run),
        the places are read here first.

        Raises:
            LeaseLostError: another driver holds the study (where ``on_lost`` does not exit).
        """
        if self.lost is None and time.monotonic() - self.confirmed > 2 * heartbeat_s():
            self._check_places(write=False)
        if self.lost is not None:
            self._lose(self.lost, None)

    def _lose(self, holder: Holder, place) -> None:
        """Another driver holds the study: remember it, and call ``on_lost`` once (the driver
        says so and exits); outside the heartbeat's thread, raise LeaseLostError when that
        returns or there is none."""
        with self._losing:
            first = self.lost is None
            if first:
                self.lost = holder
                self.lost_where = place.where if place is not None else ""
                self._stop.set()  # no heartbeat more: the places are the other driver's
            if first and self.on_lost is not None:
                self.on_lost(self.lost_message(time.time()))  # exits, in ``study run``
        if threading.current_thread() is not self._thread:
            raise LeaseLostError(self.lost_message(time.time()))

    def lost_message(self, now: float) -> str:
        """What a driver whose lease was taken over says: who holds the study now."""
        return (
            f"study {self.study!r}: another driver took this driver's lease over while this "
            f"one was not beating (suspended, or cut off, for more than {timeout_s():.0f} s), "
            f"and holds the study now: {self.lost.describe(now)}; its lease is "
            f"{self.lost_where}. This driver stopped at once, writing nothing more to the "
            "study's runs: they are that driver's now. Follow the study with `study status`; "
            "run it here again once that driver has ended"
        )

    def _refusal(self, holder: Holder, place, now: float) -> StudyError:
        if holder.host == self.me.host:
            return self._refusal_here(holder, place, now)
        return StudyError(
            f"study {self.study!r} is being run by another driver: {holder.describe(now)}; its "
            f"lease is {place.where}. Nothing was run or recorded by this driver. Wait for it "
            f"to finish or stop it (a driver whose heartbeat stops for {timeout_s():.0f} s is "
            "taken over by the next one)"
        )

    def _refusal_here(self, holder: Holder, place, now: float) -> StudyError:
        """The refusal for a holder whose process is alive on this host: never taken over,
        whatever its heartbeat, since a suspended driver goes on once woken."""
        pid = holder.pid
        state = ("it is stopped (suspended by Ctrl-Z or SIGSTOP), "
                 if process_stopped(pid) else "")  # fmt: skip
        return StudyError(
            f"study {self.study!r} is being run by another driver: {holder.describe(now)}; its "
            f"lease is {place.where}. Nothing was run or recorded by this driver. Its process "
            f"(pid {pid}) is alive on this host, {state}so its lease is not taken over, "
            f"whatever its heartbeat. If it is suspended, let it go on with `kill -CONT {pid}` "
            f"(or `fg` in its shell) and wait for it to finish; or stop it: `kill {pid}` (and "
            f"`kill -CONT {pid}` if it is suspended, so that it acts on the signal)"
        )

    def _say_takeover(self, holder: Holder, place, now: float) -> None:
        silent = now - holder.beat
        why = ("a process that is gone from this host" if self._dead_here(holder)
               else f"no heartbeat for {silent:.0f} s (more than {timeout_s():.0f} s)")  # fmt: skip
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
