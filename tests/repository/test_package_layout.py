"""The layout a wheel and pytest see: every product folder with Python files is a package that
``pyproject.toml``'s package discovery ships (setuptools matches ``include`` per dotted name, so
a sub-package left out would be missing from a wheel while an editable install still finds it),
and no two test files share a basename (the tests' folders have no ``__init__.py``, so pytest
imports each file by its basename: two of one name are an "import file mismatch")."""

from __future__ import annotations

import tomllib
from collections import Counter
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("study", "trainables", "search_spaces", "analysis")


def _code_folders() -> set[str]:
    folders = set()
    for package in PRODUCT:
        for path in (ROOT / package).rglob("*.py"):
            folders.add(".".join(path.parent.relative_to(ROOT).parts))
    return folders


def test_every_folder_of_product_code_is_a_package_the_wheel_ships():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = config["tool"]["setuptools"]["packages"]["find"]["include"]
    shipped = set(find_packages(str(ROOT), include=include))
    assert _code_folders() <= shipped, sorted(_code_folders() - shipped)


def test_no_two_test_files_share_a_basename():
    names = Counter(path.name for path in (ROOT / "tests").rglob("test_*.py"))
    assert [name for name, n in names.items() if n > 1] == []
