"""Meta-tests: every hook is documented and tested, the CLI reference covers the CLI, and the
plugin tutorial works as written."""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from asrkit import hookspecs
from tests.conftest import ROOT, hook_section, pip_install, run_asrkit

DOCS = ROOT / "docs"
HOOKS = sorted(
    name for name, value in vars(hookspecs).items()
    if inspect.isfunction(value) and hasattr(value, "asrkit_spec")
)


def test_hooks_found():
    assert HOOKS == ["register_commands", "register_decoders", "register_features",
                     "register_importers", "register_models", "register_objectives",
                     "register_tokenizers"]


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_is_documented(hook):
    _, section = hook_section(hook)
    index = (DOCS / "hooks.md").read_text()
    assert f'<a id="{hook}"></a>' in index, "the index keeps the hook's old anchor"
    assert f"def {hook}(" in section, "the section shows the signature"
    assert "Called" in section, "the section says when the hook is called"
    assert section.count("```python") >= 2, "the section has an example"


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_has_a_test(hook):
    tests = "".join(p.read_text() for p in (ROOT / "tests").glob("test_*.py"))
    assert f"def test_hook_{hook}(" in tests, f"no test named test_hook_{hook}"


def test_every_hookspec_has_a_docstring():
    for hook in HOOKS:
        assert getattr(hookspecs, hook).__doc__, hook


def test_cli_reference_covers_the_commands():
    from asrkit.cli import build_cli
    from asrkit.plugins import get_plugins

    reference = "".join(page.read_text() for page in sorted(DOCS.glob("cli*.md")))
    cli = build_cli(get_plugins())
    for name in cli.commands:
        assert f"asrkit {name}" in reference, f"docs/cli*.md do not document `asrkit {name}`"
    for param in cli.commands["import"].commands["sample"].params:
        for option in param.opts:
            assert option in reference, f"docs/cli*.md do not document {option}"


#: The plugin guides: the importer tutorial, and a page for each other kind of plugin.
PLUGIN_PAGES = ("writing-a-plugin.md", "plugin-features.md", "plugin-model.md",
                "plugin-decoder.md", "plugin-tokenizer.md", "plugin-command.md")


def tutorial_files(package: str = "asrkit-importer-foo") -> dict[str, str]:
    """The files of a plugin guide's ``package``: ``file=PATH`` code blocks under it."""
    text = "\n".join((DOCS / page).read_text() for page in PLUGIN_PAGES)
    blocks = re.findall(r"^```\w+ file=(\S+)\n(.*?)^```", text, re.S | re.M)
    return {name: body for name, body in blocks if name.startswith(f"{package}/")}


def install_tutorial(package: str, files: set[str], folder: Path) -> Path:
    """Write the page's plugin ``package`` (exactly ``files``, paths inside the package) into
    ``folder`` as an author would copy it, and pip-install it into ``folder / "site"``, which
    is returned (the package's own files stay in ``folder / package``)."""
    found = tutorial_files(package)
    assert set(found) == {f"{package}/{name}" for name in files}
    for name, content in found.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(content)
    pip_install(folder / package, folder / "site")
    return folder / "site"


def run_tutorial_tests(site: Path, package: str) -> subprocess.CompletedProcess:
    """The page's plugin ``package``'s own tests, run with pytest against its install in
    ``site`` (as :func:`install_tutorial` left them), as the plugin's author would run them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASRKIT_")}
    env["PYTHONPATH"] = str(site)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         str(site.parent / package / "tests")],
        capture_output=True, text=True, env=env, cwd=site.parent, check=False, timeout=300,
    )


def test_tutorial_plugin_installs_and_passes_its_tests(tmp_path):
    site = install_tutorial("asrkit-importer-foo", {
        "pyproject.toml", "asrkit_importer_foo/__init__.py", "tests/test_foo.py"}, tmp_path)

    listing = run_asrkit("plugins", "--json", pythonpath=site)
    plugins = {p["name"]: p for p in json.loads(listing.stdout)["plugins"]}
    assert plugins["foo"]["distribution"] == "asrkit-importer-foo"
    assert plugins["foo"]["registered"] == {"importer": ["foo"]}

    env = {k: v for k, v in os.environ.items() if not k.startswith("ASRKIT_")}
    env["PYTHONPATH"] = str(site)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         str(tmp_path / "asrkit-importer-foo" / "tests")],
        capture_output=True, text=True, env=env, cwd=tmp_path, check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert "2 passed" in result.stdout
