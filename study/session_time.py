"""Each driver session's own time, on the study's parent run, so that what a study cost is read
from the sessions that ran it and never from the span across them (a study resumed a day later
did not cost a day).

At the end of ``study run`` (before its parent is ended) the session logs, with step = the
session's index (0 for the first session that got this far, then 1, 2 …):

- ``study/session_s``: its own wall time, from ``run_study``'s start to here (the study file
  read, the lease, Ray's start, the baselines, the trials it ran, the export and the report);
- ``study/session_fixed_s``: the part of it no trial was running: its wall time less the union
  of the intervals its trials ran in (each attempt from its ``study.attempt_started`` to its
  run's end). A session that ran no trial (all were finished) is fixed cost throughout.

A session stopped before its end (an interrupt, a lost cluster) logs nothing; its finished
trials still count in the trials' own times. :func:`busy_seconds` and :func:`trial_intervals`
are what ``study next``'s cost (:func:`study.sequential.follow_up_cost`) reads as well.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

SESSION_S = "study/session_s"
SESSION_FIXED_S = "study/session_fixed_s"
ATTEMPT_STARTED = "study.attempt_started"  # study.record.ATTEMPT_STARTED_TAG


def trial_intervals(runs: Iterable, since_ms: float | None = None) -> list[tuple[float, float]]:
    """(start, end) in epoch ms of each ended trial run's last attempt (its
    ``study.attempt_started``, else its start), those that started at ``since_ms`` or later."""
    found = []
    for run in runs:
        end = run.info.end_time
        if not end:
            continue
        start = float(run.data.tags.get(ATTEMPT_STARTED) or run.info.start_time)
        if since_ms is None or start >= since_ms:
            found.append((start, float(end)))
    return found


def busy_seconds(intervals: Iterable[tuple[float, float]]) -> float:
    """Seconds during which at least one of the (start, end) ms intervals ran: their union, so
    the idle time between two sessions is not counted."""
    total, reach = 0.0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total / 1000


def record_session(record, parent_id: str, wall_s: float) -> bool:
    """Log this session's ``study/session_s`` and ``study/session_fixed_s`` on the parent run
    (see the module docstring); False when they could not be (a cost note never fails a study)."""
    from mlflow.entities import Metric

    try:
        now = time.time() * 1000
        runs = record.trial_runs().values()
        busy = busy_seconds(trial_intervals(runs, since_ms=now - wall_s * 1000))
        step = len(record.client.get_metric_history(parent_id, SESSION_S))
        stamp = int(now)
        record.client.log_batch(parent_id, metrics=[
            Metric(SESSION_S, float(wall_s), stamp, step),
            Metric(SESSION_FIXED_S, max(0.0, float(wall_s) - busy), stamp, step),
        ])  # fmt: skip
    except Exception:  # the study is done: its cost note is not worth failing it
        return False
    return True
