"""asrkit's modules import each other without cycles.

A cycle makes the import order matter (a half-initialised module, an ``ImportError`` that
appears only when a plugin happens to import things in another order) and means two modules are
really one. Only module-level imports count: an import inside a function runs when the function
does, and one under ``if TYPE_CHECKING:`` never runs.

Checked twice: between modules, and between layers, where a subpackage of asrkit (``data``,
``train``, ``models``...) is one layer and each top-level module another. Importing any module
of a subpackage runs the subpackage, so ``runs -> train.config`` together with
``train.engine -> runs`` is a cycle between ``runs`` and ``train`` even though no two modules
import each other.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "asrkit"

#: Known edges that close a cycle, each to be removed (none today).
ALLOWED: set[tuple[str, str]] = set()


def module_names() -> dict[str, Path]:
    """``asrkit.x.y`` -> its file, for every module of the package."""
    names = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _module_level(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """The import statements run when the module is imported: at the top, in class bodies,
    in ``try``/``with``/``if`` blocks (except ``if TYPE_CHECKING:``), not in functions."""
    found: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                found += _module_level(node.body)
            found += _module_level(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody,
                          *(handler.body for handler in node.handlers)):
                found += _module_level(block)
        elif isinstance(node, ast.With | ast.ClassDef | ast.For | ast.While):
            found += _module_level(node.body)
    return found


def imports_of(name: str, path: Path, modules: set[str]) -> set[str]:
    """The asrkit modules ``name`` imports at module level."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in _module_level(ast.parse(path.read_text(encoding="utf-8")).body):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
            continue
        if node.level:
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        for alias in node.names:  # `from a import b` imports module a.b when there is one
            submodule = f"{source}.{alias.name}"
            targets.add(submodule if submodule in modules else source)
    return {target for target in targets if target in modules and target != name}


def import_graph() -> dict[str, set[str]]:
    names = module_names()
    graph = {name: imports_of(name, path, set(names)) for name, path in names.items()}
    for source, target in ALLOWED:
        graph[source].discard(target)
    return graph


def layer(module: str) -> str:
    """``asrkit.train.config`` -> ``asrkit.train``; a top-level module is its own layer."""
    return ".".join(module.split(".")[:2])


def layer_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    layers: dict[str, set[str]] = {}
    for source, targets in graph.items():
        layers.setdefault(layer(source), set()).update(
            layer(target) for target in targets if layer(target) != layer(source))
    return layers


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (``a -> b -> a``) through each group of modules that import each other
    (Tarjan's strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_one_cycle(graph, group) for group in groups]


def _one_cycle(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """The shortest path from the group's first module back to itself."""
    start = min(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node] & group):
                if target == start:
                    return [*paths[node], start]
                if target not in paths:
                    paths[target] = [*paths[node], target]
                    following.append(target)
        frontier = following
    raise AssertionError("a strongly connected group without a cycle")


def test_the_checker_sees_relative_and_nested_imports(tmp_path):
    """The parser itself: ``from . import x`` counts, imports in functions and under
    TYPE_CHECKING do not."""
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "from . import b\n"
        "from .c import thing\n"
        "try:\n    import asrkit.d\nexcept ImportError:\n    pass\n"
        "if TYPE_CHECKING:\n    import asrkit.e\n"
        "def f():\n    import asrkit.f\n"
    )
    modules = {"asrkit.p.m", "asrkit.p.b", "asrkit.p.c", "asrkit.d", "asrkit.e", "asrkit.f"}
    assert imports_of("asrkit.p.m", source, modules) == {"asrkit.p.b", "asrkit.p.c", "asrkit.d"}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


def _shown(found: list[list[str]]) -> str:
    return "\n".join("  " + " -> ".join(cycle) for cycle in found)


def test_no_import_cycles_between_modules():
    found = cycles(import_graph())
    assert not found, "import cycles in asrkit:\n" + _shown(found)


def test_no_import_cycles_between_layers():
    graph = import_graph()
    found = cycles(layer_graph(graph))
    steps = {(a, b) for cycle in found for a, b in itertools.pairwise(cycle)}
    through = sorted(f"  {source} -> {target}" for source, targets in graph.items()
                     for target in targets if (layer(source), layer(target)) in steps)
    assert not found, ("import cycles between asrkit's layers:\n" + _shown(found)
                       + "\nthrough these imports:\n" + "\n".join(through))
