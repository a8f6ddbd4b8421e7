"""Source return: the card's section filled from the per-trial example artifacts the study
passes (held-out anchors with their positive and hardest negatives), not from the frame."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from analysis.report.evidence.cells import NOT_MEASURED, _mean_range
from analysis.report.evidence.table import Table

# The rows of one trial's source-return artifact (8 held-out anchors, each with its positive and
# its three hardest negatives, role positive | negative_1 | negative_2 | negative_3).
SOURCE_RETURN_COLUMNS = ("anchor", "anchor_label", "role", "index", "label", "similarity",
                         "false_negative")  # fmt: skip


def source_return_section(examples: Mapping[str, pd.DataFrame | None] | None) -> str | Table:
    """The Source return section from the examples the study passed (see
    :func:`analysis.report.evidence.card.evidence_card`): per labelled point, its anchors' positive
    and hardest-negative similarities and how many of the hardest negatives are false negatives (the
    anchor's own class)."""
    if not examples:
        return (
            f"{NOT_MEASURED}: the record holds no example pairs showing why positives and "
            "negatives were judged valid."
        )
    columns = ("point", "anchors", "positive similarity", "hardest negative similarity",
               "anchors with a negative at least as similar as the positive",
               "false negatives among the 3 hardest", "anchors whose hardest negative is a "
               "false negative")  # fmt: skip
    rows = tuple(source_return_row(label, table) for label, table in examples.items())
    caption = (
        "Held-out anchors, each with its positive (the other view of the same source) and its "
        "three most similar negatives; their panels are in report.html (Source return). A false "
        "negative is a negative of the anchor's own class: the loss pushes it away although the "
        "receiver wants it close. Similarities: mean (range) over the "
        "anchors. Labels are diagnostic only; the loss never sees them."
    )
    return Table(columns, rows, caption)


def source_return_row(label: str, table: pd.DataFrame | None) -> tuple[str, ...]:
    """One row of the Source return table: ``label`` and its artifact table's numbers, or why
    there are none (only the panel was passed; the table lacks columns; it has no rows)."""
    blank = ("n/a",) * 5
    if table is None:
        return (label, "panel only (table not passed)", *blank)
    missing = [c for c in ("anchor", "role", "similarity", "false_negative") if c not in table]
    if missing:
        return (label, f"unreadable: no {', '.join(missing)} column", *blank)
    rows = table.assign(
        similarity=pd.to_numeric(table["similarity"], errors="coerce"),
        false_negative=table["false_negative"].map(_truthy),
        negative=table["role"].astype(str).str.startswith("negative"),
    )
    positive = rows[rows["role"].astype(str) == "positive"].groupby("anchor")["similarity"].max()
    negatives = rows[rows["negative"]].dropna(subset=["similarity"])
    if negatives.empty or positive.empty:
        return (label, f"{rows['anchor'].nunique()} (no positive or negative rows)", *blank)
    hardest = negatives.loc[negatives.groupby("anchor")["similarity"].idxmax()].set_index("anchor")
    above = (hardest["similarity"] >= positive.reindex(hardest.index)).sum()
    return (
        label,
        str(rows["anchor"].nunique()),
        _mean_range(positive),
        _mean_range(hardest["similarity"]),
        f"{int(above)}/{len(hardest)}",
        f"{int(negatives['false_negative'].sum())}/{len(negatives)}",
        f"{int(hardest['false_negative'].sum())}/{len(hardest)}",
    )


def _truthy(value: object) -> bool:
    return str(value).strip().lower() in ("true", "1", "1.0", "yes")
