"""A trial's evidence: conditional geometry, subgroup probes, shift tests and source
return against brute-force loops, and the ``evidence`` a trial returns."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pytest
import torch
from PIL import Image
from reference import align_loop, uniform_loop

from trainables.config import TrialConfig
from trainables.corruptions import corrupt
from trainables.data import load_data, toy_samples
from trainables.diagnostics import class_geometry_metrics, label_geometry
from trainables.measures import (
    label_top1,
    return_anchors,
    shift_index,
    shift_metrics,
    shift_rows,
    shift_tests,
    source_panel,
    source_return,
    subgroup_metrics,
    tile_grid,
)
from trainables.metrics import evaluation_metrics, evidence_metrics, final_metrics
from trainables.probes import fit_probes, knn_predict, linear_probe_fit, linear_probe_predict
from trainables.train import LocalReporter, run_trial


def seeded(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def rows(x: torch.Tensor) -> list[list[float]]:
    return x.tolist()


# ---------------------------------------------------------------------------------------------
# conditional geometry
# ---------------------------------------------------------------------------------------------
def geometry_loop(x1, x2, labels):
    """label -> (n, align, uniform) with plain loops (NaN where undefined)."""
    out = {}
    for c in sorted(set(labels.tolist())):
        mine = [i for i in range(len(labels)) if int(labels[i]) == c]
        a = [rows(x1)[i] for i in mine]
        b = [rows(x2)[i] for i in mine]
        align = align_loop(a, b, 2.0)
        uniform = uniform_loop(a, 2.0) if len(mine) >= 2 else math.nan
        out[c] = (len(mine), align, uniform)
    return out


def test_label_geometry_matches_loops_with_a_class_of_one_row():
    x1, x2 = seeded(13, 4, seed=1), seeded(13, 4, seed=2)
    labels = torch.tensor([0, 1, 2, 0, 1, 0, 2, 0, 1, 1, 0, 2, 3])  # class 3 has one row
    expected = geometry_loop(x1, x2, labels)
    got = label_geometry(x1, x2, labels)
    assert [g[0] for g in got] == [0, 1, 2, 3]
    for label, n, align, uniform in got:
        e_n, e_align, e_uniform = expected[label]
        assert n == e_n and align == pytest.approx(e_align, rel=1e-10)
        if label == 3:
            assert math.isnan(uniform)
        else:
            assert uniform == pytest.approx(e_uniform, rel=1e-10)


def test_class_geometry_worst_and_spread_match_loops():
    h1, h2, z1, z2 = (seeded(20, d, seed=s) for s, d in ((3, 6), (4, 6), (5, 3), (6, 3)))
    labels = torch.arange(20) % 3
    labels[0] = 3  # a class of one row: alignment but no uniformity
    metrics, per_space = class_geometry_metrics(h1, h2, z1, z2, labels)
    for space, (x1, x2) in (("h", (h1, h2)), ("z", (z1, z2))):
        loop = geometry_loop(x1, x2, labels)
        aligns = [v[1] for v in loop.values()]
        uniforms = [v[2] for v in loop.values() if not math.isnan(v[2])]
        assert metrics[f"{space}/align_worst_class"] == pytest.approx(max(aligns), rel=1e-10)
        assert metrics[f"{space}/align_class_spread"] == pytest.approx(
            max(aligns) - min(aligns), rel=1e-10
        )
        assert metrics[f"{space}/uniform_worst_class"] == pytest.approx(max(uniforms), rel=1e-10)
        assert metrics[f"{space}/uniform_class_spread"] == pytest.approx(
            max(uniforms) - min(uniforms), rel=1e-10
        )
        assert len(per_space[space]) == 4


def test_one_class_only_is_the_global_value_and_its_spread_is_not_measured():
    from trainables.diagnostics import space_metrics

    h1, h2 = seeded(15, 5, seed=7), seeded(15, 5, seed=8)
    metrics, _ = class_geometry_metrics(
        h1, h2, h1[:, :3], h2[:, :3], torch.zeros(15, dtype=torch.long)
    )
    overall = space_metrics(h1, h2, "h")
    assert metrics["h/align_worst_class"] == pytest.approx(overall["h/align"], rel=1e-12)
    assert metrics["h/uniform_worst_class"] == pytest.approx(overall["h/uniform"], rel=1e-12)
    # a spread over one class is not 0: it is not measured (NaN), and the count says why
    assert math.isnan(metrics["h/align_class_spread"])
    assert math.isnan(metrics["h/uniform_class_spread"])
    assert metrics["h/align_classes"] == metrics["h/uniform_classes"] == 1.0


def test_every_class_of_one_row_has_no_uniformity():
    metrics, _ = class_geometry_metrics(*(seeded(4, 3, seed=s) for s in range(4)), torch.arange(4))
    assert math.isnan(metrics["z/uniform_worst_class"]) and math.isnan(
        metrics["z/uniform_class_spread"]
    )
    assert math.isfinite(metrics["z/align_worst_class"])


# ---------------------------------------------------------------------------------------------
# subgroups
# ---------------------------------------------------------------------------------------------
def test_label_top1_and_subgroup_metrics_match_loops():
    g = torch.Generator().manual_seed(9)
    y = torch.randint(0, 4, (60,), generator=g)
    pred = torch.where(
        torch.rand(60, generator=g) < 0.7, y, torch.randint(0, 4, (60,), generator=g)
    )
    groups = torch.randint(-2, 7, (60,), generator=g)  # negative: in no group
    for labels in (y, groups):
        got = {label: (n, acc) for label, n, acc in label_top1(pred, y, labels)}
        ids = sorted({int(v) for v in labels if int(v) >= 0})
        assert list(got) == ids
        for label in ids:
            mine = [i for i in range(60) if int(labels[i]) == label]
            hits = sum(int(pred[i]) == int(y[i]) for i in mine)
            assert got[label] == (len(mine), pytest.approx(hits / len(mine)))
    metrics, _ = subgroup_metrics({("knn", "h"): pred}, y, groups, "group")
    overall = sum(int(a) == int(b) for a, b in zip(pred, y, strict=True)) / 60
    worst = min(acc for _, _, acc in label_top1(pred, y, groups))
    assert metrics["probe/knn_top1_h_worst_group"] == pytest.approx(worst)
    assert metrics["probe/knn_top1_h_group_gap"] == pytest.approx(overall - worst)


def test_fitted_probes_predict_as_the_probes_do():
    x, y = seeded(80, 5, seed=10).float(), torch.arange(80) % 4
    test = seeded(30, 5, seed=11).float()
    probes = fit_probes({"h": x, "z": x[:, :2], "y": y}, num_classes=4, k=7, max_iter=30)
    assert torch.equal(
        probes.predict("knn", "z", test[:, :2]),
        knn_predict(x[:, :2], y, test[:, :2], k=7, num_classes=4),
    )
    fit = linear_probe_fit(x, y, max_iter=30, num_classes=4)
    assert torch.equal(probes.predict("linear", "h", test), linear_probe_predict(fit, test))
    off = fit_probes({"h": x, "z": x, "y": y}, num_classes=4, linear=False)
    assert off.names == ("knn",)


# ---------------------------------------------------------------------------------------------
# shift tests
# ---------------------------------------------------------------------------------------------
def test_shift_tests_score_corrupted_rows_with_clean_probes():
    g = torch.Generator().manual_seed(12)
    centres = 3 * torch.randn(3, 6, generator=g)
    y = torch.arange(90) % 3
    x = centres[y] + 0.3 * torch.randn(90, 6, generator=g)
    train, held, held_y = x[:60], x[60:], y[60:]
    embed = lambda rows: (rows, rows[:, :3])  # noqa: E731  h = x, z = its first 3 columns
    probes = fit_probes(
        {"h": train, "z": train[:, :3], "y": y[:60]}, num_classes=3, k=5, max_iter=30
    )
    table = shift_tests(held, held_y, embed, probes, "vector", "noise")
    assert len(table) == 2 * 5 * 2 * 2  # families × severities × spaces × probes
    for row in table:
        corrupted = corrupt(held, row["family"], row["severity"])
        feats = corrupted if row["space"] == "h" else corrupted[:, :3]
        pred = probes.predict(row["probe"], row["space"], feats)
        assert row["top1"] == pytest.approx(float((pred == held_y).double().mean()))
        assert row["covered"] == (row["family"] == "noise")
    metrics = shift_metrics(table)
    mean_noise = sum(metrics[f"shift/noise/s{k}/knn_top1_z"] for k in range(1, 6)) / 5
    assert metrics["shift/noise/knn_top1_z"] == pytest.approx(mean_noise)
    assert metrics["shift/mean_linear_top1_h"] == pytest.approx(
        (metrics["shift/noise/linear_top1_h"] + metrics["shift/mean_shift/linear_top1_h"]) / 2
    )
    config = TrialConfig(dataset="toy", encoder="mlp", augmentation="noise", linear_probe=True)
    assert {k for k in evidence_metrics(config) if k.startswith("shift/")} == set(metrics)


def test_shift_rows_follow_the_budget_and_the_subsample_is_fixed():
    assert shift_rows(TrialConfig(budget_examples=30720, batch_size=256)) == 120
    assert shift_rows(TrialConfig(budget_examples=512, batch_size=128)) == 64
    assert shift_rows(TrialConfig(budget_examples=2_560_000, batch_size=256)) == 2000
    assert shift_index(50, 120).tolist() == list(range(50))
    pick = shift_index(360, 120)
    assert len(pick) == 120 and torch.equal(pick, shift_index(360, 120))
    assert bool((pick.diff() > 0).all())


# ---------------------------------------------------------------------------------------------
# source return
# ---------------------------------------------------------------------------------------------
def test_return_anchors_first_row_of_each_class_then_earliest_rows():
    labels = torch.tensor([5, 3, 3, 9, 5, 1, 0, 2, 4, 6, 7, 8])
    assert return_anchors(labels) == [6, 5, 7, 1, 8, 0, 9, 10]  # classes 0..7
    assert return_anchors(torch.tensor([1, 1, 0, 0, 1, 0])) == [2, 0, 1, 3, 4, 5]


def test_source_return_hardest_negatives_are_the_brute_force_top3():
    z1, z2 = seeded(30, 4, seed=13), seeded(30, 4, seed=14)
    labels = torch.arange(30) % 4
    anchors = return_anchors(labels)
    table = source_return(z1, z2, labels, anchors)
    assert len(table) == 4 * len(anchors)
    unit = lambda v: v / v.norm()  # noqa: E731
    for a_pos, i in enumerate(anchors):
        mine = table[4 * a_pos : 4 * a_pos + 4]
        assert [r["role"] for r in mine] == ["positive", "negative_1", "negative_2", "negative_3"]
        assert all(r["anchor"] == i and r["anchor_label"] == int(labels[i]) for r in mine)
        assert mine[0]["index"] == i and mine[0]["similarity"] == pytest.approx(
            float(unit(z1[i]) @ unit(z2[i]))
        )
        candidates = [
            (float(unit(z1[i]) @ unit(view[j])), j, v + 1)
            for j in range(30)
            if j != i
            for v, view in enumerate((z1, z2))
        ]
        top = sorted(candidates, reverse=True)[:3]
        got = [(r["similarity"], r["index"], r["view"]) for r in mine[1:]]
        assert [(pytest.approx(s), j, v) for s, j, v in top] == got
        for r in mine[1:]:
            assert r["label"] == int(labels[r["index"]])
            assert r["false_negative"] == (r["label"] == r["anchor_label"])


def panel_size(tile: int, rows: int = 8, columns: int = 5) -> tuple[int, int]:
    """(height, width) of the panel: tiles framed 2 px each side, 2 px between and around."""
    side = tile + 4
    return rows * (side + 2) + 2, columns * (side + 2) + 2


def test_source_panel_holds_8_rows_of_5_framed_images_under_column_labels():
    g = torch.Generator().manual_seed(15)
    v1, v2 = torch.randn(40, 1, 8, 8, generator=g), torch.randn(40, 1, 8, 8, generator=g)
    labels = torch.arange(40) % 10
    table = source_return(v1.flatten(1), v2.flatten(1), labels, return_anchors(labels))
    assert 0 < sum(r["false_negative"] for r in table) < 24  # both frames appear
    png = source_panel(v1, v2, table, (0.3,), (0.4,))
    image = np.array(Image.open(io.BytesIO(png)))
    grid_h, grid_w = panel_size(48)  # 8-px views scaled by 6
    # the tiles under a strip of column labels and above a legend (black text on white)
    grey = (image[:, 2] == [191, 191, 191]).all(axis=1)
    head = int(grey.argmax()) - 2  # the first tile's frame, 2 px below the grid's top
    assert image.shape[1] == grid_w and head > 0 and image.shape[0] > head + grid_h
    for text in (image[:head], image[head + grid_h :]):
        assert (text < 100).all(axis=2).any(), "no text in the labels or the legend"
    red = np.array([255, 0, 0])
    for k, row in enumerate(table):
        anchor_pos, column = k // 4, k % 4 + 1
        top, left = head + 2 + anchor_pos * 54, 2 + column * 54  # the tile's frame corner
        assert (image[top, left] == red).all() == row["false_negative"]
    assert tile_grid(torch.zeros(7, 3, 4, 4), 5).shape == (3, 2 * 6 + 2, 5 * 6 + 2)


# ---------------------------------------------------------------------------------------------
# held-out groups
# ---------------------------------------------------------------------------------------------
def test_toy_held_out_rows_carry_their_item_groups():
    config = TrialConfig(
        dataset="toy", encoder="mlp", augmentation="noise", toy_photos_per_item=4, heldout_size=40
    )
    data = load_data(config)
    _, _, groups = toy_samples(config, 40, "heldout")
    assert data.heldout_groups is not None and torch.equal(data.heldout_groups, groups)
    plain = load_data(TrialConfig(dataset="toy", encoder="mlp", augmentation="noise"))
    assert plain.heldout_groups is None and plain.train_groups is None


def test_imagefolder_held_out_rows_carry_groups(tmp_path):
    rng = np.random.default_rng(0)
    for cls in ("cats", "dogs"):
        (tmp_path / cls).mkdir()
        for i in range(10):
            Image.fromarray(rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)).save(
                tmp_path / cls / f"{i}.png"
            )
    lines = [f"{c}/{i}.png,{c}-{i // 2}\n" for c in ("cats", "dogs") for i in range(10) if i != 3]
    (tmp_path / "groups.csv").write_text("".join(lines))
    data = load_data(TrialConfig(dataset="imagefolder", data_root=str(tmp_path), image_size=8))
    assert data.heldout_groups is not None and data.heldout_groups.shape == (4,)
    assert data.train_groups is not None
    names = evidence_metrics(TrialConfig(dataset="imagefolder", data_root=str(tmp_path)))
    assert "probe/knn_top1_h_worst_group" in names and "probe/knn_top1_z_group_gap" in names


# ---------------------------------------------------------------------------------------------
# the trial's evidence
# ---------------------------------------------------------------------------------------------
SMALL = {
    "dataset": "digits", "budget_examples": 256, "batch_size": 64, "eval_marks": 2,
    "heldout_size": 80, "probe_train_size": 100, "linear_probe_iters": 5,
    "augmentation": "crop+noise+erase", "aug_strength": 0.6,
}  # fmt: skip


def test_the_final_evaluation_alone_carries_the_evidence():
    config = TrialConfig(**SMALL)
    reporter = LocalReporter()
    result = run_trial(config, reporter)
    (_, first), (_, last) = reporter.history
    assert sorted(first) == sorted(evaluation_metrics(config))
    assert sorted(last) == sorted(evaluation_metrics(config) + evidence_metrics(config))
    numeric = {k for k, v in result.items() if isinstance(v, int | float)}
    assert sorted(numeric) == sorted(final_metrics(config))
    assert result["time/evidence_s"] > 0
    evidence = result["evidence"]
    json.dumps(evidence, allow_nan=False)  # strict JSON
    assert set(evidence) == {
        "per_class",
        "per_group",
        "shift",
        "source_return",
        "source_return_png",
        "outcomes",
    }
    classes = sorted(set(load_data(config).heldout_y.tolist()))
    assert [(r["space"], r["class"]) for r in evidence["per_class"]] == [
        (s, c) for s in "hz" for c in classes
    ]
    assert evidence["per_group"] == []
    assert len(evidence["shift"]) == 5 * 5 * 2 * 2
    assert len(evidence["source_return"]) == 8 * 4
    png = Image.open(io.BytesIO(__import__("base64").b64decode(evidence["source_return_png"])))
    height, width = panel_size(48)  # the tiles, under their column labels, above a legend
    assert png.size[0] == width and png.size[1] > height
    worst = min(r["knn_top1"] for r in evidence["per_class"] if r["space"] == "h")
    assert result["probe/knn_top1_h_worst_class"] == pytest.approx(worst)
    assert result["probe/knn_top1_h_class_gap"] == pytest.approx(result["probe/knn_top1_h"] - worst)


def test_toy_trial_with_groups_and_no_linear_probe():
    config = TrialConfig(
        dataset="toy", encoder="mlp", mlp_hidden=(16,), feature_dim=4, projection_dim=4,
        augmentation="noise", toy_photos_per_item=4, toy_train_size=512, heldout_size=80,
        budget_examples=256, batch_size=64, eval_marks=1, linear_probe=False,
    )  # fmt: skip
    result = run_trial(config)
    evidence = result["evidence"]
    assert evidence["source_return_png"] is None and {r["family"] for r in evidence["shift"]} == {
        "noise",
        "mean_shift",
    }
    assert evidence["per_group"] and all(r["linear_top1"] is None for r in evidence["per_group"])
    assert {"probe/knn_top1_h_worst_group", "probe/knn_top1_z_group_gap"} <= set(result)
    assert not any("linear" in k for k in result if k.startswith(("shift/", "probe/")))
    assert sorted(k for k, v in result.items() if isinstance(v, int | float)) == sorted(
        final_metrics(config)
    )


def test_a_last_step_off_the_marks_still_gets_the_evidence(monkeypatch):
    monkeypatch.setattr(TrialConfig, "eval_steps", property(lambda self: (1,)))
    reporter = LocalReporter()
    result = run_trial(TrialConfig(**SMALL), reporter)
    assert [s for s, _ in reporter.history] == [64, 256]
    assert "shift/mean_knn_top1_h" not in reporter.history[0][1]
    assert "shift/mean_knn_top1_h" in reporter.history[1][1] and result["evidence"]


def test_a_diverged_trial_has_no_evidence():
    config = {
        "dataset": "toy", "encoder": "mlp", "augmentation": "noise", "budget_examples": 128 * 20,
        "batch_size": 128, "optimizer": "sgd", "base_lr": 1e30, "momentum": 0.0,
    }  # fmt: skip
    result = run_trial(config)
    assert result["status"] == "diverged" and result["evidence"] == {}
    assert not any(k.startswith("shift/") for k in result)
