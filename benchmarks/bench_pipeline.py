"""Throughput of asrkit's in-graph features and input pipeline against python_speech_features.

Why: the input pipeline must never make the model wait. Targets (docs/performance):

- in-graph ``mfcc`` >= 3x python_speech_features on the same audio;
- the pipeline (shards -> features -> bucketed padded batches) >= 3x the rate at which ``brnn``
  training consumes audio on a 2-core CPU (about 12x real time), i.e. >= ~40x real time.

Everything is measured side by side in one run (run-to-run noise on small machines is 10-35 %,
so only the ratios of one run mean much). The speech is real: the transcribed 16 kHz clips of
``tests/fixtures/speech`` joined two to four at a time into utterances of 2-15 s.

Usage::

    python benchmarks/bench_pipeline.py [--minutes 20] [--batch-size 16] [--repeats 3] [--json]
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
import wave
from collections.abc import Callable, Iterator
from pathlib import Path

# oneDNN is off by default on AMD CPUs; it must be switched on before TensorFlow is imported.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SPEECH = ROOT / "tests" / "fixtures" / "speech"
SAMPLE_RATE = 16000
#: Rate at which brnn training consumes audio on the 2-core CPU (x real time, performance.md).
BRNN_REAL_TIME = 12.0
GAP = np.zeros(SAMPLE_RATE // 5, np.int16)


# -- data ---------------------------------------------------------------------------------------


def _pcm(path: Path) -> np.ndarray:
    with wave.open(str(path)) as handle:
        return np.frombuffer(handle.readframes(handle.getnframes()), "<i2")


def real_clips() -> list[tuple[np.ndarray, str]]:
    """The transcribed 16 kHz clips of the test fixtures, with their transcripts."""
    from asrkit.core.text import normalize

    clips = []
    for line in (SPEECH / "librispeech" / "transcripts.txt").read_text().splitlines():
        key, text = line.split(" ", 1)
        clips.append((_pcm(SPEECH / "librispeech" / f"{key}.wav"), text))
    for row in (SPEECH / "speechbrain" / "TRANSCRIPTS.tsv").read_text().splitlines()[1:]:
        key, _, _, text = row.split("\t")
        if text != "(no transcript)":
            clips.append((_pcm(SPEECH / "speechbrain" / f"{key}.wav"), text))
    clips.append(
        (_pcm(SPEECH / "misc" / "new-home-in-the-stars-16k.wav"), "we must find a new home")
    )
    ldc = (SPEECH / "ldc93s1" / "LDC93S1.txt").read_text().split(" ", 2)[2]
    clips.append((_pcm(SPEECH / "ldc93s1" / "LDC93S1.wav"), ldc))
    return [(pcm, normalize(text)) for pcm, text in clips]


def make_corpus(minutes: float, seed: int = 0) -> list[tuple[str, np.ndarray, str]]:
    """Utterances of 2-15 s made by joining real clips, ``minutes`` of audio in all."""
    clips = real_clips()
    rng = np.random.default_rng(seed)
    utterances, total = [], 0
    while total < minutes * 60 * SAMPLE_RATE:
        chosen = rng.choice(len(clips), size=int(rng.integers(1, 5)), replace=False)
        pieces = [clips[i] for i in chosen]
        pcm = np.concatenate([p for clip, _ in pieces for p in (clip, GAP)][:-1])
        text = " ".join(t for _, t in pieces)
        utterances.append((f"utt-{len(utterances):05d}", pcm, text))
        total += len(pcm)
    return utterances


def write_corpus(folder: Path, utterances: list[tuple[str, np.ndarray, str]], shards: int) -> None:
    from asrkit.dataset.shards import ShardRecord, shard_name, write_shard

    records = [ShardRecord(uid, pcm.tobytes(), text) for uid, pcm, text in utterances]
    for index in range(shards):
        write_shard(folder / "shards" / shard_name("train", index, shards), records[index::shards])


# -- timing -------------------------------------------------------------------------------------


def timed(run: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median wall and CPU seconds of ``run`` over ``repeats`` runs, after one warm-up run."""
    run()
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        run()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def row(name: str, utterances: int, audio_s: float, wall: float, cpu: float) -> dict:
    return {
        "name": name,
        "utterances_per_s": utterances / wall,
        "audio_s_per_s": audio_s / wall,
        "real_time_per_cpu_s": audio_s / cpu,
        "wall_s": wall,
        "cpu_s": cpu,
    }


# -- features alone -----------------------------------------------------------------------------


