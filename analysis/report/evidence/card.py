"""The contrastive representation evidence card (fourteen sections, from the receiver's job to
source return) and the first technical release gate (twelve items), filled only from what a study's
record shows: the results frame of :mod:`analysis.reading.load` (one row per trial) and its
``attrs``.

    card = evidence_card(read_results("studies/default-digits/results.parquet"))
    print(card.to_markdown())

Anything the record does not carry is reported as "not measured", never guessed: a missing
column, a trial without metrics (failed, killed) or a study of one trial never raises.
Summaries of metrics use finished trials only; cost counts every trial.

Source return is the one section the frame cannot fill: its examples are per-trial artifacts
(held-out anchors with their positive and hardest negatives). The study side passes the ones it
has as ``evidence_card(df, source_return={label: table})`` (see :func:`evidence_card`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from types import MappingProxyType

import pandas as pd

from analysis.report.evidence.augmentation import augmentations
from analysis.report.evidence.candidates import effective_candidates
from analysis.report.evidence.cells import _factors, _first
from analysis.report.evidence.gate import GateItem, release_gate
from analysis.report.evidence.geometry import geometry
from analysis.report.evidence.sections import (
    cost,
    negative_relation,
    positive_relation,
    receiver_job,
    representation_layer,
    similarity,
    temperature,
    transfer,
)
from analysis.report.evidence.shift import shift_tests
from analysis.report.evidence.source_return import source_return_section
from analysis.report.evidence.subgroups import subgroups
from analysis.report.evidence.table import Table

SECTION_TITLES: tuple[str, ...] = (
    "Receiver job", "Positive relation", "Negative relation", "Augmentations", "Similarity",
    "Temperature", "Effective candidates", "Representation layer", "Geometry", "Transfer",
    "Shift tests", "Subgroups", "Cost", "Source return",
)  # fmt: skip


Section = str | Table


@dataclass(frozen=True)
class EvidenceCard:
    """Sections in :data:`SECTION_TITLES` order (title -> markdown text or a
    :class:`analysis.report.evidence.table.Table`) and the release gate."""

    study: str
    n_trials: int
    sections: Mapping[str, Section]
    gate: tuple[GateItem, ...]
    summary: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "sections", MappingProxyType(dict(self.sections)))
        object.__setattr__(self, "gate", tuple(self.gate))

    def to_markdown(self) -> str:
        parts = [f"# Evidence card: {self.study or '(unnamed study)'}", self.summary]
        for title, body in self.sections.items():
            parts.append(
                f"## {title}\n\n" + (body if isinstance(body, str) else body.to_markdown())
            )
        gate = Table(
            ("#", "item", "status", "evidence"),
            tuple((str(g.number), g.text, g.status, g.evidence) for g in self.gate),
        )
        parts.append("## Release gate\n\n" + gate.to_markdown())
        return "\n\n".join(p for p in parts if p) + "\n"

    def to_json(self) -> dict:
        sections = {t: b if isinstance(b, str) else b.to_json() for t, b in self.sections.items()}
        return {
            "study": self.study,
            "n_trials": self.n_trials,
            "summary": self.summary,
            "sections": sections,
            "gate": [asdict(g) for g in self.gate],
        }


def evidence_card(
    df: pd.DataFrame, source_return: Mapping[str, pd.DataFrame | None] | None = None
) -> EvidenceCard:
    """The evidence card and release gate of one study's results frame (see
    :mod:`analysis.reading.load`).

    ``source_return`` holds the source-return examples the study has, which the frame cannot
    carry: a label naming the point (e.g. "best point p002 (τ=0.5, B=64)") -> that trial's artifact
    table, with the columns of :data:`analysis.report.evidence.source_return.SOURCE_RETURN_COLUMNS`
    (one row per anchor and role), or None when only its panel is at hand (the report shows it; the
    card says so and
    gives no numbers). None or empty: the section says "not measured"."""
    attrs = dict(df.attrs)
    builders = dict(zip(SECTION_TITLES, _SECTION_BUILDERS, strict=True))
    sections = {title: build(df, attrs) for title, build in builders.items()}
    sections["Source return"] = source_return_section(source_return)
    return EvidenceCard(
        study=str(attrs.get("study") or _first(df, "study") or ""),
        n_trials=len(df),
        sections=sections,
        gate=release_gate(df),
        summary=_summary(df, attrs),
    )


def _summary(df: pd.DataFrame, attrs: dict) -> str:
    counts = df["status"].value_counts().to_dict() if "status" in df.columns else {}
    status = ", ".join(f"{v} {k}" for k, v in counts.items()) or "status not recorded"
    factors = ", ".join(_factors(attrs)) or "none recorded"
    design = attrs.get("design") or "not recorded"
    return (
        f"{len(df)} trials ({status}); factors: {factors}; design: {design}; "
        f"spec_sha: {attrs.get('spec_sha') or 'not recorded'}. Settings and numbers below are "
        "read from the results frame and its attrs (protocol descriptions from the project's "
        "code); metric summaries use finished trials only."
    )


_SECTION_BUILDERS = (
    receiver_job, positive_relation, negative_relation, augmentations, similarity, temperature,
    effective_candidates, representation_layer, geometry, transfer, shift_tests, subgroups, cost,
    lambda df, attrs: source_return_section(None),  # filled by evidence_card(source_return=...)
)  # fmt: skip
