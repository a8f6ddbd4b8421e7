"""Effective candidates: the negatives per anchor each trial recorded, against the pool its
batch size, workers and negatives policy give, and the card's Effective candidates section."""

from __future__ import annotations

import pandas as pd

from analysis.report.evidence.cells import NOT_MEASURED, _fmt, _listing, _num, _range
from analysis.report.evidence.table import Table
from trainables.objectives.registry import ROWS

# Columns that would record a queue or memory-bank candidate pool, were one used (a
# cross-device gather is recorded by the trial fields workers and negatives).
POOL_COLUMNS = ("queue_size", "memory_bank")


def _candidates(df: pd.DataFrame) -> pd.Series | None:
    """Negatives per anchor, per trial: ``loss/candidates``, else 2B - 2 as derived."""
    logged, derived = _num(df, "loss/candidates"), _num(df, "derived.negatives_per_anchor")
    if logged is None:
        return derived
    return logged if derived is None else logged.fillna(derived)


def _pools(df: pd.DataFrame) -> pd.DataFrame:
    """Per trial: batch size B, workers W (1 when not recorded), negatives (all | local), the
    candidates per anchor recorded, and those expected: 2B - 2 with every worker's views
    gathered (or one worker), 2(B / W) - 2 with each worker's own batch only."""
    if "batch_size" not in df.columns:
        return pd.DataFrame(columns=["b", "w", "neg", "c", "expected"])
    workers = _num(df, "workers")
    frame = pd.DataFrame({
        "b": _num(df, "batch_size"),
        "w": workers.fillna(1) if workers is not None else 1.0,
        "neg": df["negatives"].fillna("all") if "negatives" in df.columns else "all",
        "c": _candidates(df),
        # mask and positive take same-group candidates out of the pool: then the pool is a bound
        "masked": (df["group_policy"].fillna("negative") != "negative")
                  if "group_policy" in df.columns else False,
    }).dropna(subset=["b"])  # fmt: skip
    pooled = (frame["neg"] == "all") | (frame["w"] == 1)
    frame["expected"] = 2 * frame["b"].where(pooled, frame["b"] // frame["w"]) - 2
    return frame


def _off_pool(frame: pd.DataFrame) -> pd.DataFrame:
    """Trials whose recorded candidates disagree with their pool: other than 2B - 2 (or
    2(B / W) - 2) without a group policy; above it, or none at all, with one (mask, positive)."""
    recorded = frame["c"].notna()
    exact = ~frame["masked"] & (frame["c"] != frame["expected"])
    bounded = frame["masked"] & ((frame["c"] > frame["expected"]) | (frame["c"] <= 0))
    return frame[recorded & (exact | bounded)]


def candidate_table(df: pd.DataFrame) -> Table:
    """(batch size B, workers W, negatives) -> candidates per anchor as recorded
    (``loss/candidates``, else derived) and as expected, with trial counts."""
    columns = ("batch size B", "workers W", "negatives",
               "candidates per anchor (loss/candidates)", "expected", "trials")  # fmt: skip
    frame = _pools(df)
    if _candidates(df) is None or frame.empty:
        return Table(columns, ())
    rows = tuple(
        (
            _fmt(b),
            _fmt(w),
            str(neg),
            _range(g["c"]),
            ("≤ " if g["masked"].any() else "") + _fmt(g["expected"].iloc[0]),
            str(len(g)),
        )
        for (b, w, neg), g in frame.groupby(["b", "w", "neg"])
    )
    return Table(columns, rows)


def _pool_scope(df: pd.DataFrame) -> str:
    """Where each anchor's candidates come from, in words."""
    frame = _pools(df)
    several = frame[frame["w"] > 1] if not frame.empty else frame
    if several.empty:
        return ("One worker per trial: each anchor's candidates are the other 2B - 2 views of "
                "its own batch (no cross-device gather).")  # fmt: skip
    parts = []
    for (w, neg), _ in several.groupby(["w", "neg"]):
        parts.append(
            f"W = {_fmt(w)} workers, negatives {neg}: "
            + ("every worker's views gathered with their gradients, so the other 2B - 2 views "
               "of the global batch B" if neg == "all" else
               "each worker's own B / W sources only, so the other 2(B / W) - 2 views")
        )  # fmt: skip
    return "Measured across devices. " + "; ".join(parts) + "."


def effective_candidates(df: pd.DataFrame, attrs: dict) -> str | Table:
    table = candidate_table(df)
    pools = [c for c in POOL_COLUMNS if c in df.columns]
    scope = _pool_scope(df) + (
        " Candidate pool as recorded: " + "; ".join(f"{c} = {_listing(df, c)}" for c in pools)
        if pools
        else " No queue or memory bank is recorded."
    )
    recorded = set(df["objective"].dropna()) if "objective" in df.columns else set()
    for row in ROWS:  # what an objective's denominator holds, where it is not the 2B - 2 shown
        if row.candidates_note and row.name in recorded:
            scope += " " + row.candidates_note
    if not table.rows:
        return f"{scope} Candidates per anchor: {NOT_MEASURED}."
    return Table(table.columns, table.rows, scope)
