"""``study status``: a study's trials (their state, the examples each has seen, the target
metric), its driver when the trials are not finished, and a study that is starting: a live
driver that holds its lease, or has announced itself, before anything is recorded.

Refusals (no such study, a store that cannot be read) are :func:`study.services.recorded.
existing`'s :class:`~search_spaces.spec.StudyError`; the typer command prints them and exits 2,
and prints the rows built here. Deferred: the lease, the record and the analysis's readers are
imported inside each function: status answers within a second, reading an embedded store
without importing MLflow (``tests/study/test_read_only_commands.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from search_spaces.spec import StudyError
from study.services.recorded import driver_state

DEFAULT_TARGET = "probe/knn_top1_h"  # a study recorded before its parent named its target


@dataclass
class Trials:
    """What ``study status`` shows of a recorded study: the target ``metric``, each trial's
    state, the driver (:class:`study.driver_gone.DriverState`, None where the store cannot say)
    and the table's ``headers`` and ``rows``."""

    metric: str
    states: dict[str, str]
    driver: object
    headers: list[str]
    rows: list[list[str]]


def trials(record) -> Trials:
    """The trials of ``record`` as ``study status`` shows them."""
    from analysis.stats.units import level  # accuracies in percent, as the headline reads them
    from study.run_notes import TARGET_MARK

    runs = record.trial_runs()
    parent = record.parent()
    metric = parent.data.params.get("target_metric") if parent else None
    metric = metric or DEFAULT_TARGET
    driver = driver_state(record)
    states = {key: trial_state(run, driver) for key, run in runs.items()}
    rows = []
    for key, run in sorted(runs.items()):
        value = run.data.metrics.get(metric)
        seen = run.data.metrics.get("train/examples_seen")
        rows.append([
            key, states[key], "—" if seen is None else f"{int(seen):,}",
            "—" if value is None else level(metric, value),
            (run.info.run_name or "").split(TARGET_MARK, 1)[0],  # its value is in its column
        ])  # fmt: skip
    return Trials(metric, states, driver, ["trial", "status", "examples seen", metric, "run"], rows)


def recorded(name: str, uri: str) -> bool:
    """Whether the store holds the study's parent run yet (reads only)."""
    from study.record import StudyRecord

    try:
        return StudyRecord.existing(uri, name, read_only=True).parent() is not None
    except (LookupError, StudyError):
        return False
    except Exception:  # a store that cannot be read: existing() says why
        return True


def starting(name: str, uri: str) -> str | None:
    """'study NAME: starting …' while a live driver holds the study's lease in the default
    storage (studies/NAME/driver.lock) or in the record (wherever its storage is), or has
    announced itself before taking it
    (:mod:`study.starting`), but has recorded nothing yet; None otherwise."""
    import socket
    import time

    from study.lease import LEASE_FILE, Holder, timeout_s
    from study.private import read_regular
    from study.starting import announced

    text = read_regular(Path("studies") / name / LEASE_FILE)  # never a FIFO, a link
    holder = Holder.from_text(text.decode(errors="replace")) if text else None
    if holder is None:  # a study run with --storage elsewhere: its lease in the record
        holder = Holder.from_text(lease_in_record(name, uri))
    if holder is None:
        early = announced(name, uri)
        if early is None:
            return None
        holder = Holder("", early["host"], int(early["pid"]), early["since"], time.time())
    here = holder.host == socket.gethostname()
    live = holder.lives_here() if here else time.time() - holder.beat < timeout_s()
    if not live:
        return None
    return (
        f"study {name}: starting, its driver running ({holder.describe(time.time())}); "
        "nothing is recorded yet: its trials are listed here once it has opened its record"
    )


def lease_in_record(name: str, uri: str) -> str | None:
    """The lease the study's experiment holds (its tag ``study.driver``, written before any
    run: :mod:`study.lease`), wherever the study's storage is; None when there is none."""
    from analysis.reading.record import find_experiment
    from analysis.reading.state import LEASE_TAG
    from analysis.reading.store import read_client, store_exists

    try:
        if not store_exists(uri):
            return None
        experiment = find_experiment(read_client(uri), name)
        return None if experiment is None else (experiment.tags or {}).get(LEASE_TAG)
    except Exception:  # a store that cannot be read: status says why next
        return None


def trial_state(run, driver=None) -> str:
    """One word for a trial: how it ended (finished, failed, diverged …) once its run ended
    FINISHED, else its run's status (running, scheduled, killed, failed); a run left RUNNING or
    SCHEDULED by a driver that is gone (``driver``: :class:`study.driver_gone.DriverState`) is
    "driver gone", never running."""
    state = run.info.status.lower()
    tag = run.data.tags.get("study.trial_status")
    if driver is not None and driver.gone and run.info.run_id in driver.unfinished:
        return "driver gone"
    return tag if tag and state == "finished" else state


def count_words(states: list[str]) -> str:
    """``"20 finished, 2 failed"``: how many trials are in each state, most first."""
    counts: dict[str, int] = {}
    for state in states:
        counts[state] = counts.get(state, 0) + 1
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{n} {state}" for state, n in ordered) or "none yet"
