"""The first technical release gate: its twelve items (:data:`GATE_ITEMS`), each judged pass,
fail or not measured from the results frame with one line of evidence (:func:`release_gate`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import pandas as pd

from analysis.report.evidence.augmentation import AUGMENTATION_INFO, _components
from analysis.report.evidence.candidates import _candidates, _off_pool, _pools, candidate_table
from analysis.report.evidence.cells import (
    NOT_MEASURED,
    PROBES,
    _distinct,
    _finished,
    _fmt,
    _grouped,
    _listing,
    _num,
    _range,
)
from analysis.report.evidence.geometry import (
    CLASS_GEOMETRY,
    SPACES,
    _class_geometry,
    _no_information_flag,
)
from analysis.report.evidence.shift import HOLD_UP_DROP, invariance_claim, shift_drops, shift_probe
from trainables.objectives.registry import GROUPLESS_OBJECTIVES, ROWS

# how the verdict names a setting of an objective (trainables/objectives/registry.py)
SETTING_SYMBOLS = {"temperature": "τ"}
GateStatus = Literal["pass", "fail", "not measured"]
GATE_STATUSES: tuple[str, ...] = ("pass", "fail", "not measured")

GATE_ITEMS: tuple[str, ...] = (
    "The InfoNCE implementation matches a checked finite example.",
    "Effective candidate count is documented across devices.",
    "Temperature and similarity scale are reported together.",
    "Positive-pair transformations are classified by the information they preserve and destroy.",
    "False-negative risk is measured on at least a diagnostic subset.",
    "Hard-negative mining includes semantic-validity checks.",
    "Projection-head and encoder representations are evaluated separately.",
    "Alignment and uniformity are inspected conditionally, not only as global averages.",
    "Multi-positive data are not forced into one-positive supervision without justification.",
    "Cross-modal or temporal alignment error is measured where relevant.",
    "Batch sampling and distributed negative policies are part of the reproducibility record.",
    "The public invariance claim is no broader than the transformations actually validated.",
)


@dataclass(frozen=True)
class GateItem:
    number: int
    text: str
    status: GateStatus
    evidence: str

    def __post_init__(self) -> None:
        if self.status not in GATE_STATUSES:
            raise ValueError(f"status must be one of {GATE_STATUSES}, got {self.status!r}")


def release_gate(df: pd.DataFrame) -> tuple[GateItem, ...]:
    """The twelve release-gate items, each with a status and one line of evidence from the frame."""
    attrs = dict(df.attrs)
    return tuple(
        GateItem(n, text, *rule(df, attrs))
        for n, (text, rule) in enumerate(zip(GATE_ITEMS, _GATE_RULES, strict=True), start=1)
    )


Verdict = tuple[str, str]


def _gate_worked_example(df: pd.DataFrame, attrs: dict) -> Verdict:
    result = (attrs.get("checks") or {}).get("info_nce_worked_example")
    if result is None:
        return NOT_MEASURED, "attrs['checks'] has no info_nce_worked_example result"
    if str(result) == "pass":
        return "pass", "info_nce_worked_example self-check passed in the study's trials"
    return "fail", f"info_nce_worked_example: {result}"


def _gate_candidates(df: pd.DataFrame, attrs: dict) -> Verdict:
    cands = _candidates(df)
    if cands is None or df.empty:
        return NOT_MEASURED, "neither loss/candidates nor derived.negatives_per_anchor is recorded"
    known = int(cands.notna().sum())
    if known < len(df):
        return "fail", f"candidates per anchor recorded for only {known}/{len(df)} trials"
    frame = _pools(df)
    wrong = _off_pool(frame)
    if not wrong.empty:
        first = wrong.iloc[0]
        return "fail", (
            f"{len(wrong)} trial(s) recorded candidates per anchor other than their pool holds: "
            f"B={_fmt(first['b'])}, W={_fmt(first['w'])}, negatives {first['neg']}: recorded "
            f"{_fmt(first['c'])}, expected {_fmt(first['expected'])}"
        )
    per_pool = "; ".join(
        f"B={r[0]}: {r[3]}" if r[1] == "1" else f"B={r[0]}, W={r[1]}, negatives {r[2]}: {r[3]}"
        for r in candidate_table(df).rows
    )
    several = bool((frame["w"] > 1).any()) if not frame.empty else False
    where = (
        "measured across devices: each matches the pool its workers and negatives give"
        if several
        else "one worker per trial, local batch only, no cross-device gather"
    )
    return (
        "pass",
        f"candidates per anchor recorded for {known}/{len(df)} trials ({per_pool}; {where})",
    )


def _gate_temperature(df: pd.DataFrame, attrs: dict) -> Verdict:
    if "objective" not in df.columns or df.empty:
        return NOT_MEASURED, "objective not recorded"
    missing, scales = [], []
    for row in ROWS:  # each objective's settings (trainables/objectives/registry.py)
        trials = df["objective"] == row.name
        if not trials.any():
            continue
        for col in row.settings:
            v = _num(df, col)
            missing += [] if v is not None and v[trials].notna().all() else [col]
        named = (
            f"{SETTING_SYMBOLS.get(col, col)} = {_listing(df[trials], col)}" for col in row.settings
        )
        scales.append(", ".join(named))
    if missing:
        return "fail", f"{', '.join(missing)} missing for some trials"
    return "pass", "cosine similarity on unit z, with " + "; ".join(scales)


def _gate_classified(df: pd.DataFrame, attrs: dict) -> Verdict:
    if "augmentation" not in df.columns:
        return NOT_MEASURED, "augmentation not recorded"
    used = _components(df)
    unknown = [c for c in used if c not in AUGMENTATION_INFO]
    if unknown:
        return "fail", f"unclassified component(s): {', '.join(unknown)}"
    return (
        "pass",
        f"every component used ({', '.join(used) or 'none'}) has a preserve/destroy entry",
    )


def _gate_false_negatives(df: pd.DataFrame, attrs: dict) -> Verdict:
    done = _finished(df)
    fnr = _num(done, "sim/false_negative_rate")
    if fnr is None or done.empty:
        return NOT_MEASURED, "no finished trial with sim/false_negative_rate"
    if fnr.notna().all():
        return (
            "pass",
            f"held-out false-negative rate in all {len(done)} finished trials: {_range(fnr)}",
        )
    return "fail", f"sim/false_negative_rate missing in {int(fnr.isna().sum())} finished trial(s)"


def _gate_mining(df: pd.DataFrame, attrs: dict) -> Verdict:
    return NOT_MEASURED, "no hard-negative mining in this study"


def _gate_spaces(df: pd.DataFrame, attrs: dict) -> Verdict:
    done = _finished(df)
    have = {}
    for space in ("h", "z"):
        cols = [_num(done, p) for p in PROBES if p.endswith(f"_{space}") and p in done.columns]
        have[space] = bool(cols) and any(c.notna().all() for c in cols) and not done.empty
    if all(have.values()):
        return "pass", f"kNN/linear probes recorded on both h and z for {len(done)} finished trials"
    if not any(c in done.columns for c in PROBES) or done.empty:
        return NOT_MEASURED, "no probe results on finished trials"
    return "fail", f"probes missing for {', '.join(s for s, ok in have.items() if not ok)}"


def _gate_conditional(df: pd.DataFrame, attrs: dict) -> Verdict:
    """Pass: per-class alignment and uniformity (worst class and spread, h and z) recorded for
    every finished trial; fail: recorded for only some of them or some of those columns."""
    done = _finished(df)
    if done.empty or not _class_geometry(done):
        return NOT_MEASURED, "only global averages of alignment and uniformity are recorded"
    names = [f"{space}/{m}" for space in SPACES for m in CLASS_GEOMETRY]
    gaps = {name: int(value.isna().sum()) if (value := _num(done, name)) is not None
            else len(done) for name in names}  # fmt: skip
    if any(gaps.values()):
        missing = ", ".join(f"{name} in {n}" for name, n in gaps.items() if n)
        return "fail", (
            f"per-class geometry recorded for only some of the {len(done)} finished trials; "
            f"missing: {missing}"
        )
    values = []
    for space in SPACES:
        value = {m: _range(_num(done, f"{space}/{m}")) for m in CLASS_GEOMETRY}
        values.append(
            f"{space}: worst-class alignment {value['align_worst_class']} (spread "
            f"{value['align_class_spread']}), worst-class uniformity "
            f"{value['uniform_worst_class']} (spread {value['uniform_class_spread']})"
        )
    return "pass", (
        f"per-class alignment and uniformity recorded in h and z for all {len(done)} finished "
        f"trials ({'; '.join(values)}){_no_information_flag(done)}"
    )


def _gate_multi_positive(df: pd.DataFrame, attrs: dict) -> Verdict:
    grouped = _grouped(df)
    policy = df["group_policy"] if "group_policy" in df.columns else pd.Series(None, index=df.index)
    groupless = df["objective"].isin(GROUPLESS_OBJECTIVES) if "objective" in df.columns else False
    forced = grouped & ((policy == "negative") | groupless)
    if forced.any():
        return "fail", (
            f"{int(forced.sum())} trial(s) with grouped data (toy_photos_per_item > 1) treat group "
            f"mates as negatives (group_policy negative, or {' or '.join(GROUPLESS_OBJECTIVES)}, "
            "which ignores groups)"
        )
    if "toy_photos_per_item" not in df.columns:
        return NOT_MEASURED, "toy_photos_per_item not recorded"
    if "imagefolder" in _distinct(df, "dataset") and (policy == "negative").any():
        return (
            NOT_MEASURED,
            "imagefolder trials with group_policy negative; groups.csv use not recorded",
        )
    if grouped.any():
        return "pass", f"grouped trials use group_policy {_listing(df[grouped], 'group_policy')}"
    return (
        "pass",
        "no multi-positive data: one photo per source in every trial "
        "(toy_photos_per_item = 1 or non-toy data)",
    )


def _gate_cross_modal(df: pd.DataFrame, attrs: dict) -> Verdict:
    return (
        NOT_MEASURED,
        "no cross-modal or temporal pairs: positives are two augmented views of one source",
    )


def _gate_reproducibility(df: pd.DataFrame, attrs: dict) -> Verdict:
    cols = ("batch_size", "group_policy", "seed", "data_seed")
    absent = [c for c in cols if c not in df.columns]
    if absent or df.empty:
        return NOT_MEASURED, f"not recorded: {', '.join(absent) or 'no trials'}"
    gaps = [c for c in cols if df[c].isna().any()]
    if gaps:
        return "fail", f"missing for some trials: {', '.join(gaps)}"
    return "pass", (
        f"batch_size, group_policy, seed and data_seed recorded for {len(df)}/{len(df)} trials; "
        "negatives from the local batch only (no distributed gather recorded)"
    )


def _gate_invariance_claim(df: pd.DataFrame, attrs: dict) -> Verdict:
    validated = (
        ", ".join(
            f"{a} at s = {_listing(g, 'aug_strength')}" for a, g in df.groupby("augmentation")
        )
        if "augmentation" in df.columns
        else "not recorded"
    )
    probe = shift_probe(df)
    rows = shift_drops(df, probe)
    if not any(r.measured for r in rows):
        return (
            NOT_MEASURED,
            f"no shift tests on finished trials; trained with: {validated or 'none'}",
        )
    if "augmentation" not in df.columns:
        return NOT_MEASURED, "augmentation not recorded: no training coverage to judge against"
    incomplete = [f"{r.family} ({r.augmentation}: {r.measured}/{r.trials} trials)"
                  for r in rows if r.measured < r.trials]  # fmt: skip
    broke = [f"{r.family} ({r.augmentation}: {_fmt(round(r.worst_point_drop, 4))})"
             for r in rows if r.covered and r.verdict == "breaks"]  # fmt: skip
    rule = (
        f"{probe} drop (clean - corrupted, mean over severities) at the worst design point; "
        f"held up at most {_fmt(HOLD_UP_DROP)}"
    )
    claims = " | ".join(invariance_claim(rows).values())
    reasons = []
    if broke:
        reasons.append(
            "a corruption the training augmentation covers breaks, so the invariance that "
            f"augmentation implies is not validated: {', '.join(broke)}"
        )
    if incomplete:
        reasons.append(f"shift tests missing in some finished trials: {', '.join(incomplete)}")
    if reasons:
        return "fail", f"{'; '.join(reasons)}. {rule}. {claims}"
    return "pass", f"every family measured in every finished trial; {rule}. {claims}"


_GATE_RULES: tuple[Callable[[pd.DataFrame, dict], Verdict], ...] = (
    _gate_worked_example, _gate_candidates, _gate_temperature, _gate_classified,
    _gate_false_negatives, _gate_mining, _gate_spaces, _gate_conditional, _gate_multi_positive,
    _gate_cross_modal, _gate_reproducibility, _gate_invariance_claim,
)  # fmt: skip
