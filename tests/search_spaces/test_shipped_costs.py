"""Every shipped study file says what it costs where a user looks first: its header.

The header holds one ``# Cost:`` statement (it may run on over the following comment lines, up
to a bare ``#`` or the first line that is not a comment), in one of two forms:

- measured: ``# Cost: <time> of wall time on this project's 2-core machine, <N> trials at a
  time (measured YYYY-MM-DD…)``;
- estimated (a study that was not run here, or does not fit this machine): ``# Cost: about
  <amount> … (estimated …; basis: …)``, the estimate's basis named.

The statement is a comment, so it never changes the study's fingerprint: each file's ``sha`` is
the one a parse of the same file with its comment lines removed gives.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from search_spaces.spec import load_spec, parse_spec
from trainables.text import load_yaml

SHIPPED = sorted((Path(__file__).parents[2] / "search_spaces").glob("*.yaml"))

MEASURED = re.compile(
    r"^\d[\d,.]*\s(?:s|min|h)\b.*? of wall time on this project's 2-core machine, "
    r"(?P<n>\d+) trials? at a time \(measured (?P<date>\d{4}-\d{2}-\d{2})\b",
    re.DOTALL,
)
ESTIMATED = re.compile(
    r"^about \d[\d,.]*\s?(?:s|min|h|GPU-hours)\b.*?\(estimated\b.*?\bbasis: \S", re.DOTALL
)


def header(text: str) -> list[str]:
    """The file's leading comment lines (blank lines among them kept out)."""
    lines = []
    for line in text.splitlines():
        if line.startswith("#"):
            lines.append(line)
        elif line.strip():
            break
    return lines


def cost_statement(text: str) -> str | None:
    """The header's ``# Cost:`` statement, its continuation lines joined, or None."""
    lines = header(text)
    starts = [i for i, line in enumerate(lines) if line.startswith("# Cost:")]
    if len(starts) != 1:
        return None
    parts = [lines[starts[0]].removeprefix("# Cost:").strip()]
    for line in lines[starts[0] + 1 :]:
        body = line.removeprefix("#").strip()
        if not body:
            break
        parts.append(body)
    return " ".join(parts)


def states_a_cost(text: str) -> bool:
    statement = cost_statement(text)
    return statement is not None and bool(MEASURED.match(statement) or ESTIMATED.match(statement))


def test_there_are_shipped_study_files():
    assert len(SHIPPED) >= 8, SHIPPED


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_study_file_states_its_cost(path):
    statement = cost_statement(path.read_text(encoding="utf-8"))
    assert statement is not None, f"{path.name}: no single '# Cost:' line in its header"
    assert MEASURED.match(statement) or ESTIMATED.match(statement), (
        f"{path.name}: its cost line states neither a measured wall time with its concurrency"
        f" and date nor an estimate with its basis: {statement!r}"
    )


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_the_cost_comment_leaves_the_fingerprint_alone(path):
    text = path.read_text(encoding="utf-8")
    bare = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    assert "# Cost:" not in bare
    assert load_spec(path).sha == parse_spec(load_yaml(bare), str(path)).sha


def test_a_file_without_a_cost_line_fails(tmp_path):
    text = (SHIPPED[0]).read_text(encoding="utf-8")
    kept = [line for line in text.splitlines() if not line.startswith("#")]
    bare = tmp_path / "no_cost.yaml"
    bare.write_text("# A study without its cost.\n" + "\n".join(kept) + "\n", encoding="utf-8")
    assert load_spec(bare).sha == load_spec(SHIPPED[0]).sha  # still a valid study file
    assert not states_a_cost(bare.read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    "line",
    [
        "# Cost: a few minutes.",  # neither form
        "# Cost: 3 min of wall time on this project's 2-core machine.",  # no concurrency, date
        "# Cost: 3 min of wall time on this project's 2-core machine, 2 trials at a time.",
        "# Cost: about 9 GPU-hours (estimated).",  # no basis
        "# Cost: about 9 GPU-hours, basis: none (a guess).",  # not said to be an estimate
    ],
)
def test_a_cost_line_without_its_grounds_fails(line):
    assert not states_a_cost(f"{line}\nstudy: s\n")


@pytest.mark.parametrize(
    "line",
    [
        "# Cost: 3 min 20 s of wall time on this project's 2-core machine, 2 trials at a time\n"
        "# (measured 2026-12-07, while it also ran other work).",
        "# Cost: about 85 min of wall time on this machine, 2 trials at a time (estimated by\n"
        "# study plan --estimate; basis: a probe of 19 s).",
    ],
)
def test_either_form_passes(line):
    assert states_a_cost(f"# A study.\n{line}\n#\n# More.\nstudy: s\n")


def test_a_second_cost_line_fails():
    line = "# Cost: about 9 GPU-hours (estimated; basis: FLOPs)."
    assert not states_a_cost(f"{line}\n{line}\nstudy: s\n")
