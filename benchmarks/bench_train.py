"""Training speed of ``brnn`` or ``conformer``: asrkit's engine step against a hand-written step
and plain Keras.

Three ways to train the same network on the same batch (``--batch`` utterances of
``--seconds`` seconds), measured in one run:

- **hand-written**: a minimal TF2 step: ``tf.GradientTape``, CTC loss, ``Adam.apply_gradients``
  in a ``tf.function``, on asrkit's model. The baseline the engine must not slow down;
- **asrkit engine**: the engine's compiled step (``tf.distribute`` strategy, loss scaling with
  the non-finite guard, per-utterance losses gathered to the host), on the same model;
- **plain Keras**: the same network written the obvious way with stock Keras layers, trained
  with the same hand-written step. For ``brnn`` (the notebook's sizes by default): ``Dense``
  layers and ``Bidirectional(LSTM)``; ``brnn`` should beat it (its LSTM multiplies the input by
  its weights for all frames at once). For ``conformer`` (its ``cpu`` preset's sizes by
  default): the same blocks with ``keras.layers.MultiHeadAttention`` (absolute positions; asrkit's
  has Transformer-XL relative positions and masks padded keys) and ``"same"``-padded
  convolutions (asrkit's mask padding, so results do not depend on it): the price of those two.

Reports seconds per step, steps per second and audio-seconds trained per second, with ratios.
Features are random (the arithmetic does not depend on the values).

    python benchmarks/bench_train.py [--model brnn|conformer] [--batch 16] [--seconds 5]
                                     [--steps 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import asrkit  # noqa: E402, F401  (sets TensorFlow's environment defaults before it loads)


def plain_keras_brnn(config, num_features: int, num_classes: int):
    """The notebook's network with stock Keras layers (no hoisting)."""
    import keras
    import tensorflow as tf

    from asrkit.features import context_windows

    init = keras.initializers.RandomNormal(stddev=config.init_stddev)

    def clip(x):
        return tf.minimum(tf.nn.relu(x), config.relu_clip)

    class PlainBRNN(keras.Model):
        def __init__(self):
            super().__init__()
            self.h1 = keras.layers.Dense(config.n_hidden, kernel_initializer=init)
            self.h2 = keras.layers.Dense(config.n_hidden, kernel_initializer=init)
            self.h3 = keras.layers.Dense(2 * config.n_cell, kernel_initializer=init)
            self.rnn = keras.layers.Bidirectional(
                keras.layers.LSTM(config.n_cell, return_sequences=True, unit_forget_bias=True))
            self.h5 = keras.layers.Dense(config.n_hidden, kernel_initializer=init)
            self.out = keras.layers.Dense(num_classes, kernel_initializer=init)
            self.drop = keras.layers.Dropout(config.dropout)

        def call(self, inputs, training=False):
            features, lengths = inputs
            x = context_windows(features, config.context)
            for layer in (self.h1, self.h2, self.h3):
                x = self.drop(clip(layer(x)), training=training)
            mask = tf.sequence_mask(lengths, tf.shape(x)[1])
            x = self.rnn(x, mask=mask, training=training)
            return self.out(self.drop(clip(self.h5(x)), training=training))

    model = PlainBRNN()
    model((tf.zeros([1, 1, num_features]), tf.ones([1], tf.int32)))
    return model


