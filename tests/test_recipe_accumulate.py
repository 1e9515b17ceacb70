"""Gradient accumulation: K micro-batches make one update equal to one K times larger batch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import TINY


@pytest.fixture
def home(datasets, monkeypatch):
    monkeypatch.setenv("ASRKIT_HOME", str(datasets))
    return datasets


def check_one_update_of_the_larger_batch(objective: str = "ctc") -> None:
    """tests/scripts/accumulate.py for ``objective``, with clipping on: micro-batches of equal
    and of unequal sizes, on one device and on two CPU towers, against one step of the whole
    batch on one device, must change every weight (the model's and the objective's head's) as
    that step does, to float32 rounding."""
    script = Path(__file__).parent / "scripts" / "accumulate.py"
    result = subprocess.run([sys.executable, str(script), objective], capture_output=True,
                            text=True, check=False, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    update = figures.pop("max_update")
    assert update > 1e-3  # the update really changed the weights
    for case, difference in figures.items():
        assert difference < 1e-5 * update, (case, figures)


def test_accumulated_update_equals_the_larger_batch_on_one_device_and_on_towers():
    check_one_update_of_the_larger_batch("ctc")


def test_a_run_counts_updates_and_applies_an_epochs_last_micro_batches(home, asrkit_cli,
                                                                        tmp_path):
    """16 utterances in batches of 4 are 4 batches an epoch: with 3 an update, 2 updates an
    epoch (3 batches, then the last one on its own)."""
    run = tmp_path / "run"
    result = asrkit_cli(["train", "--epochs", "2", "--batch-size", "4", *TINY,
                         "-o", "accumulate_steps=3", "-o", "log_every=1",
                         "-o", "evaluate_dev=false", "--run-dir", run, "--no-progress"])
    assert result.exit_code == 0, result.stderr[-3000:]
    assert "finished after 4 steps" in result.stdout
    lines = (run / "metrics.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    # Logged by the loop after each full update; an epoch's last one is applied at its end.
    assert [e["step"] for e in events if e["event"] == "step"] == [1, 3]
    assert [e["step"] for e in events if e["event"] == "epoch"] == [2, 4]
    state = json.loads((run / "checkpoints/latest.json").read_text())["state"]
    assert state["global_step"] == 4 and state["steps_per_epoch"] == 4
