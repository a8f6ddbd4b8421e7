"""Tables that fit the terminal, as ``study plan`` and ``study status`` print them: a header
wraps between the pieces of its name instead of being cut, values keep their width as long as
the terminal allows, and every text is measured as it is shown
(:func:`trainables.shown.shown`). Nothing here reads a study; it only lays out rows.
"""

from __future__ import annotations

import re

from rich import box
from rich.table import Table

from trainables.shown import shown


def fitted_table(
    headers: list[str], rows: list[list[str]], width: int, title: str | None = None
) -> Table:
    """A table that fits ``width`` columns: a header wraps between the pieces of its name
    (:func:`wrapped_name`) instead of being cut with an ellipsis, and values keep their width
    as long as the terminal allows (headers give way first). Its texts are measured as they
    are shown (:func:`~trainables.shown.shown`)."""
    headers = [shown(h) for h in headers]
    rows = [[shown(value) for value in row] for row in rows]
    headers, rows = _without_empty_columns(headers, rows, width)
    natural = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(headers)]
    gap = 2 if sum(natural) + 2 * (len(headers) - 1) < width else 1  # air when there is room
    table = Table(
        title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False,
        padding=(0, gap - 1, 0, 0),
    )  # fmt: skip
    for header, fitted in zip(headers, column_widths(headers, rows, width, gap), strict=True):
        table.add_column(wrapped_name(header, fitted), overflow="fold", width=fitted)
    for row in rows:
        table.add_row(*row)
    return table


def _without_empty_columns(
    headers: list[str], rows: list[list[str]], width: int
) -> tuple[list[str], list[list[str]]]:
    """The columns, less those with no value in any row when keeping them would fold a header
    inside a word (``snapped`` when nothing was snapped): an empty column says nothing."""
    if sum(_floors(headers, rows)) + len(headers) - 1 < width:
        return headers, rows
    keep = [i for i in range(len(headers)) if any(row[i].strip() for row in rows)]
    return [headers[i] for i in keep], [[row[i] for i in keep] for row in rows]


def wrapped_name(name: str, width: int) -> str:
    """``name`` in lines of at most ``width`` characters, broken after a ``/``, ``_`` or space
    where it can be (probe/ | knn_top1_h, examples | seen), folded only inside a longer piece."""
    lines: list[str] = [""]
    for piece in _name_pieces(name):
        if lines[-1] and len(lines[-1]) + len(piece.rstrip()) > width:
            lines.append("")
        lines[-1] += piece
    return "\n".join(line.rstrip() for line in lines)


def _name_pieces(name: str) -> list[str]:
    """``name`` cut after each ``/``, ``_`` or space: where a header may break."""
    return [piece for piece in re.split(r"(?<=[/_ ])", name) if piece] or [name]


def _floors(headers: list[str], rows: list[list[str]]) -> list[int]:
    """The narrowest each column gets while values can give way: its longest value and its
    header's longest piece (a word is folded only when nothing else fits)."""
    return [max([1, *(len(piece.rstrip()) for piece in _name_pieces(h)),
                 *(len(row[i]) for row in rows)])
            for i, h in enumerate(headers)]  # fmt: skip


def column_widths(headers: list[str], rows: list[list[str]], width: int, gap: int = 1) -> list[int]:
    """Each column's width: its header's or its longest value's, narrowed one character at a
    time (the widest first) until the table fits ``width`` with a space between columns: down
    to :func:`_floors`, then further."""
    values = [max((len(row[i]) for row in rows), default=0) for i in range(len(headers))]
    widths = [max(len(h), v, 1) for h, v in zip(headers, values, strict=True)]
    floors = _floors(headers, rows)
    room = width - gap * (len(headers) - 1) - 1
    for limit in (floors, [1] * len(widths)):
        while sum(widths) > room:
            wide = [j for j in range(len(widths)) if widths[j] > limit[j]]
            if not wide:
                break
            widths[max(wide, key=lambda j: widths[j])] -= 1
    return widths
