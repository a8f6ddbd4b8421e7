"""Reading report.html as a person sees it: its headings, contents, figure index, figures (with
their alt text) and the trials table; and the ways a page fails to be navigable."""

from __future__ import annotations

from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

MAX_BYTES = 1_000_000  # "opens instantly": under 1 MB


@dataclass
class Heading:
    level: int
    id: str | None
    text: str = ""


@dataclass
class Image:
    src: str
    alt: str
    figure: str | None  # the id of the figure that holds it


_CLOSES = (("nav", ["toc"]), ("ol", ["index"]), ("table", ["trials"]))


class ReportPage(HTMLParser):
    """The parts of report.html a reader navigates by."""

    def __init__(self, text: str):
        super().__init__()
        self.ids: set[str] = set()
        self.headings: list[Heading] = []
        self.contents: list[tuple[str, str]] = []  # (href anchor, text) in the nav#toc
        self.index: list[tuple[str, str]] = []  # (href anchor, text) in ol.figure-index
        self.figures: list[str] = []  # figure ids
        self.images: list[Image] = []
        self.trial_headers: list[str] = []
        self.trial_rows: list[list[str]] = []
        self._heading: Heading | None = None
        self._link: list | None = None
        self._where: list[str] = []  # "toc" / "index" / "trials" while inside one
        self._figure: str | None = None
        self._cell: list[str] | None = None
        self._row: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "nav" and a.get("id") == "toc":
            self._where.append("toc")
        elif tag == "ol" and "figure-index" in (a.get("class") or ""):
            self._where.append("index")
        elif tag == "table" and "trials" in (a.get("class") or ""):
            self._where.append("trials")
        elif tag in ("h2", "h3"):
            self._heading = Heading(int(tag[1]), a.get("id"))
        elif tag == "a" and a.get("href", "").startswith("#"):
            self._link = [a["href"][1:], ""]
        elif tag == "figure":
            self._figure = a.get("id")
            self.figures.append(a.get("id") or "")
        elif tag == "img":
            self.images.append(Image(a.get("src") or "", a.get("alt") or "", self._figure))
        elif "trials" in self._where and tag == "tr":
            self._row = []
        elif "trials" in self._where and tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("h2", "h3") and self._heading is not None:
            self._heading.text = self._heading.text.strip()
            self.headings.append(self._heading)
            self._heading = None
        elif tag == "a" and self._link is not None:
            target = {"toc": self.contents, "index": self.index}.get(
                self._where[-1] if self._where else ""
            )
            if target is not None:
                target.append((self._link[0], self._link[1].strip()))
            self._link = None
        elif (tag, self._where[-1:]) in (
            ("nav", ["toc"]),
            ("ol", ["index"]),
            ("table", ["trials"]),
        ):
            self._where.pop()
        elif tag == "figure":
            self._figure = None
        elif tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if self._row and not self.trial_headers:
                self.trial_headers = self._row
            else:
                self.trial_rows.append(self._row)
            self._row = None

    def handle_data(self, data):
        if self._heading is not None:
            self._heading.text += data
        if self._link is not None:
            self._link[1] += data
        if self._cell is not None:
            self._cell.append(data)


def navigation_problems(path: Path, figure_stems: set[str] | None = None) -> list[str]:
    """What stops a reader of the report at ``path`` finding their way, in words; empty when
    nothing does. ``figure_stems``: the figures' file stems (alt text must say more)."""
    text = path.read_text()
    page = ReportPage(text)
    problems = []
    size = path.stat().st_size
    if size >= MAX_BYTES:
        problems.append(f"report.html is {size / 1e6:.2f} MB (at least 1 MB)")
    sections = [(h.id, h.text) for h in page.headings if h.text != "Contents"]
    unnamed = [text for anchor, text in sections if not anchor]
    if unnamed:
        problems.append(f"sections without an id to link to: {unnamed}")
    if [anchor for anchor, _ in page.contents] != [anchor for anchor, _ in sections]:
        listed = {anchor for anchor, _ in page.contents}
        problems.append("the contents do not list every h2 and h3 in order; missing: "
                        f"{[t for a, t in sections if a not in listed]}")  # fmt: skip
    dangling = [a for a, _ in [*page.contents, *page.index] if a not in page.ids]
    if dangling:
        problems.append(f"links to anchors that do not exist: {dangling}")
    indexed = {anchor for anchor, _ in page.index}
    unindexed = [f for f in page.figures if f not in indexed]
    if unindexed or len(page.index) != len(page.figures):
        problems.append(f"figures not in the figure index (one line each): {unindexed}")
    stems = figure_stems or set()
    for image in page.images:
        words = image.alt.strip()
        if not words or words in stems or (image.figure or "").endswith(f"-{words}"):
            problems.append(f"figure {image.figure}: alt text {words!r} says nothing")
    if not page.trial_rows:
        problems.append("no table of the trials")
    return problems
