"""The evidence card's sections read straight from the frame: receiver job, positive and
negative relations, similarity, temperature, representation layer, transfer and cost. The
sections with a concept of their own live beside it (:mod:`analysis.report.evidence.augmentation`,
:mod:`analysis.report.evidence.candidates`, :mod:`analysis.report.evidence.geometry`,
:mod:`analysis.report.evidence.shift`, :mod:`analysis.report.evidence.subgroups`,
:mod:`analysis.report.evidence.source_return`)."""

from __future__ import annotations

import re

import pandas as pd

from analysis.findings.baselines import (
    OWN,
    architecture_words,
    baseline_name,
    baselines_of,
    counterpart,
)
from analysis.report.evidence.candidates import _candidates, candidate_table
from analysis.report.evidence.cells import (
    DEFAULT_TARGET,
    NOT_MEASURED,
    PROBES,
    _distinct,
    _factors,
    _finished,
    _fmt,
    _grouped,
    _is_infonce,
    _listing,
    _mean_sd,
    _num,
    _point_label,
    _range,
    _target,
)
from analysis.report.evidence.table import Table
from trainables.objectives.registry import DEFAULT_OBJECTIVE, ROWS


def receiver_job(df: pd.DataFrame, attrs: dict) -> str:
    present = [p for p in PROBES if p in df.columns]
    if not present:
        return f"{NOT_MEASURED}: no probe/* columns in the record."
    knn = (
        f"weighted cosine kNN top-1 (k = {_listing(df, 'knn_k')}, "
        f"vote temperature {_listing(df, 'knn_temperature')})"
    )
    linear = (
        f"linear top-1 (standardised features, L2-penalised multinomial logistic regression, "
        f"full-batch L-BFGS, at most {_listing(df, 'linear_probe_iters')} iterations)"
    )
    return (
        f"Class recognition on held-out labels, read by frozen-feature probes: {knn} and {linear}; "
        "each fit on a labelled probe-train split and scored on a disjoint held-out split, "
        f"in both h and z. Recorded: {', '.join(present)}. Target metric: {_target(attrs)}"
        f"{'' if attrs.get('target') else ' (the default; attrs carry no target)'}."
    )


def positive_relation(df: pd.DataFrame, attrs: dict) -> str:
    grouped = _grouped(df)
    if grouped.any():
        groups = (
            f"Groups exist in {int(grouped.sum())} trial(s): toy items of "
            f"{_listing(df[grouped], 'toy_photos_per_item')} photos share one item identity"
        )
    else:
        groups = "No groups: one photo per source (toy_photos_per_item = 1 or non-toy data)"
    if "imagefolder" in _distinct(df, "dataset"):
        groups += (
            "; imagefolder trials take groups from root/groups.csv when present, "
            "which the record does not show"
        )
    return (
        "Two independently augmented views of one training source form the positive pair "
        f"(random parameters drawn per sample). Dataset: {_listing(df, 'dataset')}. {groups}. "
        f"group_policy: {_listing(df, 'group_policy')} (negative: group mates are negatives; "
        "mask: dropped from the denominator; positive: extra positives; moot without groups)."
    )


def negative_relation(df: pd.DataFrame, attrs: dict) -> str:
    done = _finished(df)
    cands = _candidates(df)
    rows = candidate_table(df).rows  # (B, W, negatives, recorded, expected, trials)
    per_batch = "; ".join(f"B = {r[0]}: {r[3]}" for r in rows) or "not recorded"
    fnr = _num(done, "sim/false_negative_rate")
    share = _by(done[_is_infonce(done)], "sim/hardest_neg_share", "temperature", "τ")
    return (
        "Every other view in the anchor's training batch is a negative (the other 2B - 2 views; "
        "no mining or reweighting is recorded). Candidates per anchor"
        f"{'' if cands is not None else ' (not recorded)'}: {per_batch}. "
        f"group_policy: {_listing(df, 'group_policy')}. False-negative rate (share of held-out "
        "anchors whose hardest negative in z has the anchor's class label, with the whole "
        f"held-out set as one batch), over finished trials: {_range(fnr)}; a high rate means "
        "an anchor's most strongly repelled negative is usually a same-class view. Hardest "
        "negative's "
        f"share of the anchor's repulsion (InfoNCE, held-out): {share}. Labels are diagnostic "
        "only; the loss never sees them."
    )


def _by(df: pd.DataFrame, col: str, key: str, name: str) -> str:
    """``col``'s range per value of ``key``, e.g. "τ = 0.1: 0.15 to 0.16; τ = 0.5: 0.007"."""
    value = _num(df, col)
    if value is None or value.dropna().empty:
        return "n/a"
    if key not in df.columns:
        return _range(value)
    return "; ".join(f"{name} = {_fmt(k)}: {_range(v)}" for k, v in value.groupby(df[key]))


