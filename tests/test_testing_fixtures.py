"""The fixtures asrkit's pytest plugin gives plugin authors: the CLI runner keeps the test's own
output, the tiny dataset and run are what ``asrkit train`` reads and leaves."""

from __future__ import annotations

import json


def test_asrkit_cli_keeps_what_the_test_printed(asrkit_cli, capsys):
    print("printed by the test")
    result = asrkit_cli(["--version"])
    assert result.exit_code == 0 and result.stdout.startswith("asrkit")
    assert "printed by the test" not in result.stdout
    assert "printed by the test" in capsys.readouterr().out


def test_tiny_dataset_is_the_bundled_sample_corpus(tiny_dataset):
    report = json.loads((tiny_dataset / "dataset.json").read_text())
    assert {split: report["splits"][split]["utterances"] for split in ("train", "dev", "test")} \
        == {"train": 16, "dev": 2, "test": 1}


def test_tiny_run_loads_as_a_trained_run(tiny_run):
    from asrkit.evaluation.restore import load_run_model

    run, _, state = load_run_model(tiny_run)
    assert run.spec.name == "brnn" and state["global_step"] == 7
