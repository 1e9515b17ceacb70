"""What an import holds in memory and how long it waits are bounded, whatever the corpus holds:
a 100 kB ``tar --sparse`` archive with a 1 GiB recording, a compressed clip of ten minutes, a
transcript of megabytes, a folder a thousand deep, a hung sox or gzip. Real archives, real
folders, real sox; only the hung programs are fakes on ``PATH``."""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import soundfile

from asrkit.dataset import audio
from asrkit.dataset.folders import MAX_MEMBER_BYTES
from asrkit.importing import archive
from asrkit.importing.convert import SegmentJob, convert_member
from asrkit_importers.folder import FolderImporter
from tests import corpora, toy_importer
from tests.archives import tar_gz
from tests.conftest import ROOT, SPEECH

CLIP = SPEECH / "ldc93s1" / "LDC93S1.wav"  # 16 kHz mono: decoded in-process
CLIP_8K = SPEECH / "ldc93s1" / "LDC93S1_8k_mono.wav"  # resampled by sox
TRANSCRIPT = "she had your dark suit in greasy wash water all year"
GIB = 1 << 30


def one_line_error(result) -> str:
    """The error line of a failed command, checked to be the only thing it said."""
    assert result.exit_code == 1, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("asrkit: error: "), result.stderr
    return lines[0]


def report_of(home: Path, name: str) -> dict:
    return json.loads((home / "datasets" / name / "dataset.json").read_text())


def recording(folder: Path, name: str, source: Path = CLIP, text: str = TRANSCRIPT) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, folder / f"{name}.wav")
    (folder / f"{name}.txt").write_text(text)


def fake_program(tmp_path: Path, monkeypatch, name: str) -> None:
    """``name`` on ``PATH`` becomes a program that hangs (reads nothing, writes nothing)."""
    folder = tmp_path / "fake-bin"
    folder.mkdir(exist_ok=True)
    program = folder / name
    program.write_text("#!/bin/sh\nexec sleep 20\n")
    program.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")


# -- 1. a recording larger than any an import reads ---------------------------------------------


def sparse_wav(path: Path, size: int) -> None:
    """A WAV file of ``size`` bytes that takes no disk: 16 kHz mono 16-bit silence, hours of it,
    with a header that says so."""
    data = size - 44
    header = struct.pack("<4sI4s4sIHHIIHH4sI", b"RIFF", size - 8, b"WAVE", b"fmt ", 16, 1, 1,
                         16000, 32000, 2, 16, b"data", data)
    with open(path, "wb") as f:
        f.write(header)
        f.truncate(size)


#: Imports the toy archive, then prints the report and the peak memory of the import (its
#: process's or, larger, a child's such as sox), in bytes.
IMPORT_CHILD = """
import json, resource, sys
from pathlib import Path
from asrkit.importing.engine import ImportConfig, run_import
from tests.toy_importer import ToyTarImporter
home, tar = Path(sys.argv[1]), Path(sys.argv[2])
result = run_import(ToyTarImporter(), {}, ImportConfig(home=home, archives=(tar,), jobs=1,
                                                        progress=False))
# This process's own peak is VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec, so it
# would hold the peak of the pytest worker that started this process.
status = Path("/proc/self/status").read_text().split("VmHWM:")[1].split()
peak = max(int(status[0]), resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
print(json.dumps({"report": result.report, "peak": peak * 1024}))  # kilobytes on Linux
"""


