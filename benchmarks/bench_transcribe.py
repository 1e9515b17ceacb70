"""Real-time factor of ``asrkit transcribe`` on CPU: run checkpoint, SavedModel and TFLite.

Why: transcription should be much faster than real time on a plain CPU, and an export should not
be slower than the checkpoint it came from. The real-time factor (RTF) is processing seconds per
second of audio: below 1 is faster than real time (0.1 = ten times faster).

What is measured, on one long recording of real speech (the 16 kHz clips of
``tests/fixtures/speech`` joined with short pauses, ``--seconds`` long, as MP3):

- ``decode``: MP3 -> 16 kHz mono int16 through sox (:func:`asrkit.serving.transcribe.load_audio`);
- for each model source (the run's checkpoint, its SavedModel export, its TFLite export):
  ``load`` seconds (building or loading the model; one-off), and the RTF of transcribing the
  decoded recording in ``--chunk-seconds`` windows (features, network, greedy decoding, word
  alignment and stitching), after one warm-up window. Each is the best of ``--repeats`` runs
  (the machine is shared; the best run is the least disturbed one).

The model has the architecture's full default size (``brnn``: the Deep Speech notebook's 494
units, 9 frames of context) with random weights: speed does not depend on what was learnt.

Usage::

    python benchmarks/bench_transcribe.py [--model brnn] [--seconds 120] [--chunk-seconds 20]
        [--repeats 2] [-o model.n_hidden=2048] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import wave
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SPEECH = ROOT / "tests" / "fixtures" / "speech"
SAMPLE_RATE = 16000
PAUSE = np.zeros(SAMPLE_RATE // 4, np.int16)


def _pcm(path: Path) -> np.ndarray:
    with wave.open(str(path)) as handle:
        return np.frombuffer(handle.readframes(handle.getnframes()), "<i2")


def long_recording(seconds: float) -> np.ndarray:
    """Real 16 kHz speech clips joined with 250 ms pauses until ``seconds`` long."""
    clips = sorted(SPEECH.glob("librispeech/*.wav")) + sorted(SPEECH.glob("speechbrain/*.wav"))
    clips += [SPEECH / "ldc93s1" / "LDC93S1.wav", SPEECH / "misc" / "arctic_a0024.wav"]
    pieces, total, index = [], 0, 0
    while total < seconds * SAMPLE_RATE:
        pcm = _pcm(clips[index % len(clips)])
        pieces += [pcm, PAUSE]
        total += len(pcm) + len(PAUSE)
        index += 1
    return np.concatenate(pieces)[: int(seconds * SAMPLE_RATE)]


def write_mp3(samples: np.ndarray, path: Path) -> None:
    wav = path.with_suffix(".wav")
    with wave.open(str(wav), "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(2)
        handle.setframerate(SAMPLE_RATE)
        handle.writeframes(samples.astype("<i2").tobytes())
    subprocess.run(["sox", str(wav), str(path)], check=True, capture_output=True)


def make_run(folder: Path, model: str, overrides: list[str]) -> Path:
    """A run folder with a randomly initialised model of ``model``'s default size."""
    import keras

    from asrkit import plugins
    from asrkit.config.overrides import parse_overrides
    from asrkit.config.pipeline import PipelineConfig
    from asrkit.config.run import RunConfig
    from asrkit.config.train import TrainConfig
    from asrkit.core.settings import apply
    from asrkit.core.text import Alphabet
    from asrkit.runs.run import Run
    from asrkit.train.checkpoints import Checkpoints

    spec = plugins.get("model", model)
    extractor = plugins.get("feature", spec.features)
    config = apply(spec.Config(), parse_overrides(overrides).section("model"))
    run = Run(folder, RunConfig(TrainConfig(model=model), config, extractor.Config(),
                                PipelineConfig()), Alphabet())
    run.save()
    keras.utils.set_random_seed(0)
    network = spec.build(config, extractor.num_features(run.feature_config),
                         run.alphabet.num_classes)
    Checkpoints(folder / "checkpoints", model=network).save("best", 1, {"global_step": 1})
    return folder


def best_of(repeats: int, work: Any) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="brnn")
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--chunk-seconds", type=float, default=20.0)
    parser.add_argument("--overlap-seconds", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("-o", dest="overrides", action="append", default=[],
                        metavar="model.KEY=VALUE")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from asrkit.decoders.greedy import GreedyDecoder
    from asrkit.serving.export import export_run
    from asrkit.serving.transcribe import load_audio, load_recognizer, transcribe_samples

    decoder = GreedyDecoder()
    results: dict[str, Any] = {
        "model": args.model, "overrides": args.overrides, "audio_seconds": args.seconds,
        "chunk_seconds": args.chunk_seconds, "overlap_seconds": args.overlap_seconds,
        "cpus": os.cpu_count(), "machine": platform.processor() or platform.machine(),
        "python": sys.version.split()[0],
    }
    with tempfile.TemporaryDirectory(prefix="bench-transcribe-") as scratch:
        folder = Path(scratch)
        mp3 = folder / "long.mp3"
        write_mp3(long_recording(args.seconds), mp3)
        samples = load_audio(mp3)
        duration = len(samples) / SAMPLE_RATE
        results["audio_seconds"] = round(duration, 2)
        results["decode_rtf"] = best_of(args.repeats, lambda: load_audio(mp3)) / duration

        run = make_run(folder / "run", args.model, args.overrides)
        sources: dict[str, Path] = {"checkpoint": run}
        for fmt in ("savedmodel", "tflite"):
            started = time.perf_counter()
            sources[fmt] = Path(export_run(run, fmt, folder / fmt)["path"])
            results[f"export_{fmt}_seconds"] = round(time.perf_counter() - started, 2)

        warmup = samples[: int(min(duration, args.chunk_seconds) * SAMPLE_RATE)]
        for name, source in sources.items():
            started = time.perf_counter()
            recognizer = load_recognizer(source)
            load = time.perf_counter() - started
            transcribe_samples(warmup, recognizer, decoder, args.chunk_seconds,
                               args.overlap_seconds)
            windows = []

            def work(recognizer: Any = recognizer, windows: list[int] = windows) -> None:
                transcript = transcribe_samples(samples, recognizer, decoder, args.chunk_seconds,
                                                args.overlap_seconds)
                windows.append(transcript.windows)

            seconds = best_of(args.repeats, work)
            results[name] = {"load_seconds": round(load, 2), "rtf": round(seconds / duration, 4),
                             "x_real_time": round(duration / seconds, 1),
                             "windows": windows[-1]}

    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{args.model} {' '.join(args.overrides)}: {results['audio_seconds']} s of speech, "
          f"{args.chunk_seconds:g} s windows (+{args.overlap_seconds:g} s each side), "
          f"{results['cpus']} CPUs")
    print(f"  decode MP3 with sox    RTF {results['decode_rtf']:.4f}")
    for name in ("checkpoint", "savedmodel", "tflite"):
        row = results[name]
        print(f"  {name:<11} load {row['load_seconds']:5.2f} s   RTF {row['rtf']:.4f}   "
              f"({row['x_real_time']:g}x real time, {row['windows']} windows)")
    print(f"  export: SavedModel {results['export_savedmodel_seconds']} s, "
          f"TFLite {results['export_tflite_seconds']} s")


if __name__ == "__main__":
    main()
