"""analysis.report.plots: the tables each figure draws, checked against hand-built tables (Optuna's
visualization-test style), a render of every figure for a literal default-study frame, and the
caption of every figure name ``all_figures`` can give."""

from __future__ import annotations

import importlib
import itertools
import math
import pkgutil
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PathCollection
from matplotlib.container import ErrorbarContainer
from matplotlib.contour import ContourSet
from matplotlib.figure import Figure
from resultskit import (
    add_class_geometry,
    add_shift,
    default_frame,
    default_history,
)

import analysis.report.plots
from analysis.report.plots import (
    all_figures,
    caption,
    class_spread,
    class_spread_table,
    contour_grid,
    interaction_table,
    interactions,
    main_effect_table,
    main_effects,
    phase_diagram,
    phase_table,
    plane,
    plane_table,
    probe_table,
    probe_vs_temperature,
    save_figure,
    save_figures,
    shift,
    shift_families,
    shift_table,
    surface_contours,
    trajectories,
    trajectory_table,
)
from analysis.report.plots._common import (
    _LABELS,
    _SHIFT_FAMILIES,
    KNOWN_FACTORS,
    KNOWN_METRICS,
    _slug,
)
from analysis.stats.frontier import pareto_frontier

# ---------------------------------------------------------------------------------------------
# Literal tables


def _two_by_two() -> pd.DataFrame:
    """temperature {0.1, 0.5} x batch_size {64, 256} x 2 replicates, hand-picked responses."""
    rows = [
        # temperature, batch_size, replicate, response
        (0.1, 64, 0, 0.90),
        (0.1, 64, 1, 0.92),
        (0.1, 256, 0, 0.94),
        (0.1, 256, 1, 0.96),
        (0.5, 64, 0, 0.80),
        (0.5, 64, 1, 0.84),
        (0.5, 256, 0, 0.86),
        (0.5, 256, 1, 0.90),
    ]
    df = pd.DataFrame(rows, columns=["temperature", "batch_size", "replicate", "acc"])
    df["derived.negatives_per_anchor"] = 2 * df["batch_size"] - 2
    df.attrs.update(study="toy", factors=["temperature", "batch_size"])
    return df


def _errorbars(ax) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """label -> (x, y) of every error-bar series drawn on ``ax``."""
    found = {}
    for container in ax.containers:
        if isinstance(container, ErrorbarContainer):
            line = container.lines[0]
            found[container.get_label()] = (
                np.asarray(line.get_xdata(), dtype=float),
                np.asarray(line.get_ydata(), dtype=float),
            )
    return found


class _QuadraticSurface:
    """Stand-in for analysis.stats.surface's fitted surface: a known quadratic in coded units, peak
    0.9 at temperature 0.2 (log scale), batch_size 128 (log scale), lr 0.3 (linear)."""

    def __init__(self) -> None:
        self.response = "probe/knn_top1_h"
        self.factors = ("temperature", "batch_size", "lr", "objective")
        numeric = {"kind": "numeric", "levels": ()}
        self.coding = {
            "temperature": SimpleNamespace(**numeric, scale="log", low=0.05, high=0.8),
            "batch_size": SimpleNamespace(**numeric, scale="log", low=32, high=512),
            "lr": SimpleNamespace(**numeric, scale="linear", low=0.1, high=0.5),
            "objective": SimpleNamespace(
                kind="categorical", scale="linear", low=None, high=None, levels=("a", "b")
            ),
        }
        self.optimum = {"temperature": 0.2, "batch_size": 128, "lr": 0.3, "objective": "a"}
        self.data = pd.DataFrame(
            {
                "temperature": [0.05, 0.05, 0.8, 0.8, 0.2],
                "batch_size": [32, 512, 32, 512, 128],
                "lr": [0.3] * 5,
                "objective": ["a"] * 5,
            }
        )
        self.seen: list[pd.DataFrame] = []

    def predict(self, frame: pd.DataFrame) -> pd.DataFrame:
        self.seen.append(frame)
        mean = (
            0.9
            - 0.01 * np.log(frame["temperature"] / 0.2) ** 2
            - 0.02 * np.log(frame["batch_size"] / 128) ** 2
            - 0.5 * (frame["lr"] - 0.3) ** 2
        )
        return pd.DataFrame({"mean": mean, "lower": mean - 0.01, "upper": mean + 0.01})


# ---------------------------------------------------------------------------------------------
# Pareto frontier (analysis.stats.frontier's, the one the plane draws)

_MIN_BOTH = {"u": "min", "a": "min"}


def test_pareto_frontier_keeps_ties_and_drops_dominated_rows():
    table = pd.DataFrame(
        {"u": [1.0, 1.0, 1.0, 2.0, 3.0, 4.0, 5.0, np.nan, 0.5], "a": [5, 5, 6, 3, 3, 1, 5, 0, 9]},
        index=list("abcdefghi"),
    )
    # a, b: an exact duplicate pair, both kept; c: same u as a, worse a; e: same a as d, worse u;
    # g: dominated by everything before; h: missing u; i: lowest u, so on the frontier.
    front = pareto_frontier(table, _MIN_BOTH)
    assert front.index.tolist() == ["a", "b", "d", "f", "i"]  # the frame's own order
    by_u = front.sort_values(["u", "a"], kind="stable")  # the order the plane's step line uses
    assert by_u.index.tolist() == ["i", "a", "b", "d", "f"]
    assert by_u["u"].tolist() == [0.5, 1.0, 1.0, 2.0, 4.0]