def bench_features(utterances: list, batch_size: int, repeats: int) -> list[dict]:
    import python_speech_features as psf
    import tensorflow as tf

    from asrkit.features import MFCC, MFCCConfig

    audio_s = sum(len(pcm) for _, pcm, _ in utterances) / SAMPLE_RATE
    count = len(utterances)
    as_int = [pcm.astype(np.float64) for _, pcm, _ in utterances]
    as_float = [tf.constant(pcm / 32768.0, tf.float32) for _, pcm, _ in utterances]
    extractor, config = MFCC(), MFCCConfig()

    def reference() -> None:
        for pcm in as_int:
            psf.mfcc(pcm, samplerate=SAMPLE_RATE, numcep=26)

    one = tf.function(
        lambda audio: extractor.extract(audio, config),
        input_signature=[tf.TensorSpec([None], tf.float32)],
    )

    def per_utterance() -> None:
        for audio in as_float:
            one(audio)

    batch = tf.function(
        lambda audio, lengths: extractor.extract_batch(audio, lengths, config),
        input_signature=[tf.TensorSpec([None, None], tf.float32), tf.TensorSpec([None], tf.int32)],
    )
    order = sorted(range(count), key=lambda i: len(as_int[i]))
    batches = []
    for start in range(0, count, batch_size):
        chosen = order[start : start + batch_size]
        lengths = np.array([len(as_int[i]) for i in chosen], np.int32)
        padded = np.zeros([len(chosen), lengths.max()], np.float32)
        for j, i in enumerate(chosen):
            padded[j, : lengths[j]] = utterances[i][1] / 32768.0
        batches.append((tf.constant(padded), tf.constant(lengths)))

    def batched() -> None:
        for audio, lengths in batches:
            batch(audio, lengths)

    return [
        row(
            "python_speech_features.mfcc (numpy, per utterance)",
            count,
            audio_s,
            *timed(reference, repeats),
        ),
        row(
            "asrkit mfcc, tf.function per utterance", count, audio_s, *timed(per_utterance, repeats)
        ),
        row(
            f"asrkit mfcc, batches of {batch_size} sorted by length",
            count,
            audio_s,
            *timed(batched, repeats),
        ),
    ]


# -- whole pipelines ----------------------------------------------------------------------------


def generator_baseline(folder: Path, batch_size: int):  # -> tf.data.Dataset
    """The seeds' way: a Python generator reads the records, computes python_speech_features'
    MFCC and the labels, and tf.data pads the batches."""
    import python_speech_features as psf
    import tensorflow as tf

    from asrkit.core.text import Alphabet
    from asrkit.dataset.shards import shard_paths

    alphabet = Alphabet()
    files = [str(p) for p in shard_paths(folder, "train")]

    def generate() -> Iterator[tuple[np.ndarray, int, np.ndarray, int]]:
        for raw in tf.data.TFRecordDataset(files).as_numpy_iterator():
            feature = tf.train.Example.FromString(raw).features.feature
            pcm = np.frombuffer(feature["audio"].bytes_list.value[0], "<i2")
            text = feature["transcript"].bytes_list.value[0].decode()
            features = psf.mfcc(pcm.astype(np.float64), samplerate=SAMPLE_RATE, numcep=26)
            labels = np.array(alphabet.encode(text), np.int32)
            yield features.astype(np.float32), len(features), labels, len(labels)

    signature = (
        tf.TensorSpec([None, 26], tf.float32),
        tf.TensorSpec([], tf.int32),
        tf.TensorSpec([None], tf.int32),
        tf.TensorSpec([], tf.int32),
    )
    dataset = tf.data.Dataset.from_generator(generate, output_signature=signature)
    return dataset.padded_batch(batch_size).prefetch(tf.data.AUTOTUNE)


