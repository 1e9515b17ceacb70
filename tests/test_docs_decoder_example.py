"""The decoder plugin of docs/plugin-decoder.md works as written: extracted from the page,
pip-installed, its own tests pass, ``asrkit plugins --settings`` lists its settings, and
``asrkit evaluate -o decoder=lexicon -o decoder.KEY=VALUE`` decodes a tiny run with it."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_asrkit
from tests.test_docs import install_tutorial, run_tutorial_tests

PLUGIN = "asrkit-decoder-lexicon"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return install_tutorial(PLUGIN, {"pyproject.toml", "asrkit_decoder_lexicon/__init__.py",
                                     "tests/test_lexicon.py"},
                            tmp_path_factory.mktemp("example"))


def test_the_example_plugin_passes_its_own_tests(site):
    result = run_tutorial_tests(site, PLUGIN)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "3 passed" in result.stdout


def test_the_example_plugin_lists_its_settings(site):
    result = run_asrkit("plugins", "--settings", "lexicon", "--json", pythonpath=site)
    assert result.returncode == 0, result.stderr
    [listed] = json.loads(result.stdout)
    assert listed["kind"] == "decoder"
    settings = {s["name"]: s for s in listed["settings"]}
    assert list(settings) == ["words", "bonus", "penalty", "beam_width", "token_min_logp",
                              "beam_prune_logp"]
    assert settings["bonus"]["default"] == "2.0"
    assert settings["bonus"]["doc"].startswith("Added (natural log) to a transcript")


def test_evaluate_decodes_with_the_example_plugin_and_its_settings(site, datasets, tmp_path,
                                                                   monkeypatch, make_plugins,
                                                                   asrkit_cli):
    """In this process (TensorFlow loads once), with the plugin found through its installed
    entry point, as ``asrkit`` finds it."""
    from asrkit.testing import make_tiny_run

    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("ASRKIT_HOME", str(datasets))
    plugins = make_plugins(entry_points=True)
    assert plugins.plugins["lexicon"].provider.distribution == PLUGIN
    run = make_tiny_run(tmp_path / "run")
    words = tmp_path / "words.txt"
    words.write_text("we must find a new home in the stars\n")
    result = asrkit_cli(["evaluate", run, "--split", "dev", "-o", "decoder=lexicon",
                         "-o", f"decoder.words={words}", "-o", "decoder.bonus=3",
                         "-o", "decoder.beam_width=4", "--json", "-", "--no-progress"], plugins)
    assert result.exit_code == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["decoder"] == "lexicon" and report["utterances"] == 2
    assert report["decoder_settings"] == {
        "words": str(words), "bonus": 3.0, "penalty": -5.0, "beam_width": 4,
        "token_min_logp": -10.0, "beam_prune_logp": None}

    refused = asrkit_cli(["evaluate", run, "-o", "decoder=lexicon", "-o", "decoder.bonus=-1"],
                         plugins)
    assert refused.exit_code == 1
    assert refused.stderr.strip().splitlines()[-1] == (
        "asrkit: error: setting bonus=-1.0 is not allowed: must be a number >= 0")
    needs = asrkit_cli(["evaluate", run, "-o", "decoder=lexicon", "--no-progress"], plugins)
    assert needs.exit_code == 1
    assert "the lexicon decoder needs a word list: -o decoder.words=FILE" in needs.stderr
