"""The transducer objective under the training engine's recipes, as CTC is tested under them:
gradient accumulation and towers make the update of one larger batch on one device (with the
head's weights and its embedding's gradient, which CTC has not), and a stopped run resumed ends
with the weights (the encoder's and the head's) and the losses of one uninterrupted run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.test_recipe_accumulate import check_one_update_of_the_larger_batch

#: A tiny conformer transducer (the tiny preset's networks, the objective's too) without
#: dropout, so that a resumed run draws nothing an uninterrupted one would not; two
#: micro-batches of 2 an update (8 micro-batches an epoch of the 16 sample utterances), with
#: clipping; every update's loss logged.
TRANSDUCER = ["--model", "conformer", "-o", "preset=tiny", "-o", "objective=transducer",
              "--batch-size", "2", "-o", "accumulate_steps=2", "-o", "clip_norm=1",
              "-o", "model.dropout=0", "-o", "model.attention_dropout=0",
              "-o", "objective.dropout=0", "-o", "evaluate_dev=false", "-o", "log_every=1",
              "--no-progress"]


def test_accumulation_and_towers_make_the_update_of_the_larger_batch():
    """The brnn of tests/scripts/tiny_brnn_batch.py with a small transducer (an LSTM prediction
    network, the auxiliary CTC loss on), clipped: its head's weights must move as the encoder's
    do. (It found the one device's step clipping by a wrong norm: the next test.)"""
    check_one_update_of_the_larger_batch("transducer")


def test_an_embeddings_gradient_is_clipped_by_its_norm():
    """An embedding's gradient is ``tf.IndexedSlices`` with a row for each use of a label; the
    norm clipping divides by is that of the rows summed per label (sqrt(10) here, where Keras'
    own global norm of the slices says sqrt(6)): the step on one device clips what towers and
    accumulation clip."""
    import keras
    import tensorflow as tf

    from asrkit.train.gradients import apply_gradients

    table = tf.Variable(tf.zeros([4, 2]))
    optimizer = keras.optimizers.SGD(learning_rate=1.0, global_clipnorm=1.0)
    uses = tf.IndexedSlices(tf.ones([3, 2]), tf.constant([0, 0, 1]), tf.constant([4, 2]))
    apply_gradients(optimizer, [uses], [table], clip_norm=1.0)
    dense = np.array([[2, 2], [1, 1], [0, 0], [0, 0]], np.float32)
    np.testing.assert_allclose(table.numpy(), -dense / np.sqrt(10), rtol=1e-6)


def networks_and_state(run: Path) -> tuple[dict[str, np.ndarray], dict]:
    """What the latest checkpoint holds of what training updates (the model's and the head's
    trainable weights), by path, and its state."""
    from asrkit.evaluation.restore import restore_networks
    from asrkit.runs.run import load_run
    from asrkit.train.checkpoints import trainable_variables

    model, head, state = restore_networks(load_run(run), "latest")
    assert head is not None
    return {v.path: v.numpy() for v in trainable_variables(model, head)}, state


def step_losses(run: Path) -> dict[int, float]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return {e["step"]: e["loss"] for e in map(json.loads, lines) if e["event"] == "step"}


def check_a_stopped_run_resumes_exactly(asrkit_cli, tmp_path: Path,
                                        args: list[str]) -> tuple[Path, dict[str, np.ndarray]]:
    """Stopped after 3 updates, mid-way through its first epoch (and after a whole number of
    micro-batch pairs), and resumed to 6, a run of ``train ARGS`` ends with the weights (the
    model's and its head's) and the losses of one run to 6; returns that run and the weights
    by path, for an objective's own checks."""
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    done = asrkit_cli(["train", *args, "-o", "max_steps=6", "--run-dir", whole])
    assert done.exit_code == 0, done.stderr[-3000:]
    stopped = asrkit_cli(["train", *args, "-o", "max_steps=3", "--run-dir", parts])
    assert stopped.exit_code == 0, stopped.stderr[-3000:]
    _, state = networks_and_state(parts)
    assert (state["global_step"], state["epoch"], state["step_in_epoch"]) == (3, 0, 6)
    resumed = asrkit_cli(["train", "--resume", parts, "-o", "max_steps=6", "--no-progress"])
    assert resumed.exit_code == 0, resumed.stderr[-3000:]

    expected, expected_state = networks_and_state(whole)
    got, got_state = networks_and_state(parts)
    assert got_state["global_step"] == expected_state["global_step"] == 6
    assert got.keys() == expected.keys()
    for path, value in expected.items():
        np.testing.assert_allclose(got[path], value, rtol=1e-5, atol=1e-6, err_msg=path)
    losses = step_losses(whole)
    assert sorted(losses) == list(range(1, 7))
    assert step_losses(parts) == pytest.approx(losses, rel=1e-5)
    return whole, got


def test_a_stopped_transducer_run_resumes_exactly(datasets, monkeypatch, asrkit_cli, tmp_path):
    monkeypatch.setenv("ASRKIT_HOME", str(datasets))
    _, weights = check_a_stopped_run_resumes_exactly(asrkit_cli, tmp_path, TRANSDUCER)
    assert any(path.startswith("transducer_head/") for path in weights)
