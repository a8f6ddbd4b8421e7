"""Every figure that applies to a study, by file name; writing them all, in parallel where the
cores allow (one figure is written by :mod:`analysis.report.plots._save`); a figure's title and
caption."""

from __future__ import annotations

import collections
import contextlib
import os
import pickle
import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from analysis.report.plots import (
    _class_spread,
    _desirability,
    _interactions,
    _learning_curves,
    _main_effects,
    _pareto,
    _phase_diagram,
    _plane,
    _probe_vs_temperature,
    _save,
    _shift,
    _surface_contours,
    _trajectories,
)
from analysis.report.plots._class_spread import METRICS as _CLASS_METRICS
from analysis.report.plots._class_spread import class_spread
from analysis.report.plots._common import (
    _SPACE_NAMES,
    KNOWN_METRICS,
    _factors,
    _has,
    _slug,
    _unslug,
    _varies,
)
from analysis.report.plots._desirability import desirability_contours
from analysis.report.plots._interactions import interactions
from analysis.report.plots._learning_curves import learning_curves_figure
from analysis.report.plots._main_effects import main_effects
from analysis.report.plots._pareto import pareto_figure
from analysis.report.plots._phase_diagram import _PHASE_METRICS, phase_diagram
from analysis.report.plots._plane import plane
from analysis.report.plots._probe_vs_temperature import probe_vs_temperature
from analysis.report.plots._save import figure_paths, save_figure
from analysis.report.plots._shift import shift, shift_families
from analysis.report.plots._surface_contours import _split_contours_name, surface_contours
from analysis.report.plots._trajectories import trajectories

_FIGURE_MODULES = (
    _plane,
    _trajectories,
    _learning_curves,
    _main_effects,
    _interactions,
    _phase_diagram,
    _probe_vs_temperature,
    _surface_contours,
    _desirability,
    _pareto,
    _class_spread,
    _shift,
)


def caption(name: str) -> str:
    """What a reader should look for in the figure ``all_figures`` names ``name`` (e.g.
    ``plane_z``, ``phase_z_align``, ``contours_probe_knn_top1_h_temperature_batch_size``): its
    module's ``CAPTION`` with the space, metric, probe or response and factors the name carries
    filled in. Raises KeyError for a name no figure has."""
    for module in _FIGURE_MODULES:
        text = module.caption_of(name)
        if text is not None:
            return text
    raise KeyError(f"no figure is named {name!r}")


_PROBES = {"knn": "k-NN", "linear": "Linear"}
# name pattern -> a one-line title that says what is plotted against what (the figure index's
# line and the start of the image's alt text in report.html)
_TITLES = (
    (r"plane_(?P<space>\w+)", "Alignment against uniformity of every trial, {space_name}"),
    (r"trajectories_(?P<space>\w+)",
     "Each trial's path in alignment and uniformity over training, {space_name}"),
    (r"learning_curves", "Probe accuracy against examples seen, per design point, beside the "
                         "baselines"),
    (r"main_effects", "Main effects: the response's mean at each level of each factor"),
    (r"interactions",
     "Interactions: the response's mean against one factor, a line per level of another"),
    (r"phase_(?P<metric>\w+)", "{metric} in each temperature × negatives-per-anchor cell"),
    (r"probe_vs_temperature_(?P<probe>\w+)",
     "{probe} probe top-1 accuracy against temperature, one line per batch size"),
    (r"contours_(?P<contours>\w+)", "Fitted {response} over {factors}"),
    (r"class_spread_(?P<space>\w+)",
     "Per-class alignment and uniformity at each design point, {space_name}"),
    (r"shift_(?P<probe>\w+)",
     "{probe} probe top-1 accuracy against corruption severity, per corruption family"),
)  # fmt: skip


def title(name: str) -> str:
    """One line that says what the figure ``all_figures`` names ``name`` plots against what, for
    an index of the figures and the image's alt text. Raises KeyError for a name no figure has."""
    caption(name)  # the same names, and the same error for any other
    for pattern, text in _TITLES:
        match = re.fullmatch(pattern, name)
        if match is None:
            continue
        parts = match.groupdict()
        if "space" in parts:
            parts["space_name"] = (
                f"{parts['space']} features ({_SPACE_NAMES.get(parts['space'], parts['space'])})"
            )
        if "metric" in parts:
            parts["metric"] = _unslug(parts["metric"], KNOWN_METRICS) or parts["metric"]
        if "probe" in parts:
            parts["probe"] = _PROBES.get(parts["probe"], parts["probe"])
        if "contours" in parts:
            parts["response"], parts["factors"] = _split_contours_name(parts["contours"])
        return text.format(**parts)
    return name


