"""A live terminal view of a running study: pending, running, done, failed, best so far, ETA.

It is a Tune callback fed by the same events as the MLflow recorder. On a terminal it redraws a
small rich table in place; elsewhere (CI, a log file) it prints one line whenever a count changes.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field

from ray import tune
from rich.live import Live
from rich.table import Table

from analysis.stats.units import level  # an accuracy in percent, as the headline reads it
from study.terminal import ShownConsole, say


@dataclass
class StudyProgress:
    """Counts and timings of one study run; pure bookkeeping, testable without a terminal."""

    name: str
    total: int
    already_done: int
    concurrency: int
    metric: str
    mode: str
    running: set[str] = field(default_factory=set)
    done: int = 0
    failed: int = 0
    best: float | None = None
    best_trial: str = ""
    durations: list[float] = field(default_factory=list)
    started: dict[str, float] = field(default_factory=dict)
    t0: float = field(default_factory=time.monotonic)

    @property
    def pending(self) -> int:
        return self.total - self.already_done - self.done - self.failed - len(self.running)

    def seed(self, prior: dict[str, float | None]) -> None:
        """Count the target metric of trials finished before this run (a resumed study): the
        best so far is the study's best, not only this run's."""
        for key, value in sorted(prior.items()):
            self.result(key, value)

    def start(self, key: str) -> None:
        self.running.add(key)
        self.started.setdefault(key, time.monotonic())

    def result(self, key: str, value: float | None) -> None:
        if value is None or not math.isfinite(value):
            return
        better = self.best is None or (
            value > self.best if self.mode == "max" else value < self.best
        )
        if better:
            self.best, self.best_trial = value, key

    def end(self, key: str, ok: bool) -> None:
        self.running.discard(key)
        if ok:
            self.done += 1
        else:
            self.failed += 1
        if key in self.started:
            self.durations.append(time.monotonic() - self.started.pop(key))

    def eta_s(self) -> float | None:
        """Remaining trials × mean trial time / concurrency (None before a trial ends)."""
        if not self.durations:
            return None
        left = self.pending + len(self.running)
        return left * (sum(self.durations) / len(self.durations)) / max(1, self.concurrency)

    def line(self) -> str:
        eta = self.eta_s()
        best = "—" if self.best is None else f"{level(self.metric, self.best)} ({self.best_trial})"
        return (
            f"{self.name}: {self.pending} pending · {len(self.running)} running · "
            f"{self.already_done + self.done} done · {self.failed} failed · best {self.metric} "
            f"{best} · elapsed {time.monotonic() - self.t0:.0f} s · ETA "
            f"{'—' if eta is None else f'{eta:.0f} s'}"
        )

    def table(self) -> Table:
        table = Table(title=f"study {self.name}", show_header=True)
        for column in ("pending", "running", "done", "failed", f"best {self.metric}", "ETA"):
            table.add_column(column, overflow="fold")  # a narrow terminal wraps, never cuts
        eta = self.eta_s()
        table.add_row(
            str(self.pending), str(len(self.running)), str(self.already_done + self.done),
            str(self.failed),
            "—" if self.best is None else f"{level(self.metric, self.best)} ({self.best_trial})",
            "—" if eta is None else f"{eta:.0f} s",
        )  # fmt: skip
        return table


class ProgressView(tune.Callback):
    """Feeds :class:`StudyProgress` from Tune's events and shows it."""

    def __init__(self, progress: StudyProgress, key_of) -> None:
        self.progress = progress
        self.key_of = key_of
        self.console = ShownConsole(file=sys.stdout)
        self.live: Live | None = None
        self.last_line = ""

    def __getstate__(self) -> dict:
        # Ray pickles the Tuner's callbacks; a console and a live display do not travel.
        return {k: v for k, v in self.__dict__.items() if k not in ("console", "live")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.console, self.live = ShownConsole(file=sys.stdout), None

    def show(self) -> None:
        if self.console.is_terminal:
            if self.live is None:
                self.live = Live(self.progress.table(), console=self.console, refresh_per_second=4)
                self.live.start()
            self.live.update(self.progress.table())
            return
        line = self.progress.line()
        counts = line.split(" · best")[0]
        if counts != self.last_line:
            say(line, flush=True)
            self.last_line = counts

    def on_trial_start(self, iteration, trials, trial, **info):
        self.progress.start(self.key_of(trial))
        self.show()

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.progress.result(self.key_of(trial), result.get(self.progress.metric))
        self.show()

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.progress.end(self.key_of(trial), ok=True)
        self.show()

    def on_trial_error(self, iteration, trials, trial, **info):
        self.progress.end(self.key_of(trial), ok=False)
        self.show()

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
        say(self.progress.line(), flush=True)
