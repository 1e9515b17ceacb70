"""The model plugin of docs/plugin-model.md ("A model plugin") works as written: installed
with pip, it trains, evaluates, transcribes and exports through the ``asrkit`` command and passes
its own contract test; and the model example of docs/hooks-models.md keeps the model contract."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from asrkit.testing import check_output_lengths, check_padding
from asrkit.testing.models import sample_clip
from tests.conftest import hook_section, run_asrkit
from tests.test_docs import install_tutorial

PACKAGE = "asrkit-model-tinyconv"
#: Wall-clock limit of each command: minutes, since the test machine may be shared.
TIMEOUT = 600


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The tutorial's model plugin, extracted from the page and pip-installed into a folder."""
    return install_tutorial(PACKAGE, {"pyproject.toml", "asrkit_model_tinyconv/__init__.py",
                                      "tests/test_tinyconv.py"},
                            tmp_path_factory.mktemp("model-plugin"))


def test_model_plugin_trains_evaluates_transcribes_and_exports(site, tiny_dataset, tmp_path):
    from asrkit.serving.export import ExportedModel

    def asrkit(*args):
        result = run_asrkit(*map(str, args), pythonpath=site, timeout=TIMEOUT,
                            env={"ASRKIT_HOME": str(tmp_path / "home")})
        assert result.returncode == 0, result.stderr[-3000:]
        return result.stdout

    plugins = {p["name"]: p for p in json.loads(asrkit("plugins", "--json"))["plugins"]}
    assert plugins["tinyconv"]["distribution"] == PACKAGE
    assert plugins["tinyconv"]["registered"] == {"model": ["tinyconv"]}

    run = tmp_path / "run"
    asrkit("train", "--model", "tinyconv", "--dataset", tiny_dataset, "--run-dir", run,
           "--batch-size", "4", "-o", "model.channels=16", "-o", "max_steps=4", "--no-progress")
    assert json.loads((run / "config.json").read_text())["model"] == {"channels": 16, "kernel": 5}

    report = json.loads(asrkit("evaluate", run, "--split", "dev", "--json", "-", "--no-progress"))
    assert report["utterances"] == 2

    transcript = json.loads(asrkit("transcribe", sample_clip(), "--model", run, "--json"))
    assert "text" in transcript

    asrkit("export", run, "--format", "tflite", "--output", tmp_path / "tflite")
    meta = ExportedModel(tmp_path / "tflite").metadata
    assert meta["model"] == "tinyconv" and meta["frame_seconds"] == pytest.approx(0.02)
    assert meta["verified_max_abs_diff"] < 1e-3


def test_model_plugin_passes_its_own_contract_test(site, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASRKIT_")}
    env["PYTHONPATH"] = str(site)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         str(site.parent / PACKAGE / "tests")],
        capture_output=True, text=True, env=env, cwd=tmp_path, check=False, timeout=TIMEOUT,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert "1 passed" in result.stdout


def hooks_model_example() -> str:
    _, section = hook_section("register_models")
    return re.findall(r"^```python\n(.*?)^```", section, re.S | re.M)[-1]


def test_hooks_model_example_keeps_the_contract():
    """The example in docs/hooks-models.md once built a one-input model, which the engine's
    ``model((features, lengths))`` call broke on."""
    namespace: dict = {}
    exec(compile(hooks_model_example(), "docs/hooks-models.md", "exec"), namespace)
    spec = namespace["TinyModel"]()
    config = spec.Config(units=8)
    assert check_output_lengths(spec, config, 26) == 1
    assert check_padding(spec, config, 26) < 1e-4


def test_the_streaming_model_example_streams_exactly(tmp_path):
    """docs/plugin-model.md's minimal streaming model passes check_streaming_model as written."""
    from tests.conftest import run_doc_snippet

    result = run_doc_snippet("plugin-model.md", "streaming-model", {}, (), tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "streams exactly" in result.stdout