START_AFTER = 8
"""Figures waiting, in :func:`drawing_weight` units (two small figures: about a second of
drawing), beyond which :func:`save_figures` starts its drawing processes: a process costs the
interpreter and matplotlib (0.8 s of CPU) before its first figure, so a report of a figure or
two is drawn here alone."""


def drawing_weight(fig: Figure) -> int:
    """A figure's drawing time in relative units: laying out and rendering each panel is most
    of it (a 10-panel shift figure takes about 1.5 s, a 2-panel plane 0.6 s), plus a share for
    the figure itself (its canvas, its text)."""
    return len(fig.axes) + 2


def save_figures(
    figures: Mapping[str, Figure] | Iterable[tuple[str, Figure]],
    out_dir: str | Path,
    processes: int | None = None,
) -> dict[str, list[Path]]:
    """Write every figure as :func:`save_figure` does; returns name -> its two paths, in the
    order given.

    ``figures`` is a mapping, or pairs (name, figure) made one at a time (:func:`iter_figures`):
    each is drawn as soon as a core is free, so the drawing starts while the rest are still
    being made. The figures wait in one queue in the order they come; a drawing process (one
    per other core of ``processes``, by default :func:`usable_cores`) takes the next whenever it
    has drawn its last, and so does this process once every figure is made. No figure's time
    is guessed, and the cores finish within a figure of each other. The processes start once
    the figures waiting weigh :data:`START_AFTER`; with ``processes`` 1, or fewer figures,
    everything is drawn here. A figure that will not pickle, or whose process failed, is drawn
    here."""
    out = Path(out_dir)
    cores = processes or usable_cores()
    pairs = figures.items() if isinstance(figures, Mapping) else figures
    waiting = _FigureQueue()
    made: dict[str, Figure] = {}
    helpers: list[_DrawingProcess] = []
    done: dict[str, list[Path]] = {}
    try:
        weight = 0
        for name, fig in pairs:
            made[name] = fig
            waiting.put(name)
            weight += drawing_weight(fig)
            if not helpers and cores >= 2 and weight >= START_AFTER:
                helpers = [_DrawingProcess(made, out, waiting) for _ in range(cores - 1)]
        waiting.close()
        while (name := waiting.take()) is not None:  # this process draws as a helper does
            done[name] = save_figure(made[name], out, name)
    finally:
        waiting.close()
        for helper in helpers:
            done |= helper.finish()
    for name in made:  # drawn here after all: it would not pickle, or its process failed
        if name not in done:
            done[name] = save_figure(made[name], out, name)
    return {name: done[name] for name in made}


def usable_cores() -> int:
    """The cores this process may use (its CPU affinity and cgroup quota:
    :func:`trainables.machine.usable_cpus`), capped by ``OMP_NUM_THREADS`` when set (as a test
    worker or a batch job sets it)."""
    from trainables.machine import usable_cpus

    cores = usable_cpus()
    omp = os.environ.get("OMP_NUM_THREADS", "")
    return min(cores, int(omp)) if omp.isdigit() and int(omp) > 0 else cores


class _FigureQueue:
    """The names of the figures not yet taken, in the order they came; ``take`` waits for the
    next until the queue is closed (no more figures will come), then gives None."""

    def __init__(self) -> None:
        self._names: collections.deque[str] = collections.deque()
        self._closed = False
        self._changed = threading.Condition()

    def put(self, name: str) -> None:
        with self._changed:
            self._names.append(name)
            self._changed.notify()

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def take(self) -> str | None:
        with self._changed:
            self._changed.wait_for(lambda: self._names or self._closed)
            return self._names.popleft() if self._names else None


