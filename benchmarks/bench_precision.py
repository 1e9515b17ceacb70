"""Training step time in float32 against bfloat16 mixed precision, for each bundled model.

For each model at its ``cpu`` preset's sizes: the engine's compiled training step
(``asrkit.train.step.make_train_step``: CTC, gradients, Adam) on one batch of ``--batch``
utterances of ``--seconds`` seconds at most (padded, as in training: ``bench_rnn_paths``'s
batch and timing), the model built in float32 and again under the
``mixed_bfloat16`` policy (as ``asrkit train -o precision=...`` builds it), measured in the same
run; reports seconds a step, audio-seconds a second and the ratio float32 / bfloat16. Features
are random: the arithmetic does not depend on the values. On a CPU with AMX or AVX512-BF16
(``amx_bf16``, ``avx512_bf16`` in /proc/cpuinfo) oneDNN multiplies bfloat16 in hardware;
elsewhere bfloat16 is emulated and slower.

    python benchmarks/bench_precision.py [--models ds2,conformer,brnn] [--batch 16]
                                         [--seconds 4] [--steps 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_rnn_paths import make_batch, measure_step  # noqa: E402
from bench_train import preset_sizes  # noqa: E402  (both import asrkit before TensorFlow)

#: Measured against each other; the first is the baseline.
COMPARED = ("float32", "mixed_bfloat16")


def feature_width(spec) -> int:
    """The features the model reads at its ``cpu`` preset: its mel bins, else its extractor's
    default width."""
    from asrkit import plugins

    bins = spec.presets["cpu"].get("features.num_mel_bins")
    if bins:
        return int(bins)
    extractor = plugins.get("feature", spec.features)
    return extractor.num_features(extractor.Config())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="ds2,conformer,brnn")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    import keras
    import tensorflow as tf

    from asrkit import plugins
    from asrkit.train.precision import BF16_FLAGS, cpu_flags, policy

    units = [name for flag, name in BF16_FLAGS.items() if flag in cpu_flags()]
    print(f"bfloat16 in hardware: {', '.join(units) or 'none'}; batch {args.batch} x up to "
          f"{args.seconds:g} s; median of {args.steps} steps\n")
    print(f"{'model':10s} {'precision':15s} {'s/step':>8s} {'audio s/s':>10s} {'speed-up':>9s}")
    rows = []
    strategy = tf.distribute.get_strategy()
    for name in args.models.split(","):
        spec = plugins.get("model", name)
        config = preset_sizes(spec)
        frames = int(args.seconds * 100)
        batch = make_batch(args.batch, frames, feature_width(spec),
                           frames // (6 * spec.time_stride(config)))
        audio = float(tf.reduce_sum(batch["feature_lengths"])) / 100
        seconds = {}
        for precision in COMPARED:
            keras.utils.set_random_seed(0)
            with policy(precision):
                model = spec.build(config, feature_width(spec), 29)
            seconds[precision], _ = measure_step(strategy, model, spec, config, batch,
                                                 args.steps)
        base = seconds[COMPARED[0]]
        for precision, value in seconds.items():
            row = {"model": name, "precision": precision, "seconds_per_step": round(value, 3),
                   "audio_seconds_per_second": round(audio / value, 1),
                   "speedup": round(base / value, 2)}
            rows.append(row)
            print(f"{name:10s} {precision:15s} {value:8.3f} "
                  f"{row['audio_seconds_per_second']:10.1f} {row['speedup']:8.2f}x")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
