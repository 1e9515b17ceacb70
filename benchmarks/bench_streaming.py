"""How fast, how late and how big is a streaming model's transcription?

For a streaming run (``asrkit train ... -o model.streaming=true``; bench_learning.py trains one
with ``--variant "stream:model.streaming=true"`` and scores it at each chunk size), and for each
chunk size in ``--chunks``:

- **Speed**: ``asrkit transcribe --stream``'s work
  (:class:`asrkit.serving.stream.StreamTranscriber`) on the test utterances, fed in 100 ms
  blocks as a microphone would give them but as fast as it goes: seconds of computation per
  second of audio (real-time factor) and per chunk, beside the whole-utterance transcription of
  the same utterances (``asrkit transcribe``'s
  :class:`~asrkit.serving.transcribe.CheckpointRecognizer`, the same decoder), run side by side:
  their ratio is what streaming costs.
- **Latency**, in audio time (what the model waits for; add the computation per chunk for the
  wall clock): for each word of each final transcript, the audio heard when that word first
  showed as it finally reads, minus the word's end (as the model places it: where CTC emits
  its last letter, which is early rather than late); and the first partial result of an
  utterance, minus its first word's start. A final result comes at the endpoint, by design
  ``--endpoint-seconds`` (0.8) after the last word, within a chunk.
- **Memory**: ``asrkit transcribe --stream`` of a 1-minute and a 10-minute recording (the test
  utterances joined with pauses), each process's own peak resident memory.

    python benchmarks/bench_streaming.py RUN --dataset openvocab [--chunks 160,320,640]
        [--utterances 100] [--json FILE]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import wave
from pathlib import Path

import numpy as np
from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from asrkit.config.overrides import DecoderChoice  # noqa: E402
from asrkit.dataset.folders import resolve_dataset  # noqa: E402
from asrkit.serving.stream import Endpoints, StreamingModel, StreamTranscriber, Update  # noqa: E402
from asrkit.serving.transcribe import (  # noqa: E402
    CheckpointRecognizer,
    load_audio,
    transcribe_samples,
)
from asrkit.types import Decoder  # noqa: E402

#: Audio fed at a time, as a microphone gives it.
BLOCK = 1600
#: The pause between utterances of the long recordings.
PAUSE_SECONDS = 0.5


def utterances(dataset: Path, split: str, count: int) -> list[tuple[np.ndarray, str]]:
    with (dataset / f"{split}.csv").open() as f:
        rows = list(csv.DictReader(f))[:count]
    return [(load_audio(dataset / row["wav_filename"]), row["transcript"]) for row in rows]


def stream_one(model: StreamingModel, decoder: Decoder, endpoints: Endpoints,
               audio: np.ndarray) -> tuple[list[Update], float]:
    """The updates of one utterance streamed in :data:`BLOCK` s, and the seconds it took."""
    transcriber = StreamTranscriber(model, decoder, endpoints)
    updates: list[Update] = []
    began = time.perf_counter()
    for start in range(0, len(audio), BLOCK):
        updates += transcriber.push(audio[start:start + BLOCK])
    updates += transcriber.finish()
    return updates, time.perf_counter() - began


def latencies(updates: list[Update]) -> tuple[list[float], list[float]]:
    """Per word: heard when it first read as in the final, minus its end; per utterance: the
    first partial with text, minus the first word's start."""
    words, firsts = [], []
    finals = [u for u in updates if u.kind == "final"]
    for final in finals:
        during = [u for u in updates if u.kind == "partial" and final.start <= u.start
                  and u.heard <= final.heard] + [final]
        for index, word in enumerate(final.words):
            shown = next(u for u in during if len(u.words) > index
                         and u.words[index].word == word.word)
            words.append(shown.heard - word.end)
        spoken = next((u for u in during if u.words), None)
        if spoken is not None and final.words:
            firsts.append(spoken.heard - final.words[0].start)
    return words, firsts


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {"median": round(statistics.median(values), 3),
            "p90": round(float(np.percentile(values, 90)), 3)}


