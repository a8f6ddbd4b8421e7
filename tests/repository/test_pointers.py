"""Every pointer names the real home: a module, function or class that a docstring, a comment or
a document names in markup (``analysis.stats.fits``, :func:`study.record.check_store`) is
importable there, and every file path it names exists. A move that leaves a pointer behind
fails here, with the file and the name."""

from __future__ import annotations

import importlib
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# a name followed by ".<" is a template of tag names (``study.baselines.architecture.<n>``), not
# a pointer to code
MARKED = re.compile(r"(?:``|`|:(?:func|class|mod|data|meth|attr):`)"
                    r"((?:analysis|study|search_spaces|trainables)"
                    r"(?:\.[A-Za-z_]\w*)++)(?!\.<)")  # fmt: skip
PATH = re.compile(r"(?<![\w./-])((?:analysis|study|search_spaces|trainables|tests|benchmarks|"
                  r"scripts|docs)/[\w./-]*\.(?:py|md|yaml|ipynb))")  # fmt: skip
SUFFIXES = {"py", "md", "yaml", "json", "html", "parquet", "db", "csv", "png", "svg", "ipynb"}


def _tracked(*patterns: str) -> list[str]:
    done = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True,
                          text=True, check=True)  # fmt: skip
    return done.stdout.split()


def _pages() -> list[str]:
    """Product code, benchmarks, scripts and documents (tests name tags and variables alike)."""
    return [f for f in _tracked("*.py", "*.md", "*.ipynb") if not f.startswith("tests/")]


def _is_module_pointer(name: str) -> bool:
    """A name whose second part is a module or package of its package: ``study.role`` is a tag,
    ``study.record`` a module. In analysis, search_spaces and trainables every name is one."""
    top, second = name.split(".")[:2]
    if top != "study":
        return True
    return (ROOT / top / f"{second}.py").is_file() or (ROOT / top / second).is_dir()


def resolves(name: str) -> bool:
    """Whether ``name`` is a module, or an attribute path under the longest importable one."""
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:k]))
        except ModuleNotFoundError:
            continue
        for attr in parts[k:]:
            if not hasattr(found, attr):
                return False
            found = getattr(found, attr)
        return True
    return False


def stale_pointers(files: list[str]) -> list[str]:
    stale = set()
    for file in files:
        text = (ROOT / file).read_text()
        for match in MARKED.finditer(text):
            name = match.group(1)
            if name.split(".")[-1] in SUFFIXES or not _is_module_pointer(name):
                continue
            if not resolves(name):
                stale.add(f"{file}: {name}")
        stale |= {f"{file}: {m.group(1)} (no such file)" for m in PATH.finditer(text)
                  if not (ROOT / m.group(1)).exists()}  # fmt: skip
    return sorted(stale)


def test_every_pointer_in_the_code_and_the_docs_names_a_real_home():
    assert stale_pointers(_pages()) == []


def test_every_path_a_test_names_exists():
    files = [f for f in _tracked("tests/*.py") if not f.endswith("test_import_layers.py")]
    missing = [f"{f}: {m.group(1)}" for f in files for m in PATH.finditer((ROOT / f).read_text())
               if not (ROOT / m.group(1)).exists()]  # fmt: skip
    assert missing == []


def test_the_check_finds_a_moved_module_a_missing_name_and_a_missing_file(tmp_path):
    assert resolves("analysis.stats.fits.fit_study") and resolves("analysis.reading")
    assert not resolves("analysis.stats.fits.no_such_function")
    assert not resolves("analysis.no_such_room.fits")
    page = ROOT / "docs" / "architecture.md"
    assert stale_pointers([str(page.relative_to(ROOT))]) == []
    assert _is_module_pointer("study.record") and not _is_module_pointer("study.role")
    templated = "``study.baselines.architecture.<n>`` and ``study.baselines.study_configs``"
    assert [m.group(1) for m in MARKED.finditer(templated)] == ["study.baselines.study_configs"]