@pytest.mark.skipif(shutil.which("tar") is None, reason="needs GNU tar")
def test_a_sparse_gigabyte_member_is_skipped_unread(tmp_path):
    """``tar --sparse`` packs a 1 GiB recording in 100 kB. The import skips and names it before
    reading a byte of it: its peak memory stays below the member's size (it read the whole
    member, and decoded it, before the bound)."""
    corpus = tmp_path / "toy"
    corpus.mkdir()
    shutil.copyfile(CLIP, corpus / "a.wav")
    sparse_wav(corpus / "big.wav", GIB)
    (corpus / "transcripts.tsv").write_text(
        f"a.wav\ttrain\t{TRANSCRIPT}\nbig.wav\ttrain\t{TRANSCRIPT}\n")
    tar = tmp_path / "toy.tar"
    subprocess.run(["tar", "--sparse", "-cf", str(tar), "toy"], cwd=tmp_path, check=True)
    assert tar.stat().st_size < 200_000
    (corpus / "big.wav").unlink()

    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run([sys.executable, "-c", IMPORT_CHILD, str(tmp_path / "home"), str(tar)],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    printed = json.loads(done.stdout.splitlines()[-1])
    report, peak = printed["report"], printed["peak"]
    assert peak < GIB, f"peak RSS {peak / 2**20:.0f} MiB"
    assert report["total"]["utterances"] == 1
    reason = archive.too_large(MAX_MEMBER_BYTES)
    assert report["skipped"][reason]["files"] == ["toy/big.wav"]
    assert report["skipped"]["audio file missing"]["utterances"] == ["train/big"]


def test_a_member_over_the_bound_is_never_read(tmp_path):
    """The bound holds in both passes, for archives and folders: a second member of the same
    name, or a file grown since the scan, is not read either."""
    small, big = b"x" * 10, b"y" * 100
    tar = tmp_path / "two.tar.gz"
    tar.write_bytes(tar_gz({"c/a.wav": small, "c/b.wav": big}))
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "a.wav").write_bytes(small)
    (folder / "b.wav").write_bytes(big)
    for path, prefix in ((tar, "c/"), (folder, "")):
        source = archive.Source(path, progress=False, member_limit=50)
        scan = archive.scan_sources([source], lambda name: False)
        assert scan.members == [prefix + "a.wav"]
        assert scan.skipped == {prefix + "b.wav": archive.too_large(50)}
        wanted = {prefix + "a.wav", prefix + "b.wav"}
        assert dict(source.stream(wanted)) == {prefix + "a.wav": small}
    (folder / "a.wav").write_bytes(big)  # grown between the passes
    assert dict(archive.Source(folder, member_limit=50).stream({"a.wav"})) == {}


def test_max_file_size_sets_the_bound_and_is_part_of_the_import(asrkit_cli, asrkit_home,
                                                                 tmp_path):
    """``--max-file-size`` is how a user raises (or lowers) the bound the skip reason names;
    another value is another import, so the same folder is not taken as up to date."""
    root = tmp_path / "sizes"
    root.mkdir()
    sparse_wav(root / "big.wav", 3 << 20)  # 98 s of 16 kHz silence
    (root / "big.txt").write_text(TRANSCRIPT)
    recording(root, "a")
    output = tmp_path / "ds"
    small = asrkit_cli(corpora.import_args("folder", root, "--output", output, "--json",
                                           "--max-file-size", "2"))
    assert small.exit_code == 0, small.stderr[-2000:]
    reason = archive.too_large(2 << 20)
    assert "raise --max-file-size" in reason
    assert json.loads(small.stdout)["skipped"][reason]["files"] == ["big.wav"]
    default = asrkit_cli(corpora.import_args("folder", root, "--output", output, "--json",
                                             "--force"))
    assert default.exit_code == 0, default.stderr[-2000:]
    assert reason not in json.loads(default.stdout)["skipped"]
    refused = asrkit_cli(corpora.import_args("folder", root, "--max-file-size", "0"))
    assert refused.exit_code == 2


# -- 2. a long clip is not decoded whole ---------------------------------------------------------