def similarity(df: pd.DataFrame, attrs: dict) -> str:
    objectives = _distinct(df, "objective")
    text = [f"Objective(s): {', '.join(objectives) or 'not recorded'}."]
    for row in ROWS:  # each objective's sentence (trainables/objectives/registry.py)
        if row.name in objectives:
            trials = df[df["objective"] == row.name]
        elif not objectives and row.name == DEFAULT_OBJECTIVE:  # unrecorded: the default
            trials = df
        else:
            continue
        text.append(_filled(row.similarity, trials))
    return " ".join(text)


def _filled(sentence: str, trials: pd.DataFrame) -> str:
    """``sentence`` with each ``{field}`` replaced by the values ``trials`` recorded for it."""
    return re.sub(r"\{([\w./]+)\}", lambda m: _listing(trials, m[1]), sentence)


def temperature(df: pd.DataFrame, attrs: dict) -> str | Table:
    nce = df[_is_infonce(df)]
    if "temperature" not in df.columns or nce.empty:
        return f"{NOT_MEASURED}: no InfoNCE trial records a temperature."
    caption = (
        f"τ used: {_listing(nce, 'temperature')}; constant through training (the record has no "
        "temperature schedule, and τ is not learned). Mean target probe "
        f"({_target(attrs)}, finished InfoNCE trials) by τ and candidates per anchor C:"
    )
    table = temperature_table(df, _target(attrs))
    return Table(table.columns, table.rows, caption + ("" if table.rows else " not measured."))


def temperature_table(df: pd.DataFrame, target: str = DEFAULT_TARGET) -> Table:
    """Mean ``target`` of finished InfoNCE trials by temperature (rows) and candidates (columns)."""
    done = _finished(df)
    done = done[_is_infonce(done)]
    value, cands = _num(done, target), _candidates(done)
    if value is None or cands is None or "temperature" not in done.columns:
        return Table(("τ",), ())
    frame = pd.DataFrame({"t": _num(done, "temperature"), "c": cands, "v": value}).dropna()
    cols = sorted(frame["c"].unique())
    rows = []
    for t, at_t in frame.groupby("t"):
        cells = [at_t.loc[at_t["c"] == c, "v"] for c in cols]
        rows.append((_fmt(t), *(f"{v.mean():.3f} (n={len(v)})" if len(v) else "-" for v in cells)))
    return Table(("τ", *(f"C = {_fmt(c)}" for c in cols)), tuple(rows))


def representation_layer(df: pd.DataFrame, attrs: dict) -> str | Table:
    done = _finished(df)
    present = [p for p in PROBES if p in done.columns]
    arch = (
        f"h: {_listing(df, 'encoder')} encoder output, dim {_listing(df, 'feature_dim')}; "
        f"z: {_listing(df, 'projection')} projection head output, "
        f"dim {_listing(df, 'projection_dim')}. "
        "Mean probe top-1 over finished replicates, per point:"
    )
    if not present or done.empty:
        return f"{arch} {NOT_MEASURED}."
    key = "point_id" if "point_id" in done.columns else None
    groups = done.groupby(key, sort=True) if key else [("all", done)]
    rows = tuple(
        (
            _point_label(done, p, _factors(attrs)) if key else "all trials",
            str(len(g)),
            *(_fmt(round(float(_num(g, c).mean()), 4)) for c in present),
        )
        for p, g in groups
    )
    return Table(("point", "n", *present), rows, arch)


def transfer(df: pd.DataFrame, attrs: dict) -> str | Table:
    done = _finished(df)
    rows = [_transfer_row(done, p, attrs) for p in PROBES if p in done.columns]
    rows = [r for r in rows if r]
    if not rows:
        return f"{NOT_MEASURED}: no probe/* columns in the record."
    caption = (
        "Linear and kNN probes on held-out labels (few-shot and fine-tuned transfer: "
        f"{NOT_MEASURED}). Best point by mean over its replicates, beside the study's "
        "baselines scored by the same probes on the same split (the raw input answers a z "
        "probe with its h score):"
    )
    found = baselines_of(df)
    kinds = tuple(found)
    cols = ("probe", "best point", "mean ± sd over replicates", "all finished trials",
            *(baseline_name(k, found[k].get("of") or (), OWN) for k in kinds))  # fmt: skip
    if not kinds:
        caption += f" baselines {NOT_MEASURED} (baselines: [] or a study recorded before them)."
    if any(e.get("of") for e in found.values()):
        caption = caption[:-1] + (", each of the best point's own architecture, named in its "
                                  "cell:")  # fmt: skip
    rows = [(*row, *_baseline_cells(df, row[0], kinds, _best_point(done, row[0])))
            for row in rows]  # fmt: skip
    return Table(cols, tuple(rows), caption)