def bench_pipelines(folder: Path, utterances: list, batch_size: int, repeats: int) -> list[dict]:
    from asrkit.config.pipeline import PipelineConfig
    from asrkit.core.text import Alphabet
    from asrkit.features import MFCC
    from asrkit.pipeline.batches import make_dataset, padding_fraction

    audio_s = sum(len(pcm) for _, pcm, _ in utterances) / SAMPLE_RATE
    count = len(utterances)
    config = PipelineConfig(batch_size=batch_size, shuffle_buffer=512)
    ours = make_dataset(folder, "train", Alphabet(), MFCC(), config=config)
    baseline = generator_baseline(folder, batch_size)

    def drain(dataset) -> Callable[[], int]:
        def run() -> int:
            seen = 0
            for batch in dataset:
                features = batch["features"] if isinstance(batch, dict) else batch[0]
                seen += int(features.shape[0])
            assert seen == count, (seen, count)
            return seen

        return run

    rows = [
        row(
            "baseline: python_speech_features in a Python generator",
            count,
            audio_s,
            *timed(drain(baseline), repeats),
        ),
        row(
            f"asrkit pipeline (shards, in-graph mfcc, buckets, batch {batch_size})",
            count,
            audio_s,
            *timed(drain(ours), repeats),
        ),
    ]
    unbucketed = make_dataset(
        folder,
        "train",
        Alphabet(),
        MFCC(),
        config=PipelineConfig(batch_size=batch_size, bucketing=False),
    )
    rows[0]["padding_fraction"] = padding_fraction(unbucketed)
    rows[1]["padding_fraction"] = padding_fraction(ours)
    return rows


# -- report -------------------------------------------------------------------------------------


def table(title: str, rows: list[dict], reference: float) -> str:
    lines = [
        title,
        f"{'':64} {'utt/s':>8} {'x real time':>12} {'x RT/CPU-s':>11} {'ratio':>7}",
    ]
    for r in rows:
        lines.append(
            f"{r['name'][:64]:64} {r['utterances_per_s']:8.1f} {r['audio_s_per_s']:12.0f} "
            f"{r['real_time_per_cpu_s']:11.0f} {r['audio_s_per_s'] / reference:6.2f}x"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=20.0, help="minutes of audio")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs (median)")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)

    import tensorflow as tf

    utterances = make_corpus(args.minutes)
    audio_s = sum(len(pcm) for _, pcm, _ in utterances) / SAMPLE_RATE
    with tempfile.TemporaryDirectory(prefix="asrkit-bench-") as tmp:
        folder = Path(tmp)
        write_corpus(folder, utterances, args.shards)
        features = bench_features(utterances, args.batch_size, args.repeats)
        pipelines = bench_pipelines(folder, utterances, args.batch_size, args.repeats)

    psf_rate = features[0]["audio_s_per_s"]
    best_tf = max(r["audio_s_per_s"] for r in features[1:])
    baseline_rate, ours_rate = (r["audio_s_per_s"] for r in pipelines)
    summary = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "tensorflow": tf.__version__,
            "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
        },
        "corpus": {"utterances": len(utterances), "audio_s": audio_s},
        "features": features,
        "pipelines": pipelines,
        "ratios": {
            "mfcc_per_utterance_vs_psf": features[1]["audio_s_per_s"] / psf_rate,
            "mfcc_batched_vs_psf": features[2]["audio_s_per_s"] / psf_rate,
            "pipeline_vs_generator_baseline": ours_rate / baseline_rate,
            "pipeline_vs_brnn_training": ours_rate / BRNN_REAL_TIME,
        },
        "targets_met": {
            "mfcc_3x_psf": best_tf >= 3 * psf_rate,
            "pipeline_3x_brnn": ours_rate >= 3 * BRNN_REAL_TIME,
        },
    }
    if args.json:
        json.dump(summary, sys.stdout, indent=2)
        print()
        return 0
    print(
        f"{len(utterances)} utterances, {audio_s / 60:.1f} min of real speech; "
        f"{os.cpu_count()} CPUs, TensorFlow {tf.__version__}, "
        f"TF_ENABLE_ONEDNN_OPTS={summary['machine']['onednn']}; medians of {args.repeats} runs\n"
    )
    print(table("MFCC alone (ratio: against python_speech_features)", features, psf_rate))
    print()
    print(
        table("Input pipeline, one epoch (ratio: against the generator)", pipelines, baseline_rate)
    )
    print(
        f"padding fraction: {pipelines[0]['padding_fraction']:.3f} unbucketed, "
        f"{pipelines[1]['padding_fraction']:.3f} bucketed"
    )
    ratios = summary["ratios"]
    print(
        f"\nin-graph mfcc vs python_speech_features: {ratios['mfcc_per_utterance_vs_psf']:.2f}x "
        f"per utterance, {ratios['mfcc_batched_vs_psf']:.2f}x batched (target >= 3x)\n"
        f"pipeline vs generator baseline: {ratios['pipeline_vs_generator_baseline']:.2f}x\n"
        f"pipeline vs brnn training ({BRNN_REAL_TIME:.0f}x real time): "
        f"{ratios['pipeline_vs_brnn_training']:.1f}x (target >= 3x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
