"""The RNN-T loss with its gradient through a joint network, three ways, each in a process of its
own so that its peak memory (``ru_maxrss``) is its own:

- ``naive``: the whole joint ``[batch, T, U+1, V]``, ``tf.nn.log_softmax`` over it, then the
  blank and label log-probabilities gathered from the result (what a plain implementation does);
- ``fused``: the whole joint, ``asrkit.core.rnnt.rnnt_loss`` (log-softmax and gather fused: the
  log-probabilities are never stored);
- ``chunked``: ``gathered_logprobs_in_chunks`` (the joint computed ``--chunk-frames`` frames at
  a time, forward and again backward) then ``rnnt_loss_from_gathered``.

A batch shaped as a transducer trains on 8 s utterances at 40 ms frames: 8 utterances, T = 200
frames (random lengths down to 70 %), U = 40 labels, a joint of ``--hidden`` units
(``tanh(encoded + predicted)`` then a dense layer to V classes), for V = 256 subword pieces and
V = 30 characters. The gradient reaches the encoder's and prediction network's outputs and the
joint's weights, as in training; inputs are random (the arithmetic does not depend on them).
Reports the seconds per step (median of ``--repeats``), the process's peak resident memory and
its growth over the process before the first step, and each ratio to ``naive``.

    python benchmarks/bench_rnnt.py [--repeats 5] [--chunk-frames 20] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

BATCH, FRAMES, LABELS = 8, 200, 40
#: name: classes
VOCABULARIES = {"V=256 (subword pieces)": 256, "V=30 (characters)": 30}
VARIANTS = ("naive", "fused", "chunked")


def peak_mib() -> float:
    """This process's peak resident memory so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(variant: str, classes: int, hidden: int, chunk_frames: int, repeats: int) -> dict:
    """One variant's seconds per step and memory, in this process (see :func:`main`). The
    growth is counted from after a step on a tiny batch, which has loaded and started what every
    step needs (kernels, thread pools, the graph's optimisation) but holds no joint to speak of."""
    step = make_step(variant, 1, 4, 2, classes, hidden, chunk_frames)
    step()
    before = peak_mib()
    step = make_step(variant, BATCH, FRAMES, LABELS, classes, hidden, chunk_frames)
    loss = float(step()[0])
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        step()
        times.append(time.perf_counter() - began)
    return {"seconds": statistics.median(times), "peak_mib": peak_mib(),
            "growth_mib": peak_mib() - before, "loss": loss}


def make_step(variant: str, batch: int, frames: int, labels: int, classes: int, hidden: int,
              chunk_frames: int) -> Callable[[], list]:
    """A traced training step of ``variant`` on random inputs of that shape: the summed losses,
    and their gradients with respect to the encoder's and prediction network's outputs and the
    joint's weights, as numpy arrays."""
    import numpy as np
    import tensorflow as tf

    from asrkit.core.rnnt import (
        gathered_logprobs_in_chunks,
        rnnt_loss,
        rnnt_loss_from_gathered,
    )

    rng = np.random.default_rng(0)
    encoded = tf.constant(rng.normal(size=(batch, frames, hidden)), tf.float32)
    predicted = tf.constant(rng.normal(size=(batch, labels + 1, hidden)), tf.float32)
    targets = tf.constant(rng.integers(1, classes, (batch, labels)), tf.int32)
    lengths = tf.constant(rng.integers(int(0.7 * frames), frames + 1, batch), tf.int32)
    label_lengths = tf.constant(rng.integers(int(0.7 * labels), labels + 1, batch), tf.int32)
    kernel = tf.Variable(rng.normal(size=(hidden, classes)) / hidden ** 0.5, dtype=tf.float32)

    def joint(encoded: tf.Tensor, predicted: tf.Tensor) -> tf.Tensor:
        return tf.tensordot(tf.tanh(encoded[:, :, None] + predicted[:, None]), kernel, 1)

    def losses(encoded: tf.Tensor, predicted: tf.Tensor) -> tf.Tensor:
        if variant == "chunked":
            gathered = gathered_logprobs_in_chunks(joint, encoded, predicted, targets,
                                                   chunk_frames)
            return rnnt_loss_from_gathered(*gathered, lengths, label_lengths)[0]
        logits = joint(encoded, predicted)
        if variant == "fused":
            return rnnt_loss(logits, targets, lengths, label_lengths)[0]
        logprobs = tf.nn.log_softmax(logits)
        cells = tf.broadcast_to(targets[:, None, :, None], [batch, frames, labels, 1])
        label_logprobs = tf.gather(logprobs[:, :, :-1], cells, batch_dims=3)[..., 0]
        return rnnt_loss_from_gathered(logprobs[..., 0], label_logprobs, lengths,
                                       label_lengths)[0]

    @tf.function
    def step() -> list:
        with tf.GradientTape() as tape:
            tape.watch([encoded, predicted])
            total = tf.reduce_sum(losses(encoded, predicted))
        return [total, *tape.gradient(total, [encoded, predicted, kernel])]

    return lambda: [t.numpy() for t in step()]


def in_subprocess(variant: str, classes: int, args: argparse.Namespace) -> dict:
    """:func:`measure` in a fresh Python, whose peak memory is that variant's alone."""
    command = [sys.executable, __file__, "--measure", variant, "--classes", str(classes),
               "--hidden", str(args.hidden), "--chunk-frames", str(args.chunk_frames),
               "--repeats", str(args.repeats)]
    # glibc keeps freed blocks of up to 32 MB in its heap, and RSS with them; a fixed threshold
    # maps every large tensor afresh and unmaps it when freed, so RSS follows the live tensors.
    environment = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    done = subprocess.run(command, capture_output=True, text=True, check=True, env=environment)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=256, help="the joint's units")
    parser.add_argument("--chunk-frames", type=int, default=20)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--measure", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--classes", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.classes, args.hidden, args.chunk_frames,
                                 args.repeats)))
        return
    rows = []
    for name, classes in VOCABULARIES.items():
        results = {variant: in_subprocess(variant, classes, args) for variant in VARIANTS}
        naive = results["naive"]
        row: dict = {"shape": f"B={BATCH} T={FRAMES} U={LABELS} {name}"}
        parts = []
        for variant, result in results.items():
            row[f"{variant}_seconds"] = round(result["seconds"], 5)
            row[f"{variant}_peak_mib"] = round(result["peak_mib"])
            row[f"{variant}_growth_mib"] = round(result["growth_mib"])
            time_ratio = naive["seconds"] / result["seconds"]
            memory_ratio = naive["growth_mib"] / max(result["growth_mib"], 1)
            row[f"{variant}_speedup"] = round(time_ratio, 2)
            row[f"{variant}_memory_ratio"] = round(memory_ratio, 2)
            parts.append(f"{variant} {result['seconds'] * 1000:.0f} ms, peak "
                         f"{result['peak_mib']:.0f} MiB (+{result['growth_mib']:.0f}) "
                         f"({time_ratio:.2f}x time, {memory_ratio:.1f}x memory)")
        losses = {round(r["loss"], 1) for r in results.values()}
        row["same_loss"] = len(losses) == 1
        rows.append(row)
        print(f"{row['shape']}: " + "; ".join(parts), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
