"""The import engine end to end, with a minimal importer: fetch over real HTTP, verification,
safe archive reading, conversion, filtering, manifests, shards, idempotence and resumption."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from asrkit.dataset.shards import read_records, shard_paths
from tests import toy_importer
from tests.archives import tar_gz, wav_seconds
from tests.conftest import SPEECH

CLIPS = {
    "spk1_snt1.wav": ("train", "THE CHILD ALMOST HURT THE SMALL DOG"),
    "spk1_snt3.wav": ("train", "At that high level, the air is pure!"),
    "spk2_snt2.wav": ("train", "WHAT JOY THERE IS IN LIVING"),
    "spk2_snt4.wav": ("dev", "MEND THE COAT BEFORE YOU GO OUT"),
}
SPEECHBRAIN = SPEECH / "speechbrain"
LDC = SPEECH / "ldc93s1"


def toy_files(extra_lines: tuple[str, ...] = (), extra: dict[str, bytes] | None = None):
    files = {f"toy/{name}": (SPEECHBRAIN / name).read_bytes() for name in CLIPS}
    files["toy/LDC93S1_8k.wav"] = (LDC / "LDC93S1_8k_mono.wav").read_bytes()
    files["toy/LDC93S1.wav"] = (LDC / "LDC93S1.wav").read_bytes()
    lines = [f"{name}\t{split}\t{text}" for name, (split, text) in CLIPS.items()]
    lines += [
        "LDC93S1_8k.wav\ttest\tShe had your dark suit in greasy wash water all year.",
        "LDC93S1.wav\ttest\tshe had your dark suit\t0.0\t1.2",
        "LDC93S1.wav\ttest\tin greasy wash water all year\t1.2\t2.9",
        *extra_lines,
    ]
    files["toy/transcripts.tsv"] = ("\n".join(lines) + "\n").encode()
    files.update(extra or {})
    return files


@pytest.fixture
def toy(make_plugins):
    return make_plugins(toy_importer)


def import_toy(asrkit_cli, plugins, server, *args):
    return asrkit_cli(["import", "toy", "--mirror", server.url, "--no-progress", *args], plugins)


def rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_import_through_mirror(toy, asrkit_cli, asrkit_home, corpus_server):
    corpus_server.add_file("corpora/toy.tar.gz", tar_gz(toy_files()))
    result = import_toy(asrkit_cli, toy, corpus_server, "--jobs", "1")
    assert result.exit_code == 0, result.stderr
    dataset = asrkit_home / "datasets" / "toy"
    assert "imported toy" in result.stdout and "train 3 utt" in result.stdout

    report = json.loads((dataset / "dataset.json").read_text())
    assert {s: v["utterances"] for s, v in report["splits"].items()} == {
        "train": 3, "dev": 1, "test": 3}
    assert report["skipped"] == {}
    assert report["source"][0]["sha256"] == __import__("hashlib").sha256(
        corpus_server.files["corpora/toy.tar.gz"]).hexdigest()

    with open(dataset / "train.csv") as f:
        assert f.readline() == "wav_filename,wav_filesize,transcript,duration,speaker\n"
    train = {r["wav_filename"]: r for r in rows(dataset / "train.csv")}
    row = train["audio/train/spk1_snt3.wav"]
    assert row["transcript"] == "at that high level the air is pure"
    assert row["speaker"] == "spk1"
    wav = dataset / row["wav_filename"]
    assert int(row["wav_filesize"]) == wav.stat().st_size
    assert abs(float(row["duration"]) - wav_seconds(SPEECHBRAIN / "spk1_snt3.wav")) < 1e-3

    test = {r["wav_filename"]: r for r in rows(dataset / "test.csv")}
    resampled = test["audio/test/LDC93S1_8k.wav"]  # 8 kHz in, 16 kHz out, through sox
    assert abs(float(resampled["duration"]) - 46797 / 16000) < 1e-3
    assert abs(float(test["audio/test/LDC93S1-00000.wav"]["duration"]) - 1.2) < 1e-4
    assert abs(float(test["audio/test/LDC93S1-00120.wav"]["duration"]) - 1.7) < 1e-4
    assert test["audio/test/LDC93S1-00120.wav"]["transcript"] == "in greasy wash water all year"

    records = [r for path in shard_paths(dataset, "test") for r in read_records(path)]
    assert sorted(r.id for r in records) == ["LDC93S1-00000", "LDC93S1-00120", "LDC93S1_8k"]
    by_id = {r.id: r for r in records}
    assert by_id["LDC93S1-00000"].transcript == "she had your dark suit"
    assert by_id["LDC93S1-00000"].num_samples == 19200


def test_second_run_does_no_work(toy, asrkit_cli, asrkit_home, corpus_server):
    corpus_server.add_file("corpora/toy.tar.gz", tar_gz(toy_files()))
    assert import_toy(asrkit_cli, toy, corpus_server).exit_code == 0
    dataset = asrkit_home / "datasets" / "toy"
    before = {p: p.stat().st_mtime_ns for p in dataset.rglob("*")}
    downloads = len(corpus_server.requested("corpora/toy.tar.gz"))
    again = import_toy(asrkit_cli, toy, corpus_server)
    assert again.exit_code == 0
    assert "already imported" in again.stdout and "nothing to do" in again.stdout
    assert {p: p.stat().st_mtime_ns for p in dataset.rglob("*")} == before
    assert len(corpus_server.requested("corpora/toy.tar.gz")) == downloads
    forced = import_toy(asrkit_cli, toy, corpus_server, "--force")
    assert forced.exit_code == 0 and "imported toy" in forced.stdout


def test_bad_inputs_are_skipped_and_reported(toy, asrkit_cli, asrkit_home, corpus_server):
    lines = (
        "broken.wav\ttrain\tthis file is not audio",
        "spk1_snt4.wav\ttrain\t日本語",
        "spk1_snt5.wav\ttrain\t  ...  ",
        "LDC93S1.wav\ttrain\ta transcript far too long for one tenth of a second\t0.0\t0.1",
        "spk2_snt1.wav\ttrain\tWE ARE SURE THAT ONE WORE IS ENOUGH",
        "missing.wav\ttrain\tno such file",
    )
    extra = {
        "toy/broken.wav": b"RIFF\x00\x00\x00\x00WAVEnot really a wave file" * 10,
        "toy/spk1_snt4.wav": (SPEECHBRAIN / "spk1_snt4.wav").read_bytes(),
        "toy/spk1_snt5.wav": (SPEECHBRAIN / "spk1_snt5.wav").read_bytes(),
        "toy/spk2_snt1.wav": (SPEECHBRAIN / "spk2_snt1.wav").read_bytes(),
    }
    corpus_server.add_file("corpora/toy.tar.gz", tar_gz(toy_files(lines, extra)))
    result = import_toy(asrkit_cli, toy, corpus_server, "--max-duration", "2.5")
    assert result.exit_code == 0, result.stderr
    report = json.loads((asrkit_home / "datasets/toy/dataset.json").read_text())
    skipped = {reason: info["utterances"] for reason, info in report["skipped"].items()}
    assert skipped == {
        "unreadable audio": ["train/broken"],
        "characters outside the alphabet": ["train/spk1_snt4"],
        "empty transcript": ["train/spk1_snt5"],
        "too short for its transcript": ["train/LDC93S1-00000"],
        "too long": ["test/LDC93S1_8k", "train/spk1_snt1", "train/spk1_snt3"],
        "audio file missing": ["train/missing"],
    }
    assert "sox could not decode toy/broken.wav" in report["errors"]["toy/broken.wav"]
    assert "skipped" in result.stdout and "dataset.json" in result.stdout
    kept = [r["wav_filename"] for r in rows(asrkit_home / "datasets/toy/train.csv")]
    assert kept == ["audio/train/spk2_snt1.wav", "audio/train/spk2_snt2.wav"]
    assert not (asrkit_home / "datasets/toy/audio/train/broken.wav").exists()


def test_wrong_checksum_stops_before_reading(toy, asrkit_cli, asrkit_home, corpus_server):
    corpus_server.add_file("corpora/toy.tar.gz", tar_gz(toy_files()), checksums=False)
    corpus_server.files["corpora/SHA256SUMS"] = b"0" * 64 + b"  toy.tar.gz\n"
    result = import_toy(asrkit_cli, toy, corpus_server)
    assert result.exit_code == 1
    (line,) = result.stderr.strip().splitlines()[-1:]
    assert line.startswith("asrkit: error: toy.tar.gz has sha256")
    assert "set aside as toy.tar.gz.bad" in line
    assert (asrkit_home / "downloads/toy.tar.gz.bad").exists()
    assert not (asrkit_home / "downloads/toy.tar.gz").exists()
    dataset = asrkit_home / "datasets" / "toy"
    assert not list(dataset.glob("*.csv")) and not (dataset / "audio").exists()


def test_no_checksum_needs_explicit_opt_out(toy, asrkit_cli, asrkit_home, corpus_server):
    corpus_server.add_file("corpora/toy.tar.gz", tar_gz(toy_files()), checksums=False)
    refused = import_toy(asrkit_cli, toy, corpus_server)
    assert refused.exit_code == 1 and "--no-verify" in refused.stderr
    accepted = import_toy(asrkit_cli, toy, corpus_server, "--no-verify")
    assert accepted.exit_code == 0, accepted.stderr


def test_dropped_connection_resumes(toy, asrkit_cli, asrkit_home, corpus_server):
    data = tar_gz(toy_files())
    corpus_server.add_file("corpora/toy.tar.gz", data)
    corpus_server.drop_after("corpora/toy.tar.gz", len(data) // 2)
    result = import_toy(asrkit_cli, toy, corpus_server)
    assert result.exit_code == 0, result.stderr
    first, second = corpus_server.requested("corpora/toy.tar.gz")
    assert first is None
    assert second.startswith("bytes=") and 0 < int(second[6:-1]) <= len(data) // 2
    assert (asrkit_home / "downloads/toy.tar.gz").read_bytes() == data


@pytest.mark.parametrize("evil", [
    {"files": {"../x": b"escaped"}},
    {"files": {"toy/../../x": b"escaped"}},
    {"files": {"/tmp/asrkit-absolute-member": b"escaped"}},
    {"links": {"toy/link.wav": "../../etc/passwd"}},
    {"links": {"toy/abs.wav": "/etc/passwd"}},
])
def test_unsafe_archives_are_refused(evil, toy, asrkit_cli, asrkit_home, corpus_server, tmp_path):
    files = toy_files()
    files.update(evil.get("files", {}))
    corpus_server.add_file("corpora/toy.tar.gz", tar_gz(files, links=evil.get("links")))
    result = import_toy(asrkit_cli, toy, corpus_server)
    assert result.exit_code == 1
    assert "refusing to read it" in result.stderr and "Traceback" not in result.stderr
    assert not (asrkit_home / "datasets/toy/audio").exists()
    assert not (asrkit_home / "datasets/x").exists() and not (tmp_path / "x").exists()


def test_links_inside_the_archive_are_followed(toy, asrkit_cli, asrkit_home, corpus_server):
    files = toy_files(("linked.wav\tdev\tthe child almost hurt the small dog",))
    archive = tar_gz(files, links={"toy/linked.wav": "spk1_snt1.wav"})
    corpus_server.add_file("corpora/toy.tar.gz", archive)
    assert import_toy(asrkit_cli, toy, corpus_server).exit_code == 0
    dataset = asrkit_home / "datasets/toy"
    assert (dataset / "audio/dev/linked.wav").read_bytes() == (
        dataset / "audio/train/spk1_snt1.wav").read_bytes()


def test_archive_on_disk(toy, asrkit_cli, asrkit_home, tmp_path):
    archive = tmp_path / "toy.tar.gz"
    archive.write_bytes(tar_gz(toy_files()))
    result = asrkit_cli(["import", "toy", "--archive", archive, "--no-progress"], toy)
    assert result.exit_code == 0, result.stderr
    assert archive.exists()  # inputs are never deleted
    assert not (asrkit_home / "downloads").exists()


def assert_same_tree(got: dict[str, bytes], expected: dict[str, bytes]) -> None:
    """Equal trees, or a failure that names the files that differ (not megabytes of bytes)."""
    assert sorted(got) == sorted(expected)
    differ = [name for name in expected if got[name] != expected[name]]
    shown = {name: (got[name][:300], expected[name][:300]) for name in differ[:3]}
    assert not differ, (differ, shown)


def tree(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and ".import" not in p.parts
    }


@pytest.fixture
def toy_site(installed):
    source = (Path(__file__).parent / "toy_importer.py").read_text()
    return installed("asrkit-importer-toy", "asrkit_importer_toy", source,
                     {"toy": "asrkit_importer_toy"})


def test_killed_import_resumes_byte_identical(toy_site, corpus_server, tmp_path):
    """kill -9 during conversion and during sharding; the reruns end byte-identical to a run
    that was never interrupted (and to one with another number of jobs)."""
    lines = tuple(f"spk1_snt1.wav\ttrain\tthe child almost\t{i / 10}\t{1.5 + i / 10}"
                  for i in range(5))
    many = {f"toy/lj{i:03d}.wav": (SPEECH / "ljspeech/LJ002-0020.wav").read_bytes()
            for i in range(120)}  # 22.05 kHz: each needs a sox process, so conversion takes time
    lines += tuple(f"lj{i:03d}.wav\t{('train', 'dev')[i % 2]}\tin eighteen thirteen"
                   for i in range(120))
    corpus_server.add_file("corpora/toy.tar.gz", tar_gz(toy_files(lines, many)))

    def command(home: Path, jobs: str) -> tuple[list[str], dict]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ASRKIT_")}
        env.update(ASRKIT_HOME=str(home), PYTHONPATH=str(toy_site))
        args = [sys.executable, "-m", "asrkit", "import", "toy", "--mirror", corpus_server.url,
                "--no-progress", "--jobs", jobs]
        return args, env

    reference = tmp_path / "reference"
    args, env = command(reference, "1")
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr

    resumed = tmp_path / "resumed"
    dataset = resumed / "datasets" / "toy"
    journal = dataset / ".import" / "journal.jsonl"
    args, env = command(resumed, "2")
    for ready in (lambda: journal.exists() and len(journal.read_text().splitlines()) >= 20,
                  lambda: any((dataset / "shards").glob("*.tfrecord"))):
        process = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 120
        while not ready() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert process.poll() is None, "the import finished before it could be killed"
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        assert not (dataset / "dataset.json").exists()
    # What a kill in the middle of writing a converted file leaves (named by process id).
    (dataset / "audio" / "train" / "lj000.wav.4242.partial").write_bytes(b"RIFF")
    finished = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    assert finished.returncode == 0, finished.stderr
    assert_same_tree(tree(dataset), tree(reference / "datasets" / "toy"))
