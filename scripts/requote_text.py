"""The text side of scripts/requote.py: the pages' fenced blocks and the markers that tie them
to a quote (:func:`blocks`), and how a quote is compared with what its command printed now
(:func:`normalise`, :func:`numbers_agree`, :func:`difference`, :func:`elide`). Nothing here runs
a command; scripts/requote.py runs them and imports these by name."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("README.md", "docs/*.md")

# --- the markers and the blocks they tie -------------------------------------------------------

#: Fenced blocks with one of these info strings quote what a command printed.
OUTPUT_LANGUAGES = frozenset({"console", "text", "output", "terminal", "shell-session",
                              "sh-session"})  # fmt: skip
PROMPT = re.compile(r"^\s*\$ ")  # a shell prompt: a block of any language that has one quotes
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+|~~~+)\s*(?P<info>[^`\s]*)")
MARKER = re.compile(r"^\s*<!--\s*quote:\s*(?P<body>.*?)\s*-->\s*$")
NOT_A_QUOTE = re.compile(r"^\s*<!--\s*not a quote:\s*(?P<why>.*?)\s*-->\s*$")
QUOTE_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")
ELIDED = "…"  # a line of a quote that stands for lines left out (the registry says which)


@dataclass(frozen=True)
class Marker:
    """``<!-- quote: ID; machine: PREFIX, PREFIX -->``: the quote's registry id and the line
    prefixes of its machine-specific lines."""

    id: str
    machine: tuple[str, ...] = ()


def parse_marker(line: str) -> Marker | None:
    """The marker on ``line``, or None when the line is none.

    Raises:
        ValueError: a ``quote:`` comment that does not follow the syntax (said how).
    """
    found = MARKER.match(line)
    if found is None:
        return None
    parts = [p.strip() for p in found.group("body").split(";")]
    qid, options = parts[0], parts[1:]
    if not QUOTE_ID.match(qid):
        raise ValueError(f"{line.strip()!r}: a quote id is lower-case letters, digits and hyphens")
    machine: list[str] = []
    for option in options:
        key, _, value = option.partition(":")
        prefixes = [p.strip() for p in value.split(",") if p.strip()]
        if key.strip() != "machine" or not prefixes:
            raise ValueError(f"{line.strip()!r}: after the id, only 'machine: PREFIX, PREFIX'")
        machine += prefixes
    return Marker(qid, tuple(machine))


@dataclass(frozen=True)
class Block:
    """One fenced block of a page: its fence's line (1-based), info string and body, and what
    the line above it says (a marker, a reason it is not a quote, or nothing)."""

    page: str
    line: int
    language: str
    body: tuple[str, ...]
    start: int  # index of the fence line in the page's lines
    end: int  # index of the closing fence line
    marker: Marker | None
    not_a_quote: str | None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def quotes_output(self) -> bool:
        """Whether the block quotes what a command printed (see the module)."""
        return self.language in OUTPUT_LANGUAGES or any(PROMPT.match(x) for x in self.body)

    @property
    def text(self) -> str:
        return "\n".join(self.body)


def pages(root: Path = ROOT) -> list[Path]:
    found: list[Path] = []
    for pattern in PAGES:
        found += sorted(root.glob(pattern))
    return found


def blocks(page: Path, root: Path = ROOT) -> list[Block]:
    """Every fenced block of a markdown page, with the marker on the line right above it."""
    lines = page.read_text(encoding="utf-8").splitlines()
    name = str(page.relative_to(root)) if page.is_relative_to(root) else str(page)
    found, i = [], 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if opened is None:
            i += 1
            continue
        fence = opened.group("fence")
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        above = lines[i - 1] if i > 0 else ""
        why = NOT_A_QUOTE.match(above)
        found.append(Block(
            page=name, line=i + 1, language=opened.group("info").lower(),
            body=tuple(lines[i + 1:j]), start=i, end=j, marker=parse_marker(above),
            not_a_quote=why.group("why") if why else None,
        ))  # fmt: skip
        i = j + 1
    return found


def all_blocks(root: Path = ROOT) -> list[Block]:
    return [b for page in pages(root) for b in blocks(page, root)]


# --- normalising ---------------------------------------------------------------------------------

TIME = r"\d[\d,]*(?:\.\d+)?\s?(?:ms|s|sec|seconds?|min|minutes?|h|hours?)\b"
TIMES = (
    # "measured in 0.2 s", "elapsed 42 s", "ETA 96 s", "ETA —", "took 3.1 s", "about 9 min"
    (re.compile(rf"\b(in|elapsed|ETA|took|after|about) (?:{TIME}|—)"), r"\1 <time>"),
    # clock times: 2026-12-06T07:02:11+00:00, 2026-12-06 07:02:11, 07:02:11
    (re.compile(r"\b\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:?\d\d)?"),
     "<time>"),
    (re.compile(r"\b\d\d:\d\d:\d\d\b"), "<time>"),
)  # fmt: skip


def normalise(text: str, machine: tuple[str, ...] = ()) -> str:
    """``text`` as quotes are compared: trailing blanks and blank edges dropped, times replaced by
    ``<time>``, and each line that starts with one of ``machine`` cut to that prefix."""
    out = []
    for line in text.strip("\n").splitlines():
        line = line.rstrip()
        prefix = next((p for p in machine if line.startswith(p)), None)
        if prefix is not None:
            out.append(f"{prefix} <machine-specific>")
            continue
        for pattern, replacement in TIMES:
            line = pattern.sub(replacement, line)
        out.append(line)
    while out and not out[-1]:
        out.pop()
    while out and not out[0]:
        out.pop(0)
    return "\n".join(out)


# --- the arithmetic another machine may move ----------------------------------------------------
#
# A quote of a trained study (the walk-through's) is made by training on this machine's CPU; an
# x86-64 CPU of another make runs other kernels (MKL and oneDNN choose them by CPU), whose sums
# round differently, so the same seeds can train slightly different encoders. Such a quote is
# compared at the resolution the README promises (README.md, "5. Reading the result"); the rule,
# written once, is :func:`numbers_agree`:
#
# - every word, and so every verdict (found or not, raises or lowers, "cannot be told apart",
#   the next step), reads the same, and so do the whole numbers: counts of trials, examples,
#   held-out items, replicates, the items only one system got right, points, seeds, df;
# - an accuracy in percent (a number with a decimal point and "%": 96.9%, 94.7%) within
#   ACCURACY_POINTS of its quote (1 point: 3.6 of the walk-through's 360 held-out items);
# - a p-value (after "p = ") within a factor of P_FACTOR of its quote;
# - every other figure with a decimal point or an exponent (effects, their intervals, detectable
#   sizes, differences in points, R², mean squares, an --effect to run) and every whole percent
#   ("29% more") within RELATIVE of its own size, plus one unit of the quote's last printed digit.
#
# Quotes of commands that train nothing (plans, refusals, a recorded run's headline) are compared
# exactly.
ACCURACY_POINTS = 1.0
P_FACTOR = 3.0
RELATIVE = 0.35

# a number standing on its own (not the 0 of p000-r0 or the 1 of top1_h): a sign (hyphen or the
# minus sign the output prints), thousands separated by commas, decimals, an exponent, a percent
NUMBER = re.compile(r"(?<![\w.])[-−+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:e[-+]?\d+)?%?(?![\w])")
P_VALUES = re.compile(r"\bp = (?:[-−+]?[\d.e+-]+)(?:, [-−+]?[\d.e+-]+)*")  # p = 0.45, 1
RULE = re.compile(r"─+")  # a table's rule: its length follows its columns' widths


def skeleton(line: str) -> str:
    """The words of ``line``: every number replaced by ``#``, runs of blanks and of a table's
    rule by one (a wider number widens its column)."""
    line = RULE.sub("─", NUMBER.sub("#", line))
    return re.sub(r"\s+", " ", line)


def _value(text: str) -> float:
    return float(text.replace(",", "").replace("−", "-").rstrip("%"))


def _last_digit(text: str) -> float:
    """One unit of the last printed digit of a decimal (0.114: 0.001; 1.2: 0.1; 3.8e-06: 1e-07)."""
    mantissa, _, exponent = text.rstrip("%").partition("e")
    decimals = len(mantissa.partition(".")[2])
    return 10.0 ** (-decimals + (int(exponent) if exponent else 0))


def number_agrees(quoted: str, produced: str, is_p: bool) -> bool:
    """Whether one number another machine printed agrees with its quote (the rule above)."""
    if quoted == produced:
        return True
    a, b = _value(quoted), _value(produced)
    decimal = any("." in x or "e" in x for x in (quoted, produced))
    if is_p:
        return a > 0 and b > 0 and max(a / b, b / a) <= P_FACTOR
    if decimal and quoted.endswith("%") and produced.endswith("%"):
        return abs(a - b) <= ACCURACY_POINTS  # an accuracy
    if not decimal and not quoted.endswith("%"):
        return False  # a count
    return abs(a - b) <= RELATIVE * max(abs(a), abs(b)) + _last_digit(quoted)


def numbers_agree(quoted: str, produced: str) -> bool:
    """Whether a line another machine printed reads as its quote at the promised resolution:
    the same words (:func:`skeleton`), and each number agreeing (:func:`number_agrees`)."""
    if skeleton(quoted) != skeleton(produced):
        return False
    p_spans = [m.span() for m in P_VALUES.finditer(quoted)]
    pairs = zip(NUMBER.finditer(quoted), NUMBER.finditer(produced), strict=True)
    return all(
        number_agrees(q.group(), r.group(), any(lo <= q.start() < hi for lo, hi in p_spans))
        for q, r in pairs
    )


def within_resolution(quoted: str, produced: str) -> str:
    """``produced`` with each line that agrees with its quote's line (:func:`numbers_agree`)
    replaced by the quote's, so that only what moved beyond the promise is left to differ
    (lines are paired by position: a line more or less is a difference)."""
    a, b = quoted.splitlines(), produced.splitlines()
    if len(a) != len(b):
        return produced
    return "\n".join(q if numbers_agree(q, r) else r for q, r in zip(a, b, strict=True))


def difference(quoted: str, produced: str, machine: tuple[str, ...] = (),
               arithmetic: bool = False) -> str:  # fmt: skip
    """A unified diff of the two, normalised; empty when they agree. ``arithmetic``: the quote
    is of a trained study, and its numbers may move as :func:`numbers_agree` allows."""
    a, b = normalise(quoted, machine), normalise(produced, machine)
    if arithmetic:
        b = within_resolution(a, b)
    if a == b:
        return ""
    return "\n".join(difflib.unified_diff(a.splitlines(), b.splitlines(), "quoted", "produced",
                                          lineterm=""))  # fmt: skip


def elide(lines: list[str], keep: Callable[[int, str], bool]) -> list[str]:
    """``lines`` with every run of lines ``keep(index, line)`` refuses replaced by one
    :data:`ELIDED` line."""
    out: list[str] = []
    for i, line in enumerate(lines):
        if keep(i, line):
            out.append(line)
        elif not out or out[-1] != ELIDED:
            out.append(ELIDED)
    return out


def rows_elided(lines: list[str], row: re.Pattern, first: int, last: int) -> list[str]:
    """A table with only its ``first`` and ``last`` rows (lines matching ``row``) kept."""
    rows = [i for i, line in enumerate(lines) if row.match(line)]
    dropped = set(rows[first : len(rows) - last])
    return elide(lines, lambda i, _: i not in dropped)
