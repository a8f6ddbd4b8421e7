"""A multi-objective study's Pareto front, drawn as Optuna's ``plot_pareto_front`` draws it:
every finished trial by its first two objectives, the trials on the front highlighted and
joined by a step line (``analysis.stats.frontier.pareto_front``, the one Pareto routine)."""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure

from analysis.report.plots._common import FIG_WIDTH, SMALL_PT

CAPTION = (
    "Every finished trial of a multi-objective study by its first two objectives; the trials no "
    "other trial beats on every objective (the Pareto front) are red and joined by the step "
    "line, the others grey. Each arrow in the axis labels points the better way. Moving along "
    "the front trades one objective for the other: a study's best is a choice among these."
)


def caption_of(name: str) -> str | None:
    return CAPTION if name == "pareto_front" else None


def pareto_figure(front: Any) -> Figure:
    """The figure of a :class:`analysis.stats.frontier.ParetoFront` (see the module docstring)."""
    (x, x_mode), (y, y_mode) = list(front.objectives.items())[:2]
    fig = Figure(figsize=(FIG_WIDTH, 4.6), layout="constrained")
    ax = fig.add_subplot()
    rest = front.trials.drop(index=front.front.index)
    ax.scatter(rest[x], rest[y], s=22, color="0.6", label="dominated trials", zorder=2)
    ordered = front.front.sort_values(x)
    ax.scatter(ordered[x], ordered[y], s=34, color="crimson", edgecolors="black",
               label="Pareto front", zorder=3)  # fmt: skip
    ax.step(ordered[x], ordered[y], where="post" if (x_mode == y_mode) else "pre",
            color="crimson", linewidth=1.2, zorder=2)  # fmt: skip
    arrow = {"max": "↑ better", "min": "↓ better"}
    ax.set_xlabel(f"{x} ({arrow[x_mode].replace('↑', '→').replace('↓', '←')})")
    ax.set_ylabel(f"{y} ({arrow[y_mode]})")
    ax.set_title(f"Pareto front: {len(front.front)} of {len(front.trials)} trials", fontsize=10)
    fig.legend(loc="outside lower center", ncols=2, fontsize=SMALL_PT)
    return fig