def test_pareto_frontier_edge_cases():
    assert pareto_frontier(pd.DataFrame({"u": [np.nan], "a": [1.0]}), _MIN_BOTH).empty
    assert pareto_frontier(pd.DataFrame({"u": [], "a": []}), _MIN_BOTH).empty
    one = pd.DataFrame({"u": [-3.0], "a": [0.4]})
    assert pareto_frontier(one, _MIN_BOTH).index.tolist() == [0]
    # Strictly increasing in both: only the first point is on the frontier.
    chain = pd.DataFrame({"u": [1.0, 2.0, 3.0], "a": [1.0, 2.0, 3.0]})
    assert pareto_frontier(chain, _MIN_BOTH).index.tolist() == [0]
    # An infinite value is still a value: nothing has u <= 1, so row 0 is not dominated (the
    # plane's old _pareto_min dropped every row with a = +inf).
    edge = pd.DataFrame({"u": [1.0, 4.0], "a": [np.inf, 0.0]})
    assert pareto_frontier(edge, _MIN_BOTH).index.tolist() == [0, 1]


def test_plane_draws_the_frontier_as_a_step_line_and_both_references():
    df = default_frame()
    fig = plane(df, "z")
    ax = fig.axes[0]
    steps = [line for line in ax.get_lines() if line.get_label() == "Pareto frontier"]
    assert len(steps) == 1
    expected = pareto_frontier(df, {"z/uniform": "min", "z/align": "min"})
    expected = expected.sort_values(["z/uniform", "z/align"], kind="stable")
    assert expected["trial_key"].tolist() == ["p000-r1", "p000-r0", "p002-r1"]
    np.testing.assert_allclose(steps[0].get_xdata(), expected["z/uniform"])
    assert steps[0].get_drawstyle() == "steps-post"
    labels = {line.get_label(): line for line in ax.get_lines()}
    collapse = labels["collapse (uniformity 0)"]
    no_info = labels["no information (alignment 2)"]
    assert collapse.get_xdata()[0] == 0 and no_info.get_ydata()[0] == 2
    # Both references are inside the axes even though the data sit far from them.
    lo, hi = ax.get_xlim()
    assert lo < df["z/uniform"].min() and hi > 0
    lo, hi = ax.get_ylim()
    assert lo < df["z/align"].min() and hi > 2
    assert "default-digits" in ax.get_title()
    assert fig.axes[1].get_ylabel() == "probe/knn_top1_h"  # the colorbar


def test_plane_uses_a_given_frontier_and_tolerates_missing_colour():
    df = default_frame()
    given = df.iloc[[5, 0]]
    fig = plane(df, "h", color="not/a/column", frontier=given)
    (step,) = [line for line in fig.axes[0].get_lines() if line.get_label() == "Pareto frontier"]
    np.testing.assert_allclose(step.get_xdata(), sorted(given["h/uniform"]))
    assert len(fig.axes) == 1  # no colorbar


def test_plane_marks_collapsed_trials_and_skips_the_inset_for_spread_data():
    df = pd.DataFrame(
        {
            "z/uniform": [-3.5, -2.0, -0.1, -1.0],
            "z/align": [1.6, 0.8, 0.05, 0.4],
            "status": ["finished", "finished", "collapsed", "finished"],
            "acc": [0.9, 0.8, 0.1, np.nan],
        }
    )
    fig = plane(df, "z", color="acc")
    ax = fig.axes[0]
    assert ax.child_axes == []  # data fill the axes: no zoom inset
    scatters = [c for c in ax.collections if isinstance(c, PathCollection)]
    assert sorted(c.get_label() for c in scatters) == ["trials (collapsed)", "trials (finished)"]


def test_plane_adds_a_zoom_inset_clear_of_the_data():
    fig = plane(default_frame(), "z")
    ax = fig.axes[0]
    (inset,) = ax.child_axes
    lo, hi = inset.get_xlim()
    assert lo < -3.4533 and hi > -2.7989


def test_plane_table_keeps_the_trials_with_both_coordinates_and_marks_the_frontier():
    df = default_frame()
    df.loc[3, "z/align"] = np.nan
    df.index = [0, 0, 1, 1, 2, 2, 3, 3]  # repeated labels: the frontier is marked by position
    table = plane_table(df, "z")
    assert table.index.tolist() == [0, 0, 1, 2, 2, 3, 3]
    front = table.loc[table["on_frontier"], "trial_key"].tolist()
    assert front == ["p000-r0", "p000-r1", "p002-r1"]
    with pytest.raises(KeyError):
        plane_table(df, "w")


# ---------------------------------------------------------------------------------------------
# Trajectories


def test_trajectories_one_path_per_trial_hollow_start_filled_end():
    history = default_history()
    fig = trajectories(history, default_frame(), "z")
    ax = fig.axes[0]
    paths = [line for line in ax.get_lines() if line.get_marker() == "."]
    assert len(paths) == 8
    first = history[history.trial_key == "p000-r0"].sort_values("step")
    assert any(
        np.allclose(p.get_xdata(), first["z/uniform"])
        and np.allclose(p.get_ydata(), first["z/align"])
        for p in paths
    )
    scatters = [c for c in ax.collections if isinstance(c, PathCollection)]
    hollow = [c for c in scatters if np.allclose(c.get_facecolors()[0], (1, 1, 1, 1))]
    assert len(hollow) == 8 and len(scatters) == 16
    legend = fig.legends[0].get_texts()
    assert "p000: temperature=0.1, batch_size=64" in [t.get_text() for t in legend]


