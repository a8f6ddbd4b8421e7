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
    # A relative import resolves against the file's own package: analysis/report/plots/_x.py's
    # "from .. import report" is analysis.report.page, allowed; study may import anything.
    assert upward_imports("from .. import report\n", ROOT / "analysis" / "plots" / "_x.py") == []
    assert upward_imports("import analysis, search_spaces\n", ROOT / "study" / "x.py") == []
    assert upward_imports("import trainables.config\n", ROOT / "analysis" / "x.py") == []


def import_graph(files: list[Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports (anywhere in the file, ``TYPE_CHECKING`` blocks
    and imports inside functions included: a circle there is still a circle in the design).
    ``from package import name`` counts the submodule ``package.name`` when there is one."""
    modules = {".".join(_module_of(path)): path for path in files}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets = _imported(node, name.split("."), is_package)
            if isinstance(node, ast.ImportFrom):
                targets = [f"{t}.{a.name}" if f"{t}.{a.name}" in modules else t
                           for t in targets for a in node.names]  # fmt: skip
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_module_imports_one_that_imports_it_back():
    files = [path for package in FORBIDDEN for path in _files(package)]
    found = circles(import_graph(files))
    if found:
        pytest.fail("import circles:\n" + "\n".join(" ↔ ".join(c) for c in found), pytrace=False)


def test_the_circle_check_finds_a_circle_through_three_modules():
    graph = {"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": {"a.x", "b.w"}, "b.w": set()}
    assert circles(graph) == [["a.x", "a.y", "a.z"]]
    assert circles({"a.x": {"a.y"}, "a.y": set()}) == []


# analysis/'s rooms, lowest first: each may import the rooms below it, none above
ANALYSIS_ROOMS = ("analysis.reading", "analysis.stats", "analysis.findings",
                  "analysis.study_analysis", "analysis.report")  # fmt: skip


def _room(module: str) -> int | None:
    for rank, room in enumerate(ANALYSIS_ROOMS):
        if module == room or module.startswith(room + "."):
            return rank
    return None


def test_analysis_rooms_import_only_the_rooms_below_them():
    graph = import_graph(_files("analysis"))
    upward = [f"{module} imports {target}" for module, targets in sorted(graph.items())
              for target in sorted(targets)
              if None not in (_room(module), _room(target)) and _room(target) > _room(module)]
    assert not upward, "\n".join(upward)
