"""Figures of a study's results frame (see ``analysis.reading.load``), drawn with matplotlib.

One private module per figure, as in Optuna's visualization package: ``_plane`` (the
alignment–uniformity plane), ``_trajectories``, ``_learning_curves`` (probe accuracy against
examples seen, beside the baselines), ``_main_effects``, ``_interactions``,
``_phase_diagram``, ``_probe_vs_temperature``, ``_surface_contours``, ``_class_spread`` (per-class
geometry by design point) and ``_shift`` (accuracy under corruption); ``_common`` holds what they
share (labels, number formats, colours, cell tables, level and log axes) and ``_all`` makes every
figure that applies to a study (``all_figures``), writes one (``save_figure``), says in one line
what it plots (``title``) and names what to look for in it (``caption``).

Every figure function first computes the table it draws (the public ``*_table`` helpers and
``contour_grid`` are pure and tested against hand-built tables), then returns a
``matplotlib.figure.Figure`` built without pyplot, so importing this package never touches the
interactive backend. Each figure module's ``CAPTION`` tells a reader what to look for;
``caption(name)`` fills it in for a name ``all_figures`` gives.
"""

from analysis.report.plots._all import (
    all_figures,
    caption,
    iter_figures,
    save_figure,
    save_figures,
    title,
    usable_cores,
)
from analysis.report.plots._class_spread import class_spread, class_spread_table
from analysis.report.plots._interactions import interaction_table, interactions
from analysis.report.plots._learning_curves import learning_curves_figure
from analysis.report.plots._main_effects import main_effect_table, main_effects
from analysis.report.plots._phase_diagram import phase_diagram, phase_table
from analysis.report.plots._plane import (
    COLLAPSE_UNIFORMITY,
    NO_INFORMATION_ALIGNMENT,
    plane,
    plane_table,
)
from analysis.report.plots._probe_vs_temperature import probe_table, probe_vs_temperature
from analysis.report.plots._shift import shift, shift_families, shift_table
from analysis.report.plots._surface_contours import contour_grid, surface_contours
from analysis.report.plots._trajectories import MAX_DETAILED_PATHS, trajectories, trajectory_table

__all__ = [
    "COLLAPSE_UNIFORMITY",
    "MAX_DETAILED_PATHS",
    "NO_INFORMATION_ALIGNMENT",
    "all_figures",
    "caption",
    "class_spread",
    "class_spread_table",
    "contour_grid",
    "interaction_table",
    "interactions",
    "iter_figures",
    "learning_curves_figure",
    "main_effect_table",
    "main_effects",
    "phase_diagram",
    "phase_table",
    "plane",
    "plane_table",
    "probe_table",
    "probe_vs_temperature",
    "save_figure",
    "save_figures",
    "shift",
    "shift_families",
    "shift_table",
    "surface_contours",
    "title",
    "trajectories",
    "trajectory_table",
    "usable_cores",
]
