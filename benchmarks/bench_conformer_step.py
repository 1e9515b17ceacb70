"""The ``conformer``'s training step with and without its two CPU savings, side by side.

Two parts of the step were rewritten for speed (2026-12):

- **dropout**: Keras' ``Dropout`` draws one float32 uniform number an element;
  :class:`asrkit.models.dropout.Dropout` draws one 32-bit number for four elements;
- **the relative-position shift** (:func:`asrkit.models.conformer_layers.rel_shift`): indexing
  (a strided slice, whose gradient ``StridedSliceGrad`` is slow on a CPU) against ``tf.slice``
  (whose gradient is a pad).

Measured in one process: each part alone (forward and gradient, at the shapes of the
``cpu`` preset: ``--batch`` utterances of ``--seconds`` s), then the engine's whole compiled
training step (``asrkit.train.step.make_train_step``, the objective's head and loss included)
built three times, the baselines put back while each is traced: both as before, the shift
only, both. Steps run interleaved, round after round, so that the machine's drift falls on
each alike; medians and ratios to the first. Features are random (the arithmetic does not
depend on them).

    python benchmarks/bench_conformer_step.py [--objective transducer|ctc] [--batch 16]
                                              [--seconds 4] [--rounds 15] [--precision auto]
                                              [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_train import median_seconds  # noqa: E402  (imports asrkit before TensorFlow)


def strided_rel_shift(scores, keys=None):
    """The shift as it was: the same reshapes, with indexing for the slices."""
    import tensorflow as tf

    shape = tf.shape(scores)
    batch, heads, frames, positions = shape[0], shape[1], shape[2], shape[3]
    padded = tf.pad(scores, [[0, 0], [0, 0], [0, 0], [1, 0]])
    padded = tf.reshape(padded, [batch, heads, positions + 1, frames])
    shifted = tf.reshape(padded[:, :, 1:], [batch, heads, frames, positions])
    return shifted[:, :, :, :frames if keys is None else keys]


def keras_dropout(inputs, rate, seed):
    """Keras' dropout, as ``keras.layers.Dropout`` computes it with TensorFlow."""
    import tensorflow as tf

    return tf.nn.experimental.stateless_dropout(inputs, rate=rate, seed=seed)


def with_gradient(function, inputs, *args):
    """A compiled call of ``function(inputs, *args)`` with its gradient to ``inputs`` from a
    random one to its outputs, both arguments of the compiled function (else TensorFlow could
    fold a gradient that depends only on shapes into a constant)."""
    import tensorflow as tf

    upstream = tf.cast(tf.random.normal(tf.shape(function(inputs, *args))), inputs.dtype)

    @tf.function
    def run(inputs, upstream):
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            outputs = function(inputs, *args)
        return outputs, tape.gradient(outputs, inputs, output_gradients=upstream)

    return lambda: [tensor.numpy() for tensor in run(inputs, upstream)]


def parts(args, config, dtype) -> dict[str, dict[str, float]]:
    """Seconds of each part alone, forward and gradient, baseline and asrkit's."""
    import tensorflow as tf

    from asrkit import plugins
    from asrkit.models.conformer_layers import rel_shift
    from asrkit.models.dropout import byte_dropout

    # The blocks' frames: the features' after the subsampling.
    frames = int(args.seconds * 100) // plugins.get("model", "conformer").time_stride(config)
    hidden = tf.cast(tf.random.normal([args.batch, frames, config.d_model * config.ff_multiplier]),
                     dtype)
    scores = tf.cast(tf.random.normal([args.batch, config.num_heads, frames, 2 * frames - 1]),
                     dtype)
    seed = tf.constant([1, 2])
    return {
        "dropout (feed-forward)": median_seconds({
            "keras": with_gradient(keras_dropout, hidden, config.dropout, seed),
            "asrkit": with_gradient(byte_dropout, hidden, config.dropout, seed),
        }, args.rounds * 3),
        "relative shift (one block)": median_seconds({
            "keras": with_gradient(strided_rel_shift, scores),
            "asrkit": with_gradient(rel_shift, scores),
        }, args.rounds * 3),
    }


