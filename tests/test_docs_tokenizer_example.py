"""The tokenizer plugin of docs/plugin-tokenizer.md works as written: extracted from the page,
pip-installed, its own tests pass, and ``asrkit tokenizer build --tokenizer letters`` then
``asrkit train -o tokenizer=FILE`` and ``asrkit transcribe`` use it through its installed entry
point."""

from __future__ import annotations

import json

import pytest

from tests.conftest import SPEECH, TINY
from tests.test_docs import install_tutorial, run_tutorial_tests

PLUGIN = "asrkit-tokenizer-letters"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return install_tutorial(PLUGIN, {"pyproject.toml", "asrkit_tokenizer_letters/__init__.py",
                                     "tests/test_letters.py"},
                            tmp_path_factory.mktemp("example"))


def test_the_example_plugin_passes_its_own_tests(site):
    result = run_tutorial_tests(site, PLUGIN)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "2 passed" in result.stdout


def test_a_run_trains_and_transcribes_on_the_example_tokenizer(site, tiny_dataset, tmp_path,
                                                               monkeypatch, make_plugins,
                                                               asrkit_cli):
    """In this process (TensorFlow loads once), with the plugin found through its installed
    entry point, as ``asrkit`` finds it."""
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.chdir(tmp_path)
    plugins = make_plugins(entry_points=True)
    assert plugins.plugins["letters"].provider.distribution == PLUGIN
    built = asrkit_cli(["tokenizer", "build", "--tokenizer", "letters", "--dataset",
                        tiny_dataset, "-o", "sample.letters"], plugins)
    assert built.exit_code == 0, built.stderr
    trained = asrkit_cli(["train", "--dataset", tiny_dataset, "--run-dir", "run",
                          "-o", "tokenizer=sample.letters", "-o", "max_steps=2",
                          "--batch-size", "4", "-o", "eval_every_minutes=0", "--no-progress",
                          *TINY], plugins)
    assert trained.exit_code == 0, trained.stderr
    clip = SPEECH / "ldc93s1" / "LDC93S1.wav"
    result = asrkit_cli(["transcribe", clip, "--model", "run", "--json"], plugins)
    assert result.exit_code == 0, result.stderr
    [line] = [json.loads(line) for line in result.stdout.splitlines()]
    assert "\u2581" not in line["text"]
    assert " ".join(w["word"] for w in line["words"]) == line["text"]
