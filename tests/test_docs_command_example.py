"""The command plugin of docs/plugin-command.md ("A command plugin") works as written: its
files are taken from the page, installed with pip into a folder of their own, and the command
is run through the ``asrkit`` command line in fresh processes."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_asrkit
from tests.test_docs import install_tutorial

PACKAGE = "asrkit-command-datasets"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return install_tutorial(PACKAGE, {"pyproject.toml", "asrkit_command_datasets/__init__.py"},
                            tmp_path_factory.mktemp("command"))


def test_the_plugin_is_listed(site):
    listing = run_asrkit("plugins", "--json", pythonpath=site)
    assert listing.returncode == 0, listing.stderr
    plugins = {p["name"]: p for p in json.loads(listing.stdout)["plugins"]}
    assert plugins["datasets"]["distribution"] == PACKAGE
    assert plugins["datasets"]["registered"] == {"command": ["datasets"]}
    helped = [line.strip() for line in run_asrkit("--help", pythonpath=site).stdout.splitlines()]
    assert "datasets (asrkit-command-datasets 1.0.0)" in helped  # named, not imported
    assert "Usage: asrkit datasets" in run_asrkit("datasets", "--help", pythonpath=site).stdout


def test_the_command_lists_the_imported_datasets(site, datasets):
    env = {"ASRKIT_HOME": str(datasets)}
    listed = run_asrkit("datasets", pythonpath=site, env=env)
    assert listed.returncode == 0, listed.stderr
    names = [line.split("\t")[0] for line in listed.stdout.splitlines()]
    assert names == ["ldc93s1", "sample"]
    rows = json.loads(run_asrkit("datasets", "--json", pythonpath=site, env=env).stdout)
    assert [(row["name"], row["importer"]) for row in rows] == [("ldc93s1", "ldc93s1"),
                                                                ("sample", "sample")]
    assert all(row["utterances"] > 0 for row in rows)
    longest = run_asrkit("datasets", "--min-hours", "1000", pythonpath=site, env=env)
    assert "no datasets in" in longest.stdout


def test_its_errors_are_one_line(site, tmp_path):
    bad = run_asrkit("datasets", "--min-hours", "-1", pythonpath=site,
                     env={"ASRKIT_HOME": str(tmp_path)})
    assert bad.returncode == 1
    assert bad.stderr == "asrkit: error: --min-hours -1.0: give a number of hours, 0 or more\n"
