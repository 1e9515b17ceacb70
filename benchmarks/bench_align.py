"""Word boundaries of ``asrkit align`` against the truth, and its Viterbi against torchaudio's.

Why: a forced aligner is only as good as the times it gives, and those can be checked only where
the truth is known exactly. Here every word is synthesised on its own (espeak-ng, a voice, speed
and pitch per utterance, as the ``openvocab`` corpus was made: ``benchmarks/open_vocab.py``),
cut where its samples start and stop, and the words are joined with known gaps (``--word-gap``
seconds between words, ``--utterance-gap`` between utterances) into recordings of about
``--seconds`` each. Every word's start and end in the recording is then known to the sample.

Measured
    - the word-boundary error of ``asrkit align`` (the run's CTC log-probabilities over the
      whole recording, one Viterbi over all of it): median absolute error of word starts and of
      word ends, and the share within 100 ms;
    - the same with torchaudio's ``forced_align`` (a published CTC aligner) on the *same*
      log-probabilities (run in the Python of ``--reference-python``, which has torch and
      torchaudio), and a check of asrkit's Viterbi: the share of characters whose frames are
      the same in both paths (asrkit's without its free ends, which torchaudio lacks);
    - compute seconds: the model's frames (the windows), asrkit's Viterbi, torchaudio's;
    - bad input, one line each: a transcript with characters the model cannot spell, the text
      of another recording, a transcript that holds only the middle third of the recording's
      utterances (audio far longer than the text: the words it holds must still be aligned),
      and one utterance's text replaced by another's (the rest must still be aligned).

Usage::

    python benchmarks/bench_align.py --run RUN --dataset DATASET_FOLDER [--recordings 3]
        [--seconds 180] [--reference-python PYTHON] [--json]

``DATASET_FOLDER`` is an imported dataset whose ``test.csv`` transcripts are the sentences.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from open_vocab import trimmed_16k  # noqa: E402

RATE = 16000
DIALECTS = ("en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-029", "en-gb-x-gbclan")
VARIANTS = ("m1", "m2", "m3", "f1", "f2")

REFERENCE = r"""
import sys, json, time
import numpy as np, torch
from torchaudio.functional import forced_align, merge_tokens
data = np.load(sys.argv[1])
log_probs = torch.from_numpy(data["log_probs"]).float()[None]
targets = torch.from_numpy(data["targets"]).int()[None]
start = time.perf_counter()
path, scores = forced_align(log_probs, targets, blank=int(data["blank"]))
seconds = time.perf_counter() - start
spans = merge_tokens(path[0], scores[0].exp(), blank=int(data["blank"]))
json.dump({"seconds": seconds, "spans": [[s.token, s.start, s.end - 1] for s in spans]},
          open(sys.argv[2], "w"))
