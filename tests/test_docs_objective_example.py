"""The objective plugin of docs/hooks-models.md ("`register_objectives`") works as written: the
page's plugin module, packaged with the page's entry point and installed with pip, keeps the
objective contract (the page's own test of it passes); run by the ``asrkit`` command as a user
runs it, it is listed with its distribution and settings, trains with ``-o objective=smoothed-ctc
-o objective.weight=...``, is scored by ``asrkit evaluate`` with its own loss, and is transcribed
and exported as any run (its outputs are CTC logits), the export transcribing as the run does; a
resumed run keeps its objective."""

from __future__ import annotations

import importlib
import json
import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from asrkit.testing import check_objective
from tests.conftest import SPEECH, TINY, hook_section, run_asrkit

#: The distribution the page's module is installed as.
PACKAGE = "asrkit-objective-smoothed"
#: Wall-clock limit of each command: minutes, since the test machine may be shared.
TIMEOUT = 600


def hooks_objective_blocks(language: str = "python") -> list[str]:
    """The ``language`` code blocks of the page's section on ``register_objectives``."""
    _, section = hook_section("register_objectives")
    return re.findall(rf"^```{language}\n(.*?)^```", section, re.S | re.M)


def entry_points() -> dict[str, str]:
    """The entry points the page declares for the plugin (its ``pyproject.toml`` table)."""
    [packaging] = hooks_objective_blocks("toml")
    table, *lines = packaging.splitlines()
    assert table == "[project.entry-points.asrkit]"
    return dict(re.fullmatch(r'(\S+) = "(\S+)"', line).groups() for line in lines)


@pytest.fixture(scope="module")
def site(installed) -> Path:
    """The page's plugin module (the block that registers the objective), saved as the module
    the page's entry point names, in a distribution with that entry point, pip-installed into a
    folder of its own (returned: a PYTHONPATH)."""
    [source] = [block for block in hooks_objective_blocks()
                if "@hookimpl\ndef register_objectives(register):" in block]
    [module] = set(entry_points().values())
    return installed(PACKAGE, module, source, entry_points())


@pytest.fixture
def plugin(site) -> Iterator[types.ModuleType]:
    """The installed module, imported in this process."""
    [module] = set(entry_points().values())
    sys.path.insert(0, str(site))
    try:
        yield importlib.import_module(module)
    finally:
        sys.path.remove(str(site))
        sys.modules.pop(module, None)


def test_the_example_keeps_the_contract_as_its_own_test_says(plugin):
    [test] = [block for block in hooks_objective_blocks() if "def test_" in block]
    namespace = dict(plugin.__dict__)
    exec(compile(test, "docs/hooks-models.md", "exec"), namespace)
    namespace["test_smoothed_ctc_keeps_the_contract"]()
    check_objective(plugin.SmoothedCTC(), plugin.SmoothedCTCConfig(weight=0.0))
    check_objective(plugin.SmoothedCTC(), plugin.SmoothedCTCConfig(weight=10.0))


def test_the_installed_example_trains_evaluates_transcribes_and_exports(
        site, datasets, tmp_path, monkeypatch, make_plugins, asrkit_cli):
    """Every command in a process of its own, as a user runs it, but the refusals to resume
    with another objective: they come before any work, so they run in this process, with the
    plugin found through its installed entry point."""
    def asrkit(*args: object) -> str:
        result = run_asrkit(*map(str, args), pythonpath=site, timeout=TIMEOUT,
                            env={"ASRKIT_HOME": str(datasets)})
        assert result.returncode == 0, result.stderr[-3000:]
        return result.stdout

    listed = json.loads(asrkit("plugins", "--json"))["plugins"]
    [mine] = [p for p in listed if p["distribution"] == PACKAGE]
    assert mine["name"] in entry_points() and mine["registered"] == {"objective":
                                                                     ["smoothed-ctc"]}
    [settings] = json.loads(asrkit("plugins", "--settings", "smoothed-ctc", "--json"))
    assert (settings["kind"], settings["prefix"]) == ("objective", "objective.")
    [weight] = settings["settings"]
    assert (weight["name"], weight["default"]) == ("weight", "0.1")
    assert weight["doc"].startswith("Weight of the penalty")

    run = tmp_path / "run"
    asrkit("train", "--batch-size", "4", *TINY, "-o", "objective=smoothed-ctc",
           "-o", "objective.weight=0.2", "-o", "max_steps=2", "-o", "evaluate_dev=false",
           "-o", "log_every=1", "--run-dir", run, "--no-progress")
    config = json.loads((run / "config.json").read_text())
    assert config["train"]["objective"] == "smoothed-ctc"
    assert config["objective"] == {"weight": 0.2}
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [e["step"] for e in steps if e.get("event") == "step"] == [1, 2]

    scored = {}
    for weight_value in (0.2, 0.0):
        (run / "config.json").write_text(json.dumps({**config,
                                                     "objective": {"weight": weight_value}}))
        scored[weight_value] = json.loads(asrkit("evaluate", run, "--split", "dev", "--json",
                                                 "-", "--no-progress"))
    (run / "config.json").write_text(json.dumps(config))
    # The loss is the objective's: the penalty adds to CTC's; decoding is any decoder's.
    assert scored[0.2]["loss"] > scored[0.0]["loss"] > 0
    assert scored[0.2]["wer"] == scored[0.0]["wer"] and scored[0.2]["decoder"] == "greedy"

    # Its outputs are CTC logits: transcribed and exported as any run's.
    clip = SPEECH / "ldc93s1" / "LDC93S1.wav"
    transcript = json.loads(asrkit("transcribe", clip, "--model", run, "--json"))
    assert transcript["decoder"] == "greedy"
    asrkit("export", run, "--output", tmp_path / "export")
    again = json.loads(asrkit("transcribe", clip, "--model", tmp_path / "export", "--json"))
    assert again["text"] == transcript["text"]

    monkeypatch.syspath_prepend(str(site))
    plugins = make_plugins(entry_points=True)
    assert plugins.registry.names("objective") == ["attention", "ctc", "smoothed-ctc", "transducer"]
    monkeypatch.setenv("ASRKIT_HOME", str(datasets))
    for pair, message in (("objective=ctc", "a resumed run keeps its objective (smoothed-ctc)"),
                          ("objective.weight=0.5", "keeps its objective settings")):
        refused = asrkit_cli(["train", "--resume", run, "-o", pair], plugins)
        assert refused.exit_code == 1
        assert message in refused.stderr.strip().splitlines()[-1]