def steps(args, run_config) -> dict[str, float]:
    """Seconds of the whole training step, with the baselines put back while it is traced."""
    import keras
    import tensorflow as tf
    from bench_rnn_paths import make_batch

    import asrkit.models.conformer_layers as layers
    from asrkit import plugins
    from asrkit.core.text import Alphabet
    from asrkit.models.dropout import Dropout
    from asrkit.train.precision import policy
    from asrkit.train.step import make_optimizer, make_train_step, trainable_variables

    spec = plugins.get("model", "conformer")
    objective = plugins.get("objective", run_config.train.objective)
    labels = Alphabet()
    width = int(objective.encoder_width(run_config.objective_config, labels))
    frames = int(args.seconds * 100)
    extractor = plugins.get("feature", run_config.train.features)
    batch = make_batch(args.batch, frames, extractor.num_features(run_config.features),
                       frames // 10)
    asrkit_shift, asrkit_call = layers.rel_shift, Dropout.call
    keras_call = keras.layers.Dropout.call
    variants = {"as before": (strided_rel_shift, keras_call),
                "shift": (asrkit_shift, keras_call),
                "shift + dropout": (asrkit_shift, asrkit_call)}
    functions = {}
    for name, (shift, call) in variants.items():
        keras.utils.set_random_seed(0)
        with policy(args.precision):
            model = spec.build(run_config.model, batch["features"].shape[-1], width)
            head = objective.build(run_config.objective_config, width, labels)
            optimizer = make_optimizer(run_config.train)
            optimizer.build(trainable_variables(model, head))
        step = make_train_step(tf.distribute.get_strategy(), model, optimizer, spec,
                               run_config.model, None, run_config.train.clip_norm,
                               objective=objective,
                               objective_config=run_config.objective_config, head=head)
        layers.rel_shift, Dropout.call = shift, call
        try:
            step(batch).numpy()  # traced with this variant's parts
        finally:
            layers.rel_shift, Dropout.call = asrkit_shift, asrkit_call
        functions[name] = (lambda step=step: step(batch).numpy())
    return median_seconds(functions, args.rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--objective", default="transducer")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--precision", default="auto",
                        help="float32, mixed_bfloat16, or auto (as asrkit train chooses on "
                        "a CPU)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    from asrkit.config.overrides import parse_overrides
    from asrkit.config.run import build_run_config
    from asrkit.train.machine import machine_record, machine_text
    from asrkit.train.precision import choose_precision

    run_config, _ = build_run_config({"model": "conformer", "objective": args.objective},
                                     parse_overrides(["preset=cpu"]))
    args.precision, _ = choose_precision(args.precision, on_gpus=False)
    dtype = "bfloat16" if "bfloat16" in args.precision else "float32"
    machine = machine_text(machine_record(0, args.precision, 1))
    print(f"conformer ({args.objective}), cpu preset; batch {args.batch} x {args.seconds:g} s; "
          f"medians of interleaved rounds\n{machine}\n")
    results: dict = {"objective": args.objective, "precision": args.precision,
                     "batch": args.batch, "seconds": args.seconds, "parts": {}}
    for part, seconds in parts(args, run_config.model, dtype).items():
        ratio = seconds["keras"] / seconds["asrkit"]
        print(f"{part:28s} as before {seconds['keras'] * 1000:7.2f} ms   asrkit "
              f"{seconds['asrkit'] * 1000:7.2f} ms   {ratio:.2f}x")
        results["parts"][part] = {**seconds, "speed_up": ratio}
    seconds = steps(args, run_config)
    base = seconds["as before"]
    print()
    for name, value in seconds.items():
        print(f"step, {name:18s} {value:.3f} s   {base / value:.2f}x")
    results["step"] = {name: {"seconds": value, "speed_up": base / value}
                       for name, value in seconds.items()}
    results["machine"] = machine
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
