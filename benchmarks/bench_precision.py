"""Training step time in float32 against bfloat16 mixed precision, for each bundled model.

For each model at its ``cpu`` preset's sizes: the engine's compiled training step
(``asrkit.train.engine.make_train_step``: CTC, gradients, Adam) on one batch of ``--batch``
utterances of ``--seconds`` seconds, the model built in float32 and again under the
``mixed_bfloat16`` policy (as ``asrkit train -o precision=...`` builds it), measured in the same
run; reports seconds a step, audio-seconds a second and the ratio float32 / bfloat16. Features
are random: the arithmetic does not depend on the values. On a CPU with AMX (``amx_bf16`` in
/proc/cpuinfo) oneDNN multiplies bfloat16 in hardware; elsewhere bfloat16 is emulated and slower.

    python benchmarks/bench_precision.py [--models ds2,conformer,brnn] [--batch 16]
                                         [--seconds 4] [--steps 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import asrkit  # noqa: E402, F401  (sets TensorFlow's environment defaults before it loads)

PRECISIONS = ("float32", "mixed_bfloat16")


def cpu_preset(spec, num_features: int = 0):
    """The model's config and feature width at its ``cpu`` preset."""
    from asrkit import plugins
    from asrkit.settings import override

    config = spec.Config()
    width = num_features
    for key, value in spec.presets["cpu"].items():
        if key.startswith("model."):
            config = override(config, key.removeprefix("model."), value)
        if key == "features.num_mel_bins":
            width = int(value)
    if not width:
        extractor = plugins.get("feature", spec.features)
        width = extractor.num_features(extractor.Config())
    return config, width


def measure(step, steps: int) -> float:
    step()  # compile
    step()
    times = []
    for _ in range(steps):
        began = time.perf_counter()
        step()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="ds2,conformer,brnn")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    import keras
    import numpy as np
    import tensorflow as tf

    from asrkit import plugins
    from asrkit.train.config import TrainConfig
    from asrkit.train.engine import make_optimizer, make_train_step
    from asrkit.train.precision import AMX_FLAG, cpu_flags, policy

    print(f"CPU with AMX-BF16: {AMX_FLAG in cpu_flags()}; batch {args.batch} x "
          f"{args.seconds:g} s; median of {args.steps} steps\n")
    print(f"{'model':10s} {'precision':15s} {'s/step':>8s} {'audio s/s':>10s} {'speed-up':>9s}")
    rows = []
    strategy = tf.distribute.get_strategy()
    for name in args.models.split(","):
        spec = plugins.get("model", name)
        config, width = cpu_preset(spec)
        frames = int(args.seconds * 100)
        labels = frames // (6 * spec.time_stride(config))
        rng = np.random.default_rng(0)
        batch = {
            "features": tf.constant(rng.normal(size=(args.batch, frames, width))
                                    .astype(np.float32)),
            "feature_lengths": tf.fill([args.batch], frames),
            "labels": tf.constant(rng.integers(0, 28, size=(args.batch, labels),
                                               dtype=np.int32)),
            "label_lengths": tf.fill([args.batch], labels),
        }
        seconds = {}
        for precision in PRECISIONS:
            keras.utils.set_random_seed(0)
            with policy(precision):
                model = spec.build(config, width, 29)
            optimizer = make_optimizer(TrainConfig())
            optimizer.build(model.trainable_variables)
            step = make_train_step(strategy, model, optimizer, spec, config)
            seconds[precision] = measure(lambda step=step, batch=batch: step(batch).numpy(),
                                         args.steps)
        base = seconds["float32"]
        for precision, value in seconds.items():
            row = {"model": name, "precision": precision, "seconds_per_step": round(value, 3),
                   "audio_seconds_per_second": round(args.batch * args.seconds / value, 1),
                   "speedup": round(base / value, 2)}
            rows.append(row)
            print(f"{name:10s} {precision:15s} {value:8.3f} "
                  f"{row['audio_seconds_per_second']:10.1f} {row['speedup']:8.2f}x")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