def _replicated_history(points: int = 25) -> pd.DataFrame:
    """Two replicates per point, two evaluations each; replicate 1 sits 0.1 right, 0.2 up."""
    rows = [
        {"trial_key": f"p{p:02d}-r{r}", "point_id": f"p{p:02d}", "step": step,
         "z/uniform": -3.0 + p + 0.1 * r, "z/align": 0.5 + step + 0.2 * r}
        for p in range(points) for r in range(2) for step in (2, 1)
    ]  # fmt: skip
    return pd.DataFrame(rows)


def test_trajectory_table_one_path_per_trial_or_one_mean_path_per_point():
    few = trajectory_table(_replicated_history(points=20), "z")  # 40 trials: every path drawn
    assert len(few) == 80 and few["trial_key"].nunique() == 40
    assert few["step"].tolist()[:4] == [1, 2, 1, 2]  # sorted by trial, then step
    many = _replicated_history()  # 50 trials: one path per point, the mean of its replicates
    table = trajectory_table(many, "z")
    assert len(table) == 50 and (table["trial_key"] == table["point_id"]).all()
    cell = table[(table["point_id"] == "p03") & (table["step"] == 2)]
    assert cell["z/uniform"].item() == pytest.approx(0.05)
    assert cell["z/align"].item() == pytest.approx(2.6)
    title_words = " ".join(trajectories(many).axes[0].get_title().split())  # wrapped to fit
    assert "mean over replicates per point" in title_words


# ---------------------------------------------------------------------------------------------
# Main effects and interactions


def test_main_effect_table_matches_hand_computed_means_and_standard_errors():
    df = _two_by_two()
    t = main_effect_table(df, "acc", "temperature")
    assert t.columns.tolist() == ["level", "mean", "se", "n"]
    assert t["level"].tolist() == [0.1, 0.5]
    np.testing.assert_allclose(t["mean"], [0.93, 0.85])
    # 0.1: deviations -.03 -.01 .01 .03 -> ss .002; 0.5: -.05 -.01 .01 .05 -> ss .0052
    np.testing.assert_allclose(t["se"], [math.sqrt(0.002 / 3) / 2, math.sqrt(0.0052 / 3) / 2])
    assert t["n"].tolist() == [4, 4]
    b = main_effect_table(df, "acc", "batch_size")
    np.testing.assert_allclose(
        b["mean"], [(0.90 + 0.92 + 0.80 + 0.84) / 4, (0.94 + 0.96 + 0.86 + 0.90) / 4]
    )


def test_main_effect_table_single_trial_levels_have_no_standard_error_and_nans_are_dropped():
    df = pd.DataFrame({"f": ["a", "a", "b", "c"], "y": [1.0, 3.0, 5.0, np.nan]})
    t = main_effect_table(df, "y", "f")
    assert t["level"].tolist() == ["a", "b"]
    assert t["mean"].tolist() == [2.0, 5.0]
    assert t["se"].iloc[0] == pytest.approx(1.0) and np.isnan(t["se"].iloc[1])


def test_main_effect_table_bins_a_continuous_factor():
    df = pd.DataFrame({"lr": np.geomspace(0.01, 1.0, 30), "y": np.arange(30.0)})
    t = main_effect_table(df, "y", "lr", max_levels=5)
    assert len(t) == 5 and t["n"].tolist() == [6] * 5
    np.testing.assert_allclose(t["mean"], [2.5, 8.5, 14.5, 20.5, 26.5])


def test_interaction_table_cells():
    t = interaction_table(_two_by_two(), "acc", "temperature", "batch_size")
    assert t.columns.tolist() == ["temperature", "batch_size", "mean", "se", "n"]
    assert list(zip(t["temperature"], t["batch_size"], strict=True)) == [
        (0.1, 64), (0.1, 256), (0.5, 64), (0.5, 256)
    ]  # fmt: skip
    np.testing.assert_allclose(t["mean"], [0.91, 0.95, 0.82, 0.88])
    # Two replicates a, b: se = sd / sqrt(2) = |a - b| / 2.
    np.testing.assert_allclose(t["se"], [0.01, 0.01, 0.02, 0.02])
    assert t["n"].tolist() == [2, 2, 2, 2]


def test_main_effects_and_interactions_draw_the_tables():
    df = _two_by_two()
    fig = main_effects(df, "acc")
    assert len(fig.axes) == 2
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"  # 0.1 .. 0.5 spans 5x
    x, y = _errorbars(ax)["mean ± SE"]
    np.testing.assert_allclose(x, [0.1, 0.5])
    np.testing.assert_allclose(y, [0.93, 0.85])
    fig = interactions(df, "acc")
    (ax,) = fig.axes
    lines = _errorbars(ax)
    np.testing.assert_allclose(lines["batch size B = 64"][1], [0.91, 0.82])
    np.testing.assert_allclose(lines["batch size B = 256"][1], [0.95, 0.88])
    with pytest.raises(ValueError):
        interactions(df, "acc", factors=["temperature"])


