"""``study next``'s cost (:func:`study.sequential.follow_up_cost`) read from a finished study's
record: fixed costs from each session's own time, never the span across sessions, and each
trial's examples from the study file, never the newest run's examples seen.

The records are planted in memory (the runs as MLflow's client returns them: ``info`` and
``data``), on the default study's design (8 trials of 30,720 examples): a straight run of 2 at
once, each trial 10 s, one session with 16 s of fixed costs. Each variant is set against it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from search_spaces.designs import build_design
from search_spaces.spec import load_spec
from study.sequential import follow_up_cost
from study.session_time import busy_seconds, record_session, trial_intervals

EXAMPLES = 30720
T0 = 1_700_000_000_000  # epoch ms
GAP_S = 3600.0  # a resumed study's idle hour between its sessions


def _run(start_s: float, wall: float, seen: float = EXAMPLES, resumed: float = 0.0):
    start = T0 + int(start_s * 1000)
    return SimpleNamespace(
        info=SimpleNamespace(
            status="FINISHED",
            start_time=start - 500,  # scheduled earlier
            end_time=start + int(wall * 1000),
        ),
        data=SimpleNamespace(
            tags={"study.attempt_started": str(start)},
            metrics={
                "trial/wall_s": wall,
                "trial/examples_seen": seen,
                "trial/resumed_from": resumed,
            },
        ),
    )


class _Record:
    """What follow_up_cost reads of a StudyRecord: its trial runs (newest first, as MLflow
    lists them), its parent, and the parent's metric history through the client."""

    def __init__(self, runs, parent_span_s: float, sessions: list[float] | None):
        self.runs = list(reversed(runs))
        self.parent_ = SimpleNamespace(info=SimpleNamespace(
            run_id="parent", start_time=T0 - 12_000,
            end_time=T0 + int(parent_span_s * 1000)))  # fmt: skip
        self.history = [SimpleNamespace(step=i, value=v, timestamp=T0 + i)
                        for i, v in enumerate(sessions or [])]  # fmt: skip
        self.client = SimpleNamespace(get_metric_history=lambda run_id, key: self.history)

    def trial_runs(self):
        return {f"t{i}": run for i, run in enumerate(self.runs)}

    def parent(self):
        return self.parent_


def _pairs(start_s: float, walls: list[float], seen: list[float] | None = None) -> list:
    """Trials two at a time from ``start_s``, each pair starting when the last one ends."""
    runs, at = [], start_s
    seen = seen or [EXAMPLES] * len(walls)
    for i in range(0, len(walls), 2):
        runs += [_run(at, w, s) for w, s in zip(walls[i : i + 2], seen[i : i + 2], strict=True)]
        at += max(walls[i : i + 2])
    return runs


@pytest.fixture(scope="module")
def default():
    spec = load_spec(None)
    return spec, build_design(spec)


def _seconds(text: str) -> float:
    """The seconds of "about 56 s" / "about 1.2 min" / "about 1.0 h" at the text's start."""
    number, unit = text.removeprefix("about ").split(" ")[:2]
    return float(number) * {"s": 1, "min": 60, "h": 3600}[unit]


def _cost(record, default) -> str:
    spec, design = default
    return follow_up_cost(record, spec, design)


def test_a_straight_run_costs_its_trials_at_once_plus_its_fixed_costs(default):
    record = _Record(_pairs(0, [10.0] * 8), parent_span_s=40 + 4, sessions=[16.0])
    said = _cost(record, default)
    assert said.startswith("about 56 s on this machine (8 trials at the 2 at once the finished "
                           "study ran; from its recorded trial times), 1× the compute of "
                           "default-digits, which ran 8 trials in 56 s")  # fmt: skip


def test_a_resumed_study_idle_between_its_sessions_costs_what_a_straight_run_does(default):
    """Before: the parent's span less the trials' (an hour's gap in both) as fixed cost, and
    the gap in the span the trials ran in: "about 1.0 h …" for a study that ran in 56 s."""
    straight = _Record(_pairs(0, [10.0] * 8), parent_span_s=44, sessions=[16.0])
    first, second = _pairs(0, [10.0] * 4), _pairs(20 + 16 + GAP_S, [10.0] * 4)
    resumed = _Record(first + second, parent_span_s=GAP_S + 76, sessions=[16.0, 16.0])
    assert _seconds(_cost(resumed, default)) == pytest.approx(
        _seconds(_cost(straight, default)), rel=0.0
    )  # exactly: one session's fixed costs
    assert "at the 2 at once" in _cost(resumed, default)  # the gap is no slot's
    # the finished study's own time: its trials' and both sessions' fixed costs, not the hour
    assert _cost(resumed, default).endswith("which ran 8 trials in 72 s")


