"""asrkit's modules import each other without cycles, and import each other at the top.

A cycle makes the import order matter (a half-initialised module, an ``ImportError`` that
appears only when a plugin happens to import things in another order) and means two modules are
really one. *Every* import of an asrkit module counts: at the top of a module, inside a function
or method (it runs later, but the dependency is the same), and under ``if TYPE_CHECKING:`` (it
never runs, but the types are the same dependency). An import hidden in a function is how a
cycle is usually papered over, so hiding it does not make it go away here.

Checked twice: between modules, and between layers, where a subpackage of asrkit (``core``,
``train``, ``models``...) is one layer and each top-level module another. Importing any module
of a subpackage runs the subpackage, so ``runs.run -> train.checkpoints`` together with
``train.engine -> runs.run`` would be a cycle between ``runs`` and ``train`` even though no two
modules import each other. And every import must go down the layers that docs/architecture.md
lists, so that the page stays true.

Then, so that a module's dependencies can be read at its top: an asrkit module is imported
inside a function only by the modules in :data:`LAZY_IMPORTERS`, mainly the command line, which
imports each command's machinery only when that command runs so that ``asrkit --help`` starts
at once. Third-party imports inside functions (TensorFlow, numpy) are not checked: asrkit's
modules import TensorFlow lazily on purpose, so that a plugin module costs nothing to load.
"""

from __future__ import annotations

import ast
import fnmatch
import itertools
import re
from pathlib import Path
from typing import NamedTuple

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "asrkit"

#: Known edges that close a cycle, each to be removed (none today).
ALLOWED: set[tuple[str, str]] = set()

#: The only modules that may import asrkit modules inside functions (patterns of paths from the
#: repository root), each for start-up speed: the CLI and its commands, so that ``asrkit --help``
#: loads no command's machinery; and the beam decoder, a plugin module that ``asrkit.api``
#: imports, whose search (``decoders.prefix``) imports numpy at its top.
LAZY_IMPORTERS = (
    # The command line: each command's machinery is imported when that command runs.
    "asrkit/cli.py", "asrkit/commands/*",
    # Plugin modules, which `asrkit --help` and `asrkit plugins` import: the beam search's
    # numpy half, and each model's and objective head's Keras layers (the modules that define
    # Keras classes import Keras at their top), are imported when first used.
    "asrkit/decoders/beam.py", "asrkit/models/brnn.py", "asrkit/models/ds2.py",
    "asrkit/models/conformer.py", "asrkit/objectives/transducer.py",
    "asrkit/objectives/attention.py",
)

#: Where an import statement runs.
TOP, TYPE_CHECKING_BLOCK, FUNCTION = "top", "TYPE_CHECKING", "function"


class Found(NamedTuple):
    """One asrkit module imported by a statement: its line, and where the statement is."""

    line: int
    target: str
    where: str


def module_names(package: Path = PACKAGE) -> dict[str, Path]:
    """``asrkit.x.y`` -> its file, for every module of the package."""
    names = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _statements(node: ast.AST, where: str = TOP) -> list[tuple[ast.Import | ast.ImportFrom, str]]:
    """Every import statement under ``node``, with where it runs: inside a function (whatever
    encloses the function), else under ``if TYPE_CHECKING:``, else when the module is
    imported (at the top, in class bodies, in ``try``/``with``/``if`` blocks)."""
    found: list[tuple[ast.Import | ast.ImportFrom, str]] = []
    if isinstance(node, ast.Import | ast.ImportFrom):
        return [(node, where)]
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
        where = FUNCTION
    if isinstance(node, ast.If) and _is_type_checking(node.test) and where == TOP:
        for child in node.body:
            found += _statements(child, TYPE_CHECKING_BLOCK)
        for child in node.orelse:
            found += _statements(child, where)
        return found
    for child in ast.iter_child_nodes(node):
        found += _statements(child, where)
    return found