def test_main_effects_categorical_factor():
    df = pd.DataFrame(
        {
            "objective": ["infonce", "infonce", "ntxent_long_name", "ntxent_long_name"],
            "y": [1, 2, 3, 5],
        }
    )
    fig = main_effects(df, "y", factors=["objective"])
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["infonce", "ntxent_long_name"]
    assert ax.get_xscale() == "linear"


# ---------------------------------------------------------------------------------------------
# Phase diagram and probe accuracy


def test_phase_table_cell_means():
    t = phase_table(_two_by_two(), "acc")
    assert t["derived.negatives_per_anchor"].tolist() == [126, 510, 126, 510]
    np.testing.assert_allclose(t["mean"], [0.91, 0.95, 0.82, 0.88])


def test_phase_diagram_grid_annotates_every_cell():
    fig = phase_diagram(_two_by_two(), "acc")
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    texts = sorted(t.get_text().split("\n")[0] for t in ax.texts)
    assert texts == ["0.82", "0.88", "0.91", "0.95"]
    assert len(ax.collections) == 1  # the heatmap mesh


def test_phase_diagram_scattered_design_uses_filled_contours():
    rng = np.random.default_rng(0)
    df = pd.DataFrame(
        {
            "temperature": np.exp(rng.uniform(np.log(0.05), np.log(1.0), 12)),
            "derived.negatives_per_anchor": np.exp(rng.uniform(np.log(30), np.log(2000), 12)),
        }
    )
    df["acc"] = -(np.log(df["temperature"] / 0.2) ** 2)
    fig = phase_diagram(df, "acc")
    ax = fig.axes[0]
    assert any(isinstance(c, ContourSet) for c in ax.collections)
    assert len(ax.texts) == 12
    with pytest.raises(ValueError):
        phase_diagram(df.assign(temperature=0.1), "acc")


def test_probe_vs_temperature_lines_per_batch_size_and_single_line():
    df = default_frame()
    fig = probe_vs_temperature(df, "knn")
    h_ax = fig.axes[0]
    assert h_ax.get_xscale() == "log"
    assert sorted(t.get_text() for t in h_ax.get_legend().get_texts()) == ["B = 256", "B = 64"]
    expected = interaction_table(df, "probe/knn_top1_h", "temperature", "batch_size")
    _, b64 = _errorbars(h_ax)["B = 64"]
    np.testing.assert_allclose(b64, expected[expected.batch_size == 64]["mean"])
    fig = probe_vs_temperature(df.drop(columns=["batch_size"]), "linear")
    assert [t.get_text() for t in fig.axes[1].get_legend().get_texts()] == ["all trials"]


def test_probe_figures_draw_the_baselines_as_labelled_reference_lines():
    df = default_frame()
    df.attrs["baselines"] = {
        "raw": {"metrics": {"probe/knn_top1_h": 0.98}, "seeds": []},
        "random_init": {"metrics": {"probe/knn_top1_h": 0.947, "probe/knn_top1_z": 0.9},
                        "seeds": [0, 1]},
    }  # fmt: skip
    fig = probe_vs_temperature(df, "knn")
    h, z = fig.axes[:2]

    def references(ax) -> dict[str, float]:
        return {line.get_label(): line.get_ydata()[0] for line in ax.get_lines()
                if line.get_linestyle() in (":", "--") and line.get_color() == "0.35"}  # fmt: skip

    assert references(h) == {"raw input 98.0%": 0.98, "random-init 94.7%": 0.947}
    # on z the raw input (no head) is its h score; the random-init encoder its own z score
    assert references(z) == {"raw input 98.0%": 0.98, "random-init 90.0%": 0.9}
    legend = [t.get_text() for t in h.get_legend().get_texts()]
    assert "raw input 98.0%" in legend and "random-init 94.7%" in legend
    effects = main_effects(df, "probe/knn_top1_h")
    assert all(references(ax) for ax in effects.axes if ax.get_xlabel())
    assert not references(main_effects(df, "z/uniform").axes[0])  # the raw input has no z/


def test_probe_table_per_batch_size_or_over_all_trials():
    df = default_frame()
    by_batch = probe_table(df, "knn", "z")
    expected = interaction_table(df, "probe/knn_top1_z", "temperature", "batch_size")
    pd.testing.assert_frame_equal(by_batch, expected)
    overall = probe_table(df.drop(columns=["batch_size"]), "linear", "h")
    assert overall.columns.tolist() == ["temperature", "mean", "se", "n"]
    np.testing.assert_allclose(
        overall["mean"],
        [np.mean([0.9861, 0.9750, 0.9917, 0.9861]), np.mean([0.9917, 0.9889, 0.9833, 0.9806])],
    )


# ---------------------------------------------------------------------------------------------
# Response-surface contours


def test_contour_grid_holds_other_factors_at_the_optimum():
    surface = _QuadraticSurface()
    xs, ys, Z = contour_grid(surface, "temperature", "batch_size", n=21)
    np.testing.assert_allclose(xs, np.geomspace(0.05, 0.8, 21))
    np.testing.assert_allclose(ys, np.geomspace(32, 512, 21))
    assert Z.shape == (21, 21)
    frame = surface.seen[-1]
    assert list(frame.columns) == list(surface.factors)
    assert set(frame["lr"]) == {0.3} and set(frame["objective"]) == {"a"}
    i, j = np.unravel_index(np.argmax(Z), Z.shape)
    assert xs[j] == pytest.approx(0.2) and ys[i] == pytest.approx(128)
    assert Z[i, j] == pytest.approx(0.9)
    xs, _, _ = contour_grid(surface, "lr", "temperature", n=5)
    np.testing.assert_allclose(xs, [0.1, 0.2, 0.3, 0.4, 0.5])
    with pytest.raises(ValueError):
        contour_grid(surface, "objective", "lr")


