"""sherpa-onnx against asrkit's own ONNX export of the same run: agreement and speed.

Why: ``asrkit export --format sherpa-onnx`` promises that sherpa-onnx, computing Kaldi fbank
itself, transcribes as asrkit does; and users choosing between the two want to know what each
costs on a CPU.

For each run given (trained with ``-o features.kaldi=true -o features.low_hz=20
-o features.high_hz=7600``), the run's ``best`` checkpoint is exported twice, ``--format
sherpa-onnx`` and ``--format onnx``, then both transcribe the same recordings whole, greedy:

- sherpa-onnx through its Python API (``OfflineRecognizer.from_zipformer_ctc``, one stream at
  a time, ``--threads`` threads): its own fbank, the model, its greedy search;
- the ONNX export through :class:`asrkit.serving.export.ExportedModel` (what ``asrkit
  transcribe --model`` runs; onnxruntime's default threads, one per core): features, model
  and greedy decoding in the graph, equal to the checkpoint's logits to about 1e-6.

Measured: ``rtf``, seconds of compute per second of audio, the median of ``--repeats`` passes
(the two take turns within each pass); ``cer_between``, the character error rate of
sherpa-onnx's transcripts against the ONNX export's (spaces collapsed), and ``differing``, the
recordings whose texts differ; ``chars``, the characters the ONNX export emitted (a model that
emits nothing agrees trivially); with ``--split``, each one's CER against the references.

The recordings: every utterance of ``--split`` of the runs' dataset (``$ASRKIT_HOME``), else
the 16 kHz WAV fixtures of tests/fixtures/speech. Prints a table; ``--json FILE`` writes the
figures.

    ASRKIT_HOME=... python benchmarks/bench_sherpa.py RUN [RUN ...] [--split test]
        [--repeats 3] [--threads 2] [--work DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "speech"


def fixture_audio() -> tuple[list[Any], None]:
    """The fixtures' 16 kHz WAV recordings of speech, float32 in [-1, 1] (no references)."""
    import numpy as np
    import soundfile

    clips = sorted([*FIXTURES.glob("librispeech/*.wav"), *FIXTURES.glob("misc/*.wav"),
                    *FIXTURES.glob("speechbrain/*.wav"), FIXTURES / "ldc93s1" / "LDC93S1.wav"])
    return [soundfile.read(clip, dtype="float32")[0].astype(np.float32) for clip in clips], None


def split_audio(run_folder: Path, split: str) -> tuple[list[Any], list[str]]:
    """Every utterance of ``split`` of the run's dataset: float32 PCM and references."""
    import numpy as np

    from asrkit.dataset.audio import read_wav
    from asrkit.dataset.manifest import read_csv
    from asrkit.runs.run import load_run

    dataset = load_run(run_folder).dataset
    rows = list(read_csv(dataset / f"{split}.csv"))
    audio = [read_wav(Path(dataset, row.wav_filename)).astype(np.float32) / 32768
             for row in rows]
    return audio, [row.transcript for row in rows]


def collapse(text: str) -> str:
    return " ".join(text.split())


def measure(run: Path, work: Path, audios: list[Any], references: list[str] | None,
            repeats: int, threads: int) -> dict[str, Any]:
    import sherpa_onnx
    from tqdm import tqdm

    from asrkit.core.metrics import corpus_score
    from asrkit.serving.export import ExportedModel, export_run

    exported: dict[str, dict[str, Any]] = {}
    for fmt in ("sherpa-onnx", "onnx"):
        start = time.perf_counter()
        meta = export_run(run, fmt, work / run.name / fmt, force=True)
        exported[fmt] = {**meta, "export_seconds": time.perf_counter() - start}
    sherpa_folder = work / run.name / "sherpa-onnx"
    recognizer = sherpa_onnx.OfflineRecognizer.from_zipformer_ctc(
        model=str(sherpa_folder / "model.onnx"), tokens=str(sherpa_folder / "tokens.txt"),
        feature_dim=exported["sherpa-onnx"]["feature_dim"], num_threads=threads)

    onnx_model = ExportedModel(work / run.name / "onnx")

    def by_sherpa(audio: Any) -> str:
        stream = recognizer.create_stream()
        stream.accept_waveform(16000, audio)
        recognizer.decode_stream(stream)
        return collapse(stream.result.text)

    def by_onnx(audio: Any) -> str:
        return collapse(onnx_model.transcribe(audio))

    seconds = sum(len(a) for a in audios) / 16000
    times: dict[str, list[float]] = {"sherpa-onnx": [], "onnx": []}
    texts: dict[str, list[str]] = {}
    by_onnx(audios[0]), by_sherpa(audios[0])  # warm-up
    for _ in tqdm(range(repeats), desc=run.name, unit="pass", file=sys.stderr):
        for name, fn in (("sherpa-onnx", by_sherpa), ("onnx", by_onnx)):
            start = time.perf_counter()
            texts[name] = [fn(audio) for audio in audios]
            times[name].append(time.perf_counter() - start)
    result: dict[str, Any] = {
        "run": str(run), "model": exported["onnx"]["model"], "recordings": len(audios),
        "audio_seconds": round(seconds, 1), "threads": threads,
        "feature_dim": exported["sherpa-onnx"]["feature_dim"],
        "sherpa_verified_max_abs_diff": exported["sherpa-onnx"]["verified_max_abs_diff"],
        "chars": sum(len(t) for t in texts["onnx"]),
        "cer_between": corpus_score(texts["onnx"], texts["sherpa-onnx"]).cer,
        "differing": sum(a != b for a, b in zip(texts["onnx"], texts["sherpa-onnx"],
                                                 strict=True)),
    }
    for name in times:
        result[name] = {"rtf": statistics.median(times[name]) / seconds,
                        "export_seconds": round(exported[name]["export_seconds"], 1)}
        if references is not None:
            result[name]["cer"] = corpus_score(references, texts[name]).cer
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (Kaldi fbank features)")
    parser.add_argument("--split", default="", help="transcribe this split of the runs' "
                        "dataset [default: the fixture recordings]")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work", type=Path, default=None, help="where the exports go")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench-sherpa-") as scratch:
        work = args.work or Path(scratch)
        results = []
        for run in args.runs:
            audios, references = (split_audio(run, args.split) if args.split
                                  else fixture_audio())
            results.append(measure(run, work, audios, references, args.repeats,
                                   args.threads))
    print("| model | recordings | seconds | chars | CER between | differing | RTF sherpa-onnx "
          "| RTF onnx |" + (" CER sherpa-onnx | CER onnx |" if args.split else ""))
    print("|---" * (8 + (2 if args.split else 0)) + "|")
    for r in results:
        row = (f"| `{r['model']}` | {r['recordings']} | {r['audio_seconds']} | {r['chars']} | "
               f"{100 * r['cer_between']:.2f} | {r['differing']} | "
               f"{r['sherpa-onnx']['rtf']:.4f} | {r['onnx']['rtf']:.4f} |")
        if args.split:
            row += (f" {100 * r['sherpa-onnx']['cer']:.2f} | {100 * r['onnx']['cer']:.2f} |")
        print(row)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
