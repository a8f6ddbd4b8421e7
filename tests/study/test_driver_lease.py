"""One live driver per study, wherever the drivers run: the lease in the storage and in the
tracking store, refused while it beats, taken over (and said) once it stops; two real driver
processes on one store and on one moto bucket."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from s3kit import make_bucket, s3_server  # noqa: F401
from studykit import child_runs, duplicated_metric_rows, write_spec

from search_spaces.spec import StudyError
from study.lease import (
    LEASE_TAG,
    TAKEOVER_TAG,
    DriverLease,
    Holder,
    StorageLease,
    TrackingLease,
    study_lease,
)
from study.record import StudyRecord
from study.storage import open_storage

STUDY = str(Path(sys.executable).with_name("study"))


def places(workdir: Path, name: str = "leased"):
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    study = open_storage(workdir / "studies").sub(name)
    return uri, study, lambda: StudyRecord(uri, name)


def lease(workdir: Path):
    uri, study, make = places(workdir)
    return study_lease(study, uri, "leased", make)


def tracking(workdir: Path) -> TrackingLease:
    uri, _, make = places(workdir)
    return TrackingLease(uri, "leased", make)


def test_a_live_lease_refuses_a_second_driver_naming_it(workdir):
    _, study, _ = places(workdir)
    with lease(workdir) as first:
        with pytest.raises(StudyError) as err:
            lease(workdir).__enter__()
        text = str(err.value)
        assert f"is being run by another driver: host {first.me.host}, pid {os.getpid()}" in text
        assert "since 20" in text and "last heartbeat" in text
    assert StorageLease(study).read() is None  # released on exit
    assert tracking(workdir).read() is None
    with lease(workdir):  # and free for the next driver
        pass


@pytest.mark.parametrize("where", ["storage", "tracking"])
def test_a_lease_written_on_another_host_counts_while_it_beats(workdir, where):
    """The old lock only counted a lock written by its own hostname."""
    _, study, _ = places(workdir)
    place = StorageLease(study) if where == "storage" else tracking(workdir)
    place.write(Holder("other", "elsewhere.example", 4242, time.time() - 30, time.time()))
    with pytest.raises(StudyError, match=r"host elsewhere\.example, pid 4242, since"):
        lease(workdir).__enter__()


def test_a_refused_driver_creates_nothing_in_its_own_store(workdir):
    """A driver that shares only the storage is refused before it touches its store."""
    _, study, _ = places(workdir)
    StorageLease(study).write(Holder("other", "h", 1, time.time(), time.time()))
    with pytest.raises(StudyError):
        lease(workdir).__enter__()
    assert not (workdir / "mlflow.db").exists()


def test_a_lease_without_a_heartbeat_is_taken_over_and_the_takeover_is_kept(
    workdir, monkeypatch, capsys
):
    monkeypatch.setenv("CONTRASTIVE_LEASE_TIMEOUT_S", "5")
    uri, study, _ = places(workdir)
    dead = Holder("dead", "gone.example", 999, time.time() - 300, time.time() - 60)
    StorageLease(study).write(dead)
    tracking(workdir).write(dead)
    with lease(workdir) as held:
        assert StorageLease(study).read().token == held.me.token
        eid = tracking(workdir).experiment_id()
        tags = MlflowClient(uri).get_experiment(eid).tags
        assert json.loads(tags[LEASE_TAG])["token"] == held.me.token
        assert re.search(r"took over the lease of a driver with no heartbeat for 6\d s",
                         tags[TAKEOVER_TAG])  # fmt: skip
        assert "host gone.example, pid 999" in tags[TAKEOVER_TAG]
    assert "took over the lease" in capsys.readouterr().err


def test_the_heartbeat_renews_both_places(workdir, monkeypatch):
    monkeypatch.setenv("CONTRASTIVE_LEASE_HEARTBEAT_S", "0.2")
    _, study, _ = places(workdir)
    with lease(workdir) as held:
        first = StorageLease(study).read().beat
        deadline = time.monotonic() + 10  # a beat every 0.2 s; a busy machine may delay a few
        while time.monotonic() < deadline and tracking(workdir).read().beat <= first:
            time.sleep(0.2)
        assert StorageLease(study).read().beat > first
        assert tracking(workdir).read().beat > first
        assert held.lost is None


class Racing(StorageLease):
    """A place where another driver writes its own lease right after ours (both started
    together and both found the place empty)."""

    def __init__(self, study, rival: Holder) -> None:
        super().__init__(study)
        self.rival = rival

    def write(self, holder: Holder) -> None:
        super().write(holder)
        super().write(self.rival)


def test_of_two_drivers_writing_at_once_the_one_overwritten_is_refused(workdir):
    _, study, _ = places(workdir)
    rival = Holder("rival", "other-host", 7, time.time(), time.time())
    with pytest.raises(StudyError, match="host other-host, pid 7"):
        DriverLease("leased", [Racing(study, rival)]).__enter__()
    assert StorageLease(study).read().token == "rival"  # the other one holds it


class Logged(StorageLease):
    """A place that logs what is done to it in ``log``."""

    def __init__(self, study, log: list) -> None:
        super().__init__(study)
        self.log = log

    def read(self):
        self.log.append("read")
        return super().read()

    def write(self, holder: Holder) -> None:
        self.log.append("write")
        super().write(holder)


@pytest.mark.parametrize("fails", [False, True])
def test_the_drivers_own_work_is_done_while_the_lease_settles(workdir, fails):
    """Between writing the lease and reading it back, the driver does ``meanwhile`` (it loads
    the report's modules there); a failure there is left to the later use, the lease is taken."""
    _, study, _ = places(workdir)
    log: list[str] = []

    def meanwhile() -> None:
        log.append("meanwhile")
        if fails:
            raise ImportError("no such module")

    with DriverLease("leased", [Logged(study, log)], meanwhile) as held:
        assert StorageLease(study).read().token == held.me.token
    settled = log.index("meanwhile")  # after the write, before the read back; once
    assert log[settled - 1 : settled + 2] == ["write", "meanwhile", "read"]
    assert log.count("meanwhile") == 1


class Slow(TrackingLease):
    """The shared store, as one driver sees it: creating the study's record (importing MLflow,
    creating the store) or writing the lease into it takes ``create_s`` or ``write_s`` seconds,
    once; a slow write lands no sooner than ``lands_after`` is set. ``gate`` orders the other
    driver's writes around this one's late write (see :class:`HeldBack`)."""

    def __init__(
        self, uri, make, create_s: float = 0.0, write_s: float = 0.0,
        lands_after: threading.Event | None = None,
    ) -> None:  # fmt: skip
        super().__init__(uri, "leased", lambda: (time.sleep(create_s), make())[1])
        self.write_s, self.lands_after = write_s, lands_after
        self.cleared = 0
        self.writing_slowly = threading.Event()  # set as the slow write begins
        self.gate = LateWriteGate()

    def clear(self) -> None:
        self.cleared += 1
        super().clear()
        self.gate.withdrawn.set()

    def write(self, holder: Holder) -> None:
        if not self.write_s:
            super().write(holder)
            return
        began = time.monotonic()
        self.writing_slowly.set()
        if self.lands_after is not None:
            assert self.lands_after.wait(timeout=30), "the other driver never took the lease"
        time.sleep(max(0.0, self.write_s - (time.monotonic() - began)))
        self.write_s = 0.0
        with self.gate.lock:
            super().write(holder)
            self.gate.landed = True


class LateWriteGate:
    """Between one driver's late write landing and that driver withdrawing it, the other
    driver's heartbeat does not write. Without it, a heartbeat that read its own lease just
    before the late write landed writes it back just after, so the late driver finds nothing of
    its own to clear: a right outcome, but not the one the test is about, and a busy machine
    makes it likely (it failed one run in a suite run 4 tests at a time on 2 cores)."""

    def __init__(self) -> None:
        self.lock, self.landed, self.withdrawn = threading.Lock(), False, threading.Event()

    def write(self, place: TrackingLease, holder: Holder) -> None:
        while True:
            with self.lock:
                if not self.landed or self.withdrawn.is_set():
                    TrackingLease.write(place, holder)
                    return
            # held back until the late driver withdraws; a driver that never does (the clear
            # removed from the lease) gets its write through after 10 s, and the test fails
            if not self.withdrawn.wait(timeout=10):
                TrackingLease.write(place, holder)
                return


class HeldBack(TrackingLease):
    """The shared store, as the other driver sees it: its writes pass ``gate``."""

    def __init__(self, uri, make, gate: LateWriteGate) -> None:
        super().__init__(uri, "leased", make)
        self.gate = gate

    def write(self, holder: Holder) -> None:
        self.gate.write(self, holder)


def race(workdir: Path, slow: dict) -> dict:
    """Driver A starts, B 0.3 s later; they share the tracking store (A's place is slow as
    ``slow`` says), each has its own storage. Where A's write is slow, B starts as that write
    begins and the write lands once B holds the lease (timing alone let a busy machine order
    them otherwise). Which entered, which were refused, and who holds the store's lease once
    the refused one has given up."""
    uri, _, make = places(workdir)
    outcome, entered, holding = {}, threading.Event(), threading.Event()

    def drive(name: str, place: TrackingLease) -> None:
        storage = StorageLease(open_storage(workdir / name).sub("leased"))
        try:
            with DriverLease("leased", [storage, place]) as held:
                outcome[name] = held.me.token
                holding.set()
                entered.wait(timeout=30)  # holds the lease until the other has ended
                time.sleep(0.5)
        except StudyError as err:
            outcome[name] = err
            outcome["holder"] = tracking(workdir).read()
            entered.set()

    # given before A starts: A's thread reads it as its write begins
    lands_after = holding if slow.get("write_s") else None
    outcome["a's place"] = slow_place = Slow(uri, make, **slow, lands_after=lands_after)
    drivers = [
        threading.Thread(target=drive, args=("a", slow_place)),
        threading.Thread(target=drive, args=("b", HeldBack(uri, make, slow_place.gate))),
    ]
    drivers[0].start()
    if lands_after is not None:
        assert slow_place.writing_slowly.wait(timeout=30), "A never began its write"
    else:
        time.sleep(0.3)
    drivers[1].start()
    for driver in drivers:
        driver.join(timeout=60)
    return outcome


def one_ran(outcome: dict) -> str:
    """The one driver that ran; the other was refused, and the store's lease is the one's."""
    ran = [name for name in "ab" if isinstance(outcome[name], str)]
    refused = [name for name in "ab" if isinstance(outcome[name], StudyError)]
    assert len(ran) == 1 and len(refused) == 1, outcome
    assert outcome["holder"].token == outcome[ran[0]]
    return ran[0]


def test_a_driver_slow_to_create_the_store_does_not_take_the_lease_taken_meanwhile(
    workdir, monkeypatch
):
    """CI's failure: A found the store free, then took seconds to import MLflow and create the
    store before writing its lease; B took the lease meanwhile, and both ran the study."""
    monkeypatch.setenv("CONTRASTIVE_LEASE_HEARTBEAT_S", "0.2")
    outcome = race(workdir, {"create_s": 2.5})
    refused = "ab".replace(one_ran(outcome), "")
    assert "is being run by another driver" in str(outcome[refused])


def test_a_driver_whose_write_is_slower_than_the_bound_withdraws_and_one_runs(workdir, monkeypatch):
    """A's write lands after B has taken the lease and overwrites it: A clears it, waits for
    B's heartbeat to write it again, and is refused; B alone runs."""
    monkeypatch.setenv("CONTRASTIVE_LEASE_HEARTBEAT_S", "0.2")
    outcome = race(workdir, {"write_s": DriverLease.SETTLE_S + 2.0})
    assert one_ran(outcome) == "b"
    assert outcome["a's place"].cleared == 1  # A withdrew what it wrote too late, once
    assert tracking(workdir).read() is None  # and B released its lease on ending


def test_writes_too_slow_in_every_round_are_refused_saying_so(workdir, monkeypatch):
    monkeypatch.setenv("CONTRASTIVE_LEASE_HEARTBEAT_S", "0.1")
    uri, study, make = places(workdir)

    class Slower(Slow):
        def write(self, holder: Holder) -> None:
            self.write_s = DriverLease.SETTLE_S + 0.2
            super().write(holder)

    with pytest.raises(StudyError, match="took longer than 1 s in 3 tries"):
        DriverLease("leased", [StorageLease(study), Slower(uri, make)]).__enter__()
    assert StorageLease(study).read() is None and tracking(workdir).read() is None


def start(spec: Path, cwd: Path, uri: str, storage: str, ray_tmp: str) -> subprocess.Popen:
    env = os.environ | {"RAY_TMPDIR": ray_tmp}
    return subprocess.Popen(
        [STUDY, "run", str(spec), "--no-figures", "--tracking-uri", uri, "--storage", storage],
        cwd=cwd,
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip


@contextlib.contextmanager
def trials_held(driver: int):
    """Stop (SIGSTOP) every Ray worker under the process ``driver`` while the block runs, those
    that start meanwhile too; each is continued (SIGCONT) at the end. The driver itself runs on
    (its lease's heartbeat beats), so it holds its study while its trials wait."""
    import psutil

    stopped: set[psutil.Process] = set()
    done = threading.Event()

    def hold() -> None:
        while not done.wait(0.1):
            with contextlib.suppress(psutil.Error):
                for proc in psutil.Process(driver).children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        if proc not in stopped and proc.name().startswith("ray::"):
                            proc.suspend()
                            stopped.add(proc)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    try:
        yield
    finally:
        done.set()
        holder.join()
        for proc in stopped:
            with contextlib.suppress(psutil.Error):
                proc.resume()


@pytest.mark.long
@pytest.mark.slow
def test_two_real_drivers_on_one_store_or_one_bucket_run_every_trial_once(
    workdir,
    ray_tmp,
    s3_server,  # noqa: F811
):
    """Driver A holds the study (store T1, bucket storage). B shares T1 from another folder
    with its own storage; C shares the bucket with its own store. Both are refused (exit 2,
    naming the holder) before they train anything; A runs every trial exactly once."""
    bucket = make_bucket("lease-bucket")
    spec = write_spec(workdir / "s.yaml", "two-drivers",
                      factors={"temperature": {"levels": [0.1, 0.3, 0.5]}},
                      trial={"budget_examples": 128 * 24, "batch_size": 128},
                      max_concurrent=1)  # fmt: skip
    t1 = f"sqlite:///{workdir / 't1.db'}"
    a = start(spec, workdir, t1, f"s3://{bucket}/studies", ray_tmp)
    storage = open_storage(f"s3://{bucket}/studies").sub("two-drivers")
    deadline = time.monotonic() + 120
    while StorageLease(storage).read() is None:
        assert a.poll() is None, a.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "driver A never took the lease"
        time.sleep(0.2)
    while not any(run.info.status == "RUNNING" for run in child_runs(t1, "two-drivers")):
        assert a.poll() is None, a.communicate()[1][-3000:]
        assert time.monotonic() < deadline + 180, "driver A never started a trial"
        time.sleep(0.2)
    other = workdir / "elsewhere"
    other.mkdir()
    # A alive and holding the study all the while B and C ask: once its first trial runs, its
    # trials' Ray workers are stopped (SIGSTOP) until both were refused, whatever the speed of
    # this machine (A's three small trials can end before a second driver has read its file)
    with trials_held(a.pid):
        askers = ((t1, str(other / "studies")),  # B
                  (f"sqlite:///{other / 't2.db'}", f"s3://{bucket}/studies"))  # C  # fmt: skip
        seconds = [start(spec, other, uri, where, ray_tmp) for uri, where in askers]
        for second in seconds:
            _, err = second.communicate(timeout=180)
            assert second.returncode == 2, err[-3000:]
            assert "is being run by another driver: host" in err and f"pid {a.pid}" in err
        assert a.poll() is None
    _, err = a.communicate(timeout=400)
    assert a.returncode == 0, err[-3000:]
    runs = child_runs(t1, "two-drivers")
    assert len(runs) == 3 and {r.data.tags["study.attempts"] for r in runs} == {"1"}
    assert duplicated_metric_rows(workdir / "t1.db") == []
    assert not (other / "t2.db").exists()  # C was refused before it touched its own store
    assert not (other / "studies" / "two-drivers" / "trials").exists()  # B trained nothing


def test_a_lease_of_a_dead_process_on_this_host_is_taken_over_at_once(workdir, capsys):
    """A driver SIGKILLed and rerun at once: its lease still looks fresh, but its process is
    gone from this host."""
    import socket

    gone = subprocess.Popen(["true"])
    gone.wait()
    _, study, _ = places(workdir)
    StorageLease(study).write(Holder("killed", socket.gethostname(), gone.pid, time.time(),
                                     time.time()))  # fmt: skip
    with lease(workdir) as held:
        assert StorageLease(study).read().token == held.me.token
    assert "a process that is gone from this host" in capsys.readouterr().err


class Entered:
    """A context whose entry waits for ``go`` (the driver's Ray start, in the other thread) and
    then is refused or taken."""

    def __init__(self, refuse: bool = False) -> None:
        self.refuse, self.go = refuse, threading.Event()
        self.log: list[str] = []

    def __enter__(self):
        assert self.go.wait(10), "entered only after the work: not beside it"
        if self.refuse:
            raise StudyError("refused")
        self.log.append("entered")
        return self

    def __exit__(self, *exc) -> None:
        self.log.append(f"exited {exc[0].__name__ if exc[0] else None}")


def test_the_lease_is_taken_beside_the_drivers_ray_start_and_held_for_the_block():
    from study.runner import entered_beside

    lease = Entered()
    with entered_beside(lease, lease.go.set) as held:
        assert held is lease and lease.log == ["entered"]
    assert lease.log == ["entered", "exited None"]
    with pytest.raises(KeyError), entered_beside(lease, lease.go.set):
        raise KeyError("in the block")
    assert lease.log[-1] == "exited KeyError"


def test_a_refusal_beside_the_ray_start_is_raised_after_it_and_nothing_is_held():
    from study.runner import entered_beside

    lease, started = Entered(refuse=True), []

    def start() -> None:
        lease.go.set()
        started.append("ray")

    with pytest.raises(StudyError, match="refused"), entered_beside(lease, start):
        pytest.fail("the block runs without the lease")
    assert started == ["ray"] and lease.log == []


def test_an_interrupted_ray_start_lets_the_lease_go_once_it_is_taken():
    from study.runner import entered_beside

    lease = Entered()

    def start() -> None:
        lease.go.set()
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt), entered_beside(lease, start):
        pytest.fail("the block runs after an interrupt")
    assert lease.log == ["entered", "exited KeyboardInterrupt"]


@pytest.mark.slow
def test_a_new_study_refused_by_the_lease_stops_the_ray_it_started_and_records_nothing(
    workdir, ray_tmp, monkeypatch
):
    """A new study starts its Ray while it takes the lease; refused (another driver's live lease
    in the storage), it stops that Ray: this process is left connected to none, and its store
    was never made."""
    import ray

    import study.local_ray as local_ray
    import study.runner as runner

    spec = write_spec(workdir / "s.yaml", "leased", factors={"temperature": {"levels": [0.1]}})
    StorageLease(open_storage(workdir / "studies").sub("leased")).write(
        Holder("other", "elsewhere.example", 4242, time.time(), time.time())
    )
    started: list[bool] = []
    real_start = local_ray.start_ray

    def start_ray(*args, **kwargs) -> bool:
        started.append(real_start(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(local_ray, "start_ray", start_ray)
    with pytest.raises(StudyError, match=r"host elsewhere\.example, pid 4242"):
        runner.run_study(spec, quiet=True, figures=False, storage=workdir / "studies",
                         tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}")  # fmt: skip
    assert started == [True]  # a Ray was started here, beside the lease
    assert not ray.is_initialized()
    assert not (workdir / "mlflow.db").exists()
