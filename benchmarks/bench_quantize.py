"""Quantised TFLite exports against the float one: file size, speed and accuracy.

Why: ``asrkit export --format tflite --quantize int8|float16|full`` should make a model smaller
(and, for int8, faster on a CPU) without costing accuracy; the target is dynamic-range int8
within 1 point of the float export's CER.

For each trained run given, the run's ``best`` checkpoint is exported as TFLite four times
(``--quantize none``, ``int8``, ``float16``, ``full``), then each export transcribes every
utterance of each test split (``--splits``) with its own in-graph greedy decoding, whole
utterances, through :class:`asrkit.serving.export.ExportedModel` (what ``asrkit transcribe
--model`` runs). Measured:

- ``mb``: the size of ``model.tflite``, and ``constant_mb``, its weights and tables;
- ``rtf``: seconds of compute per second of audio on this CPU, the median of ``--repeats``
  passes over the first split; the exports take turns within each pass (side by side, so a
  busy moment of a shared machine slows them all);
- ``cer``/``wer`` on each split (corpus rates, as ``asrkit evaluate`` computes them), and the
  difference from the float export's CER in points;
- ``export_seconds``: the time ``asrkit export`` took (``full`` includes its calibration).

Prints a table; ``--json FILE`` writes the figures. The runs' datasets must be in
``$ASRKIT_HOME``.

    ASRKIT_HOME=... python benchmarks/bench_quantize.py RUN [RUN ...] [--splits test]
        [--repeats 3] [--work DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

MODES = ("none", "int8", "float16", "full")
#: The accuracy target: int8's CER within this many points of the float export's.
INT8_TARGET_POINTS = 1.0


def split_audio(run_folder: Path, split: str) -> tuple[list[Any], list[str], float]:
    """Every utterance of ``split`` of the run's dataset: float32 PCM, references, seconds."""
    import numpy as np

    from asrkit.dataset.audio import read_wav
    from asrkit.dataset.manifest import read_csv
    from asrkit.runs.run import load_run

    dataset = load_run(run_folder).dataset
    rows = list(read_csv(dataset / f"{split}.csv"))
    audio = [read_wav(Path(dataset, row.wav_filename)).astype(np.float32) / 32768
             for row in rows]
    return audio, [row.transcript for row in rows], sum(len(a) for a in audio) / 16000


def bench_run(run_folder: Path, splits: list[str], repeats: int, work: Path) -> dict[str, Any]:
    from asrkit.core.metrics import corpus_score
    from asrkit.runs.run import load_run
    from asrkit.serving.export import ExportedModel, export_run
    from asrkit.serving.quantize import operation_counts

    run = load_run(run_folder)
    results: dict[str, Any] = {"run": str(run_folder), "model": run.spec.name, "modes": {}}
    models = {}
    for mode in MODES:
        started = time.perf_counter()
        meta = export_run(run_folder, "tflite", work / run_folder.name / mode, force=True,
                          quantization=mode)
        seconds = time.perf_counter() - started
        model_file = Path(meta["path"]) / "model.tflite"
        results["modes"][mode] = {
            "mb": model_file.stat().st_size / 2**20,
            "constant_mb": operation_counts(model_file.read_bytes())["constant_bytes"] / 2**20,
            "export_seconds": seconds,
            "verified_transcript_cer": meta.get("verified_transcript_cer"),
        }
        models[mode] = ExportedModel(meta["path"])
        print(f"  exported {run.spec.name} {mode} in {seconds:.0f} s", file=sys.stderr)

    for split in splits:
        audio, references, seconds = split_audio(run_folder, split)
        results.setdefault("audio_seconds", {})[split] = seconds
        passes = repeats if split == splits[0] else 1
        timings: dict[str, list[float]] = {mode: [] for mode in MODES}
        for index in range(passes):
            for mode, model in models.items():
                model.transcribe(audio[0])  # warm: the first call plans the interpreter
                started = time.perf_counter()
                texts = [model.transcribe(pcm) for pcm in audio]
                timings[mode].append(time.perf_counter() - started)
                if index == 0:
                    score = corpus_score(references, texts)
                    results["modes"][mode][split] = {"cer": score.cer, "wer": score.wer}
        if passes > 1 or split == splits[0]:
            for mode in MODES:
                results["modes"][mode]["rtf"] = statistics.median(timings[mode]) / seconds
                results["modes"][mode]["rtf_passes"] = [t / seconds for t in timings[mode]]
    float_cer = results["modes"]["none"][splits[0]]["cer"]
    for mode in MODES:
        results["modes"][mode]["cer_points_over_float"] = 100 * (
            results["modes"][mode][splits[0]]["cer"] - float_cer)
    return results


def table(results: list[dict[str, Any]], splits: list[str]) -> str:
    head = ("| model | export | MB | weights MB | RTF | "
            + " | ".join(f"CER {s} | WER {s}" for s in splits) + f" | CER vs float ({splits[0]}) |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for run in results:
        for mode, row in run["modes"].items():
            scores = " | ".join(f"{100 * row[s]['cer']:.2f} | {100 * row[s]['wer']:.2f}"
                                for s in splits)
            delta = ("" if mode == "none" else f"{row['cer_points_over_float']:+.2f}")
            lines.append(f"| {run['model']} | {mode} | {row['mb']:.2f} | "
                         f"{row['constant_mb']:.2f} | {row['rtf']:.4f} | {scores} | {delta} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--splits", default="test", help="comma-separated test splits")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", type=Path, default=None, help="where the exports go")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    splits = [s for s in args.splits.split(",") if s]

    with tempfile.TemporaryDirectory(prefix="bench-quantize-") as scratch:
        work = args.work or Path(scratch)
        results = [bench_run(run, splits, args.repeats, work) for run in args.runs]
    report = {"cpus": os.cpu_count(), "machine": platform.processor() or platform.machine(),
              "python": sys.version.split()[0], "repeats": args.repeats, "splits": splits,
              "int8_target_points": INT8_TARGET_POINTS, "runs": results}
    for run in results:
        points = run["modes"]["int8"]["cer_points_over_float"]
        run["int8_target_met"] = points <= INT8_TARGET_POINTS
    print(table(results, splits))
    for run in results:
        print(f"{run['model']}: int8 CER {run['modes']['int8']['cer_points_over_float']:+.2f} "
              f"points over float: target (<= {INT8_TARGET_POINTS}) "
              f"{'met' if run['int8_target_met'] else 'NOT met'}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
