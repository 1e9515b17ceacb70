"""The first-party AN4 importer as a user gets it: ``pip install plugins/asrkit-importer-an4``.

The distribution is installed with pip into a folder of its own and used through PYTHONPATH, in
fresh processes: ``asrkit plugins`` must list it as provided by ``asrkit-importer-an4``,
``asrkit import an4`` must exist, and the plugin's own test suite (a real import of AN4
recordings served over HTTP) must pass against the installed copy.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, SPEECH, pip_install, run_asrkit

PLUGIN = ROOT / "plugins" / "asrkit-importer-an4"


@pytest.fixture(scope="module")
def an4_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin pip-installed into its own folder. It is built from a copy, so that the
    build leaves nothing in the working tree."""
    base = tmp_path_factory.mktemp("an4")
    source = base / "src"
    shutil.copytree(PLUGIN, source, ignore=shutil.ignore_patterns(
        "__pycache__", "build", "*.egg-info", ".pytest_cache", "tests"))
    pip_install(source, base / "site")
    return base / "site"


def test_installed_plugin_is_listed(an4_site):
    assert (an4_site / "asrkit_importer_an4" / "__init__.py").exists()
    listing = run_asrkit("plugins", "--json", pythonpath=an4_site)
    assert listing.returncode == 0, listing.stderr
    report = json.loads(listing.stdout)
    [an4] = [p for p in report["plugins"] if p["name"] == "an4"]
    assert an4["distribution"] == "asrkit-importer-an4"
    assert an4["version"] == "0.1.0"
    assert an4["registered"] == {"importer": ["an4"]}
    assert not [f for f in report["failures"] if f["name"] == "an4"]


def test_installed_plugin_adds_the_command(an4_site):
    result = run_asrkit("import", "an4", "--help", pythonpath=an4_site)
    assert result.returncode == 0, result.stderr
    assert "CMU AN4" in result.stdout
    assert "--mirror" in result.stdout and "--no-verify" in result.stdout


def test_plugin_test_suite_passes_installed(an4_site):
    """The plugin's own tests (``asrkit import an4 --mirror`` against a real HTTP server) run
    against the pip-installed copy, as a plugin author's CI would run them."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ASRKIT_")}
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(an4_site), environment.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    environment["AN4_MINI"] = str(SPEECH / "an4-mini" / "mini_an4_downloads.tar.gz")
    environment["PYTHONDONTWRITEBYTECODE"] = "1"  # leave no __pycache__ in the working tree
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "--rootdir", str(PLUGIN), "-c", str(PLUGIN / "pyproject.toml"),
         str(PLUGIN / "tests" / "test_an4.py")],
        capture_output=True, text=True, env=environment, cwd=PLUGIN, timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "4 passed" in result.stdout
    assert "skipped" not in result.stdout  # the AN4 recordings were found: nothing skipped
