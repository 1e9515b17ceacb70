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
emits nothing agrees trivially); the largest difference between the sherpa-onnx model's
log-probabilities of kaldi-native-fbank's features (what sherpa-onnx feeds it) and the
log-softmax of the ONNX export's logits (the worst recording's and the median recording's),
and the share of output frames whose best class is the same; with ``--split``, each one's CER
against the references.

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
    differences, agreement = log_prob_differences(sherpa_folder, onnx_model, audios,
                                                  exported["sherpa-onnx"]["feature_dim"])
    result: dict[str, Any] = {
        "run": str(run), "model": exported["onnx"]["model"], "recordings": len(audios),
        "audio_seconds": round(seconds, 1), "threads": threads,
        "feature_dim": exported["sherpa-onnx"]["feature_dim"],
        "sherpa_verified_max_abs_diff": exported["sherpa-onnx"]["verified_max_abs_diff"],
        "chars": sum(len(t) for t in texts["onnx"]),
        "log_prob_max_abs_diff": max(differences),
        "log_prob_median_max_abs_diff": statistics.median(differences),
        "frames_same_best_class": agreement,
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


def knf_features(audio: Any, bins: int) -> Any:
    """kaldi-native-fbank's features with sherpa-onnx's options: what sherpa-onnx feeds."""
    import kaldi_native_fbank as knf
    import numpy as np

    opts = knf.FbankOptions()
    opts.frame_opts.dither = 0
    opts.frame_opts.snip_edges = False
    opts.mel_opts.num_bins = bins
    opts.mel_opts.low_freq = 20
    opts.mel_opts.high_freq = -400
    fbank = knf.OnlineFbank(opts)
    fbank.accept_waveform(16000, audio.tolist())
    fbank.input_finished()
    return np.array([fbank.get_frame(i) for i in range(fbank.num_frames_ready)], np.float32)


def log_prob_differences(sherpa_folder: Path, onnx_model: Any, audios: list[Any],
                         bins: int) -> tuple[list[float], float]:
    """Per recording, the largest difference between the sherpa-onnx export's
    log-probabilities of kaldi-native-fbank's features and the log-softmax of the ONNX
    export's logits of the audio; and the share of frames whose best class is the same."""
    import numpy as np

    from asrkit.serving.export_sherpa import log_probs

    differences, same, frames = [], 0, 0
    for audio in audios:
        got = log_probs(sherpa_folder, [knf_features(audio, bins)])[0]
        logits = onnx_model.logits(audio)
        shifted = logits - logits.max(-1, keepdims=True)
        want = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
        differences.append(float(np.abs(got - want).max()))
        same += int((got.argmax(-1) == want.argmax(-1)).sum())
        frames += len(want)
    return differences, same / frames


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
    print("| model | recordings | seconds | chars | CER between | differing | log-prob diff "
          "max (median) | same best class | RTF sherpa-onnx | RTF onnx |"
          + (" CER sherpa-onnx | CER onnx |" if args.split else ""))
    print("|---" * (10 + (2 if args.split else 0)) + "|")
    for r in results:
        row = (f"| `{r['model']}` | {r['recordings']} | {r['audio_seconds']} | {r['chars']} | "
               f"{100 * r['cer_between']:.2f} | {r['differing']} | "
               f"{r['log_prob_max_abs_diff']:.2g} ({r['log_prob_median_max_abs_diff']:.2g}) | "
               f"{100 * r['frames_same_best_class']:.2f} % | "
               f"{r['sherpa-onnx']['rtf']:.4f} | {r['onnx']['rtf']:.4f} |")
        if args.split:
            row += (f" {100 * r['sherpa-onnx']['cer']:.2f} | {100 * r['onnx']['cer']:.2f} |")
        print(row)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
