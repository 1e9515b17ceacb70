"""The exponential moving average of the weights: its value, and who uses it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import TINY


@pytest.fixture
def home(datasets, monkeypatch):
    monkeypatch.setenv("ASRKIT_HOME", str(datasets))
    return datasets


def test_the_decay_warms_up_to_the_one_set():
    import keras
    import tensorflow as tf

    from asrkit.train.ema import WeightAverage

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    average = WeightAverage(tf.distribute.get_strategy(), model, 0.999)
    assert average.decay_after(1) == pytest.approx(2 / 11)  # the first steps: the raw weights
    assert average.decay_after(1000) == pytest.approx(1001 / 1010)
    assert average.decay_after(8991) == pytest.approx(0.999)
    assert average.decay_after(20000) == 0.999


@pytest.mark.parametrize("decay", [0.2, 0.8])  # the set decay, and the warm-up below it
def test_the_average_after_n_updates_follows_the_trajectory(decay):
    import keras
    import tensorflow as tf

    from asrkit.train.ema import WeightAverage

    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    optimizer = keras.optimizers.SGD(learning_rate=0.1)
    updates = 6
    average = WeightAverage(tf.distribute.get_strategy(), model, decay)
    average.reset()
    data = np.random.default_rng(0).normal(size=(updates, 8, 4)).astype(np.float32)
    trajectory = [[w.numpy() for w in model.trainable_variables]]
    for n, batch in enumerate(data, start=1):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(batch) - 1.0))
        variables = model.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        average.update(n)
        trajectory.append([w.numpy() for w in model.trainable_variables])
    decays = [min(decay, (1 + n) / (10 + n)) for n in range(1, updates + 1)]
    for i, shadow in enumerate(average.shadow):
        # Weight k's share: (1 - d_k) times every later update's decay; w_0's: every decay.
        expected = np.prod(decays) * trajectory[0][i] + sum(
            (1 - decays[k - 1]) * np.prod(decays[k:]) * trajectory[k][i]
            for k in range(1, updates + 1))
        np.testing.assert_allclose(shadow.numpy(), expected, rtol=1e-5, atol=1e-6)
    raw = [w.numpy() for w in model.trainable_variables]
    with average.applied():  # evaluation sees the average, training keeps its own weights
        for shadow, weight in zip(average.shadow, model.trainable_variables, strict=True):
            np.testing.assert_array_equal(weight.numpy(), shadow.numpy())
    for before, weight in zip(raw, model.trainable_variables, strict=True):
        np.testing.assert_array_equal(weight.numpy(), before)


def test_evaluate_transcribe_and_export_load_the_average(home, asrkit_cli, tmp_path):
    import tensorflow as tf

    from asrkit.evaluation.restore import load_run_model
    from asrkit.serving.transcribe import CheckpointRecognizer
    from asrkit.train.checkpoints import Checkpoints
    from asrkit.train.ema import shadow_of

    run = tmp_path / "run"
    result = asrkit_cli(["train", "--epochs", "1", "--batch-size", "4", *TINY,
                         "-o", "ema_decay=0.5", "-o", "learning_rate=0.01", "--run-dir", run,
                         "--no-progress"])
    assert result.exit_code == 0, result.stderr[-3000:]
    state = json.loads((run / "checkpoints/latest.json").read_text())["state"]
    assert state["ema_from_step"] == 0 and state["global_step"] == 4

    loaded_run, model, _ = load_run_model(run, "latest")
    raw = loaded_run.spec.build(loaded_run.model_config,
                                loaded_run.extractor.num_features(loaded_run.feature_config),
                                loaded_run.alphabet.num_classes)
    shadow = shadow_of(raw)
    Checkpoints(run / "checkpoints", model=raw, ema=shadow).restore("latest")
    weights = [w.numpy() for w in model.trainable_variables]
    for loaded, average in zip(weights, shadow.weights, strict=True):
        np.testing.assert_array_equal(loaded, average.numpy())
    assert any(not np.allclose(a, b.numpy()) for a, b in
               zip(weights, raw.trainable_variables, strict=True))  # the raw weights differ

    recognizer = CheckpointRecognizer(run, "latest")
    for a, b in zip(recognizer._model.trainable_variables, weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b)

    evaluated = asrkit_cli(["evaluate", run, "--split", "dev", "--checkpoint", "latest",
                            "--json", "-", "--no-progress"])
    assert evaluated.exit_code == 0, evaluated.stderr[-3000:]
    scored = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    at_end = [e for e in scored if e["event"] == "evaluation"][-1]
    # the training's dev evaluation scored the average too: the same loss as evaluate's
    assert json.loads(evaluated.stdout)["loss"] == pytest.approx(at_end["dev_loss"], rel=1e-4)

    from asrkit.serving.export import ExportedModel, export_run, verification_audio
    from asrkit.serving.graph import make_logits_fn

    meta = export_run(run, "savedmodel", tmp_path / "export", "latest")
    audio = verification_audio()
    exported = ExportedModel(meta["path"]).logits(audio)
    averaged = tf.function(make_logits_fn(loaded_run, model))(audio).numpy()
    raw_logits = tf.function(make_logits_fn(loaded_run, raw))(audio).numpy()
    assert np.abs(exported - averaged).max() < 1e-4 < np.abs(exported - raw_logits).max()
