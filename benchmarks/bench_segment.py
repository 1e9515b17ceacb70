"""Utterance boundaries of ``asrkit segment`` against the truth, and the corpus it writes.

Why: segmentation makes training data, and a clip cut in the wrong place teaches the model the
wrong words; the boundaries can be checked only where the truth is known. Here ``--utterances``
test sentences of the open-vocabulary corpus (espeak-ng, a voice, speed and pitch each, made by
``benchmarks/open_vocab.py``'s own plan and synthesis) are each cut to their first and last
sounding sample and joined with known gaps of silence (``--gap`` seconds, drawn uniformly) into
one long recording, whose text is one utterance a line. ``asrkit segment`` (the command, run as a
user runs it) then cuts it back.

Measured
    - speech boundaries (the ``speech_start``/``speech_end`` of each utterance: its first
      letter's start, its last letter's end) against the truth: median absolute error of starts
      and of ends, the shares within 100 ms and 250 ms;
    - the clips: the share of utterances **recovered exactly**: kept by ``--min-confidence``,
      both speech boundaries within 250 ms of the truth, and the clip (``start``..``end``) holds
      all of its utterance's speech and none of another's (its transcript is then exactly what
      the clip says);
    - confidences (median, lowest) and how many utterances the threshold keeps;
    - seconds the command takes (model frames, segmentation and writing the clips);
    - ``--wrong`` lines the reader "skipped": sentences inserted into the text that the audio
      does not hold; how many the threshold drops, and how many true utterances are still
      recovered exactly;
    - the folder imports with ``asrkit import folder`` and trains a step (``ASRKIT_MAX_STEPS=1``).

Usage::

    python benchmarks/bench_segment.py --run RUN [--corpus OPENVOCAB_FOLDER] [--utterances 150]
        [--gap 0.5 2.0] [--wrong 5] [--json]

``--corpus`` is a folder of ``open_vocab.py`` (its ``test/`` files are reused when present, made
otherwise).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import wave
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from open_vocab import (  # noqa: E402
    Utterance,
    fortune_sentences,
    plan_corpus,
    synthesise,
    trimmed_16k,
)

RATE = 16000
#: The thresholds whose effect is reported (the share of true utterances each keeps, the wrong
#: lines each drops).
THRESHOLDS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)


@dataclass
class Spoken:
    text: str
    start: float
    end: float


def build(corpus: Path, count: int, gap: tuple[float, float], rng: random.Random,
          folder: Path) -> tuple[Path, list[Spoken]]:
    """The long recording (a WAV in ``folder``) of the corpus's first ``count`` test
    utterances joined by gaps, and where each one's speech is. A made corpus's own plan
    (``plan.json``) names them: its test sentences are the ones its runs never trained on, and
    its files are read, never written; without one, the default plan is synthesised in
    ``folder``."""
    if (corpus / "plan.json").is_file():
        planned = json.loads((corpus / "plan.json").read_text())["utterances"]
        tests = [Utterance(**u) for u in planned if u["split"] == "test"][:count]
    else:
        plan = plan_corpus(fortune_sentences(), 2000, 100, 150, 1)
        tests = [u for u in plan.utterances if u.split == "test"][:count]
        corpus = folder / "openvocab"
    pieces: list[np.ndarray] = []
    spoken: list[Spoken] = []
    position = 0
    for utterance in tests:
        synthesise(utterance, corpus)  # kept when already made
        silence = np.zeros(int(rng.uniform(*gap) * RATE), np.int16)
        audio = trimmed_16k(corpus / utterance.file, folder)
        pieces += [silence, audio]
        position += len(silence)
        spoken.append(Spoken(utterance.text, position / RATE, (position + len(audio)) / RATE))
        position += len(audio)
    pieces.append(np.zeros(int(rng.uniform(*gap) * RATE), np.int16))
    path = folder / "long.wav"
    with wave.open(str(path), "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(2)
        handle.setframerate(RATE)
        handle.writeframes(np.concatenate(pieces).tobytes())
    return path, spoken


def asrkit(*args: Any, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "asrkit", *map(str, args)], env=env,
                          capture_output=True, text=True, check=False)


def segment(audio: Path, lines: list[str], run: Path, out: Path,
            min_confidence: float) -> tuple[dict[str, Any], float, list[str]]:
    """``asrkit segment --json``: its record, the seconds it took and its warnings."""
    text = out.with_suffix(".txt")
    text.write_text("".join(line + "\n" for line in lines))
    start = time.perf_counter()
    result = asrkit("segment", audio, text, "--model", run, "--out", out, "--json",
                    "--no-progress", "--min-confidence", min_confidence)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"asrkit segment failed: {result.stderr[-2000:]}")
    warnings = [line for line in result.stderr.splitlines() if line.startswith("asrkit:")]
    return json.loads(result.stdout), seconds, warnings


def score(segments: list[dict[str, Any]], spoken: list[Spoken]) -> dict[str, Any]:
    """Boundary errors and recovered utterances of ``segments`` (one per ``spoken``, in order)."""
    starts = np.array([abs(s["speech_start"] - t.start) for s, t in zip(segments, spoken,
                                                                         strict=True)])
    ends = np.array([abs(s["speech_end"] - t.end) for s, t in zip(segments, spoken,
                                                                   strict=True)])
    exact = placed = 0
    for index, (found, truth) in enumerate(zip(segments, spoken, strict=True)):
        before = spoken[index - 1].end if index else 0.0
        after = spoken[index + 1].start if index + 1 < len(spoken) else float("inf")
        holds = found["start"] <= truth.start and found["end"] >= truth.end
        alone = found["start"] >= before and found["end"] <= after
        right = bool(found["text"] == truth.text and holds and alone
                     and starts[index] <= 0.25 and ends[index] <= 0.25)
        placed += right
        exact += right and bool(found["clip"])
    confidences = np.array([s["confidence"] for s in segments])
    return {"utterances": len(spoken),
            "median_start_ms": round(1000 * float(np.median(starts)), 1),
            "median_end_ms": round(1000 * float(np.median(ends)), 1),
            "within_100ms_start": round(float(np.mean(starts <= 0.1)), 4),
            "within_100ms_end": round(float(np.mean(ends <= 0.1)), 4),
            "within_250ms_start": round(float(np.mean(starts <= 0.25)), 4),
            "within_250ms_end": round(float(np.mean(ends <= 0.25)), 4),
            "kept": sum(bool(s["clip"]) for s in segments),
            "recovered_exactly": round(exact / len(spoken), 4),
            "placed_right_whatever_the_threshold": round(placed / len(spoken), 4),
            "confidence_percentiles_10_50_90": [round(float(np.percentile(confidences, q)), 4)
                                                for q in (10, 50, 90)],
            "lowest_confidence": round(float(confidences.min()), 4),
            "kept_at_threshold": {str(t): round(float(np.mean(confidences >= t)), 4)
                                  for t in THRESHOLDS}}


def import_and_train(out: Path, home: Path) -> dict[str, Any]:
    """``asrkit import folder OUT`` and one training step on the dataset it makes."""
    env = {**os.environ, "ASRKIT_HOME": str(home), "ASRKIT_MAX_STEPS": "1"}
    imported = asrkit("import", "folder", out, "--name", "segmented", "--no-progress", env=env)
    if imported.returncode != 0:
        return {"import": imported.stderr.strip()[-500:]}
    trained = asrkit("train", "--dataset", "segmented", "--model", "ds2", "--run-dir",
                     home / "run", "--no-progress", "--batch-size", "4", env=env)
    return {"import": imported.stdout.strip().splitlines()[-1],
            "train_step": "ok" if trained.returncode == 0 else trained.stderr.strip()[-500:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", type=Path, required=True)
    parser.add_argument("--corpus", type=Path, default=None,
                        help="an open_vocab.py folder to reuse [default: made in a temporary "
                             "folder]")
    parser.add_argument("--utterances", type=int, default=150)
    parser.add_argument("--gap", type=float, nargs=2, default=(0.5, 2.0))
    parser.add_argument("--wrong", type=int, default=5)
    parser.add_argument("--min-confidence", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    rng = random.Random(args.seed)
    report: dict[str, Any] = {"run": str(args.run), "min_confidence": args.min_confidence}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        audio, spoken = build(args.corpus or folder / "openvocab", args.utterances,
                              tuple(args.gap), rng, folder)
        report["recording_minutes"] = round(spoken[-1].end / 60, 2)
        found, seconds, warnings = segment(audio, [s.text for s in spoken], args.run,
                                           folder / "clean", args.min_confidence)
        report["seconds"] = round(seconds, 1)
        report["clean"] = {**score(found["segments"], spoken), "warnings": warnings}
        report["corpus"] = import_and_train(folder / "clean", folder / "home")
        # Lines the audio does not hold, inserted at random places of the text.
        others = [s for s in fortune_sentences() if s not in {t.text for t in spoken}]
        lines: list[str | None] = [s.text for s in spoken]
        for place in sorted(rng.sample(range(1, len(spoken)), args.wrong), reverse=True):
            lines.insert(place, None)
        text = [line if line is not None else rng.choice(others) for line in lines]
        found, _, warnings = segment(audio, text, args.run, folder / "wrong",
                                     args.min_confidence)
        wrong = [s for s, line in zip(found["segments"], lines, strict=True) if line is None]
        true = [s for s, line in zip(found["segments"], lines, strict=True) if line is not None]
        report["wrong_lines"] = {"inserted": args.wrong,
                                 "dropped": sum(not s["clip"] for s in wrong),
                                 "dropped_at_threshold": {
                                     str(t): sum(s["confidence"] < t for s in wrong)
                                     for t in THRESHOLDS},
                                 "their_confidences": [s["confidence"] for s in wrong],
                                 **score(true, spoken), "warnings": warnings}
    if args.json:
        print(json.dumps(report, indent=1))
        return
    print(f"recording: {report['recording_minutes']} min, {args.utterances} utterances; "
          f"asrkit segment took {report['seconds']} s")
    for name in ("clean", "wrong_lines"):
        print(f"{name}: " + json.dumps(report[name]))
    print(f"corpus: {json.dumps(report['corpus'])}")


if __name__ == "__main__":
    main()
