"""The feature-extractor plugin of docs/plugin-features.md works as written: extracted from the
page, pip-installed, its own tests pass, and a model trained on it with ``-o features=energy``
is evaluated, transcribes and exports through the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import SPEECH, TINY, run_asrkit
from tests.test_docs import install_tutorial

PACKAGE = "asrkit-features-energy"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The example package installed with pip into a folder of its own."""
    return install_tutorial(PACKAGE, {"pyproject.toml", "asrkit_features_energy/__init__.py",
                                      "tests/test_energy.py"}, tmp_path_factory.mktemp("example"))


@pytest.fixture
def cli(site, datasets, monkeypatch, make_plugins, asrkit_cli):
    """The asrkit CLI in this process, with the installed plugins, the example among them (found
    through its entry point, as a user's installation finds it)."""
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("ASRKIT_HOME", str(datasets))
    plugins = make_plugins(entry_points=True)
    return lambda *args: asrkit_cli([str(a) for a in args], plugins)


def test_the_example_registers_and_passes_its_own_tests(site, tmp_path):
    listing = run_asrkit("plugins", "--json", pythonpath=site)
    plugins = {p["name"]: p for p in json.loads(listing.stdout)["plugins"]}
    assert plugins["energy"]["distribution"] == PACKAGE
    assert plugins["energy"]["registered"] == {"feature": ["energy"]}

    env = {k: v for k, v in os.environ.items() if not k.startswith("ASRKIT_")}
    env["PYTHONPATH"] = str(site)
    source = site.parent / PACKAGE
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(source / "tests")],
        capture_output=True, text=True, env=env, cwd=tmp_path, check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert "2 passed" in result.stdout


def test_train_evaluate_transcribe_and_export_on_the_example(cli, tmp_path):
    run = tmp_path / "run"
    trained = cli("train", "--model", "brnn", "--dataset", "sample", "-o", "features=energy",
                  *TINY, "--epochs", "1", "-o", "max_steps=2", "-o", "evaluate_dev=false",
                  "--run-dir", run, "--no-progress")
    assert trained.exit_code == 0, trained.stderr[-3000:]
    assert "settings are not applied to energy" in trained.stdout + trained.stderr
    config = json.loads((run / "config.json").read_text())
    assert config["train"]["features"] == "energy"
    assert config["features"] == {"sample_rate": 16000, "window_ms": 25.0, "step_ms": 10.0,
                                  "floor": 1e-10}
    assert config["num_features"] == 1

    evaluated = cli("evaluate", run, "--split", "test", "--json", "-")
    assert evaluated.exit_code == 0, evaluated.stderr[-3000:]
    assert "wer" in json.loads(evaluated.stdout)

    said = cli("transcribe", SPEECH / "ldc93s1" / "LDC93S1.wav", "--model", run, "--json")
    assert said.exit_code == 0, said.stderr[-3000:]

    exported = cli("export", run, "--output", tmp_path / "export", "--json")
    assert exported.exit_code == 0, exported.stderr[-3000:]
    meta = json.loads((tmp_path / "export" / "asrkit.json").read_text())
    assert meta["features"] == "energy" and meta["frame_seconds"] == pytest.approx(0.01)

    # The run keeps its extractor: resuming with another is refused in one line.
    other = cli("train", "--resume", run, "-o", "features=mfcc")
    assert other.exit_code == 1
    assert other.stderr.strip() == ("asrkit: error: -o features=mfcc: a resumed run keeps its "
                                    "feature extractor (energy); train a new run for another")
