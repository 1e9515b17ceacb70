"""Training step of the recurrent models on each implementation of their RNN (``rnn_impl``).

For ``brnn`` (bidirectional LSTM) and ``ds2`` (bidirectional GRUs), on this CPU and, when
TensorFlow sees one, on a GPU, the engine's compiled training step (``make_train_step`` on the
strategy ``asrkit train`` would use for that device) with:

- **loop**: the hoisted loop (input projection for all frames before the time loop);
- **keras**: Keras' own ``LSTM``/``GRU`` on the same weights, cuDNN's fused kernel on a GPU
  (the run says whether the compiled step holds a ``CudnnRNN`` op);
- **plain Keras** (``brnn`` only): the same network with ``Bidirectional(LSTM)`` layers
  (``benchmarks/bench_train.py``), the speed a user of stock Keras would get.

Each time is a median over ``--steps`` steps after one compiling step, reported as a ratio to
the loop measured in the same run on the same device (below 1: faster than the loop). Without a
GPU the GPU part is skipped, with a line saying so. Features and labels are random (the
arithmetic does not depend on the values).

    python benchmarks/bench_rnn_paths.py [--models brnn,ds2] [--batch 8] [--seconds 2]
        [--steps 3] [--sizes tiny|cpu|full] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import asrkit  # noqa: E402, F401  (sets TensorFlow's environment defaults before it loads)

#: Model sizes: ``tiny`` for a quick look, ``cpu`` the models' cpu presets, ``full`` defaults.
SIZES = {
    "tiny": {"brnn": {"n_hidden": 64, "n_cell": 64, "context": 2},
             "ds2": {"conv_channels": 8, "rnn_units": 64}},
    "cpu": {"brnn": {"n_hidden": 256, "n_cell": 256, "context": 5},
            "ds2": {"time_stride": 4}},
    "full": {"brnn": {}, "ds2": {}},
}
#: Feature widths the models read (MFCC; log-mel at the cpu preset's 40 bins or 80).
FEATURES = {"brnn": 26, "ds2": 80}


def make_batch(batch: int, frames: int, features: int, label_length: int) -> dict:
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    lengths = np.linspace(frames // 2, frames, batch).astype(np.int32)  # padded, as in training
    return {
        "features": tf.constant(rng.normal(size=(batch, frames, features)).astype(np.float32)),
        "feature_lengths": tf.constant(lengths),
        "labels": tf.constant(rng.integers(0, 28, size=(batch, label_length), dtype=np.int32)),
        "label_lengths": tf.fill([batch], label_length),
    }


def op_types(function, *args) -> set[str]:
    """Every op type in a compiled function's graph and the functions it calls."""
    graph = function.get_concrete_function(*args).graph.as_graph_def()
    return {n.op for n in graph.node} | {n.op for f in graph.library.function
                                        for n in f.node_def}


def measure_step(strategy, model, spec, config, batch, steps: int) -> tuple[float, bool]:
    """Median seconds of the engine's step, and whether its graph runs cuDNN's RNN."""
    from asrkit.config.train import TrainConfig
    from asrkit.train.step import make_optimizer, make_train_step

    with strategy.scope():
        optimizer = make_optimizer(TrainConfig())
        optimizer.build(model.trainable_variables)
    step = make_train_step(strategy, model, optimizer, spec, config)
    cudnn = any(t.startswith("CudnnRNN") for t in op_types(step, batch))
    step(batch).numpy()  # compile
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step(batch).numpy()
        times.append(time.perf_counter() - start)
    return statistics.median(times), cudnn


def bench_device(device: str, models: list[str], args) -> dict:
    from asrkit import plugins
    from asrkit.train.strategy import make_strategy

    strategy = make_strategy(device)
    towers = list(strategy.extended.worker_devices)
    frames = int(args.seconds * 100)
    results: dict = {}
    for name in models:
        spec = plugins.get("model", name)
        base = replace(spec.Config(), **SIZES[args.sizes][name])
        features = FEATURES[name] if args.sizes != "cpu" or name != "ds2" else 40
        batch = make_batch(args.batch, frames, features, label_length=frames // 12)
        rows = {}
        for impl in ("loop", "keras"):
            config = replace(base, rnn_impl=impl)
            with strategy.scope():
                model = spec.build(config, features, 29)
            seconds, cudnn = measure_step(strategy, model, spec, config, batch, args.steps)
            rows[impl] = {"seconds_per_step": seconds, "cudnn": cudnn}
        if name == "brnn":
            from bench_train import plain_keras_brnn

            config = replace(base, rnn_impl="loop")
            with strategy.scope():
                plain = plain_keras_brnn(config, features, 29)
            seconds, cudnn = measure_step(strategy, plain, spec, config, batch, args.steps)
            rows["plain Keras Bidirectional(LSTM)"] = {"seconds_per_step": seconds,
                                                       "cudnn": cudnn}
        loop = rows["loop"]["seconds_per_step"]
        for row in rows.values():
            row["vs_loop"] = row["seconds_per_step"] / loop
        results[name] = rows
        print(f"\n{name} on {', '.join(towers)} ({args.sizes} sizes, batch {args.batch} x "
              f"{args.seconds:g} s, median of {args.steps} steps)")
        print(f"  {'implementation':34s} {'s/step':>8s} {'x loop':>8s}  cuDNN op")
        for impl, row in rows.items():
            print(f"  {impl:34s} {row['seconds_per_step']:8.3f} {row['vs_loop']:7.2f}x  "
                  f"{'yes' if row['cudnn'] else 'no'}")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="brnn,ds2")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--sizes", choices=list(SIZES), default="tiny")
    parser.add_argument("--skip-cpu", action="store_true", help="Only the GPU part.")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    import tensorflow as tf

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    report = {}
    if not args.skip_cpu:
        report["cpu"] = bench_device("cpu", models, args)
    if tf.config.list_logical_devices("GPU"):
        report["gpu"] = bench_device("0", models, args)
    else:
        print("\nno GPU visible: the GPU part is skipped")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