def test_surface_contours_figure_has_contours_star_and_design_points():
    surface = _QuadraticSurface()
    fig = surface_contours(surface, "temperature", "batch_size", n=30)
    ax = fig.axes[0]
    assert any(isinstance(c, ContourSet) for c in ax.collections)
    (star,) = [line for line in ax.get_lines() if line.get_marker() == "*"]
    assert star.get_label() == "optimum"
    assert star.get_xdata()[0] == pytest.approx(0.2) and star.get_ydata()[0] == pytest.approx(128)
    points = [c for c in ax.collections if c.get_label() == "design points"]
    np.testing.assert_allclose(points[0].get_offsets()[:, 0], surface.data["temperature"])
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert "lr=0.3" in ax.get_title()
    # No `data` attribute: no design points, still a figure.
    bare = _QuadraticSurface()
    bare.data = None
    fig = surface_contours(bare, "lr", "temperature", n=10)
    assert not [c for c in fig.axes[0].collections if c.get_label() == "design points"]
    # A model that does not beat the mean names no optimum and draws no surface: no star, no
    # contour, no colour bar; the design points and a note that says why.
    fig = surface_contours(surface, "temperature", "batch_size", n=10, name_optimum=False)
    (ax,) = fig.axes
    assert not [line for line in ax.get_lines() if line.get_marker() == "*"]
    assert not any(isinstance(c, ContourSet) for c in ax.collections)
    assert [c for c in ax.collections if c.get_label() == "design points"]
    assert "no optimum is named" in ax.get_title()
    assert any("no surface is drawn" in t.get_text() for t in ax.texts)


def test_all_figures_draws_no_contours_for_a_model_that_does_not_beat_the_mean():
    surfaces = {"probe/knn_top1_h": _QuadraticSurface()}
    drawn = all_figures(default_frame(), surfaces=surfaces)
    assert "contours_probe_knn_top1_h_temperature_batch_size" in drawn
    flat = all_figures(default_frame(), surfaces=surfaces, no_optimum=frozenset(surfaces))
    assert not [name for name in flat if name.startswith("contours_")]


# ---------------------------------------------------------------------------------------------
# Per-class geometry and shift tests


def test_class_spread_table_matches_hand_computed_means():
    df = add_class_geometry(default_frame())
    df.loc[7, "z/align_worst_class"] = np.nan  # p003 keeps one replicate
    t = class_spread_table(df, "z", "align")
    assert t.columns.tolist() == [
        "point_id", "global_mean", "global_se", "worst_mean", "worst_se", "spread_mean",
        "spread_se", "best_mean", "n",
    ]  # fmt: skip
    assert t["point_id"].tolist() == ["p000", "p001", "p002", "p003"]
    np.testing.assert_allclose(t["worst_mean"], [0.625, 0.75, 0.875, 0.875])
    # two replicates 0.25 apart: sd 0.25 / sqrt(2), se = sd / sqrt(2) = 0.125; p003: n = 1
    np.testing.assert_allclose(t["worst_se"], [0.125, 0.125, 0.125, np.nan])
    np.testing.assert_allclose(t["spread_mean"], [0.25] * 4)
    np.testing.assert_allclose(t["best_mean"], [0.375, 0.5, 0.625, 0.625])
    # z/align of the replicates kept (p003: its replicate 0 only)
    global_means = [(0.4352 + 0.4400) / 2, (0.4586 + 0.4577) / 2, (0.2007 + 0.1955) / 2, 0.2194]
    np.testing.assert_allclose(t["global_mean"], global_means)
    assert t["n"].tolist() == [2, 2, 2, 1]
    no_global = class_spread_table(df.drop(columns=["z/align"]), "z", "align")
    assert no_global["global_mean"].isna().all()
    with pytest.raises(KeyError):
        class_spread_table(df, "z", "uniform")


def test_class_spread_draws_the_table_and_says_what_is_not_recorded():
    df = add_class_geometry(default_frame())
    fig = class_spread(df, "z")
    align, uniform = fig.axes
    x, y = _errorbars(align)["worst class ± SE"]
    np.testing.assert_allclose(x, [0, 1, 2, 3])
    np.testing.assert_allclose(y, class_spread_table(df, "z", "align")["worst_mean"])
    ticks = [t.get_text() for t in align.get_xticklabels()]
    assert ticks[0] == "p000\ntemperature=0.1\nbatch_size=64"
    assert [t.get_text() for t in uniform.texts] == ["not recorded"]
    with pytest.raises(KeyError):
        class_spread(df, "h")


def test_shift_families_in_coverage_order():
    df = add_shift(default_frame())
    df["shift/contrast/s3/knn_top1_h"] = np.nan  # no value: not a family of this study
    assert shift_families(df, "knn", "h") == {"gaussian_noise": [1, 2], "jpeg": [1, 2]}
    assert shift_families(df, "knn", "z") == {} and shift_families(df, "linear", "h") == {}


