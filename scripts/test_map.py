"""Which tests cover a module: each product module and the test files that import it.

A test file covers a module when one of its ``import``/``from`` statements (or an
``importlib.import_module`` of a literal name) names it, read with ``ast`` (nothing is
imported): ``from a.b import c`` covers ``a.b``, and ``a.b.c`` too when ``c`` is a module.
Files of ``scripts/`` and ``benchmarks/``, which tests load by path or run as programs, are
also covered by a test that names their file in a string (``"requote.py"``,
``"benchmarks/gpu.py"``), and every module by its mirrored test file
(``tests/trainables/objectives/test_infonce.py`` for ``trainables/objectives/infonce.py``),
whatever that file imports the module through. Otherwise only direct imports count: a test
that reaches a module through another (a re-export, a kit in ``tests/kits``) does not cover it.

    .venv/bin/python scripts/test_map.py            # the table, as docs/testing.md holds it
    .venv/bin/python scripts/test_map.py --write    # rewrite it in docs/testing.md
    .venv/bin/python scripts/test_map.py --check    # exit 1 when docs/testing.md's is stale
    .venv/bin/python scripts/test_map.py --uncovered  # the modules no test imports
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("study", "trainables", "search_spaces", "analysis", "benchmarks", "scripts")
BY_PATH = ("benchmarks", "scripts")  # loaded by path or run as programs, also named in strings
DOC = Path("docs") / "testing.md"
BEGIN = "<!-- test map: begin (scripts/test_map.py --write) -->"
END = "<!-- test map: end -->"


def module_name(path: Path, root: Path) -> str:
    """The dotted name of a ``.py`` file under ``root`` (``__init__`` is its package)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def product_modules(root: Path) -> dict[str, Path]:
    """Every product module: dotted name -> its file relative to ``root``."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if "__pycache__" not in path.parts:
                modules[module_name(path, root)] = path.relative_to(root)
    return modules


def imported_names(tree: ast.AST) -> set[str]:
    """The dotted names a parsed file imports, with ``a.b.c`` for each ``from a.b import c``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Call) and node.args and _is_import_module(node.func):
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                names.add(first.value)
    return names


def _is_import_module(func: ast.expr) -> bool:
    if isinstance(func, ast.Name):
        return func.id in ("__import__", "import_module")
    return isinstance(func, ast.Attribute) and func.attr == "import_module"


def _strings(tree: ast.AST) -> set[str]:
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }


def _names_file(strings: set[str], file: Path) -> bool:
    """Whether a string names ``file``: its path, or its base name alone."""
    return any(s == file.name or s.endswith(f"/{file.name}") or s == file.as_posix()
               for s in strings)  # fmt: skip


def mirrored(file: Path) -> Path:
    """The test file that mirrors a product file: ``tests/<package>/<subpath>/test_<module>.py``."""
    return Path("tests", *file.parts[:-1], f"test_{file.name}")


def nothing_to_test(file: Path) -> bool:
    """Whether a file holds no statement but its docstring (an empty package ``__init__``)."""
    body = ast.parse(file.read_text()).body
    return all(isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) for n in body)


def coverage_map(root: Path = ROOT) -> dict[str, list[str]]:
    """Each product module -> the test files (relative to ``root``) that cover it, sorted."""
    modules = product_modules(root)
    covered: dict[str, list[str]] = {name: [] for name in modules}
    for test in sorted((root / "tests").rglob("test_*.py")):
        tree = ast.parse(test.read_text(), filename=str(test))
        imported, strings = imported_names(tree), _strings(tree)
        shown = test.relative_to(root).as_posix()
        for name, file in modules.items():
            by_path = file.parts[0] in BY_PATH and _names_file(strings, file)
            if name in imported or by_path or mirrored(file) == test.relative_to(root):
                covered[name].append(shown)
    return covered


def uncovered(covered: dict[str, list[str]]) -> list[str]:
    """The modules no test file covers (a file with nothing to test left out)."""
    files = product_modules(ROOT)
    return [n for n, tests in covered.items() if not tests and not nothing_to_test(ROOT / files[n])]


def table(covered: dict[str, list[str]], root: Path = ROOT) -> str:
    """The map as a Markdown table between the markers docs/testing.md holds it in."""
    modules = product_modules(root)
    rows = ["| module | its test files |", "| --- | --- |"]
    for name, tests in covered.items():
        if nothing_to_test(root / modules[name]):
            continue  # a package's __init__.py with its docstring only
        shown = ", ".join(f"`{t}`" for t in tests)
        rows.append(f"| `{modules[name].as_posix()}` | {shown or 'none'} |")
    return "\n".join([BEGIN, *rows, END])


def with_table(doc: str, block: str) -> str:
    """``doc`` with the text between the markers replaced by ``block``.

    Raises:
        ValueError: the markers are not there, once each.
    """
    if doc.count(BEGIN) != 1 or doc.count(END) != 1:
        raise ValueError(f"{DOC}: needs one {BEGIN!r} and one {END!r}")
    head, rest = doc.split(BEGIN)
    return head + block + rest.split(END)[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help=f"rewrite the table in {DOC}")
    group.add_argument("--check", action="store_true", help=f"exit 1 when {DOC} is stale")
    group.add_argument("--uncovered", action="store_true", help="the modules no test imports")
    args = parser.parse_args(argv)
    covered = coverage_map()
    if args.uncovered:
        print("\n".join(uncovered(covered)))
        return 0
    block, doc_path = table(covered), ROOT / DOC
    if not (args.write or args.check):
        print(block)
        return 0
    doc = doc_path.read_text()
    fresh = with_table(doc, block)
    if args.check:
        if fresh != doc:
            print(f"{DOC}'s test map is stale: run scripts/test_map.py --write", file=sys.stderr)
            return 1
        return 0
    doc_path.write_text(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
