"""An import's output folder inside the corpus it reads (``asrkit import folder corpus --output
corpus/ds``): the output's own files are not the corpus's. A rerun of a finished import says it
is up to date instead of refusing (the corpus would look changed: its files' times are in the
fingerprint), and a killed one continues where it stopped instead of starting over, without
taking the WAVs it wrote for recordings of the corpus."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import corpora
from tests.conftest import FAULTS

CLIPS = corpora.speechbrain_clips()
NAMES = ("spk1_snt1", "spk1_snt2", "spk2_snt1")


def corpus(root: Path, count: int) -> Path:
    """``root`` with ``count`` real recordings, each with its transcript beside it."""
    root.mkdir(parents=True)
    for i in range(count):
        clip = CLIPS[NAMES[i % len(NAMES)]]
        shutil.copyfile(clip.path, root / f"r{i:02d}.wav")
        (root / f"r{i:02d}.txt").write_text(clip.transcript)
    return root


def contents(dataset: Path) -> dict[str, bytes]:
    """Every file of a dataset but its import state (journal, marker), by relative path."""
    return {p.relative_to(dataset).as_posix(): p.read_bytes() for p in sorted(dataset.rglob("*"))
            if p.is_file() and ".import" not in p.parts and p.name != ".asrkit-output"}


def kill_once_journaled(root: Path, dataset: Path, home: Path, members: int) -> list[str]:
    """Start ``asrkit import folder root --output dataset``, stalled before its 19th recording;
    ``kill -9`` it once its journal names ``members``; the journal's lines."""
    journal = dataset / ".import" / "journal.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASRKIT_")}
    env.update(ASRKIT_HOME=str(home), ASRKIT_TEST_STALL_AFTER_WAVS="18",
               PYTHONPATH=os.pathsep.join([str(FAULTS), env.get("PYTHONPATH", "")]))
    args = map(str, corpora.import_args("folder", root, "--output", dataset))
    process = subprocess.Popen([sys.executable, "-m", "asrkit", *args], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (journal.exists() and journal.read_text().count("\n") >= members):
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        process.kill()
        process.wait()
    return [line for line in journal.read_text().splitlines(keepends=True) if line[-1] == "\n"]


def report_of(dataset: Path) -> dict:
    return json.loads((dataset / "dataset.json").read_text())


def test_a_finished_import_inside_its_corpus_is_up_to_date(asrkit_cli, asrkit_home, tmp_path):
    root = corpus(tmp_path / "rec", 3)
    dataset = root / "ds"
    first = asrkit_cli(corpora.import_args("folder", root, "--output", dataset))
    assert first.exit_code == 0, first.stderr
    before = contents(dataset)
    again = asrkit_cli(corpora.import_args("folder", root, "--output", dataset))
    assert again.exit_code == 0, again.stderr
    assert "nothing to do" in again.stdout
    assert contents(dataset) == before
    assert report_of(dataset)["total"]["utterances"] == 3 and report_of(dataset)["skipped"] == {}


def test_a_killed_import_inside_its_corpus_continues(asrkit_cli, asrkit_home, tmp_path):
    """Killed with ``kill -9`` (its lock and half-written files stay) once 16 of 24 recordings
    are journaled; the rerun keeps the WAVs the journal names, and ends as an import that never
    stopped."""
    root = corpus(tmp_path / "rec", 24)
    dataset = root / "ds"
    lines = kill_once_journaled(root, dataset, asrkit_home, 16)
    assert not (dataset / "dataset.json").exists()
    kept = {f"audio/{result['key']}.wav" for line in lines
            for result in json.loads(line)["results"]}
    assert len(kept) >= 16
    written = {path: (dataset / path).stat().st_mtime_ns for path in kept}

    rerun = asrkit_cli(corpora.import_args("folder", root, "--output", dataset))
    assert rerun.exit_code == 0, rerun.stderr
    assert "nothing to do" not in rerun.stdout
    assert {path: (dataset / path).stat().st_mtime_ns for path in kept} == written
    report = report_of(dataset)
    assert report["total"]["utterances"] == 24 and report["skipped"] == {}, report["skipped"]
    resumed = contents(dataset)
    forced = asrkit_cli(corpora.import_args("folder", root, "--output", dataset, "--force"))
    assert forced.exit_code == 0, forced.stderr
    assert contents(dataset) == resumed


@pytest.mark.parametrize("where", ["beside", "nested"])
def test_the_output_and_its_lock_are_left_out_of_the_corpus(tmp_path, where):
    """What the engine reads of a folder holding the output: neither the output's files nor
    its lock (``ds.lock``, beside it), at any depth; a link into the output neither."""
    from asrkit.importing.archive import scan_sources
    from asrkit.importing.engine import CorpusSource

    root = corpus(tmp_path / "rec", 1)
    dataset = root / "ds" if where == "beside" else root / "sub" / "ds"
    (dataset / "audio" / "train").mkdir(parents=True)
    (dataset / "audio" / "train" / "r00.wav").write_bytes(b"RIFF")
    (dataset / "alphabet.txt").write_text("a\n")
    dataset.with_name("ds.lock").write_text("{}\n")
    (root / "into-output.wav").symlink_to(dataset / "audio" / "train" / "r00.wav")
    source = CorpusSource(root, dataset, progress=False)
    scan = scan_sources([source], lambda name: name.endswith(".txt"))
    assert sorted(scan.members) == ["r00.txt", "r00.wav"]
    assert sorted(scan.metadata) == ["r00.txt"] and scan.links == {}
    assert sorted(name for name, _, _ in source.listing()) == ["r00.txt", "r00.wav"]