def test_shift_table_matches_hand_computed_means():
    df = add_shift(default_frame())
    df.loc[1, "shift/jpeg/s2/knn_top1_h"] = np.nan  # p000's second replicate lacks jpeg s2
    t = shift_table(df, "knn", "h")
    assert t.columns.tolist() == ["point_id", "augmentation", "family", "covered", "severity",
                                  "mean", "se", "n"]  # fmt: skip
    p000 = t[t["point_id"] == "p000"]
    assert p000["family"].tolist() == ["gaussian_noise"] * 3 + ["jpeg"] * 3
    assert p000["severity"].tolist() == [0, 1, 2, 0, 1, 2]
    assert p000["covered"].tolist() == [True] * 3 + [False] * 3
    clean = (0.9750 + 0.9750) / 2  # p000's replicates agree: se 0
    np.testing.assert_allclose(p000["mean"], [clean, clean, clean - 0.25, clean, clean - 0.5,
                                              0.9750 - 0.5])  # fmt: skip
    np.testing.assert_allclose(p000["se"], [0, 0, 0, 0, 0, np.nan], atol=1e-12)
    assert p000["n"].tolist() == [2, 2, 2, 2, 2, 1]
    p003 = t[(t["point_id"] == "p003") & (t["severity"] == 0)]
    np.testing.assert_allclose(p003["se"], [abs(0.9694 - 0.9722) / 2] * 2)
    unknown = shift_table(df.drop(columns=["augmentation"]), "knn", "h")
    assert unknown["covered"].isna().all()
    assert shift_table(default_frame(), "knn", "h").empty


def test_shift_draws_covered_families_solid_and_the_others_dashed():
    df = add_shift(add_shift(default_frame()), "z")
    fig = shift(df, "knn")
    axes = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in axes] == [  # a row per family, h left and z right
        "gaussian_noise  (h)", "gaussian_noise  (z)", "jpeg  (h)", "jpeg  (z)",
    ]  # fmt: skip
    noise, jpeg = axes[0], axes[2]
    lines = _errorbars(noise)
    assert sorted(lines) == ["p000", "p001", "p002", "p003"]
    x, y = lines["p000"]
    np.testing.assert_allclose(x, [0, 1, 2])
    np.testing.assert_allclose(y, [0.975, 0.975, 0.725])
    styles = {c.get_label(): c.lines[0].get_linestyle() for c in noise.containers}
    assert set(styles.values()) == {"-"}
    styles = {c.get_label(): c.lines[0].get_linestyle() for c in jpeg.containers}
    assert set(styles.values()) == {"--"}
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "p000: temperature=0.1, batch_size=64" in legend and "not covered" in legend
    assert "coverage unknown" not in legend  # a style is explained only where it is drawn
    with pytest.raises(KeyError):
        shift(default_frame(), "knn")


def test_all_figures_adds_class_spread_and_shift_only_when_recorded():
    df = add_shift(add_class_geometry(default_frame()))
    df.attrs["factors"] = []
    df = df.drop(columns=["temperature"])
    assert set(all_figures(df)) == {"plane_z", "plane_h", "class_spread_z", "shift_knn"}
    assert caption("class_spread_z") and caption("shift_knn")


# ---------------------------------------------------------------------------------------------
# Every figure of the default study renders and saves


def test_all_figures_render_and_save(tmp_path):
    figures = all_figures(
        default_frame(), default_history(), surfaces={"probe/knn_top1_h": _QuadraticSurface()}
    )
    assert set(figures) == {
        "plane_z",
        "plane_h",
        "trajectories_z",
        "trajectories_h",
        "main_effects",
        "interactions",
        "phase_probe_knn_top1_h",
        "phase_z_align",
        "phase_z_uniform",
        "phase_sim_false_negative_rate",
        "phase_z_effective_rank",
        "probe_vs_temperature_knn",
        "probe_vs_temperature_linear",
        "contours_probe_knn_top1_h_temperature_batch_size",
    }
    for name, fig in figures.items():
        assert isinstance(fig, Figure)
        assert caption(name)
        paths = save_figure(fig, tmp_path / "plots", name)
        assert [p.name for p in paths] == [f"{name}.png", f"{name}.svg"]
        assert all(p.stat().st_size > 1000 for p in paths)
        assert paths[0].read_bytes()[:4] == b"\x89PNG"


def test_figures_drawn_in_processes_are_the_figures_drawn_here(tmp_path, monkeypatch):
    """save_figures hands figures to a drawing process (forced here: two cores, no minimum
    weight) and it writes the same PNGs as save_figure in this process; a figure that cannot
    travel (it holds a lambda, which pickle refuses) is drawn here."""
    import analysis.report.plots._all as plots_all

    figures = all_figures(default_frame(), default_history())
    names = ["plane_z", "trajectories_z", "main_effects", "interactions"]
    chosen = {name: figures[name] for name in names}
    chosen["interactions"].stays_here = lambda: None  # not picklable
    monkeypatch.setattr(plots_all, "START_AFTER", 0)
    saved = save_figures(chosen, tmp_path / "pool", processes=2)
    assert list(saved) == names
    for name in names:
        here = save_figure(figures[name], tmp_path / "here", name)
        assert [p.name for p in saved[name]] == [p.name for p in here]
        assert saved[name][0].read_bytes() == here[0].read_bytes()
        assert saved[name][1].read_bytes()[:5] == b"<?xml"
    waiting = plots_all._FigureQueue()
    for name in names:
        waiting.put(name)
    waiting.close()  # every figure to the process: it takes all but the one that cannot travel
    drawn = plots_all._DrawingProcess(chosen, tmp_path / "there", waiting).finish()
    assert set(drawn) == {"plane_z", "trajectories_z", "main_effects"}
    for name in drawn:
        assert (tmp_path / "there" / f"{name}.png").read_bytes() == saved[name][0].read_bytes()


