"""A trial's evidence beyond its metrics, as the files its run holds under ``evidence/``: the
tables as CSV, the source-return panel as PNG, the per-item outcomes as one Parquet table."""

from __future__ import annotations

import base64
import csv
import json
from pathlib import Path
from typing import Any

EVIDENCE_ARTIFACTS = "evidence"
EVIDENCE_TABLES = ("per_class", "per_group", "shift", "source_return")
SOURCE_RETURN_PNG = "source_return.png"
# the per-item outcomes (evidence["outcomes"]) as one Parquet table, there:
# analysis.reading.outcomes.TRIAL_ARTIFACT (imported where written: it loads pandas)
OUTCOMES_KEY, OUTCOMES_FILE = "outcomes", "outcomes.parquet"


def evidence_files(evidence: dict[str, Any], folder: Path) -> list[Path]:
    """Write a trial's evidence into ``folder``: ``evidence.json`` (all of it but the panel
    and the outcomes), one CSV per table (``per_class``, ``per_group``, ``shift``,
    ``source_return``; empty ones skipped), ``source_return.png`` (the panel, when the data are
    images) and ``outcomes.parquet`` (every probe's label for each held-out item,
    :func:`analysis.reading.outcomes.write_outcomes`). Returns the files written; none for an empty
    evidence."""
    if not evidence:
        return []
    written = []
    png = evidence.get("source_return_png")
    outcomes = evidence.get(OUTCOMES_KEY)
    rest = {k: v for k, v in evidence.items() if k not in ("source_return_png", OUTCOMES_KEY)}
    (folder / "evidence.json").write_text(json.dumps(rest, indent=1))
    written.append(folder / "evidence.json")
    if outcomes:
        from analysis.reading.outcomes import write_outcome_json  # pandas: only to write them

        written.append(write_outcome_json(folder / OUTCOMES_FILE, outcomes))
    for name in EVIDENCE_TABLES:
        rows = evidence.get(name) or []
        if rows:
            columns = list(dict.fromkeys(c for row in rows for c in row))
            with open(folder / f"{name}.csv", "w", newline="") as out:
                writer = csv.DictWriter(out, columns)
                writer.writeheader()
                writer.writerows(rows)
            written.append(folder / f"{name}.csv")
    if png:
        (folder / SOURCE_RETURN_PNG).write_bytes(base64.b64decode(png))
        written.append(folder / SOURCE_RETURN_PNG)
    return written