def imports_in(name: str, path: Path, modules: set[str]) -> list[Found]:
    """The asrkit modules ``name`` imports, statement by statement, wherever the statement is."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Found] = []
    for node, where in _statements(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            # `from a import b` imports module a.b when there is one
            targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source
                       for alias in node.names]
        found += [Found(node.lineno, target, where) for target in dict.fromkeys(targets)
                  if target in modules and target != name]
    return found


def imports_of(name: str, path: Path, modules: set[str]) -> set[str]:
    """The asrkit modules ``name`` imports, anywhere in it."""
    return {found.target for found in imports_in(name, path, modules)}


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    names = module_names(package)
    graph = {name: imports_of(name, path, set(names)) for name, path in names.items()}
    for source, target in ALLOWED:
        graph[source].discard(target)
    return graph


def layer(module: str) -> str:
    """``asrkit.train.engine`` -> ``asrkit.train``; a top-level module is its own layer."""
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


def lazy_imports(package: Path = PACKAGE,
                 allowed: tuple[str, ...] = LAZY_IMPORTERS) -> list[str]:
    """``file:line: module`` for each asrkit module imported inside a function of a module
    that ``allowed`` does not list."""
    names = module_names(package)
    out = []
    for name, path in names.items():
        relative = path.relative_to(package.parent).as_posix()
        if any(fnmatch.fnmatch(relative, pattern) for pattern in allowed):
            continue
        out += [f"{relative}:{found.line}: {found.target}"
                for found in imports_in(name, path, set(names)) if found.where == FUNCTION]
    return out


def _shown(found: list[list[str]]) -> str:
    return "\n".join("  " + " -> ".join(cycle) for cycle in found)


def _write(root: Path, files: dict[str, str]) -> Path:
    """A package ``pkg`` under ``root`` with ``files`` (path in the package -> source)."""
    for name, source in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return root / "pkg"


# -- the checker itself ---------------------------------------------------------------------------


def test_the_checker_sees_every_import(tmp_path):
    """Relative imports, ``from package import module``, and imports in functions, methods,
    class bodies, ``try`` blocks and under ``TYPE_CHECKING`` all count, each with where it is."""
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "from . import b\n"
        "from .c import thing\n"
        "try:\n    import asrkit.d\nexcept ImportError:\n    pass\n"
        "if TYPE_CHECKING:\n    import asrkit.e\n"
        "def f():\n    import asrkit.f\n"
        "class K:\n    def g(self):\n        from asrkit import h\n"
        "    import asrkit.i\n"
        "import tensorflow\n"
    )
    modules = {"asrkit.p.m", "asrkit.p.b", "asrkit.p.c", "asrkit.d", "asrkit.e", "asrkit.f",
               "asrkit.h", "asrkit.i"}
    assert imports_in("asrkit.p.m", source, modules) == [
        Found(2, "asrkit.p.b", TOP), Found(3, "asrkit.p.c", TOP), Found(5, "asrkit.d", TOP),
        Found(9, "asrkit.e", TYPE_CHECKING_BLOCK), Found(11, "asrkit.f", FUNCTION),
        Found(14, "asrkit.h", FUNCTION), Found(15, "asrkit.i", TOP)]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


#: Ways to import ``{module}`` (``{parent}.{name}``) from a module without running it at import.
HIDDEN_IMPORTS = {
    "function": "def f():\n    from {parent} import {name}\n",
    "method": "class K:\n    def f(self):\n        import {module}\n",
    "TYPE_CHECKING": ("from typing import TYPE_CHECKING\n\n"
                      "if TYPE_CHECKING:\n    from {module} import Thing\n"),
}


@pytest.mark.parametrize("hidden", HIDDEN_IMPORTS.values(), ids=HIDDEN_IMPORTS.keys())
def test_a_cycle_closed_by_a_hidden_import_is_found(tmp_path, hidden):
    """``high`` and ``sub.a`` import ``low`` at the top; ``low`` importing ``high`` back,
    wherever the import hides, is a cycle between modules, and ``low`` importing ``sub.b`` one
    between the layers ``low`` and ``sub``, although no two modules import each other."""
    package = _write(tmp_path, {
        "__init__.py": "",
        "high.py": "from pkg import low\n",
        "low.py": "",
        "sub/__init__.py": "",
        "sub/a.py": "from pkg import low\n",
        "sub/b.py": "",
    })
    graph = import_graph(package)
    assert cycles(graph) == [] and cycles(layer_graph(graph)) == []

    (package / "low.py").write_text(hidden.format(module="pkg.high", parent="pkg", name="high"))
    assert cycles(import_graph(package)) == [["pkg.high", "pkg.low", "pkg.high"]]

    (package / "low.py").write_text(hidden.format(module="pkg.sub.b", parent="pkg.sub",
                                                  name="b"))
    graph = import_graph(package)
    assert cycles(graph) == []
    assert cycles(layer_graph(graph)) == [["pkg.low", "pkg.sub", "pkg.low"]]


def test_the_lazy_check_names_file_and_line(tmp_path):
    package = _write(tmp_path, {
        "__init__.py": "",
        "cli.py": "def main():\n    from pkg import low\n",
        "low.py": "import json\n\n\ndef f():\n    import tensorflow\n    from pkg import cli\n",
        "commands/__init__.py": "",
        "commands/run.py": "def run():\n    from pkg.low import f\n",
    })
    assert lazy_imports(package, ("pkg/cli.py", "pkg/commands/*")) == ["pkg/low.py:6: pkg.cli"]
    assert lazy_imports(package, ("pkg/low.py",)) == [
        "pkg/cli.py:2: pkg.low", "pkg/commands/run.py:2: pkg.low"]


# -- asrkit ---------------------------------------------------------------------------------------


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


def test_only_the_command_line_imports_asrkit_inside_functions():
    """Elsewhere a module's asrkit imports are at its top, where a reader sees what it
    depends on (move the import up; where that would close a cycle, the cycle is the bug)."""
    found = lazy_imports()
    assert not found, ("asrkit modules imported inside functions (import them at the top; "
                       f"only {', '.join(LAZY_IMPORTERS)} import lazily):\n  "
                       + "\n  ".join(found))


# -- the layers of docs/architecture.md ----------------------------------------------------------

ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"


def documented_layers(page: Path = ARCHITECTURE) -> dict[str, int]:
    """``asrkit.runs.run`` -> its layer's row in the page's table of layers (0 = the first row, the
    bottom layer); ``asrkit`` for the package itself."""
    ranks: dict[str, int] = {}
    rows = [line for line in page.read_text(encoding="utf-8").splitlines()
            if line.startswith("| ") and not line.startswith(("| layer", "|---"))]
    for rank, row in enumerate(rows):
        for name in re.findall(r"`([\w.]+)`", row.split("|")[2]):
            ranks["asrkit" if name == "asrkit" else f"asrkit.{name}"] = rank
    return ranks


def layer_violations(graph: dict[str, set[str]], ranks: dict[str, int]) -> list[str]:
    """Each import of a module of a higher layer, and each layer the table does not place."""
    unplaced = sorted({layer(m) for m in graph} - set(ranks))
    upward = sorted(f"{source} -> {target}" for source, targets in graph.items()
                    for target in targets
                    if layer(source) in ranks and layer(target) in ranks
                    and ranks[layer(target)] > ranks[layer(source)])
    return [f"not in the table of layers: {name}" for name in unplaced] + [
        f"imports a higher layer: {edge}" for edge in upward]


def test_the_layer_check_sees_an_upward_import_and_an_unplaced_module():
    ranks = {"asrkit.low": 0, "asrkit.high": 1}
    graph = {"asrkit.low": {"asrkit.high"}, "asrkit.high": set(), "asrkit.new": set()}
    assert layer_violations(graph, ranks) == [
        "not in the table of layers: asrkit.new",
        "imports a higher layer: asrkit.low -> asrkit.high"]


def test_imports_go_down_the_documented_layers():
    """Every module is in a layer of docs/architecture.md and imports none above its own."""
    ranks = documented_layers()
    assert ranks["asrkit.core"] == 0 and ranks["asrkit.commands"] == max(ranks.values())
    found = layer_violations(import_graph(), ranks)
    assert not found, "against docs/architecture.md:\n" + "\n".join(found)
