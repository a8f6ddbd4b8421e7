"""Hand-built results frames shaped like the default study (temperature × batch size, both on a log
scale, common seeds: replicate r uses seed r at every point): the literal four-point study the
evidence card is checked on, studies with an effect of temperature planted in them, and the real
default-digits study's final metrics (with its history, per-class geometry and shift columns) that
every figure and report.html are drawn from."""

from __future__ import annotations

import math

import pandas as pd

from analysis.report.evidence.gate import GATE_ITEMS, GateItem, release_gate

NAN = math.nan
# point, replicate, temperature, batch_size, knn h, knn z, linear h, linear z, fnr, wall_s
TRIALS = (
    ("p000", 0, 0.1, 64, 0.90, 0.80, 0.95, 0.85, 0.70, 3600.0),
    ("p001", 0, 0.1, 256, 0.92, 0.82, 0.96, 0.86, 0.75, 1800.0),
    ("p002", 0, 0.5, 64, 0.88, 0.78, 0.94, 0.84, 0.80, 5400.0),
    ("p003", 0, 0.5, 256, 0.86, 0.76, 0.93, 0.83, 0.85, 3600.0),
)


def row(point, rep, tau, batch, knn_h, knn_z, lin_h, lin_z, fnr, wall) -> dict:
    return {
        "study": "unit", "point_id": point, "replicate": rep, "status": "finished",
        "temperature": tau, "batch_size": batch, "dataset": "digits", "data_seed": 0,
        "toy_photos_per_item": 1, "toy_noise": 0.35, "encoder": "small_cnn", "feature_dim": 128,
        "projection": "mlp", "projection_dim": 64, "objective": "info_nce", "lam_t": NAN,
        "uniform_t": 2.0, "align_alpha": 2.0, "group_policy": "negative",
        "budget_examples": 30720, "augmentation": "crop+noise+erase", "aug_strength": 0.6,
        "knn_k": 20, "knn_temperature": 0.07, "linear_probe": True, "linear_probe_iters": 50,
        "seed": rep, "precision": "fp32", "derived.steps": 30720 // batch,
        "derived.negatives_per_anchor": 2 * batch - 2, "derived.lam": NAN,
        "loss/candidates": float(2 * batch - 2), "sim/false_negative_rate": fnr,
        "sim/hardest_neg_share": 0.1 if tau == 0.1 else 0.01, "sim/pos_mean": 0.8,
        "sim/neg_mean": 0.0, "sim/neg_q99": 0.7, "h/align": 0.07, "h/uniform": -0.7,
        "h/effective_rank": 27.0, "h/dim_std_min": 0.02, "h/dim_std_mean": 0.04,
        "z/align": 0.3, "z/uniform": -3.1, "z/effective_rank": 30.0, "z/dim_std_min": 0.08,
        "z/dim_std_mean": 0.12, "probe/knn_top1_h": knn_h, "probe/knn_top1_z": knn_z,
        "probe/linear_top1_h": lin_h, "probe/linear_top1_z": lin_z, "wall_s": wall,
        "examples_seen": 30720.0, "steps": float(30720 // batch),
    }  # fmt: skip


def frame(trials=TRIALS, *, checks=None, resources=None, **columns) -> pd.DataFrame:
    """The literal study above; ``columns`` overwrite whole columns (a list sets per row)."""
    df = pd.DataFrame([row(*t) for t in trials])
    for name, value in columns.items():
        df[name] = value
    df.attrs = {
        "study": "unit", "factors": ["temperature", "batch_size"], "spec_sha": "abc",
        "design": "full_factorial", "resources": {"cpu": 1.0, "gpu": 0.5} if resources is None
        else resources, "checks": {"info_nce_worked_example": "pass"} if checks is None
        else checks,
    }  # fmt: skip
    return df


def gate(df: pd.DataFrame, number: int) -> GateItem:
    item = release_gate(df)[number - 1]
    assert item.number == number and item.text == GATE_ITEMS[number - 1]
    return item


RESPONSE = "probe/knn_top1_h"
POINTS = [(0.1, 64), (0.1, 256), (0.5, 64), (0.5, 256)]  # search_spaces/default.yaml
SEED_LUCK = [0.02, -0.015, 0.01, -0.025]  # a seed's luck, shared by every point
NOISE = [0.001, -0.002, 0.0015, 0.0, -0.001, 0.002, -0.0005, 0.0]  # cycled over the trials


def study(value, replicates: int = 2) -> pd.DataFrame:
    """The default study's shape: ``value(tau, batch, replicate, i)`` at trial i."""
    trials = []
    for p, (tau, batch) in enumerate(POINTS):
        for r in range(replicates):
            i = len(trials)
            knn = value(tau, batch, r, i)
            trials.append((f"p{p:03d}", r, tau, batch, knn, knn - 0.1, 0.95, 0.85, 0.7, 3600.0))
    return frame(tuple(trials))


def planted(tau_per_doubling: float, replicates: int = 4):
    """knn = 0.9 + (effect per doubling of τ) log2(τ / 0.1) + seed luck + small noise."""
    return study(lambda tau, batch, r, i: 0.9 + tau_per_doubling * math.log2(tau / 0.1)
                 + SEED_LUCK[r] + NOISE[i % len(NOISE)], replicates)  # fmt: skip


# The real default-digits study (temperature 0.1/0.5 x batch_size 64/256 x 2 replicates), its
# final metrics rounded, with the Parquet export's column names.
DEFAULT_COLUMNS = {
    "point_id": ["p000", "p000", "p001", "p001", "p002", "p002", "p003", "p003"],
    "replicate": [0, 1, 0, 1, 0, 1, 0, 1],
    "temperature": [0.1, 0.1, 0.1, 0.1, 0.5, 0.5, 0.5, 0.5],
    "batch_size": [64, 64, 256, 256, 64, 64, 256, 256],
    "z/align": [0.4352, 0.4400, 0.4586, 0.4577, 0.2007, 0.1955, 0.2194, 0.2178],
    "z/uniform": [-3.4438, -3.4533, -3.4313, -3.4391, -2.8782, -2.8797, -2.7994, -2.7989],
    "h/align": [0.0829, 0.0650, 0.0693, 0.0592, 0.0815, 0.0656, 0.0823, 0.0665],
    "h/uniform": [-0.6896, -0.5421, -0.5619, -0.4932, -0.8553, -0.7017, -0.8222, -0.7123],
    "probe/knn_top1_h": [0.9750, 0.9750, 0.9750, 0.9722, 0.9694, 0.9778, 0.9694, 0.9722],
    "probe/knn_top1_z": [0.9750, 0.9722, 0.9806, 0.9750, 0.9722, 0.9778, 0.9611, 0.9694],
    "probe/linear_top1_h": [0.9861, 0.9750, 0.9917, 0.9861, 0.9917, 0.9889, 0.9833, 0.9806],
    "probe/linear_top1_z": [0.9861, 0.9750, 0.9806, 0.9806, 0.9778, 0.9833, 0.9750, 0.9806],
    "sim/false_negative_rate": [0.893, 0.889, 0.864, 0.890, 0.903, 0.919, 0.901, 0.894],
    "z/effective_rank": [41.08, 41.46, 40.71, 40.70, 23.65, 23.97, 22.19, 22.04],
}


def default_frame() -> pd.DataFrame:
    df = pd.DataFrame(DEFAULT_COLUMNS)
    df.insert(0, "study", "default-digits")
    df.insert(3, "status", "finished")
    df.insert(4, "trial_key", df["point_id"] + "-r" + df["replicate"].astype(str))
    df["objective"] = "infonce"
    df["uniform_t"] = 2.0
    df["derived.negatives_per_anchor"] = 2 * df["batch_size"] - 2
    df["derived.steps"] = 30720 // df["batch_size"]
    df["wall_s"] = 10.0
    df["examples_seen"] = 30720.0
    df["steps"] = df["derived.steps"].astype(float)
    df.attrs.update(study="default-digits", factors=["temperature", "batch_size"], design="")
    return df


def default_history() -> pd.DataFrame:
    """Two evaluations per trial (halfway, then final) on both planes: each trial moves left
    (more uniform) between them, its alignment a little worse in z and better in h."""
    final = default_frame()
    keep = ["trial_key", "point_id", "replicate", "z/align", "z/uniform", "h/align", "h/uniform"]
    halfway = final[keep].assign(step=15360)
    halfway["z/align"] -= 0.03
    halfway["z/uniform"] += 0.4
    halfway["h/align"] += 0.005
    halfway["h/uniform"] += 0.05
    history = pd.concat([halfway, final[keep].assign(step=30720)], ignore_index=True)
    return history.sort_values(["trial_key", "step"], ignore_index=True)


def add_class_geometry(df: pd.DataFrame) -> pd.DataFrame:
    """The default study plus per-class z alignment: worst class 0.5 + 0.125 per point index,
    replicate 1 a further 0.25 up; spread 0.25 everywhere (z uniformity not recorded)."""
    df = df.copy()
    point = df["point_id"].str[1:].astype(int)
    df["z/align_worst_class"] = 0.5 + 0.125 * point + 0.25 * df["replicate"]
    df["z/align_class_spread"] = 0.25
    return df


FAMILY_DROPS = {"gaussian_noise": (0.0, 0.25), "jpeg": (0.5, 0.5)}  # drop at s1, s2


def add_shift(df: pd.DataFrame, space: str = "h") -> pd.DataFrame:
    """The default study trained with crop+noise (covers gaussian_noise, not jpeg), its kNN
    top-1 under two corruption families at severities 1 and 2: clean minus a fixed drop."""
    df = df.copy()
    df["augmentation"] = "crop+noise"
    clean = df[f"probe/knn_top1_{space}"]
    for family, drops in FAMILY_DROPS.items():
        for k, drop in enumerate(drops, start=1):
            df[f"shift/{family}/s{k}/knn_top1_{space}"] = clean - drop
    return df
