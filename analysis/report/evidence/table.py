"""The small table of formatted cells an evidence-card section may be instead of text."""

from __future__ import annotations

from dataclasses import dataclass

from analysis.report.evidence.cells import _cell


@dataclass(frozen=True)
class Table:
    """A small table of formatted cells, with an optional caption printed above it."""

    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    caption: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "columns", tuple(map(str, self.columns)))
        object.__setattr__(self, "rows", tuple(tuple(map(str, r)) for r in self.rows))

    def to_markdown(self) -> str:
        if not self.rows:
            return self.caption or "(no rows)"
        lines = [self.caption, ""] if self.caption else []
        lines.append("| " + " | ".join(map(_cell, self.columns)) + " |")
        lines.append("|" + "---|" * len(self.columns))
        lines += ["| " + " | ".join(map(_cell, row)) + " |" for row in self.rows]
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {
            "caption": self.caption,
            "columns": list(self.columns),
            "rows": list(map(list, self.rows)),
        }