def test_a_study_recorded_before_sessions_logged_their_time_caps_its_idle_gap(default):
    """No study/session_fixed_s on the parent: its span less the trials' busy time, at most
    plan --estimate's fixed costs (driver 12 s + report 12 s + a worker per slot 6 s × 2)."""
    straight = _Record(_pairs(0, [10.0] * 8), parent_span_s=44, sessions=None)
    assert _seconds(_cost(straight, default)) == pytest.approx(56)
    first, second = _pairs(0, [10.0] * 4), _pairs(20 + 16 + GAP_S, [10.0] * 4)
    resumed = _Record(first + second, parent_span_s=GAP_S + 76, sessions=None)
    assert _seconds(_cost(resumed, default)) == pytest.approx(40 + 36)  # not an hour


def test_a_study_whose_last_trials_diverged_costs_a_same_size_follow_up_like_the_rest(default):
    """The two newest trials diverged and stopped after 640 examples (1.2 s, mostly setup).
    Before: the newest run's 640 examples scaled the follow-up 48× ("about 19 min … 1.5e+02×
    the compute"); now the examples are the study file's and the rate is pooled."""
    walls = [10.0] * 6 + [1.2, 1.2]
    seen = [EXAMPLES] * 6 + [640, 640]
    diverged = _Record(_pairs(0, walls, seen), parent_span_s=30 + 1.2 + 16, sessions=[16.0])
    said = _cost(diverged, default)
    assert "1× the compute of default-digits" in said
    straight = _cost(_Record(_pairs(0, [10.0] * 8), parent_span_s=44, sessions=[16.0]), default)
    assert _seconds(said) == pytest.approx(_seconds(straight), rel=0.10)


def test_a_resumed_trial_s_rate_counts_only_the_examples_its_last_attempt_saw(default):
    runs = _pairs(0, [10.0] * 8)
    # the first pair resumed from checkpoints at half their budget: the other half in 5 s
    runs[:2] = [_run(0, 5.0, seen=EXAMPLES, resumed=EXAMPLES / 2) for _ in range(2)]
    record = _Record(runs, parent_span_s=44, sessions=[16.0])
    assert _seconds(_cost(record, default)) == pytest.approx(56, abs=1.0)


def test_busy_time_is_the_union_of_the_trials_intervals():
    assert busy_seconds([(0, 10_000), (5_000, 12_000), (20_000, 21_000)]) == pytest.approx(13)
    assert busy_seconds([]) == 0
    runs = _pairs(0, [10.0] * 4) + _pairs(GAP_S, [10.0] * 2)
    assert busy_seconds(trial_intervals(runs)) == pytest.approx(30)
    assert busy_seconds(trial_intervals(runs, since_ms=T0 + GAP_S * 1000)) == pytest.approx(10)


def test_each_session_logs_its_own_time_and_fixed_cost_on_the_parent(tmp_path):
    """On a real embedded store: a second session logs step 1; a session that ran no trial is
    fixed cost throughout."""
    import time

    from recordkit import record_study

    from study.record import StudyRecord

    uri = record_study(tmp_path, "sessions")  # its trials ended just now, 1 s each
    record = StudyRecord(uri, "sessions", tmp_path / "artifacts")
    parent = record.parent().info.run_id
    assert record_session(record, parent, 30.0)
    time.sleep(0.01)
    assert record_session(record, parent, 0.001)  # after the trials: none of them ran in it
    fixed = record.client.get_metric_history(parent, "study/session_fixed_s")
    walls = record.client.get_metric_history(parent, "study/session_s")
    assert sorted(m.step for m in walls) == [0, 1] == sorted(m.step for m in fixed)
    by_step = {m.step: m.value for m in fixed}
    assert 0 < by_step[0] < 30.0  # the planted trials ran inside the first session
    assert by_step[1] == pytest.approx(0.001)
