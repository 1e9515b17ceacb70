"""asrkit and its bundled plugins build without a warning: their metadata, sdist, wheel and
editable wheel, through setuptools' build backend (what pip and ``python -m build`` call), with
Python's warnings as errors. A deprecated ``pyproject.toml`` form (``project.license`` as a
table, setuptools' editable-install notice) would otherwise print a screen of warnings in
``scripts/setup.sh``, every install.

Each project is copied, with only what its distribution holds, into a temporary folder, so the
build leaves nothing in the repository; the installed setuptools builds it (no isolation, no
network)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT

#: Each project and what of it its build reads.
PROJECTS = {
    "asrkit": (ROOT, ("pyproject.toml", "setup.py", "README.md", "asrkit", "asrkit_importers")),
    **{folder.name: (folder, ("pyproject.toml", "README.md", folder.name.replace("-", "_")))
       for folder in sorted((ROOT / "plugins").glob("asrkit-*"))},
}

BUILD = """
import os
from setuptools import build_meta as backend
out = os.path.abspath("dist")
os.makedirs(out)
for hook in (backend.prepare_metadata_for_build_wheel, backend.build_sdist,
             backend.build_wheel, backend.build_editable):
    print(hook(out))
"""


def test_the_bundled_plugins_are_all_checked():
    assert len(PROJECTS) == 4, sorted(PROJECTS)


@pytest.mark.parametrize("name", sorted(PROJECTS))
def test_the_project_builds_without_a_warning(name, tmp_path):
    source, members = PROJECTS[name]
    project = tmp_path / name
    project.mkdir()
    for member in members:
        path = source / member
        if path.is_dir():
            shutil.copytree(path, project / member,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy(path, project / member)
    result = subprocess.run([sys.executable, "-W", "error", "-c", BUILD], cwd=project,
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Warning" not in result.stderr, result.stderr[-3000:]
    built = sorted(p.name for p in (project / "dist").iterdir())
    assert any(p.endswith(".tar.gz") for p in built), built
    assert any(p.endswith("-py3-none-any.whl") and "editable" not in p for p in built), built
    assert any(".editable-" in p or "0.editable" in p for p in built), built
