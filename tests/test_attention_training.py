"""The attention objective under the training engine's recipes, as the transducer is tested under
them (tests/test_transducer_training.py): gradient accumulation and towers make the update of
one larger batch on one device (the head's weights, a Transformer's or LAS's, with the CTC
layer's), a stopped run resumed ends with the weights and losses of one uninterrupted run, and
a run in mixed bfloat16 precision trains with finite losses."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from asrkit import plugins
from asrkit.decoders.attention import ATTENTION_OUTPUTS
from tests.test_recipe_accumulate import check_one_update_of_the_larger_batch
from tests.test_transducer_training import (
    check_a_stopped_run_resumes_exactly,
    networks_and_state,
    step_losses,
)

#: A tiny conformer with the attention objective (the tiny preset's Transformer decoder, joint
#: CTC at its default weight, label smoothing) without dropout, so that a resumed run draws
#: nothing an uninterrupted one would not; two micro-batches of 2 an update, with clipping;
#: every update's loss logged.
ATTENTION = ["--model", "conformer", "-o", "preset=tiny", "-o", "objective=attention",
             "--batch-size", "2", "-o", "accumulate_steps=2", "-o", "clip_norm=1",
             "-o", "model.dropout=0", "-o", "model.attention_dropout=0",
             "-o", "objective.dropout=0", "-o", "evaluate_dev=false", "-o", "log_every=1",
             "--no-progress"]


@pytest.fixture
def home(datasets, monkeypatch, make_plugins):
    """ASRKIT_HOME with the sample datasets, and the installed plugins (the attention objective
    and its decoders among them)."""
    monkeypatch.setenv("ASRKIT_HOME", str(datasets))
    make_plugins(entry_points=True)
    assert plugins.get("objective", "attention").outputs == ATTENTION_OUTPUTS
    return datasets


@pytest.mark.parametrize("objective", ["attention", "attention-las"])
def test_accumulation_and_towers_make_the_update_of_the_larger_batch(objective):
    """The brnn of tests/scripts/tiny_brnn_batch.py with a small attention decoder (joint CTC
    at 0.3, label smoothing), clipped: the head's weights move as the encoder's do."""
    check_one_update_of_the_larger_batch(objective)


def test_a_stopped_attention_run_resumes_exactly(home, asrkit_cli, tmp_path):
    """Stopped after 3 updates, mid-way through its first epoch (and after a whole number of
    micro-batch pairs), and resumed to 6, a run ends as one run to 6 does."""
    whole, weights = check_a_stopped_run_resumes_exactly(asrkit_cli, tmp_path, ATTENTION)
    config = json.loads((whole / "config.json").read_text())
    assert config["train"]["objective"] == "attention"
    assert config["train"]["decoder"] == "attention-beam"
    # The tiny preset's decoder (the objective's preset).
    assert (config["objective"]["d_model"], config["objective"]["layers"]) == (16, 1)
    assert any(path.startswith("attention_head/block0/") for path in weights)
    assert any(path.startswith("attention_head/ctc_output/") for path in weights)


@pytest.mark.parametrize("decoder", ["transformer", "las"])
def test_a_mixed_bfloat16_run_trains_with_finite_losses(home, asrkit_cli, tmp_path, decoder):
    """bfloat16 products in the encoder and the head (the loss in float32): the losses of a
    short run are finite and positive, and its checkpoint's weights float32 and finite."""
    run = tmp_path / "run"
    result = asrkit_cli(["train", *ATTENTION, "-o", "precision=mixed_bfloat16",
                         "-o", f"objective.decoder={decoder}", "-o", "max_steps=4",
                         "--run-dir", run])
    assert result.exit_code == 0, result.stderr[-3000:]
    assert "precision: mixed_bfloat16" in result.stdout
    losses = step_losses(run)
    assert sorted(losses) == [1, 2, 3, 4]
    assert all(math.isfinite(loss) and loss > 0 for loss in losses.values()), losses
    weights, _ = networks_and_state(run)
    head = {path: value for path, value in weights.items()
            if path.startswith("attention_head/")}
    assert head and all(value.dtype == np.float32 and np.isfinite(value).all()
                        for value in head.values())