def _baseline_cells(
    df: pd.DataFrame, probe: str, kinds: tuple[str, ...], point: object = None
) -> tuple[str, ...]:
    """Each baseline's score on ``probe`` (as recorded, a fraction), or not measured; in a
    study of several architectures, ``point``'s own architecture's, named."""
    found = baselines_of(df, None if point is None else str(point))
    cells = []
    for kind in kinds:
        metrics = (found.get(kind) or {}).get("metrics") or {}
        name = counterpart(kind, probe, metrics)
        of = found.get(kind, {}).get("of")
        named = f" ({architecture_words(of)})" if of else ""
        cells.append(NOT_MEASURED if name is None else f"{float(metrics[name]):.3f}{named}")
    return tuple(cells)


def _best_point(done: pd.DataFrame, probe: str) -> object:
    """The point of the best mean of ``probe`` over its replicates; None without points."""
    value = _num(done, probe)
    if value is None or "point_id" not in done.columns:
        return None
    means = value.groupby(done["point_id"]).mean().dropna()
    return None if means.empty else means.idxmax()


def _transfer_row(done: pd.DataFrame, probe: str, attrs: dict) -> tuple[str, ...] | None:
    value = _num(done, probe)
    if value is None or value.dropna().empty:
        return None
    key = done["point_id"] if "point_id" in done.columns else pd.Series("all", index=done.index)
    means = value.groupby(key).mean().dropna()
    if means.empty:
        return None
    best = means.idxmax()
    label = _point_label(done, best, _factors(attrs)) if "point_id" in done.columns else "all"
    return (probe, label, _mean_sd(value[key == best]), _mean_sd(value))


def cost(df: pd.DataFrame, attrs: dict) -> str:
    wall = _num(df, "wall_s")
    total = f"{wall.sum():.1f} s" if wall is not None and wall.notna().any() else NOT_MEASURED
    mean = f"{wall.mean():.1f} s" if wall is not None and wall.notna().any() else NOT_MEASURED
    timed = 0 if wall is None else int(wall.notna().sum())
    hours = gpu_hours(df)
    gpu = (attrs.get("resources") or {}).get("gpu")
    if hours is None:
        gpu_text = f"GPU hours: {NOT_MEASURED} (attrs carry no per-trial resources)"
    elif not gpu:
        gpu_text = "GPU hours: 0 (CPU-only: resources gpu = 0)"
    else:
        workers = (attrs.get("resources") or {}).get("workers", 1)
        each = f"{_fmt(workers)} workers × {_fmt(gpu)}" if workers != 1 else _fmt(gpu)
        gpu_text = f"GPU hours: {hours:.3g} (Σ wall_s × {each} GPU / 3600)"
    steps = _by(df, "steps" if "steps" in df.columns else "derived.steps", "batch_size", "B")
    resources = attrs.get("resources") or {}
    per_trial = ", ".join(f"{k} {_fmt(v)}" for k, v in resources.items()) or "not recorded"
    if resources.get("workers", 1) != 1:
        per_trial += " (cpu and gpu per worker)"
    return (
        f"{_examples_check(df)} Steps per trial: {steps}. Wall time: total {total}, mean {mean} "
        f"per trial over {timed} trials with wall_s. {gpu_text}. Resources per trial: "
        f"{per_trial}; precision: {_listing(df, 'precision')}. "
        f"Embedding size: h {_listing(df, 'feature_dim')}, z {_listing(df, 'projection_dim')}; "
        f"deployment compression: {NOT_MEASURED}."
    )


def gpu_hours(df: pd.DataFrame) -> float | None:
    """Σ wall_s × workers × gpu / 3600 (``attrs["resources"]``: ``gpu`` per worker, ``workers``
    1 when absent), or None when the GPUs or the wall times are not recorded."""
    resources = df.attrs.get("resources") or {}
    gpu, workers = resources.get("gpu"), resources.get("workers", 1)
    wall = _num(df, "wall_s")
    if gpu is None or wall is None:
        return None
    return float(wall.fillna(0).sum()) * float(workers) * float(gpu) / 3600


def _examples_check(df: pd.DataFrame) -> str:
    seen = _num(df, "examples_seen")
    if seen is None:
        return f"Examples seen per trial: {NOT_MEASURED}."
    done = seen[_finished(df).index].dropna()
    others = len(seen) - len(done)
    rest = (
        f" ({others} unfinished trial(s) stopped at {_range(seen.drop(done.index))})"
        if others
        else ""
    )
    if done.empty:
        return f"Examples seen: no finished trial{rest}."
    if done.nunique() == 1:
        n, value = len(done), _fmt(done.iloc[0])
        return f"Compute-matched: all {n} finished trials saw {value} examples{rest}."
    return f"FLAG: finished trials saw unequal numbers of examples ({_range(done)}){rest}."
