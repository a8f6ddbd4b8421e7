"""Shift tests: the probe's top-1 drop under each corruption family per training augmentation
(:class:`FamilyShift`, :func:`shift_drops`), the invariance claim they support
(:func:`invariance_claim`), and the card's Shift tests section."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import pandas as pd

from analysis.report.evidence.cells import (
    DEFAULT_TARGET,
    NOT_MEASURED,
    PROBES,
    _factors,
    _finished,
    _fmt,
    _num,
    _point_label,
    _range,
    _target,
)
from analysis.report.evidence.table import Table
from trainables.corruption_families import COVERED_BY, covered

# A shift-test family "holds up" at a design point when the point's top-1 under corruption,
# averaged over the severities (and over the point's finished replicates), is at most this much
# below its clean top-1 (absolute, 0.05 = 5 percentage points).
HOLD_UP_DROP = 0.05

_SHIFT_COLUMN = re.compile(
    r"shift/(?P<family>[^/]+)/(?:s(?P<severity>\d+)/)?(?P<leaf>(?:knn|linear)_top1_[hz])"
)
_PROBE_COLUMN = re.compile(r"probe/(?:knn|linear)_top1_[hz]")


@dataclass(frozen=True)
class FamilyShift:
    """One corruption family of the shift tests, over the finished trials trained with one
    augmentation: the probe's top-1 drop (its clean value in the frame minus its value under
    the corruption) per severity and averaged over severities, as means over the trials, and
    at the design point where it is largest (mean over the point's replicates).

    ``covered_by``: the augmentation components whose training covers the family
    (``trainables.corruption_families.COVERED_BY``; None for a family it does not name);
    ``covered``: whether this augmentation has one (None when the family or the augmentation
    is unknown);
    ``measured`` of ``trials``: the finished trials with both a clean and a corrupted top-1."""

    augmentation: str
    family: str
    covered_by: tuple[str, ...] | None
    covered: bool | None
    measured: int
    trials: int
    drop_by_severity: tuple[tuple[int, float], ...]
    drop: float
    worst_point: str | None
    worst_point_drop: float

    @property
    def verdict(self) -> str:
        """ "held up" (the worst point's mean drop is at most :data:`HOLD_UP_DROP`), "breaks",
        or "not tested" (no trial measured)."""
        if not self.measured:
            return "not tested"
        return "held up" if self.worst_point_drop <= HOLD_UP_DROP else "breaks"


def shift_probe(df: pd.DataFrame) -> str:
    """The probe the shift tests are judged by: the study's target when it is a probe top-1 with
    shift columns, else ``probe/knn_top1_h``."""
    target = _target(dict(df.attrs))
    if _PROBE_COLUMN.fullmatch(target) and _shift_columns(df, target):
        return target
    return DEFAULT_TARGET


def _shift_columns(df: pd.DataFrame, probe: str) -> dict[str, tuple[str | None, dict[int, str]]]:
    """family -> (its mean-over-severities column or None, severity -> column) for ``probe``."""
    leaf = probe.removeprefix("probe/")
    found: dict[str, tuple[str | None, dict[int, str]]] = {}
    for col in df.columns:
        match = _SHIFT_COLUMN.fullmatch(str(col))
        if match is None or match["leaf"] != leaf:
            continue
        mean, severities = found.get(match["family"], (None, {}))
        if match["severity"] is None:
            mean = str(col)
        else:
            severities = {**severities, int(match["severity"]): str(col)}
        found[match["family"]] = (mean, severities)
    return found


def _family_order() -> dict[str, int]:
    return {family: i for i, family in enumerate(COVERED_BY)}


def _coverage(augmentation: str | None, family: str) -> tuple[tuple[str, ...] | None, bool | None]:
    if family not in COVERED_BY:
        return None, None
    by = tuple(COVERED_BY[family])
    return by, None if augmentation is None else bool(covered(augmentation, family))


def shift_drops(df: pd.DataFrame, probe: str = DEFAULT_TARGET) -> tuple[FamilyShift, ...]:
    """Every (training augmentation, corruption family) of the finished trials, in that order
    (families in ``trainables.corruption_families.COVERED_BY`` order): see
    :class:`FamilyShift`. A family counts for an augmentation's trials when some finished
    trial on the same dataset measured it. Empty when the frame has no shift column for
    ``probe`` or no ``probe`` itself."""
    columns = _shift_columns(df, probe)
    done = _finished(df)
    clean = _num(done, probe)
    if not columns or clean is None or done.empty:
        return ()
    drops = {}
    for family, (mean, severities) in columns.items():
        by_severity = {k: clean - _num(done, c) for k, c in sorted(severities.items())}
        if mean is not None:
            overall = clean - _num(done, mean)
        else:
            overall = pd.concat(by_severity.values(), axis=1).mean(axis=1, skipna=False)
        drops[family] = (overall, by_severity)
    augmentation = (
        done["augmentation"].astype("string").fillna("not recorded")
        if "augmentation" in done.columns
        else pd.Series("not recorded", index=done.index)
    )
    dataset = done["dataset"] if "dataset" in done.columns else pd.Series("", index=done.index)
    point = done["point_id"].astype(str) if "point_id" in done.columns else done.index.astype(str)
    order = _family_order()
    families = sorted(drops, key=lambda f: (order.get(f, len(order)), f))
    rows = []
    for aug in sorted(augmentation.unique()):
        mine = augmentation == aug
        same_data = dataset.isin(dataset[mine].unique())
        for family in families:
            overall, by_severity = drops[family]
            if not overall[same_data].notna().any():
                continue  # a family of another dataset (image corruptions vs toy vectors)
            drop = overall[mine].dropna()
            per_point = drop.groupby(point[drop.index]).mean()
            by, covers = _coverage(None if aug == "not recorded" else str(aug), family)
            rows.append(
                FamilyShift(
                    augmentation=str(aug),
                    family=family,
                    covered_by=by,
                    covered=covers,
                    measured=len(drop),
                    trials=int(mine.sum()),
                    drop_by_severity=tuple(
                        (k, float(v[mine].mean())) for k, v in by_severity.items()
                    ),
                    drop=float(drop.mean()) if len(drop) else math.nan,
                    worst_point=str(per_point.idxmax()) if len(per_point) else None,
                    worst_point_drop=float(per_point.max()) if len(per_point) else math.nan,
                )
            )
    return tuple(rows)


def _covered_cell(row: FamilyShift) -> str:
    if row.covered_by is None:
        return "unknown (family not in trainables.corruption_families.COVERED_BY)"
    names = " or ".join(row.covered_by)
    by = f"covered by {names}" if names else "no augmentation covers it"
    if row.covered is None:
        return f"unknown (augmentation not recorded; {by})"
    return f"yes ({names})" if row.covered else f"no ({by})"


def _family_list(rows: list[FamilyShift]) -> str:
    return ", ".join(f"{r.family} {_fmt(round(r.worst_point_drop, 4))}" for r in rows) or "none"


def invariance_claim(rows: tuple[FamilyShift, ...]) -> dict[str, str]:
    """Per training augmentation, the invariance claim the shift tests support, in words: the
    families its training covers that held up (:data:`HOLD_UP_DROP`), then the covered ones that
    broke, the uncovered ones (held up: robustness observed, not claimed) and the untested."""
    claims = {}
    for aug in dict.fromkeys(r.augmentation for r in rows):
        mine = [r for r in rows if r.augmentation == aug]
        tested = [r for r in mine if r.measured]
        claimed = [r.family for r in tested if r.covered and r.verdict == "held up"]
        broke = [r for r in tested if r.covered and r.verdict == "breaks"]
        free = [r for r in tested if not r.covered and r.verdict == "held up"]
        lost = [r for r in tested if not r.covered and r.verdict == "breaks"]
        untested = [r.family for r in mine if r.measured < r.trials]
        claims[aug] = (
            f"{aug}: claimed invariance to {', '.join(claimed) or 'no tested corruption'}"
            f"; covered by training but breaks: {_family_list(broke)}"
            f"; not covered, held up (robustness observed, not claimed): {_family_list(free)}"
            f"; not covered, breaks: {_family_list(lost)}"
            + (f"; missing in some finished trials: {', '.join(untested)}" if untested else "")
        )
    return claims


def shift_tests(df: pd.DataFrame, attrs: dict) -> str | Table:
    probe = shift_probe(df)
    rows = shift_drops(df, probe)
    if not any(r.measured for r in rows):
        return f"{NOT_MEASURED}: the record names no shifted domain or corruption family."
    severities = sorted({k for r in rows for k, _ in r.drop_by_severity})
    done = _finished(df)
    table_rows = []
    for r in rows:
        by = dict(r.drop_by_severity)
        worst = (
            f"{_point_label(done, r.worst_point, _factors(attrs))}: "
            f"{_fmt(round(r.worst_point_drop, 4))}"
            if r.worst_point is not None and "point_id" in done.columns
            else _fmt(round(r.worst_point_drop, 4))
        )
        table_rows.append((
            r.augmentation, r.family, _covered_cell(r),
            *(_fmt(round(by[k], 4)) if k in by else "-" for k in severities),
            _fmt(round(r.drop, 4)), worst, f"{r.measured}/{r.trials}", r.verdict,
        ))  # fmt: skip
    claims = " ".join(f"{c}." for c in invariance_claim(rows).values())
    others = [
        f"{col}: {_range(_num(done, col))} (clean {_range(_num(done, p))})"
        for p in PROBES
        if (col := f"shift/mean_{p.removeprefix('probe/')}") in done.columns
    ]
    caption = (
        f"Corruption families on the held-out split, judged by {probe}: drop = clean top-1 minus "
        "top-1 under the corruption, mean over finished trials at each severity and over the "
        f"severities. A family holds up when its mean drop over severities is at most "
        f"{_fmt(HOLD_UP_DROP)} at every design point (mean over the point's replicates; the "
        "worst point is shown); it is covered when a component of the trials' training "
        "augmentation trains for it (trainables.corruption_families.COVERED_BY). Seen and unseen "
        "corruptions are kept apart: only covered families that held up are claimed as "
        f"learned invariances. {claims}"
        + (f" Mean over families and severities (shift/mean_*): {'; '.join(others)}." if others
           else "")
        + f" Named domain shifts (other datasets, sensors, styles): {NOT_MEASURED}."
    )  # fmt: skip
    columns = ("training augmentation", "family", "covered by training",
               *(f"drop s{k}" for k in severities), "mean drop", "worst point: mean drop",
               "trials", "verdict")  # fmt: skip
    return Table(columns, tuple(table_rows), caption)
