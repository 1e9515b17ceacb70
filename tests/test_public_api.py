"""asrkit's public API (``asrkit.api``, docs/api.md) is what plugins use, and all of it is
documented.

The first-party plugins in ``plugins/`` are the templates third-party authors copy, and the
bundled importers in ``asrkit_importers/`` are written as such plugins, so they must import
nothing but the public modules: a private import there would teach every plugin
to depend on something that may change in any release.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import asrkit.api
from tests.test_docs import PLUGIN_PAGES

ROOT = Path(__file__).resolve().parent.parent
PLUGINS = ROOT / "plugins"
API_DOC = ROOT / "docs" / "api.md"

#: The modules a plugin may import (and their submodules, for asrkit.testing). asrkit.core.errors is
#: not among them: AsrkitError is reached through asrkit.api.
PUBLIC = ("asrkit", "asrkit.api", "asrkit.types")
PUBLIC_PACKAGES = ("asrkit.testing",)
#: Folders of a plugin that are not its source (build output, caches).
NOT_SOURCE = {"build", "dist", "__pycache__", ".pytest_cache"}

#: The first-party plugins, and the bundled importers, which could each move to a distribution of
#: their own (the design's rule for them).
DISTRIBUTIONS = [*sorted(path for path in PLUGINS.iterdir() if (path / "pyproject.toml").exists()),
                 ROOT / "asrkit_importers"]


def is_public(module: str) -> bool:
    return module in PUBLIC or any(module == package or module.startswith(package + ".")
                                   for package in PUBLIC_PACKAGES)


def asrkit_imports(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` for every import of an asrkit module in ``path``, wherever it is in
    the file (a function's import runs too, only later)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from asrkit import x` may name a submodule: then x is what is imported.
            modules = [f"{node.module}.{alias.name}" if node.module == "asrkit"
                       and importlib.util.find_spec(f"asrkit.{alias.name}") is not None
                       else node.module for alias in node.names]
        else:
            continue
        found += [(node.lineno, module) for module in dict.fromkeys(modules)
                  if module == "asrkit" or module.startswith("asrkit.")]
    return found


def source_files(distribution: Path) -> list[Path]:
    return sorted(path for path in distribution.rglob("*.py")
                  if not NOT_SOURCE & set(path.relative_to(distribution).parts)
                  and not any(part.endswith(".egg-info") for part in path.parts))


def private_imports(distribution: Path) -> list[str]:
    return [f"{distribution.name}/{path.relative_to(distribution)}:{line}: {module}"
            for path in source_files(distribution)
            for line, module in asrkit_imports(path) if not is_public(module)]


@pytest.mark.parametrize("distribution", DISTRIBUTIONS, ids=lambda path: path.name)
def test_plugins_import_only_the_public_api(distribution):
    assert source_files(distribution)
    found = private_imports(distribution)
    assert not found, ("private asrkit modules imported (use asrkit.api, docs/api.md):\n"
                       + "\n".join(found))


#: The pages a plugin author copies code from.
PLUGIN_DOCS = (*sorted(p.name for p in (ROOT / "docs").glob("hooks-*.md")), *PLUGIN_PAGES)


@pytest.mark.parametrize("page", PLUGIN_DOCS)
def test_the_plugin_docs_examples_import_only_the_public_api(page, tmp_path):
    """The worked examples are what authors copy: a private import there spreads."""
    text = (ROOT / "docs" / page).read_text()
    blocks = re.findall(r"^```python[^\n]*\n(.*?)^```", text, re.S | re.M)
    assert blocks
    found = []
    for number, block in enumerate(blocks):
        source = tmp_path / f"block{number}.py"
        source.write_text(block)
        found += [f"{page} block {number + 1}: {module}" for _, module in asrkit_imports(source)
                  if not is_public(module)]
    assert not found, "private asrkit modules in the docs' examples:\n" + "\n".join(found)


def test_the_check_sees_private_imports(tmp_path):
    plugin = tmp_path / "asrkit-thing"
    (plugin / "thing").mkdir(parents=True)
    (plugin / "thing" / "__init__.py").write_text(
        "from asrkit.api import Importer\nfrom asrkit import plugins\nimport asrkit.testing.x\n"
        "def f():\n    from asrkit.dataset.shards import read_records\n")
    (plugin / "build" / "lib").mkdir(parents=True)
    (plugin / "build" / "lib" / "copy.py").write_text("import asrkit.runs.run\n")
    assert [entry.rsplit(": ", 1)[1] for entry in private_imports(plugin)] == [
        "asrkit.plugins", "asrkit.dataset.shards"]


def test_every_public_name_imports_and_is_documented():
    documented = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)[`(]", API_DOC.read_text()))
    missing = [name for name in asrkit.api.__all__ if not hasattr(asrkit.api, name)]
    assert not missing, f"in asrkit.api.__all__ but not importable: {missing}"
    undocumented = [name for name in asrkit.api.__all__ if name not in documented]
    assert not undocumented, f"not documented in docs/api.md: {undocumented}"


def test_the_api_imports_cheaply():
    """Plugin modules import asrkit.api when asrkit loads them: no TensorFlow or numpy."""
    import subprocess
    import sys

    code = ("import sys, asrkit.api; heavy = [m for m in ('tensorflow', 'numpy') "
            "if m in sys.modules]; print(heavy)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"
