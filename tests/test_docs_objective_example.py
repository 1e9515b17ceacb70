"""The objective plugin of docs/hooks.md ("`register_objectives`") works as written: a plugin
module, taken from the page, keeps the objective contract (the page's own test of it passes),
is listed by ``asrkit plugins`` with its settings, trains with ``-o objective=smoothed-ctc -o
objective.weight=...``, is scored by ``asrkit evaluate`` with its own loss, keeps its
objective when resumed, and is transcribed and exported as any run (its outputs are CTC
logits)."""

from __future__ import annotations

import importlib
import json
import re
import sys
import types
from collections.abc import Iterator

import pytest

from asrkit.testing import check_objective
from tests.conftest import SPEECH, TINY
from tests.test_docs import DOCS

#: The page's plugin module, under a name a distribution might give it.
MODULE = "asrkit_objective_smoothed"


def hooks_objective_blocks() -> list[str]:
    text = (DOCS / "hooks.md").read_text()
    section = re.search(r"^## `register_objectives`\n(.*?)(?=^## )", text, re.S | re.M).group(1)
    return re.findall(r"^```python\n(.*?)^```", section, re.S | re.M)


@pytest.fixture(scope="module")
def plugin(tmp_path_factory) -> Iterator[types.ModuleType]:
    """The page's plugin module (the block that registers the objective), written to a file
    as its author would save it, and imported."""
    [source] = [block for block in hooks_objective_blocks()
                if "@hookimpl\ndef register_objectives(register):" in block]
    folder = tmp_path_factory.mktemp("objective-plugin")
    (folder / f"{MODULE}.py").write_text(source)
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module(MODULE)
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop(MODULE, None)


def test_the_example_keeps_the_contract_as_its_own_test_says(plugin):
    [test] = [block for block in hooks_objective_blocks() if "def test_" in block]
    namespace = dict(plugin.__dict__)
    exec(compile(test, "docs/hooks.md", "exec"), namespace)
    namespace["test_smoothed_ctc_keeps_the_contract"]()
    check_objective(plugin.SmoothedCTC(), plugin.SmoothedCTCConfig(weight=0.0))
    check_objective(plugin.SmoothedCTC(), plugin.SmoothedCTCConfig(weight=10.0))


def test_the_example_is_registered_and_lists_its_settings(plugin, make_plugins, asrkit_cli):
    plugins = make_plugins(plugin, entry_points=True)
    assert isinstance(plugins.registry.get("objective", "smoothed-ctc"), plugin.SmoothedCTC)
    assert plugins.plugins[MODULE].registered == {"objective": ["smoothed-ctc"]}
    assert plugins.registry.names("objective") == ["ctc", "smoothed-ctc", "transducer"]
    listing = asrkit_cli(["plugins"], plugins)
    assert listing.exit_code == 0, listing.stderr
    assert [line.split()[-2:] for line in listing.stdout.splitlines()
            if line.startswith(("ctc ", f"{MODULE} "))] == [["objective", "ctc"],
                                                            ["objective", "smoothed-ctc"]]
    settings = asrkit_cli(["plugins", "--settings", "smoothed-ctc"], plugins)
    lines = settings.stdout.splitlines()
    assert lines[0] == "objective smoothed-ctc (-o objective.KEY=VALUE):"
    assert lines[2].split()[:3] == ["objective.weight", "float", "0.1"]
    assert "Weight of the penalty" in lines[3]


def test_the_example_trains_evaluates_and_keeps_its_objective(plugin, make_plugins, asrkit_cli,
                                                              datasets, monkeypatch, tmp_path):
    monkeypatch.setenv("ASRKIT_HOME", str(datasets))
    plugins = make_plugins(plugin, entry_points=True)
    run = tmp_path / "run"
    trained = asrkit_cli(["train", "--batch-size", "4", *TINY, "-o", "objective=smoothed-ctc",
                          "-o", "objective.weight=0.2", "-o", "max_steps=2",
                          "-o", "evaluate_dev=false", "-o", "log_every=1", "--run-dir", run,
                          "--no-progress"],
                         plugins)
    assert trained.exit_code == 0, trained.stderr[-3000:]
    config = json.loads((run / "config.json").read_text())
    assert config["train"]["objective"] == "smoothed-ctc"
    assert config["objective"] == {"weight": 0.2}
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [e["step"] for e in steps if e.get("event") == "step"]

    scored = {}
    for weight in (0.2, 0.0):
        (run / "config.json").write_text(json.dumps({**config, "objective": {"weight": weight}}))
        result = asrkit_cli(["evaluate", run, "--split", "dev", "--json", "-", "--no-progress"],
                            plugins)
        assert result.exit_code == 0, result.stderr[-3000:]
        scored[weight] = json.loads(result.stdout)
    # The loss is the objective's: the penalty adds to CTC's; decoding is any decoder's.
    assert scored[0.2]["loss"] > scored[0.0]["loss"] > 0
    assert scored[0.2]["wer"] == scored[0.0]["wer"] and scored[0.2]["decoder"] == "greedy"
    (run / "config.json").write_text(json.dumps(config))

    for pair, message in (("objective=ctc", "a resumed run keeps its objective (smoothed-ctc)"),
                          ("objective.weight=0.5", "keeps its objective settings")):
        refused = asrkit_cli(["train", "--resume", run, "-o", pair], plugins)
        assert refused.exit_code == 1
        assert message in refused.stderr.strip().splitlines()[-1]

    # Its outputs are CTC logits: transcribed and exported as any run's.
    clip = SPEECH / "ldc93s1" / "LDC93S1.wav"
    transcribed = asrkit_cli(["transcribe", clip, "--model", run, "--json"], plugins)
    assert transcribed.exit_code == 0, transcribed.stderr[-3000:]
    text = json.loads(transcribed.stdout)["text"]
    exported = asrkit_cli(["export", run, "--output", tmp_path / "export"], plugins)
    assert exported.exit_code == 0, exported.stderr[-3000:]
    again = asrkit_cli(["transcribe", clip, "--model", tmp_path / "export", "--json"], plugins)
    assert again.exit_code == 0, again.stderr[-3000:]
    assert json.loads(again.stdout)["text"] == text