class _DrawingProcess:
    """A fresh interpreter that draws figures taken from a :class:`_FigureQueue`, fed by a
    thread of this process: each figure it takes is pickled to a file and named on the
    process's stdin, and the process says ``done NAME`` when it has written it. It is handed
    one figure at a time (a pickle takes hundredths of a second), so that at the end no figure
    waits in its hands while this process has none to draw. A plain subprocess, not
    multiprocessing: its spawn and forkserver start methods run the caller's main script again
    in each child (a notebook's cells, or a script without a ``__main__`` guard that runs a
    study), and a fork would copy the caller's threads mid-lock. The process runs
    :mod:`analysis.report.plots._save` as a script, so it imports matplotlib and what the figures
    hold, not the figure package and its analysis."""

    def __init__(self, figures: Mapping[str, Figure], out_dir: Path, queue: _FigureQueue) -> None:
        import subprocess
        import sys
        import tempfile

        self.figures, self.out_dir, self.queue = figures, out_dir, queue
        self.drawn: dict[str, list[Path]] = {}
        self._sent: list[str] = []
        self._tmp = tempfile.TemporaryDirectory(prefix="figures-")
        package_root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            filter(None, [package_root, os.environ.get("PYTHONPATH")]))}  # fmt: skip
        # -P: the script's folder stays off the path, so `analysis` is never this package's
        command = [sys.executable, "-P", _save.__file__, self._tmp.name, str(out_dir)]
        self._proc = subprocess.Popen(
            command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True, bufsize=1,
        )  # fmt: skip
        self._feeder = threading.Thread(target=self._feed, name="figure-feeder", daemon=True)
        self._feeder.start()

    def _send_next(self) -> bool:
        """Hand the process the next figure it can take; False when none is left (or it is
        gone)."""
        while (name := self.queue.take()) is not None:
            try:
                pickled = pickle.dumps(self.figures[name])
            except Exception:  # drawn by the caller instead, once the queue is empty
                continue
            (Path(self._tmp.name) / f"{name}.pickle").write_bytes(pickled)
            try:
                self._proc.stdin.write(name + "\n")
                self._proc.stdin.flush()
            except OSError:  # the process is gone: its figures are drawn by the caller
                return False
            self._sent.append(name)
            return True
        return False

    def _feed(self) -> None:
        if self._send_next():
            for line in self._proc.stdout:
                if line.startswith("done "):
                    name = line[5:].rstrip("\n")
                    self.drawn[name] = figure_paths(self.out_dir, name)
                    if not self._send_next():
                        break
        with contextlib.suppress(OSError):
            self._proc.stdin.close()

    def finish(self) -> dict[str, list[Path]]:
        """Wait for the process to draw what it was given; what it drew. Its files are written
        when it says so: its exit (the interpreter's teardown, half a second) is awaited by a
        thread of its own, not here."""
        self._feeder.join()
        threading.Thread(target=self._proc.wait, name="figure-process-exit", daemon=True).start()
        self._tmp.cleanup()
        return dict(self.drawn)


def iter_figures(
    df: pd.DataFrame,
    history: pd.DataFrame | None = None,
    surfaces: dict[str, Any] | None = None,
    response: str = "probe/knn_top1_h",
    no_optimum: frozenset[str] = frozenset(),
    desirability: Any = None,
    pareto: Any = None,
    paths: dict[str, Any] | None = None,
    learning: Any = None,
) -> Iterator[tuple[str, Figure]]:
    """:func:`all_figures`, one (name, figure) at a time, each made when asked for: what
    :func:`save_figures` draws while the next are made."""
    surfaces = surfaces or {}
    yield from _plane_figures(df, history, response)
    if learning is not None:  # analysis.stats.learning_curve.LearningCurves
        yield "learning_curves", learning_curves_figure(learning)
    yield from _effect_figures(df, response)
    yield from _temperature_figures(df, response)
    yield from _contour_figures(surfaces, no_optimum, paths or {})
    yield from _desirability_figures(desirability, surfaces)
    yield from _pareto_figures(pareto)
    yield from _class_spread_figures(df)
    yield from _shift_figures(df)


def all_figures(
    df: pd.DataFrame,
    history: pd.DataFrame | None = None,
    surfaces: dict[str, Any] | None = None,
    response: str = "probe/knn_top1_h",
    no_optimum: frozenset[str] = frozenset(),
    desirability: Any = None,
    pareto: Any = None,
    paths: dict[str, Any] | None = None,
    learning: Any = None,
) -> dict[str, Figure]:
    """Every figure that applies to this study, by file name: the plane in z and h, trajectories
    (given a history), main effects and interactions of ``response``, temperature × candidates
    phase diagrams and probe-vs-temperature (when temperature varies), and contours of each
    surface in ``surfaces`` (response -> fitted surface) over its first two numeric factors,
    except the responses in ``no_optimum`` (their models do not beat the mean: no surface to
    draw), each with its path in ``paths`` (response -> the path of steepest ascent or the
    ridge, a table with the factors' columns) drawn over it, the overall desirability over the first
    two numeric factors (given ``desirability``, the most desirable point under the study's goals),
    the Pareto front (given ``pareto``, a multi-objective study's), per-class geometry by design
    point (when ``{space}/*_worst_class`` and ``_class_spread`` are recorded) and probe accuracy
    under
    corruption (when shift-test columns are)."""
    return dict(iter_figures(df, history, surfaces, response, no_optimum, desirability, pareto,
                             paths, learning))  # fmt: skip


