"""The import direction of the packages: study → analysis, search_spaces → trainables. ``study``
(the top) may import every other package, ``analysis`` and ``search_spaces`` only ``trainables``
(analysis for config types), ``trainables`` none of them; nothing imports upward or across.

Every ``.py`` file of each package is parsed with ``ast`` (nothing is imported), so an import
inside a function, a ``from x import y``, a relative import and an ``importlib.import_module`` of
a literal name all count.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# package -> the project packages it must never import
FORBIDDEN = {
    "study": frozenset(),
    "analysis": frozenset({"study", "search_spaces"}),
    "search_spaces": frozenset({"study", "analysis"}),
    "trainables": frozenset({"study", "search_spaces", "analysis"}),
}


def _module_of(path: Path) -> list[str]:
    """The dotted module name of a file under ROOT, as parts (``__init__`` is its package)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def _imported(node: ast.AST, module: list[str], is_package: bool) -> list[str]:
    """The absolute module names one AST node imports (none for other nodes)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level == 0:
            return [node.module or ""]
        base = module if is_package else module[:-1]
        base = base[: len(base) - (node.level - 1)]
        return [".".join([*base, *([node.module] if node.module else [])])]
    if isinstance(node, ast.Call) and _is_dynamic_import(node.func) and node.args:
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            return [first.value]
    return []


def _is_dynamic_import(func: ast.expr) -> bool:
    if isinstance(func, ast.Name):
        return func.id in ("__import__", "import_module")
    return isinstance(func, ast.Attribute) and func.attr == "import_module"


def upward_imports(source: str, path: Path) -> list[str]:
    """``file:line: imports X`` for every import in ``source`` (the text of ``path``, a file of
    one of the packages) that the package's rule forbids."""
    module = _module_of(path)
    forbidden = FORBIDDEN[module[0]]
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(source, filename=str(path))):
        for name in _imported(node, module, is_package):
            top = name.split(".")[0]
            if top in forbidden:
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                rule = f"{module[0]} may not import {top}"
                found.append((node.lineno, f"{where}: imports {name} ({rule})"))
    return [text for _, text in sorted(found)]


def _files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(p for p, forbidden in FORBIDDEN.items() if forbidden))
def test_no_package_imports_upward(package):
    files = _files(package)
    assert files, f"no .py files under {package}/"
    offending = [line for path in files for line in upward_imports(path.read_text(), path)]
    if offending:
        pytest.fail("imports against the layering:\n" + "\n".join(offending), pytrace=False)


def test_the_check_finds_every_form_of_upward_import():
    source = (
        "import os\n"
        "import study.cli\n"
        "from analysis import plots\n"
        "def later():\n"
        "    from search_spaces.spec import load_spec\n"
        "    import importlib\n"
        "    importlib.import_module('study.runner')\n"
        "from . import config\n"
        "from .. import analysis\n"
    )
    found = upward_imports(source, ROOT / "trainables" / "sub" / "mod.py")
    assert found == [
        "trainables/sub/mod.py:2: imports study.cli (trainables may not import study)",
        "trainables/sub/mod.py:3: imports analysis (trainables may not import analysis)",
        "trainables/sub/mod.py:5: imports search_spaces.spec "
        "(trainables may not import search_spaces)",
        "trainables/sub/mod.py:7: imports study.runner (trainables may not import study)",
    ]
    # A relative import resolves against the file's own package: analysis/plots/_x.py's
    # "from .. import report" is analysis.report, allowed; study may import anything.
    assert upward_imports("from .. import report\n", ROOT / "analysis" / "plots" / "_x.py") == []
    assert upward_imports("import analysis, search_spaces\n", ROOT / "study" / "x.py") == []
    assert upward_imports("import trainables.config\n", ROOT / "analysis" / "x.py") == []
