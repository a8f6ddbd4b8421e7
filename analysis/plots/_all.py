"""Every figure that applies to a study, by file name; writing them all, in parallel where the
cores allow (one figure is written by :mod:`analysis.plots._save`); a figure's title and caption."""

from __future__ import annotations

import os
import pickle
import re
import time
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from analysis.plots import (
    _class_spread,
    _desirability,
    _interactions,
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
from analysis.plots._class_spread import METRICS as _CLASS_METRICS
from analysis.plots._class_spread import class_spread
from analysis.plots._common import (
    _SPACE_NAMES,
    KNOWN_METRICS,
    _factors,
    _has,
    _slug,
    _unslug,
    _varies,
)
from analysis.plots._desirability import desirability_contours
from analysis.plots._interactions import interactions
from analysis.plots._main_effects import main_effects
from analysis.plots._pareto import pareto_figure
from analysis.plots._phase_diagram import _PHASE_METRICS, phase_diagram
from analysis.plots._plane import plane
from analysis.plots._probe_vs_temperature import probe_vs_temperature
from analysis.plots._save import figure_paths, save_figure
from analysis.plots._shift import shift, shift_families
from analysis.plots._surface_contours import _split_contours_name, surface_contours
from analysis.plots._trajectories import trajectories

_FIGURE_MODULES = (
    _plane,
    _trajectories,
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


POOL_AFTER_S = 3.0  # drawing left beyond which a drawing process pays for its start
# a drawing process's start: the interpreter and matplotlib (0.8 s), then its first figures,
# slower than this process's (its font and text caches are cold); of 1, 2, 2.5 and 3 s, 3 wrote the
# default study's 20 figures soonest and most evenly (5.2-5.4 s, 3 runs each)
PROCESS_START_S = 3.0


def drawing_weight(fig: Figure) -> int:
    """A figure's drawing time in relative units: laying out and rendering each panel is most
    of it (a 10-panel shift figure takes about 1.5 s, a 2-panel plane 0.6 s), plus a share for
    the figure itself (its canvas, its text)."""
    return len(fig.axes) + 2


def save_figures(
    figures: dict[str, Figure], out_dir: str | Path, processes: int | None = None
) -> dict[str, list[Path]]:
    """Write every figure as :func:`save_figure` does; returns name -> its two paths, in order.

    The figures are drawn in parallel when the cores allow and the drawing left is long enough
    to pay for starting processes: the first figure is drawn here and timed, which gives the
    time of every other by its :func:`drawing_weight`; when the rest would take longer than
    :data:`POOL_AFTER_S`, they are dealt longest first, each to the core that would finish
    soonest: this process, or a drawing process (one per other core) whose start costs
    :data:`PROCESS_START_S`. A core dealt nothing starts no process. ``processes`` defaults to
    :func:`usable_cores`; 1 draws everything here."""
    names = list(figures)
    if not names:
        return {}
    out = Path(out_dir)
    started = time.perf_counter()
    done = {names[0]: save_figure(figures[names[0]], out, names[0])}
    unit_s = (time.perf_counter() - started) / drawing_weight(figures[names[0]])
    rest = {name: unit_s * drawing_weight(figures[name]) for name in names[1:]}
    cores = min(len(rest), processes or usable_cores())
    pooled = cores >= 2 and sum(rest.values()) > POOL_AFTER_S
    here, *elsewhere = _dealt(rest, cores) if pooled else [list(rest)]
    with _DrawingProcesses(figures, out, elsewhere) as drawing:
        for name in here:
            done[name] = save_figure(figures[name], out, name)
    for name in (n for share in elsewhere for n in share):
        # drawn here after all: it would not pickle, or its process failed
        done[name] = drawing.drawn.get(name) or save_figure(figures[name], out, name)
    return {name: done[name] for name in names}


def _dealt(seconds: dict[str, float], cores: int) -> list[list[str]]:
    """The figures dealt longest first, each to the core that would finish it soonest: this
    process (share 0, free now) or a drawing process (free once started)."""
    loads = [0.0] + [PROCESS_START_S] * (cores - 1)
    shares: list[list[str]] = [[] for _ in range(cores)]
    for name in sorted(seconds, key=seconds.get, reverse=True):
        core = min(range(cores), key=loads.__getitem__)
        loads[core] += seconds[name]
        shares[core].append(name)
    return shares


def usable_cores() -> int:
    """The cores this process may use: its CPU affinity, capped by ``OMP_NUM_THREADS`` when set
    (as a test worker or a batch job sets it)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    omp = os.environ.get("OMP_NUM_THREADS", "")
    return min(cores or 1, int(omp)) if omp.isdigit() and int(omp) > 0 else cores or 1


class _DrawingProcesses:
    """Fresh interpreters that draw figures, each given its share as pickled files, while the
    ``with`` block runs; ``drawn`` says what they drew once it ends. Plain subprocesses, not
    multiprocessing: its spawn and forkserver start methods run the caller's main script again
    in each child (a notebook's cells, or a script without a ``__main__`` guard that runs a
    study), and a fork would copy the caller's threads mid-lock."""

    def __init__(self, figures: dict[str, Figure], out_dir: Path, shares: list[list[str]]) -> None:
        """``shares``: the names of ``figures`` each process draws, a process per share that
        has any."""
        self.figures, self.out_dir, self.shares = figures, out_dir, shares
        self.drawn: dict[str, list[Path]] = {}
        self._procs: list = []

    def __enter__(self) -> _DrawingProcesses:
        import subprocess
        import sys
        import tempfile

        if not any(self.shares):
            return self
        self._tmp = tempfile.TemporaryDirectory(prefix="figures-")
        shares: list[list[str]] = [[] for _ in self.shares]
        for share, names in zip(shares, self.shares, strict=True):
            for name in names:
                try:
                    pickled = pickle.dumps(self.figures[name])
                except Exception:  # drawn by the caller instead
                    continue
                (Path(self._tmp.name) / f"{name}.pickle").write_bytes(pickled)
                share.append(name)
        package_root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            filter(None, [package_root, os.environ.get("PYTHONPATH")]))}  # fmt: skip
        # the writing module as a script (-P: its folder stays off the path), so a drawing process
        # imports matplotlib and what the figures hold, not the figure package and its analysis
        command = [sys.executable, "-P", _save.__file__, self._tmp.name, str(self.out_dir)]
        quiet = {"env": env, "stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}
        self._procs = [(s, subprocess.Popen([*command, *s], **quiet)) for s in shares if s]
        return self

    def __exit__(self, *exc) -> None:
        for share, proc in self._procs:
            proc.communicate()
            if proc.returncode == 0:
                self.drawn |= {n: figure_paths(self.out_dir, n) for n in share}
        if any(self.shares):
            self._tmp.cleanup()


def all_figures(
    df: pd.DataFrame,
    history: pd.DataFrame | None = None,
    surfaces: dict[str, Any] | None = None,
    response: str = "probe/knn_top1_h",
    no_optimum: frozenset[str] = frozenset(),
    desirability: Any = None,
    pareto: Any = None,
    paths: dict[str, Any] | None = None,
) -> dict[str, Figure]:
    """Every figure that applies to this study, by file name: the plane in z and h, trajectories
    (given a history), main effects and interactions of ``response``, temperature × candidates
    phase diagrams and probe-vs-temperature (when temperature varies), and contours of each
    surface in ``surfaces`` (response -> fitted surface) over its first two numeric factors,
    except the responses in ``no_optimum`` (their models do not beat the mean: no surface to
    draw), each with its path in ``paths`` (response -> the path of steepest ascent or the
    ridge, a table with the factors' columns) drawn over it, the overall desirability over the
    first two numeric factors (given ``desirability``,
    the most desirable point under the study's goals), the Pareto front (given ``pareto``, a
    multi-objective study's), per-class geometry by design point (when
    ``{space}/*_worst_class`` and ``_class_spread`` are recorded) and probe accuracy under
    corruption (when shift-test columns are)."""
    return {
        **_plane_figures(df, history, response),
        **_effect_figures(df, response),
        **_temperature_figures(df, response),
        **_contour_figures(surfaces or {}, no_optimum, paths or {}),
        **_desirability_figures(desirability, surfaces or {}),
        **_pareto_figures(pareto),
        **_class_spread_figures(df),
        **_shift_figures(df),
    }


def _desirability_figures(found: Any, surfaces: dict[str, Any]) -> dict[str, Figure]:
    if found is None or isinstance(found, str) or any(g.metric not in surfaces
                                                      for g in found.goals):  # fmt: skip
        return {}
    first = surfaces[found.goals[0].metric]
    numeric = [f for f in first.factors if first.coding[f].kind == "numeric"]
    if len(numeric) < 2:
        return {}
    key = f"desirability_{_slug(numeric[0])}_{_slug(numeric[1])}"
    return {key: desirability_contours(found, surfaces, numeric[0], numeric[1])}


def _pareto_figures(pareto: Any) -> dict[str, Figure]:
    if pareto is None or not len(pareto.trials):
        return {}
    return {"pareto_front": pareto_figure(pareto)}


def _class_spread_figures(df: pd.DataFrame) -> dict[str, Figure]:
    return {
        f"class_spread_{space}": class_spread(df, space)
        for space in ("z", "h")
        if any(_has(df, f"{space}/{m}_worst_class", f"{space}/{m}_class_spread")
               for m in _CLASS_METRICS)
    }  # fmt: skip


def _shift_figures(df: pd.DataFrame) -> dict[str, Figure]:
    return {
        f"shift_{probe}": shift(df, probe)
        for probe in ("knn", "linear")
        if any(_has(df, f"probe/{probe}_top1_{s}") and shift_families(df, probe, s)
               for s in ("h", "z"))
    }  # fmt: skip


def _plane_figures(
    df: pd.DataFrame, history: pd.DataFrame | None, response: str
) -> dict[str, Figure]:
    figures = {}
    for space in ("z", "h"):
        x, y = f"{space}/uniform", f"{space}/align"
        if _has(df, x, y):
            figures[f"plane_{space}"] = plane(df, space, color=response)
        if _has(history, x, y, "trial_key", "point_id", "step"):
            figures[f"trajectories_{space}"] = trajectories(history, df, space)
    return figures


def _effect_figures(df: pd.DataFrame, response: str) -> dict[str, Figure]:
    factors = _factors(df, None)
    if not (_has(df, response) and factors):
        return {}
    figures = {"main_effects": main_effects(df, response, factors)}
    if len(factors) >= 2:
        figures["interactions"] = interactions(df, response, factors)
    return figures


def _temperature_figures(df: pd.DataFrame, response: str) -> dict[str, Figure]:
    """Phase diagrams (temperature and candidates both vary) and probe accuracy vs temperature."""
    figures = {}
    if not _varies(df, "temperature"):
        return figures
    if _varies(df, "derived.negatives_per_anchor"):
        for metric in dict.fromkeys((response, *_PHASE_METRICS)):
            if _has(df, metric):
                figures[f"phase_{_slug(metric)}"] = phase_diagram(df, metric)
    for probe in ("knn", "linear"):
        if _has(df, f"probe/{probe}_top1_h") or _has(df, f"probe/{probe}_top1_z"):
            figures[f"probe_vs_temperature_{probe}"] = probe_vs_temperature(df, probe)
    return figures


def _contour_figures(
    surfaces: dict[str, Any], no_optimum: frozenset[str], paths: dict[str, Any]
) -> dict[str, Figure]:
    figures = {}
    for name, surface in surfaces.items():
        numeric = [f for f in surface.factors if surface.coding[f].kind == "numeric"]
        # a flat surface has no optimum; one that does not beat the mean has nothing to show
        if len(numeric) >= 2 and surface.optimum is not None and name not in no_optimum:
            key = f"contours_{_slug(name)}_{_slug(numeric[0])}_{_slug(numeric[1])}"
            figures[key] = surface_contours(surface, numeric[0], numeric[1],
                                            path=paths.get(name))  # fmt: skip
    return figures