def peak_mib(run: Path, audio: Path, chunk_ms: int) -> float:
    """``asrkit transcribe --stream`` of ``audio``: the process's own peak resident memory."""
    with tempfile.TemporaryDirectory() as folder:
        peak = Path(folder) / "peak"
        env = {**os.environ, "ASRKIT_TEST_PEAK_FILE": str(peak),
               "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "faults"), str(ROOT)])}
        subprocess.run([sys.executable, "-m", "asrkit", "transcribe", "--stream", "--json",
                        "--chunk-ms", str(chunk_ms), "--model", str(run), str(audio)],
                       env=env, check=True, capture_output=True)
        return int(peak.read_text()) / 1024


def joined_recording(clips: list[np.ndarray], seconds: float, path: Path) -> Path:
    pause = np.zeros(int(PAUSE_SECONDS * 16000), np.int16)
    pieces, total, index = [], 0, 0
    while total < seconds * 16000:
        clip = clips[index % len(clips)]
        pieces += [clip, pause]
        total += len(clip) + len(pause)
        index += 1
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(16000)
        out.writeframes(np.concatenate(pieces)[: int(seconds * 16000)].astype("<i2").tobytes())
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--dataset", default="openvocab")
    parser.add_argument("--split", default="test")
    parser.add_argument("--chunks", default="160,320,640")
    parser.add_argument("--utterances", type=int, default=100)
    parser.add_argument("--endpoint-seconds", type=float, default=0.8)
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

    dataset = resolve_dataset(args.dataset)
    clips = utterances(dataset, args.split, args.utterances)
    seconds = sum(len(a) for a, _ in clips) / 16000
    results = []
    for chunk in (int(c) for c in args.chunks.split(",")):
        model = StreamingModel(args.run, chunk_ms=chunk)
        decoder = model.run.choose_decoder(DecoderChoice())
        # The whole-utterance baseline at the same chunk, as evaluate --chunk-ms scores it.
        whole_model = CheckpointRecognizer(args.run, chunk_ms=chunk)
        endpoints = Endpoints(args.endpoint_seconds)
        stream_one(model, decoder, endpoints, clips[0][0])  # warm up
        transcribe_samples(clips[0][0], whole_model, decoder)
        streamed, whole, words, firsts, steps = 0.0, 0.0, [], [], 0
        same = 0
        for audio, _text in tqdm(clips, desc=f"{chunk} ms chunks", unit="utt"):
            updates, spent = stream_one(model, decoder, endpoints, audio)
            streamed += spent
            steps += -(-len(audio) // int(16 * chunk)) if chunk else 1
            began = time.perf_counter()
            reference = transcribe_samples(audio, whole_model, decoder)
            whole += time.perf_counter() - began
            finals = [u for u in updates if u.kind == "final"]
            same += " ".join(u.text for u in finals) == reference.text
            w, f = latencies(updates)
            words += w
            firsts += f
        row = {"chunk_ms": chunk, "utterances": len(clips), "audio_seconds": round(seconds, 1),
               "stream_rtf": round(streamed / seconds, 4),
               "whole_rtf": round(whole / seconds, 4),
               "stream_over_whole": round(streamed / whole, 2),
               "ms_per_chunk": round(1000 * streamed / max(steps, 1), 2),
               "same_transcript_as_whole": same,
               "word_latency_s": percentiles(words),
               "first_partial_latency_s": percentiles(firsts)}
        print(json.dumps(row), flush=True)
        results.append(row)
    if not args.no_memory:
        chunk = int(args.chunks.split(",")[-1])
        with tempfile.TemporaryDirectory() as folder:
            raw = [a for a, _ in clips]
            memory = {f"{minutes}_min_peak_mib": round(peak_mib(
                args.run, joined_recording(raw, 60 * minutes, Path(folder) / f"{minutes}.wav"),
                chunk)) for minutes in (1, 10)}
        print(json.dumps(memory), flush=True)
        results.append({"memory": memory, "chunk_ms": chunk})
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