@pytest.mark.parametrize("rate", [16000, 8000], ids=["in-process", "sox"])
def test_a_long_clip_is_refused_without_decoding_it_whole(tmp_path, rate):
    """Ten minutes of FLAC (a small file) would be 19 MB of samples: only what the segments can
    use is decoded, so refusing the whole clip as too long, and cutting a segment from its
    start, take a megabyte or two."""
    encoded = io.BytesIO()
    soundfile.write(encoded, np.zeros(600 * rate, dtype=np.int16), rate, format="FLAC")
    data = encoded.getvalue()
    jobs = [SegmentJob("train/whole", "audio/train/whole.wav", None, None, 5),
            SegmentJob("train/part", "audio/train/part.wav", 1.0, 11.0, 5)]
    tracemalloc.start()
    try:
        _, results = convert_member(str(tmp_path), "long.flac", data, jobs, 40.0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    whole, part = results
    assert whole.reason == "too long"
    assert part.reason is None and part.samples == 10 * 16000
    assert soundfile.info(str(tmp_path / "audio/train/part.wav")).frames == 10 * 16000
    assert peak < 8 << 20, f"peak {peak / 2**20:.1f} MiB"


# -- 3. transcripts ------------------------------------------------------------------------------


def test_a_transcript_of_megabytes_is_refused_by_name(asrkit_cli, asrkit_home, tmp_path):
    root = tmp_path / "big-text"
    recording(root, "a")
    recording(root / "spk", "b", text="word " * 300_000)
    line = one_line_error(asrkit_cli(corpora.import_args("folder", root)))
    assert "'spk/b.txt'" in line and "1,048,576" in line and len(line) < 300


def test_transcripts_together_are_bounded(asrkit_cli, asrkit_home, tmp_path, monkeypatch):
    """Many transcripts, each small: reading stops, before the one that would pass the total,
    with one line naming it and the bound."""
    root = tmp_path / "many"
    for i in range(5):
        recording(root, f"r{i}", text="x" * 1000)
    monkeypatch.setattr(archive, "MAX_METADATA_TOTAL_BYTES", 2500)
    monkeypatch.setattr(FolderImporter, "max_metadata_bytes", 2000)  # the total's floor
    line = one_line_error(asrkit_cli(corpora.import_args("folder", root)))
    assert "'r2.txt'" in line and "2,500" in line


# -- 4. deep folders -----------------------------------------------------------------------------


#: The deepest folder read (:data:`archive.MAX_FOLDER_DEPTH`).
DEEPEST = 100


def nest(root: Path, depth: int) -> Path:
    """``root/d/d/.../d``, ``depth`` folders deep (``os.makedirs`` recurses, so one by one)."""
    folder = root
    for _ in range(depth):
        folder = folder / "d"
        folder.mkdir()
    return folder


def unnest(root: Path, depth: int) -> None:
    """Remove what :func:`nest` made (``shutil.rmtree`` recurses too)."""
    for level in range(depth, 0, -1):
        folder = root / "/".join(["d"] * level)
        for entry in folder.iterdir():
            entry.unlink()
        folder.rmdir()


def test_a_folder_a_thousand_deep_is_skipped_and_named(asrkit_cli, asrkit_home, tmp_path):
    root = tmp_path / "deep"
    recording(root, "top")
    try:
        bottom = nest(root, 1000)
        recording(bottom, "bottom")
        recording(root / "/".join(["d"] * DEEPEST), "lowest")
        result = asrkit_cli(corpora.import_args("folder", root))
        assert result.exit_code == 0, result.stderr
        report = report_of(asrkit_home, "deep")
        assert report["total"]["utterances"] == 2  # top, and the one at the deepest depth read
        too_deep = "/".join(["d"] * (DEEPEST + 1))
        assert report["skipped"][archive.TOO_DEEP]["files"] == [too_deep]
        assert archive.MAX_FOLDER_DEPTH == DEEPEST
    finally:
        unnest(root, 1000)


# -- 5. hung decoders ----------------------------------------------------------------------------


def test_a_hung_sox_is_stopped_and_named(asrkit_cli, asrkit_home, tmp_path, monkeypatch):
    """The 8 kHz recording needs sox, which hangs: it is stopped after its time and named in
    the report; the 16 kHz one imports, and the import ends in seconds."""
    root = tmp_path / "hung"
    recording(root, "native")
    recording(root, "resampled", CLIP_8K)
    fake_program(tmp_path, monkeypatch, "sox")
    monkeypatch.setattr(audio, "SOX_MIN_SECONDS", 1.0)
    start = time.monotonic()
    result = asrkit_cli(corpora.import_args("folder", root))
    assert result.exit_code == 0, result.stderr
    assert time.monotonic() - start < 15
    report = report_of(asrkit_home, "hung")
    assert report["total"]["utterances"] == 1
    error = report["errors"]["resampled.wav"]
    assert "sox took more than 1 s to decode resampled.wav" in error


def test_a_sox_that_writes_without_end_is_stopped_at_its_deadline(tmp_path, monkeypatch):
    """The deadline bounds a whole decode even while sox keeps writing (a trickle no stall
    watchdog would catch): a recording of hours is not decoded for hours."""
    folder = tmp_path / "fake-bin"
    folder.mkdir()
    (folder / "sox").write_text("#!/bin/sh\nwhile :; do head -c 320 /dev/zero; sleep 0.1; done\n")
    (folder / "sox").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(audio, "SOX_MIN_SECONDS", 1.0)
    start = time.monotonic()
    with pytest.raises(audio.AudioError) as error:
        audio.decode(b"not audio that libsndfile reads", "talk.mp3")
    assert time.monotonic() - start < 10
    assert str(error.value) == ("sox took more than 1 s to decode talk.mp3, so it was stopped (a "
                                "damaged file can hang it); check the file")


def test_a_hung_gzip_ends_the_import_in_one_line(asrkit_cli, asrkit_home, tmp_path,
                                                  monkeypatch, make_plugins):
    plugins = make_plugins(toy_importer)
    tar = tmp_path / "toy.tar.gz"
    tar.write_bytes(tar_gz({"toy/a.wav": CLIP.read_bytes(),
                            "toy/transcripts.tsv": f"a.wav\ttrain\t{TRANSCRIPT}\n".encode()}))
    fake_program(tmp_path, monkeypatch, "gzip")
    monkeypatch.setattr(archive, "GZIP_STALL_SECONDS", 1.0)
    start = time.monotonic()
    line = one_line_error(asrkit_cli(["import", "toy", "--archive", tar, "--no-progress"],
                                     plugins))
    assert time.monotonic() - start < 10
    assert "toy.tar.gz: gzip produced nothing for 1 s" in line


# -- 6. odd file names ---------------------------------------------------------------------------


def test_names_with_control_characters_import(asrkit_cli, asrkit_home, tmp_path):
    """A newline, a tab or an escape in a file or folder name is no error: the utterance id
    (a file name in the dataset) has it replaced, as any character unsafe in a file name."""
    root = tmp_path / "odd-names"
    recording(root, "new\nline")
    recording(root, "tab\there")
    recording(root / "sp\x1bk", "c")
    result = asrkit_cli(corpora.import_args("folder", root))
    assert result.exit_code == 0, result.stderr
    report = report_of(asrkit_home, "odd-names")
    assert report["total"]["utterances"] == 3
    names = (asrkit_home / "datasets/odd-names/train.csv").read_text()
    assert "audio/train/new_line.wav" in names and "audio/train/sp_k_c.wav" in names


def test_a_path_longer_than_a_file_name_may_be_still_imports(asrkit_cli, asrkit_home, tmp_path):
    """A folder corpus's utterance id is the file's whole path: two folders of 150 characters
    make an id no file name can hold (255 bytes). It is cut, with a digest of the whole path, so
    that two such files stay apart."""
    root = tmp_path / "long"
    deep = root / ("s" * 150) / ("t" * 150)
    recording(deep, "a" * 100)
    recording(deep, "a" * 99 + "b")
    output = tmp_path / "ds"
    done = asrkit_cli(corpora.import_args("folder", root, "--output", output))
    assert done.exit_code == 0, done.stderr[-2000:]
    names = sorted(p.name for p in (output / "audio" / "train").iterdir())
    assert len(names) == 2 and names[0] != names[1]
    assert all(len(name) <= 210 for name in names)