def test_drawing_starts_while_the_figures_are_still_being_made(tmp_path, monkeypatch):
    """Figures given one at a time are drawn as they come: the fourth is made only once a
    drawing process has written one of the first three, which it could not if drawing waited
    for them all (the test would time out)."""
    import time

    import analysis.report.plots._all as plots_all

    figures = all_figures(default_frame(), default_history())
    first, last = ["plane_z", "plane_h", "main_effects"], "interactions"

    def made_one_at_a_time():
        yield from ((name, figures[name]) for name in first)
        deadline = time.monotonic() + 120
        while not any((tmp_path / f"{name}.png").exists() for name in first):
            assert time.monotonic() < deadline, "nothing was drawn while the figures were made"
            time.sleep(0.05)
        yield last, figures[last]

    monkeypatch.setattr(plots_all, "START_AFTER", 0)
    saved = save_figures(made_one_at_a_time(), tmp_path, processes=2)
    assert list(saved) == [*first, last] and all(p.is_file() for ps in saved.values() for p in ps)


def test_a_figure_travels_to_a_drawing_process_without_the_analysis(tmp_path):
    """Every figure unpickles in a fresh interpreter with matplotlib alone: none refers to this
    package (a tick formatter of its own once made every contour figure's drawing process
    import the figure package, pandas and SciPy: a second and a half each)."""
    import pickle
    import subprocess
    import sys

    df = add_shift(add_class_geometry(default_frame()))
    figures = all_figures(df, default_history(), surfaces={"probe/knn_top1_h": _QuadraticSurface()})
    assert any(name.startswith("contours_") for name in figures) and "shift_knn" in figures
    for name, fig in figures.items():
        (tmp_path / f"{name}.pickle").write_bytes(pickle.dumps(fig))
    code = ("import pathlib, pickle, sys; "
            "[pickle.loads(p.read_bytes()) for p in pathlib.Path('.').glob('*.pickle')]; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'analysis', 'pandas', 'scipy', 'statsmodels'}))")  # fmt: skip
    done = subprocess.run([sys.executable, "-P", "-c", code], cwd=tmp_path, capture_output=True,
                          text=True)  # fmt: skip
    assert done.stdout.strip() == "[]", done.stderr[-2000:]


def test_a_figure_weighs_its_panels():
    """Two panels weigh more than one, by one panel's weight; every figure weighs something."""
    from analysis.report.plots._all import drawing_weight

    figures = all_figures(add_shift(default_frame()), default_history())
    assert drawing_weight(figures["plane_z"]) == drawing_weight(figures["trajectories_z"]) + 1
    assert min(drawing_weight(fig) for fig in figures.values()) >= 3


def _smallest_text_px(fig: Figure, width_px: float = 400) -> tuple[float, str]:
    """(size in CSS px, text) of the figure's smallest drawn text when the figure is shown
    ``width_px`` wide: points x (width_px / the figure's width in points)."""
    from matplotlib.text import Text

    fig.draw_without_rendering()  # tick labels exist once drawn
    texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    smallest = min(texts, key=lambda t: t.get_fontsize())
    scale = width_px / (fig.get_size_inches()[0] * 72)
    return smallest.get_fontsize() * scale, smallest.get_text()


def _titles_outside(fig: Figure) -> list[str]:
    """Titles, labels and legends (not tick labels) that reach past the figure's edges."""
    from matplotlib.axes import Axes
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer, box = canvas.get_renderer(), fig.bbox
    every_axes = fig.findobj(Axes)  # insets too
    ticks = {id(t) for ax in every_axes for t in (*ax.get_xticklabels(), *ax.get_yticklabels())}
    inside = box.padded(2)
    texts = [t for t in fig.findobj(Text)
             if t.get_visible() and t.get_text().strip() and id(t) not in ticks]  # fmt: skip
    extents = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
    return [text for text, e in extents if not (inside.contains(*e.p0) and inside.contains(*e.p1))]


@pytest.mark.filterwarnings("ignore")
def test_every_figure_is_readable_at_400_px():
    """Shown 400 CSS px wide (a phone), a figure's smallest text is at least 8 px: its font
    size in points times 400 / its width in points; no title or label is cut off."""
    df = add_shift(add_shift(add_class_geometry(default_frame())), "z")
    figures = all_figures(df, default_history(),
                          surfaces={"probe/knn_top1_h": _QuadraticSurface()})  # fmt: skip
    assert {"shift_knn", "class_spread_z", "contours_probe_knn_top1_h_temperature_batch_size",
            "probe_vs_temperature_knn", "main_effects", "interactions"} <= set(figures)  # fmt: skip
    for name, fig in figures.items():
        px, text = _smallest_text_px(fig)
        assert px >= 8, f"{name}: {text!r} is {px:.1f} px at 400 px"
        assert fig.get_size_inches()[0] <= 5.5, name
        assert _titles_outside(fig) == [], name