"""


@dataclass
class Truth:
    word: str
    start: float
    end: float
    utterance: int


@dataclass
class Recording:
    samples: np.ndarray
    words: list[Truth]
    utterances: list[str]


def sentences(dataset: Path) -> list[str]:
    with (dataset / "test.csv").open(newline="", encoding="utf-8") as f:
        texts = [row["transcript"] for row in csv.DictReader(f)]
    return list(dict.fromkeys(texts))


def speak_word(word: str, voice: str, speed: int, pitch: int, folder: Path) -> np.ndarray:
    """One word from espeak-ng at 16 kHz, cut to its first and last sounding sample."""
    raw = folder / "word.wav"
    subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "-p", str(pitch), "-w",
                    str(raw), word], check=True, stdout=subprocess.DEVNULL)
    return trimmed_16k(raw, folder)


def build(texts: list[str], seconds: float, word_gap: tuple[float, float],
          utterance_gap: tuple[float, float], rng: random.Random, folder: Path) -> Recording:
    """Utterances of ``texts`` (drawn at random) until ``seconds`` long, words joined by known
    gaps of digital silence."""
    pieces: list[np.ndarray] = []
    truth: list[Truth] = []
    utterances: list[str] = []
    position = int(rng.uniform(*utterance_gap) * RATE)
    pieces.append(np.zeros(position, np.int16))
    while position < seconds * RATE:
        text = rng.choice(texts)
        voice = f"{rng.choice(DIALECTS)}+{rng.choice(VARIANTS)}"
        speed, pitch = rng.randint(130, 190), rng.randint(30, 70)
        words = text.split()
        for index, word in enumerate(words):
            audio = speak_word(word, voice, speed, pitch, folder)
            truth.append(Truth(word, position / RATE, (position + len(audio)) / RATE,
                               len(utterances)))
            gap = utterance_gap if index == len(words) - 1 else word_gap
            silence = np.zeros(int(rng.uniform(*gap) * RATE), np.int16)
            pieces += [audio, silence]
            position += len(audio) + len(silence)
        utterances.append(text)
    return Recording(np.concatenate(pieces), truth, utterances)


def errors(found: list[tuple[float, float]], truth: list[Truth],
           which: list[int] | None = None) -> dict[str, float]:
    """Median absolute start and end errors (ms) and the shares within 100 ms."""
    which = list(range(len(truth))) if which is None else which
    starts = [abs(found[i][0] - truth[i].start) for i in which]
    ends = [abs(found[i][1] - truth[i].end) for i in which]
    both = starts + ends
    late = [found[i][1] - truth[i].end for i in which]  # signed: negative is early
    return {"words": len(which),
            "median_signed_end_ms": 1000 * statistics.median(late),
            "end_10th_percentile_ms": 1000 * float(np.percentile(late, 10)),
            "median_start_ms": 1000 * statistics.median(starts),
            "median_end_ms": 1000 * statistics.median(ends),
            "median_ms": 1000 * statistics.median(both),
            "within_100ms_start": float(np.mean(np.array(starts) <= 0.1)),
            "within_100ms_end": float(np.mean(np.array(ends) <= 0.1)),
            "within_100ms": float(np.mean(np.array(both) <= 0.1))}


def reference_words(python: str, log_probs: np.ndarray, targets: list[int], blank: int,
                    space: int, times: np.ndarray, step: float,
                    folder: Path) -> tuple[list[tuple[float, float]], float, list[list[int]]]:
    """torchaudio's forced alignment of the same log-probabilities: word spans, seconds, and
    its token spans (label, first frame, last frame)."""
    inputs, outputs = folder / "emissions.npz", folder / "reference.json"
    np.savez(inputs, log_probs=log_probs, targets=np.array(targets), blank=blank)
    subprocess.run([python, "-c", REFERENCE, str(inputs), str(outputs)], check=True)
    result = json.loads(outputs.read_text())
    spans = result["spans"]
    words, current = [], []
    for label, first, last in [*spans, [space, 0, 0]]:
        if label == space:
            if current:
                words.append((float(times[current[0][1]]), float(times[current[-1][2]]) + step))
            current = []
        else:
            current.append((label, first, last))
    return words, result["seconds"], spans


def bad_input_lines(recognizer: Any, recording: Recording, other: Recording) -> dict[str, Any]:
    """The one line (error or warnings) of each kind of bad input, and for the two that keep
    words, the boundary errors of the words that the transcript and audio share."""
    from asrkit.core.errors import AsrkitError
    from asrkit.serving.align import align_samples

    def attempt(text: str) -> tuple[Any, list[str]]:
        try:
            found = align_samples(recording.samples, text, recognizer)
            return found, found.warnings
        except AsrkitError as error:
            return None, [f"error: {error}"]

    out: dict[str, Any] = {}
    text = " ".join(recording.utterances)
    _, out["unspellable"] = attempt("42% " + text + " café ½")
    _, out["mismatch"] = attempt(" ".join(other.utterances))
    third = len(recording.utterances) // 3
    middle = set(range(third, 2 * third))
    kept = [i for i, t in enumerate(recording.words) if t.utterance in middle]
    found, out["audio_longer"] = attempt(" ".join(recording.utterances[third:2 * third]))
    if found is not None:
        out["audio_longer_errors"] = errors([(w.start, w.end) for w in found.words],
                                            [recording.words[i] for i in kept])
    swapped = list(recording.utterances)
    swapped[third] = other.utterances[0]
    truth = [t for t in recording.words if t.utterance == third]
    out["one_utterance_wrong_truth"] = f"{truth[0].start:.2f}-{truth[-1].end:.2f} s"
    found, out["one_utterance_wrong"] = attempt(" ".join(swapped))
    if found is not None:
        own = [i for i, t in enumerate(recording.words) if t.utterance != third]
        before = [i for i in own if recording.words[i].utterance < third]
        shift = len(other.utterances[0].split())
        positions = before + [len(before) + shift + k for k in range(len(own) - len(before))]
        out["one_utterance_wrong_errors"] = errors(
            [(found.words[p].start, found.words[p].end) for p in positions],
            [recording.words[i] for i in own])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", type=Path, required=True)
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--recordings", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--word-gap", type=float, nargs=2, default=(0.05, 0.3))
    parser.add_argument("--utterance-gap", type=float, nargs=2, default=(0.5, 1.5))
    parser.add_argument("--reference-python", default=str(ROOT / ".venv-rnnt-reference" /
                                                          "bin" / "python"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from asrkit.core.viterbi import ctc_align
    from asrkit.serving.align import (
        Alignment,
        align_frames,
        check_alignment,
        prepare_text,
        recording_frames,
    )
    from asrkit.serving.transcribe import CheckpointRecognizer, samples_windows

    rng = random.Random(args.seed)
    texts = sentences(args.dataset)
    recognizer = CheckpointRecognizer(args.run)
    labels = recognizer.labels
    space = labels.symbols.index(" ")
    report: dict[str, Any] = {"run": str(args.run), "recordings": []}
    all_truth: list[Truth] = []
    ours_all: list[tuple[float, float]] = []
    theirs_all: list[tuple[float, float]] = []
    recordings = []
    timing = {"audio": 0.0, "frames": 0.0, "viterbi": 0.0, "reference": 0.0}
    agree = total = 0  # characters on the same frames in both Viterbi paths
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for number in range(args.recordings):
            recording = build(texts, args.seconds, tuple(args.word_gap),
                              tuple(args.utterance_gap), rng, folder)
            recordings.append(recording)
            text = " ".join(recording.utterances)
            _, encoded, _ = prepare_text(text, labels)
            start = time.perf_counter()
            frames = recording_frames(samples_windows(recording.samples), recognizer)
            middle = time.perf_counter()
            words = align_frames(frames, labels, encoded, len(recording.samples) / RATE)
            end = time.perf_counter()
            ours = [(w.start, w.end) for w in words]
            assert len(words) == len(recording.words), "word count differs"
            timing["audio"] += len(recording.samples) / RATE
            timing["frames"] += middle - start
            timing["viterbi"] += end - middle
            scores = [w.score for w in words]
            judged = Alignment("", len(recording.samples) / RATE, words)
            check_alignment(judged)
            entry = {"seconds": len(recording.samples) / RATE, "words": len(words),
                     "mean_word_score": statistics.fmean(scores),
                     "words_below_0.1": sum(s < 0.1 for s in scores),
                     "warnings": judged.warnings,
                     "windows": frames.windows, "frames": len(frames.log_probs),
                     "asrkit": errors(ours, recording.words)}
            if Path(args.reference_python).exists():
                theirs, seconds, spans = reference_words(args.reference_python,
                                                         frames.log_probs, encoded, labels.blank,
                                                         space, frames.times, frames.seconds,
                                                         folder)
                timing["reference"] += seconds
                entry["torchaudio"] = errors(theirs, recording.words)
                theirs_all += theirs
                plain = ctc_align(frames.log_probs, encoded, labels.blank) or []
                agree += sum([t.label, t.first, t.last] == s
                             for t, s in zip(plain, spans, strict=True))
                total += len(spans)
            report["recordings"].append(entry)
            all_truth += recording.words
            ours_all += ours
            print(f"recording {number + 1}: {json.dumps(entry)}", file=sys.stderr)
        report["asrkit"] = errors(ours_all, all_truth)
        if theirs_all:
            report["torchaudio"] = errors(theirs_all, all_truth)
            report["viterbi_identical_chars"] = agree / total
            report["characters"] = total
        report["timing"] = timing
        report["bad_input"] = bad_input_lines(recognizer, recordings[0], recordings[-1])
    if args.json:
        print(json.dumps(report, indent=1))
        return
    for name in ("asrkit", "torchaudio"):
        if name in report:
            e = report[name]
            print(f"{name:10s} words {e['words']}: median |error| start {e['median_start_ms']:.0f}"
                  f" ms, end {e['median_end_ms']:.0f} ms; within 100 ms: start "
                  f"{e['within_100ms_start']:.1%}, end {e['within_100ms_end']:.1%}")
    if "viterbi_identical_chars" in report:
        print("characters on the same frames as torchaudio's path (same emissions): "
              f"{report['viterbi_identical_chars']:.2%}")
    print("timing (s):", json.dumps({k: round(v, 2) for k, v in timing.items()}))
    for key, value in report["bad_input"].items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
