"""scripts/test_map.py and the map it writes: docs/testing.md's "Which tests cover a module"
is the map the tests make now, and the script finds a module's tests by import, by its mirrored
file and, for a script, by its file named in a string."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location("test_map", ROOT / "scripts" / "test_map.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["test_map"] = module
    spec.loader.exec_module(module)
    return module


def test_the_map_in_docs_testing_is_the_one_the_tests_make_now():
    test_map = _load()
    doc = (ROOT / test_map.DOC).read_text()
    fresh = test_map.with_table(doc, test_map.table(test_map.coverage_map()))
    assert fresh == doc, "docs/testing.md's test map is stale: run scripts/test_map.py --write"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _posix(*parts: str) -> str:
    return Path(*parts).as_posix()  # the made-up files' paths, never written out whole here


def test_a_module_is_covered_by_import_by_its_mirror_and_a_script_by_its_name(tmp_path):
    test_map = _load()
    _write(tmp_path / "trainables" / "__init__.py", '"""Only a docstring."""\n')
    _write(tmp_path / "trainables" / "a.py", "X = 1\n")
    _write(tmp_path / "trainables" / "sub" / "b.py", "Y = 2\n")
    _write(tmp_path / "trainables" / "c.py", "Z = 3\n")
    _write(tmp_path / "scripts" / "tool.py", "W = 4\n")
    one = "from trainables import a\nimport importlib\nimportlib.import_module('trainables.c')\n"
    _write(tmp_path / "tests" / "x" / "test_one.py", one)
    _write(tmp_path / "tests" / "trainables" / "sub" / "test_b.py", "import trainables\n")
    _write(tmp_path / "tests" / "x" / "test_two.py", "PATH = 'tool.py'\n")
    covered = test_map.coverage_map(tmp_path)
    one, b = _posix("tests", "x", "test_one.py"), _posix("tests", "trainables", "sub", "test_b.py")
    assert covered == {
        "trainables": [b, one],
        "trainables.a": [one],
        "trainables.c": [one],
        "trainables.sub.b": [b],
        "scripts.tool": [_posix("tests", "x", "test_two.py")],
    }
    table = test_map.table(covered | {"trainables.c": []}, tmp_path)
    assert f"| `{_posix('trainables', 'c.py')}` | none |" in table
    assert "__init__.py" not in table  # a docstring only: nothing to test
    assert table.startswith(test_map.BEGIN) and table.endswith(test_map.END)