def test_all_figures_skips_what_does_not_apply():
    df = default_frame().drop(columns=["temperature", "h/align"])
    df.attrs["factors"] = ["batch_size"]
    figures = all_figures(df)
    assert set(figures) == {"plane_z", "main_effects"}


# ---------------------------------------------------------------------------------------------
# Captions


_DEFAULT_RESPONSES = (
    "probe/knn_top1_h", "probe/linear_top1_h", "probe/knn_top1_z", "z/align", "z/uniform",
)  # fmt: skip


def _every_figure_name() -> dict[str, str]:
    """Every name all_figures can give -> a part its caption must carry: both spaces, a phase
    diagram of every known metric (any can be the response), both probes, and contours of each
    default response over every ordered pair of known factors."""
    spaces = {"z": "z features (z, projection output)", "h": "h features (h, backbone features)"}
    names = {f"plane_{space}": text for space, text in spaces.items()}
    names |= {f"trajectories_{space}": text for space, text in spaces.items()}
    names |= {"main_effects": "each level", "interactions": "one line per level"}
    names |= {f"phase_{_slug(metric)}": f"mean of {metric}" for metric in KNOWN_METRICS}
    names |= {"probe_vs_temperature_knn": "k-NN probe", "probe_vs_temperature_linear": "Linear"}
    names |= {f"class_spread_{space}": text for space, text in spaces.items()}
    names |= {"shift_knn": "k-NN probe top-1", "shift_linear": "Linear probe top-1"}
    for response in _DEFAULT_RESPONSES:
        for x, y in itertools.permutations(KNOWN_FACTORS, 2):
            over = f"{response} over {_LABELS.get(x, x)} × {_LABELS.get(y, y)},"
            names[f"contours_{_slug(response)}_{_slug(x)}_{_slug(y)}"] = over
    return names


def test_caption_of_every_figure_name_names_its_specifics():
    for name, part in _every_figure_name().items():
        text = caption(name)
        assert part in text, (name, text)
        assert "{" not in text and "}" not in text, (name, text)


def test_captions_say_what_to_look_for():
    assert caption("plane_z").startswith(
        "Each point is a trial, placed by uniformity (x) and alignment (y) of its z features"
    )
    assert "Pareto frontier" in caption("plane_h") and "collapse" in caption("plane_h")
    assert "z/align (lower = tighter positives)" in caption("phase_z_align")
    assert "probe/knn_top1_h (higher = better features)" in caption("phase_probe_knn_top1_h")
    assert "hardest negative" in caption("phase_sim_false_negative_rate")
    assert caption("probe_vs_temperature_knn").startswith("k-NN probe top-1 accuracy")
    assert "parallel lines" in caption("interactions")
    name = "contours_probe_knn_top1_h_temperature_batch_size"
    assert "fitted probe/knn_top1_h over temperature τ × batch size B" in caption(name)
    # Names a caption cannot read back: the slugs as they are.
    assert "fitted my_score over temperature τ × lam_t" in caption(
        "contours_my_score_temperature_lam_t"
    )
    assert "fitted z/align over two numeric factors (foo_bar)" in caption(
        "contours_z_align_foo_bar"
    )
    assert "mean of my_score over" in caption("phase_my_score")
    with pytest.raises(KeyError):
        caption("histogram")


def test_every_figure_module_has_a_caption():
    modules = [m.name for m in pkgutil.iter_modules(analysis.report.plots.__path__)]
    figures = [m for m in modules if m not in ("_common", "_all", "_save")]
    assert len(figures) == 12, modules
    for name in figures:
        module = importlib.import_module(f"analysis.report.plots.{name}")
        assert isinstance(module.CAPTION, str) and module.CAPTION, name


def test_caption_vocabulary_covers_every_metric_and_numeric_setting():
    from trainables.config import TrialConfig
    from trainables.corruption_families import COVERED_BY
    from trainables.metrics import final_metrics
    from trainables.text import base_type

    assert set(final_metrics(TrialConfig())) <= set(KNOWN_METRICS)
    assert set(_SHIFT_FAMILIES) == set(COVERED_BY)
    numeric = {
        name
        for name, field in TrialConfig.model_fields.items()
        if base_type(field.annotation) in (int, float)
    }
    assert numeric <= set(KNOWN_FACTORS)


def _tick_texts(ax) -> list[str]:
    ax.figure.canvas.draw()
    return [t.get_text() for t in ax.get_yticklabels() if t.get_text()]


def test_every_accuracy_axis_reads_in_percent_and_other_axes_do_not():
    """One unit for accuracies: the headline, the report and every figure that plots one."""
    df = _two_by_two().rename(columns={"acc": "probe/knn_top1_h"})
    df["z/align"] = df["probe/knn_top1_h"]
    for figure in (main_effects(df, "probe/knn_top1_h"), interactions(df, "probe/knn_top1_h")):
        assert all(text.endswith("%") for text in _tick_texts(figure.axes[0]))
    assert not any(text.endswith("%") for text in _tick_texts(interactions(df, "z/align").axes[0]))
    fig = shift(add_shift(add_shift(default_frame()), "z"), "knn")
    shown = [_tick_texts(ax) for ax in fig.axes if ax.get_title()]  # shared y: left column
    assert shown[0] and all(text.endswith("%") for texts in shown for text in texts)
