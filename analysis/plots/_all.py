"""Every figure that applies to a study, by file name; writing a figure; a figure's caption."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from analysis.plots import (
    _class_spread,
    _interactions,
    _main_effects,
    _phase_diagram,
    _plane,
    _probe_vs_temperature,
    _shift,
    _surface_contours,
    _trajectories,
)
from analysis.plots._class_spread import METRICS as _CLASS_METRICS
from analysis.plots._class_spread import class_spread
from analysis.plots._common import _factors, _has, _slug, _varies
from analysis.plots._interactions import interactions
from analysis.plots._main_effects import main_effects
from analysis.plots._phase_diagram import _PHASE_METRICS, phase_diagram
from analysis.plots._plane import plane
from analysis.plots._probe_vs_temperature import probe_vs_temperature
from analysis.plots._shift import shift, shift_families
from analysis.plots._surface_contours import surface_contours
from analysis.plots._trajectories import trajectories

_FIGURE_MODULES = (
    _plane,
    _trajectories,
    _main_effects,
    _interactions,
    _phase_diagram,
    _probe_vs_temperature,
    _surface_contours,
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


def save_figure(fig: Figure, out_dir: str | Path, name: str) -> list[Path]:
    """Write ``name.png`` (120 dpi) and ``name.svg`` under ``out_dir``; returns both paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.png", out / f"{name}.svg"]
    fig.savefig(paths[0], dpi=120)
    fig.savefig(paths[1])
    return paths


def all_figures(
    df: pd.DataFrame,
    history: pd.DataFrame | None = None,
    surfaces: dict[str, Any] | None = None,
    response: str = "probe/knn_top1_h",
    no_optimum: frozenset[str] = frozenset(),
) -> dict[str, Figure]:
    """Every figure that applies to this study, by file name: the plane in z and h, trajectories
    (given a history), main effects and interactions of ``response``, temperature × candidates
    phase diagrams and probe-vs-temperature (when temperature varies), and contours of each
    surface in ``surfaces`` (response -> fitted surface) over its first two numeric factors,
    with no optimum marked for the responses in ``no_optimum`` (they do not beat the mean),
    per-class geometry by design point (when ``{space}/*_worst_class`` and ``_class_spread``
    are recorded) and probe accuracy under corruption (when shift-test columns are)."""
    return {
        **_plane_figures(df, history, response),
        **_effect_figures(df, response),
        **_temperature_figures(df, response),
        **_contour_figures(surfaces or {}, no_optimum),
        **_class_spread_figures(df),
        **_shift_figures(df),
    }


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


def _contour_figures(surfaces: dict[str, Any], no_optimum: frozenset[str]) -> dict[str, Figure]:
    figures = {}
    for name, surface in surfaces.items():
        numeric = [f for f in surface.factors if surface.coding[f].kind == "numeric"]
        if len(numeric) >= 2 and surface.optimum is not None:  # a flat surface has no optimum
            key = f"contours_{_slug(name)}_{_slug(numeric[0])}_{_slug(numeric[1])}"
            figures[key] = surface_contours(
                surface, numeric[0], numeric[1], name_optimum=name not in no_optimum
            )
    return figures
