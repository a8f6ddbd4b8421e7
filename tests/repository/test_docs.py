"""The documentation holds together: README.md and docs/*.md link only to files and headings that
exist, and no file in the repository sends its reader to a document that is not in it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# References to documents that were never part of this repository (written in pieces so that this
# file does not match itself). A claim is cited to a paper or a textbook (docs/references.md).
FORBIDDEN = {
    "a design document outside the repository": re.compile(re.escape("shared/design" + ".md")),
    "a folder beside the repository": re.compile(re.escape(".." + "/shared")),
    "a design document by its bare name": re.compile(r"(?<!shared/)\bdesign" + r"\.md\b"),
    "a numbered seed document": re.compile(r"\bseed" + r" 00\d", re.IGNORECASE),
    "a section sign of a document outside the repository": re.compile("\u00a7" + r"[A-Z]{1,2}\b"),
}
# Not searched: environments, build output, records of runs, screenshots.
SKIPPED_PARTS = {".git", ".venv", "__pycache__", "mlruns", "studies", "node_modules"}
SKIPPED_PREFIXES = ("tests/output/",)

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~)")


def _prose(text: str) -> list[str]:
    """The lines of a markdown page outside fenced code blocks, inline code removed."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(re.sub(r"`[^`]*`", "", line))
    return lines


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        match = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            slug = _slug(match.group(1))
            n = seen.get(slug, 0)
            anchors.add(slug if n == 0 else f"{slug}-{n}")
            seen[slug] = n + 1
    return anchors


def _links(page: Path) -> list[tuple[int, str]]:
    found = []
    for number, line in enumerate(_prose(page.read_text(encoding="utf-8")), start=1):
        found += [(number, target) for target in LINK.findall(line)]
    return found


def test_there_are_pages_to_check():
    assert (ROOT / "README.md").is_file()
    assert len(PAGES) > 1, "docs/*.md is missing"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path):
    broken = []
    for number, target in _links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not this repository's
            continue
        path, _, anchor = target.partition("#")
        destination = (page.parent / path).resolve() if path else page
        if not destination.exists():
            broken.append(f"line {number}: {target} (no file {destination.relative_to(ROOT)})")
            continue
        if anchor and destination.suffix == ".md" and anchor not in _anchors(destination):
            where = destination.relative_to(ROOT)
            broken.append(f"line {number}: {target} (no heading #{anchor} in {where})")
    assert not broken, f"{page.relative_to(ROOT)}: broken links:\n" + "\n".join(broken)


def _repository_files() -> list[Path]:
    """Tracked files and new ones git does not ignore (a fresh docs/ page counts too)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT, capture_output=True, text=True, check=True,
        ).stdout.splitlines()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        listed = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file()]
    files = []
    for name in listed:
        if name.startswith(SKIPPED_PREFIXES) or SKIPPED_PARTS & set(Path(name).parts):
            continue
        if any(part.endswith(".egg-info") for part in Path(name).parts):
            continue
        path = ROOT / name
        if path.is_file():
            files.append(path)
    return files


def test_no_file_points_outside_the_repository():
    hits = []
    for path in _repository_files():
        data = path.read_bytes()
        if b"\0" in data:  # binary: images, archives
            continue
        text = data.decode("utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), start=1):
            for what, pattern in FORBIDDEN.items():
                match = pattern.search(line)
                if match:
                    where = path.relative_to(ROOT)
                    hits.append(f"{where}:{number}: {match.group(0)!r} ({what})")
    assert not hits, (
        "references to documents outside the repository (cite a paper or a textbook, "
        "docs/references.md, or a page in docs/):\n" + "\n".join(hits)
    )


def test_ci_reads_the_test_command_from_the_readme():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    marker = "# 2. set up .venv/ and run the tests"
    assert marker in lines
    command = lines[lines.index(marker) + 1]
    assert "pytest" in command and command.startswith("bash scripts/setup_env.sh")
