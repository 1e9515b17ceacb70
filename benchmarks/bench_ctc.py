"""The CTC loss with its gradient: TensorFlow's dense implementation (``tf.nn.ctc_loss`` on
padded labels, the baseline) against ``asrkit.core.ctc.ctc_losses`` on a CPU (its C++ kernel through
sparse labels), in one run, on batches shaped as the bundled models' ``cpu`` presets train:

- ``ds2``/``conformer``: 16 utterances, 40 ms frames (time stride 4);
- ``brnn``: 8 utterances, 10 ms frames (no subsampling).

Utterances of ``--seconds`` seconds (random lengths down to 70 % of it), 15 characters a second,
29 classes; logits are random (the arithmetic does not depend on them). Reports the seconds per
call (median of ``--repeats``) and the ratio dense / asrkit.

    python benchmarks/bench_ctc.py [--seconds 5] [--repeats 20] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import tensorflow as tf

from asrkit.core.ctc import ctc_losses

CLASSES = 29
CHARACTERS_PER_SECOND = 15
#: name: (utterances, seconds per output frame)
SHAPES = {"ds2/conformer (batch 16, 40 ms)": (16, 0.04), "brnn (batch 8, 10 ms)": (8, 0.01)}


def inputs(batch: int, frame_seconds: float, seconds: float, seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    durations = rng.uniform(0.7 * seconds, seconds, batch)
    frames = np.maximum(1, (durations / frame_seconds).astype(np.int32))
    label_lengths = (durations * CHARACTERS_PER_SECOND).astype(np.int32)
    labels = rng.integers(0, CLASSES - 1, (batch, int(label_lengths.max())))
    logits = rng.normal(size=(batch, int(frames.max()), CLASSES)).astype(np.float32)
    return (tf.constant(labels, tf.int32), tf.constant(label_lengths), tf.constant(logits),
            tf.constant(frames))


def timed(sparse: bool, args: tuple, repeats: int) -> float:
    labels, label_lengths, logits, frames = args

    @tf.function
    def step(x: tf.Tensor) -> tuple:
        with tf.GradientTape() as tape:
            tape.watch(x)
            losses, _ = ctc_losses(labels, label_lengths, x, frames, sparse)
            total = tf.reduce_sum(losses)
        return total, tape.gradient(total, x)

    step(logits)  # trace
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        step(logits)[1].numpy()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    for name, (batch, frame_seconds) in SHAPES.items():
        shaped = inputs(batch, frame_seconds, args.seconds)
        dense, sparse = (timed(s, shaped, args.repeats) for s in (False, True))
        rows.append({"shape": name, "dense_seconds": round(dense, 5),
                     "asrkit_seconds": round(sparse, 5), "speedup": round(dense / sparse, 1)})
        print(f"{name}: dense {dense * 1000:.1f} ms, asrkit {sparse * 1000:.1f} ms "
              f"({dense / sparse:.1f}x)", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