def _desirability_figures(found: Any, surfaces: dict[str, Any]) -> Iterator[tuple[str, Figure]]:
    if found is None or isinstance(found, str) or any(g.metric not in surfaces
                                                      for g in found.goals):  # fmt: skip
        return
    first = surfaces[found.goals[0].metric]
    numeric = [f for f in first.factors if first.coding[f].kind == "numeric"]
    if len(numeric) >= 2:
        key = f"desirability_{_slug(numeric[0])}_{_slug(numeric[1])}"
        yield key, desirability_contours(found, surfaces, numeric[0], numeric[1])


def _pareto_figures(pareto: Any) -> Iterator[tuple[str, Figure]]:
    if pareto is not None and len(pareto.trials):
        yield "pareto_front", pareto_figure(pareto)


def _class_spread_figures(df: pd.DataFrame) -> Iterator[tuple[str, Figure]]:
    for space in ("z", "h"):
        if any(_has(df, f"{space}/{m}_worst_class", f"{space}/{m}_class_spread")
               for m in _CLASS_METRICS):  # fmt: skip
            yield f"class_spread_{space}", class_spread(df, space)


def _shift_figures(df: pd.DataFrame) -> Iterator[tuple[str, Figure]]:
    for probe in ("knn", "linear"):
        if any(_has(df, f"probe/{probe}_top1_{s}") and shift_families(df, probe, s)
               for s in ("h", "z")):  # fmt: skip
            yield f"shift_{probe}", shift(df, probe)


def _plane_figures(
    df: pd.DataFrame, history: pd.DataFrame | None, response: str
) -> Iterator[tuple[str, Figure]]:
    for space in ("z", "h"):
        x, y = f"{space}/uniform", f"{space}/align"
        if _has(df, x, y):
            yield f"plane_{space}", plane(df, space, color=response)
        if _has(history, x, y, "trial_key", "point_id", "step"):
            yield f"trajectories_{space}", trajectories(history, df, space)


def _effect_figures(df: pd.DataFrame, response: str) -> Iterator[tuple[str, Figure]]:
    factors = _factors(df, None)
    if not (_has(df, response) and factors):
        return
    yield "main_effects", main_effects(df, response, factors)
    if len(factors) >= 2:
        yield "interactions", interactions(df, response, factors)


def _temperature_figures(df: pd.DataFrame, response: str) -> Iterator[tuple[str, Figure]]:
    """Phase diagrams (temperature and candidates both vary) and probe accuracy vs temperature."""
    if not _varies(df, "temperature"):
        return
    if _varies(df, "derived.negatives_per_anchor"):
        for metric in dict.fromkeys((response, *_PHASE_METRICS)):
            if _has(df, metric):
                yield f"phase_{_slug(metric)}", phase_diagram(df, metric)
    for probe in ("knn", "linear"):
        if _has(df, f"probe/{probe}_top1_h") or _has(df, f"probe/{probe}_top1_z"):
            yield f"probe_vs_temperature_{probe}", probe_vs_temperature(df, probe)


def _contour_figures(
    surfaces: dict[str, Any], no_optimum: frozenset[str], paths: dict[str, Any]
) -> Iterator[tuple[str, Figure]]:
    for name, surface in surfaces.items():
        numeric = [f for f in surface.factors if surface.coding[f].kind == "numeric"]
        # a flat surface has no optimum; one that does not beat the mean has nothing to show
        if len(numeric) >= 2 and surface.optimum is not None and name not in no_optimum:
            key = f"contours_{_slug(name)}_{_slug(numeric[0])}_{_slug(numeric[1])}"
            yield key, surface_contours(surface, numeric[0], numeric[1], path=paths.get(name))