def plain_keras_conformer(config, num_features: int, num_classes: int):
    """Conformer-CTC with stock Keras layers: Conv2D subsampling, and blocks of feed-forward,
    ``MultiHeadAttention``, convolution module, feed-forward, as Gulati et al. describe them."""
    import keras
    import tensorflow as tf

    d = config.d_model

    def feed_forward():
        return keras.Sequential([
            keras.layers.LayerNormalization(epsilon=1e-5),
            keras.layers.Dense(config.ff_multiplier * d, activation="swish"),
            keras.layers.Dropout(config.dropout), keras.layers.Dense(d),
            keras.layers.Dropout(config.dropout)])

    class Block(keras.layers.Layer):
        def __init__(self):
            super().__init__()
            self.ff1, self.ff2 = feed_forward(), feed_forward()
            self.attention_norm = keras.layers.LayerNormalization(epsilon=1e-5)
            self.attention = keras.layers.MultiHeadAttention(
                config.num_heads, d // config.num_heads, dropout=config.attention_dropout)
            self.conv = keras.Sequential([
                keras.layers.LayerNormalization(epsilon=1e-5), keras.layers.Dense(2 * d),
                keras.layers.Lambda(lambda x: x[..., :d] * tf.sigmoid(x[..., d:])),
                keras.layers.DepthwiseConv1D(config.conv_kernel, padding="same"),
                keras.layers.LayerNormalization(epsilon=1e-5), keras.layers.Activation("swish"),
                keras.layers.Dense(d), keras.layers.Dropout(config.dropout)])
            self.norm = keras.layers.LayerNormalization(epsilon=1e-5)
            self.dropout = keras.layers.Dropout(config.dropout)

        def call(self, x, training=False):
            x = x + 0.5 * self.ff1(x, training=training)
            y = self.attention_norm(x)
            x = x + self.dropout(self.attention(y, y, training=training), training=training)
            x = x + self.conv(x, training=training)
            x = x + 0.5 * self.ff2(x, training=training)
            return self.norm(x)

    class PlainConformer(keras.Model):
        def __init__(self):
            super().__init__()
            c = config.subsampling_channels
            self.conv1 = keras.layers.Conv2D(c, 3, 2, padding="same", activation="relu")
            self.conv2 = keras.layers.Conv2D(c, 3, 2, padding="same", activation="relu")
            self.project = keras.layers.Dense(d)
            self.blocks = [Block() for _ in range(config.num_blocks)]
            self.out = keras.layers.Dense(num_classes)

        def call(self, inputs, training=False):
            features, _ = inputs
            x = self.conv2(self.conv1(features[..., None]))
            shape = tf.shape(x)
            x = self.project(tf.reshape(x, [shape[0], shape[1], x.shape[2] * x.shape[3]]))
            for block in self.blocks:
                x = block(x, training=training)
            return self.out(x)

    model = PlainConformer()
    model((tf.zeros([1, 8, num_features]), tf.constant([8])))
    return model


def hand_written_step(model, learning_rate: float = 1e-3):
    import keras
    import tensorflow as tf

    optimizer = keras.optimizers.Adam(learning_rate)

    @tf.function
    def step(features, lengths, labels, label_lengths, logit_lengths):
        with tf.GradientTape() as tape:
            logits = model((features, lengths), training=True)
            loss = tf.reduce_mean(tf.nn.ctc_loss(labels, logits, label_lengths, logit_lengths,
                                                 logits_time_major=False, blank_index=-1))
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
        return loss

    return step


def preset_sizes(spec, preset: str = "cpu"):
    """The model's ``Config`` with the ``model.`` settings of one of its presets."""
    from asrkit.core.settings import override

    config = spec.Config()
    for key, value in spec.presets[preset].items():
        if key.startswith("model."):
            config = override(config, key.removeprefix("model."), value)
    return config


def median_seconds(functions: dict, rounds: int) -> dict[str, float]:
    """Median seconds of each zero-argument function, each called once first (to compile),
    then called in turn, round after round, so that a machine's drift falls on each alike."""
    for function in functions.values():
        function()
    times: dict[str, list[float]] = {name: [] for name in functions}
    for _ in range(rounds):
        for name, function in functions.items():
            start = time.perf_counter()
            function()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def measure(step, steps: int) -> float:
    return median_seconds({"step": step}, steps)["step"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=("brnn", "conformer"), default="brnn")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--n-hidden", type=int, default=494, help="brnn's width")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    import numpy as np
    import tensorflow as tf

    from asrkit.config.train import TrainConfig
    from asrkit.train.step import make_optimizer, make_train_step

    if args.model == "brnn":
        from asrkit.models.brnn import BRNN, BRNNConfig

        spec, config, num_features = BRNN(), BRNNConfig(n_hidden=args.n_hidden,
                                                        n_cell=args.n_hidden), 26
        plain_network, size = plain_keras_brnn, f"n_hidden={args.n_hidden}"
    else:
        from asrkit.models.conformer import Conformer

        spec, num_features = Conformer(), 40
        config = preset_sizes(spec)
        plain_network = plain_keras_conformer
        size = f"d_model={config.d_model} x {config.num_blocks} blocks"
    name = spec.name
    frames = int(args.seconds * 100)
    label_length = frames // (6 * spec.time_stride(config))
    rng = np.random.default_rng(0)
    batch = {
        "features": tf.constant(rng.normal(size=(args.batch, frames, num_features))
                                .astype(np.float32)),
        "feature_lengths": tf.fill([args.batch], frames),
        "labels": tf.constant(rng.integers(0, 28, size=(args.batch, label_length),
                                           dtype=np.int32)),
        "label_lengths": tf.fill([args.batch], label_length),
    }
    logit_lengths = tf.fill([args.batch], int(spec.output_length(config, frames)))
    tensors = (batch["features"], batch["feature_lengths"], batch["labels"],
               batch["label_lengths"], logit_lengths)
    results = {}
    hand_name = f"hand-written GradientTape step ({name})"

    model = spec.build(config, num_features, 29)
    hand = hand_written_step(model)
    results[hand_name] = measure(lambda: hand(*tensors), args.steps)

    strategy = tf.distribute.get_strategy()
    engine_model = spec.build(config, num_features, 29)
    optimizer = make_optimizer(TrainConfig())
    optimizer.build(engine_model.trainable_variables)
    engine = make_train_step(strategy, engine_model, optimizer, spec, config)
    results[f"asrkit engine step ({name})"] = measure(lambda: engine(batch).numpy(), args.steps)

    plain = plain_network(config, num_features, 29)
    plain_step = hand_written_step(plain)
    results["plain Keras network, same step"] = measure(lambda: plain_step(*tensors), args.steps)

    audio = args.batch * args.seconds
    base = results[hand_name]
    parameters = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    print(f"{name} {size} ({parameters / 1e6:.1f} M parameters), batch "
          f"{args.batch} x {args.seconds:g} s, median of {args.steps} steps, "
          f"TF_ENABLE_ONEDNN_OPTS={os.environ.get('TF_ENABLE_ONEDNN_OPTS')}\n")
    print(f"{'step':40s} {'s/step':>8s} {'steps/s':>8s} {'audio s/s':>10s} {'x hand':>8s}")
    table = {}
    for label, seconds in results.items():
        table[label] = {"seconds_per_step": round(seconds, 3), "steps_per_second":
                       round(1 / seconds, 3), "audio_seconds_per_second": round(audio / seconds, 1),
                       "relative_time": round(seconds / base, 3)}
        print(f"{label:40s} {seconds:8.2f} {1 / seconds:8.3f} {audio / seconds:10.1f} "
              f"{seconds / base:7.2f}x")
    engine_cost = results[f"asrkit engine step ({name})"] / base
    speedup = results["plain Keras network, same step"] / base
    print(f"\nengine cost over the hand-written step: {engine_cost:.2f}x (target <= 1.1x)")
    print(f"plain Keras step over the hand-written step on asrkit's {name}: {speedup:.2f}x"
          + (" (target >= 1.6x)" if name == "brnn" else ""))
    if args.json:
        args.json.write_text(json.dumps({"model": name, "results": table,
                                         "engine_cost": engine_cost,
                                         "speedup_over_keras": speedup}, indent=2))


if __name__ == "__main__":
    main()
