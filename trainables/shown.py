"""Text from a study file or the record, shown as written and never obeyed.

A study file is shared like any other file, and its text (a description, a level, a metric's
name, a key) reaches every terminal that plans, runs or reports the study and every browser
that opens its MLflow record. Two ways of showing it, one for each place:

- :func:`shown`, for a terminal: C0 controls other than newline and tab, ESC, DEL, the C1
  controls and the bidirectional marks, embeddings, overrides and isolates are written as
  ``\\x1b`` or ``\\u202e``, so no escape sequence clears a screen, hides a link behind other
  text, sets the clipboard (OSC 52) or reorders the line a reader sees. Backslashes are kept as
  they are: ordinary text prints as before, and escaping twice changes nothing.
- :func:`in_markdown` and :func:`in_code`, for MLflow's Markdown (showdown, GitHub flavour,
  then an HTML sanitizer that lets ``<img>`` through): HTML is written as entities, Markdown's
  syntax characters are backslash-escaped, and what the renderer would turn into a link by
  itself (``http://…``, ``www.…``, ``@name``, an e-mail address) is broken by an entity, so a
  level reads as written and no element or link of a file renders.
"""

from __future__ import annotations

import re

_HIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(text: str) -> str:
    """``text`` with every character that would steer a terminal written as an escape
    (``\\x1b``, ``\\x9b``, ``\\u202e``); newlines, tabs and everything printable unchanged."""
    return _HIDDEN.sub(_escaped, text)


# showdown and CommonMark both read these backslash-escaped as the character itself; an
# underscore inside a word (knn_top1_h) is literal in both and stays as it is
_SYNTAX = r"[\\`*\[\]~|]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])"
# showdown's sanitizer keeps <img>, and it links bare addresses and @mentions by itself: an
# entity is shown as its character but is neither markup nor part of an address
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "@": "&#64;", ":": "&#58;", ".": "&#46;"}
_INLINE = re.compile(rf"{_SYNTAX}|[&<>@]|:(?=//)|(?i:(?<=\bwww)\.)")
# what opens a block at a line's start: a heading, a list, a setext underline, a numbered item;
# its indentation is dropped (four spaces would open a code block, which shows entities raw)
_LINE_START = re.compile(
    r"^[ \t]*(?:([#=]|[+-](?=[\s+=-]|$))|(\d+)([.)])(?=\s|$))?", re.MULTILINE
)  # a list marker only with the space after it: '0.1, 0.5' and '-5' stay as they are


def _inline(match: re.Match[str]) -> str:
    char = match.group()
    return _ENTITIES.get(char, "\\" + char)


def _line_start(match: re.Match[str]) -> str:
    if match.group(1):
        return "\\" + match.group(1)
    return f"{match.group(2)}\\{match.group(3)}" if match.group(2) else ""


def _markdown(text: str) -> str:
    return _LINE_START.sub(_line_start, _INLINE.sub(_inline, shown(text)))


def in_markdown(text: str, limit: int | None = None) -> str:
    """``text`` as Markdown that renders it as written (see the module); with ``limit``, cut
    so that the escaped text holds at most ``limit`` characters (never inside an escape)."""
    escaped = _markdown(text)
    keep = len(text)
    while limit is not None and len(escaped) > limit:
        keep -= max(1, (len(escaped) - limit) // 6)  # an escape is at most 6 characters
        escaped = _markdown(text[:keep])
    return escaped


def in_code(text: str) -> str:
    """``text`` as a Markdown code span (its own backticks included): fenced by more backticks
    than it holds in a row, so none of its own closes the span; on one line."""
    text = " ".join(shown(text).splitlines())
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


__all__ = ["in_code", "in_markdown", "shown"]
