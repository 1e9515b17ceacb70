"""Import speed: asrkit's engine against a serial one-sox-process-per-file import.

Builds a LibriSpeech-style corpus (16 kHz FLAC in a .tar.gz, transcripts beside) of at least
``--minutes`` of real speech from the test fixtures, then imports it three ways, in one run:

- baseline: what DeepSpeech-era importers do: unpack the archive, run one ``sox`` process per
  file to make a 16 kHz mono 16-bit WAV, write the CSV;
- asrkit ``--jobs 1`` and ``--jobs 2``: the full import (scan, convert, CSV, TFRecord shards,
  dataset.json), reading the archive without unpacking it.

Reports audio-seconds per wall second and the ratios. TensorFlow (used for the shards) is
imported once before timing; its import time is reported separately.

    python benchmarks/bench_import.py [--minutes 30] [--repeats 3] [--json results.json]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEECH = ROOT / "tests" / "fixtures" / "speech"
sys.path.insert(0, str(ROOT))

from asrkit.importing.engine import ImportConfig, run_import  # noqa: E402
from asrkit.types import Importer, Resource, Utterance  # noqa: E402


class BenchImporter(Importer):
    """A LibriSpeech-shaped corpus: bench/<id>.flac and bench/transcripts.txt."""

    name = "bench"
    description = "benchmark corpus"

    def __init__(self, archive: Path) -> None:
        self.archive = archive

    def resources(self, options):
        return [Resource("bench.tar.gz", path=str(self.archive))]

    def is_metadata(self, member):
        return member.endswith("transcripts.txt")

    def prepare(self, metadata, members, options):
        for line in metadata["bench/transcripts.txt"].decode().splitlines():
            uid, text = line.split(" ", 1)
            yield Utterance(uid, "train", f"bench/{uid}.flac", text, uid.split("-")[0])


def clips() -> list[tuple[Path, str]]:
    """The fixture clips with transcripts (16 kHz mono)."""
    found = []
    for folder in ("librispeech", "librispeech-flac"):
        for line in (SPEECH / folder / "transcripts.txt").read_text().splitlines():
            uid, text = line.split(" ", 1)
            path = next((SPEECH / folder).glob(f"{uid}.*"))
            found.append((path, text))
    for line in (SPEECH / "speechbrain/TRANSCRIPTS.tsv").read_text().splitlines()[1:]:
        uid, _, _, text = line.split("\t")
        if "no transcript" not in text:
            found.append((SPEECH / "speechbrain" / f"{uid}.wav", text))
    return found


def seconds_of(flac: bytes) -> float:
    import soundfile

    info = soundfile.info(io.BytesIO(flac))
    return info.frames / info.samplerate


def build_corpus(folder: Path, minutes: float) -> tuple[Path, float, int]:
    encoded = []
    for path, text in clips():
        out = folder / "clip.flac"
        subprocess.run(["sox", str(path), "-r", "16000", "-c", "1", "-b", "16", str(out)],
                       check=True)
        encoded.append((out.read_bytes(), text))
    files, lines, total, i = {}, [], 0.0, 0
    while total < minutes * 60:
        data, text = encoded[i % len(encoded)]
        uid = f"{1000 + i % 40}-{i:06d}"
        files[f"bench/{uid}.flac"] = data
        lines.append(f"{uid} {text}")
        total += seconds_of(data)
        i += 1
    files["bench/transcripts.txt"] = ("\n".join(lines) + "\n").encode()
    archive = folder / "bench.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return archive, total, i


def baseline(archive: Path, work: Path) -> None:
    """Unpack, then one sox process per file, serially; then the CSV."""
    raw = work / "raw"
    with tarfile.open(archive) as tar:
        tar.extractall(raw, filter="data")
    out = work / "wav"
    out.mkdir()
    transcripts = dict(
        line.split(" ", 1) for line in (raw / "bench/transcripts.txt").read_text().splitlines()
    )
    with open(work / "train.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["wav_filename", "wav_filesize", "transcript"])
        for uid, text in sorted(transcripts.items()):
            wav = out / f"{uid}.wav"
            subprocess.run(["sox", str(raw / "bench" / f"{uid}.flac"), "-r", "16000", "-c", "1",
                            "-b", "16", str(wav)], check=True)
            writer.writerow([wav.name, wav.stat().st_size, text.lower()])


def asrkit_import(archive: Path, work: Path, jobs: int) -> None:
    config = ImportConfig(home=work, jobs=jobs, progress=False)
    result = run_import(BenchImporter(archive), {}, config)
    assert result.report["skipped"] == {}, result.report["skipped"]


PEAK_RSS = """
import resource, subprocess, sys
subprocess.run(sys.argv[1:], check=True, capture_output=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def peak_memory(archive: Path, work: Path) -> int:
    """Peak resident memory (KiB) of the largest process of ``asrkit import`` on ``archive``
    (a fresh process tree: the CLI and its workers)."""
    env = {**os.environ, "ASRKIT_HOME": str(work), "PYTHONPATH": str(ROOT / "benchmarks")}
    command = [sys.executable, "-c", PEAK_RSS, sys.executable, "-c",
               "import sys; from bench_import import cli_import; cli_import(sys.argv[1])",
               str(archive)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return int(result.stdout.split()[-1])


def cli_import(archive: str) -> None:
    """An import of ``archive`` through the same engine as the command (for peak_memory)."""
    asrkit_import(Path(archive), Path(os.environ["ASRKIT_HOME"]), 2)


def timed(function, *args) -> float:
    start = time.perf_counter()
    function(*args)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--memory", action="store_true",
                        help="also measure peak memory for --minutes/10 and --minutes of audio")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        archive, audio, count = build_corpus(tmp_path, args.minutes)
        start = time.perf_counter()
        import tensorflow  # noqa: F401  (shards need it; imported once per process)

        tf_import = time.perf_counter() - start
        runs = {"baseline: unpack + one sox per file": lambda w: baseline(archive, w),
                "asrkit --jobs 1": lambda w: asrkit_import(archive, w, 1),
                "asrkit --jobs 2": lambda w: asrkit_import(archive, w, 2)}
        results = {}
        for name, run in runs.items():
            times = []
            for r in range(args.repeats):
                work = tmp_path / f"{len(results)}-{r}"
                work.mkdir()
                times.append(timed(run, work))
                shutil.rmtree(work)
            results[name] = min(times)

    base = results["baseline: unpack + one sox per file"]
    print(f"corpus: {count} FLAC files, {audio / 60:.1f} min of audio; {os.cpu_count()} cores")
    print(f"TensorFlow import (once per process, not in the times below): {tf_import:.2f} s\n")
    print(f"{'import':40s} {'seconds':>8s} {'audio s/s':>10s} {'x baseline':>11s}")
    table = {}
    for name, seconds in results.items():
        rate = audio / seconds
        table[name] = {"seconds": round(seconds, 3), "audio_seconds_per_second": round(rate, 1),
                       "ratio": round(base / seconds, 2)}
        print(f"{name:40s} {seconds:8.2f} {rate:10.1f} {base / seconds:10.2f}x")
    scaling = results["asrkit --jobs 1"] / results["asrkit --jobs 2"]
    print(f"\n--jobs 2 over --jobs 1: {scaling:.2f}x")
    memory = {}
    if args.memory:
        with tempfile.TemporaryDirectory() as tmp:
            tmp_path = Path(tmp)
            for minutes in (args.minutes / 10, args.minutes):
                folder = tmp_path / f"m{minutes:g}"
                folder.mkdir()
                small, seconds, _ = build_corpus(folder, minutes)
                memory[round(seconds / 60, 1)] = peak_memory(small, folder / "home")
        (low, low_kib), (high, high_kib) = sorted(memory.items())
        print(f"\npeak resident memory: {low_kib / 1024:.0f} MiB for {low:g} min of audio, "
              f"{high_kib / 1024:.0f} MiB for {high:g} min ({high_kib / low_kib:.2f}x for "
              f"{high / low:.0f}x the audio)")
    if args.json:
        args.json.write_text(json.dumps({"audio_seconds": audio, "files": count,
                                         "tensorflow_import_seconds": tf_import,
                                         "results": table, "jobs_scaling": scaling,
                                         "peak_rss_kib_by_minutes": memory}, indent=2))


if __name__ == "__main__":
    main()
