"""What a rerun trusts by its name is on disk before it has that name: the file's contents are
synced, then it is renamed into place, then its folder's entry is synced. Otherwise a power cut
can leave the final name on an empty or partial file (the rename reaches the disk before the
data), and the next import keeps it.

The system calls are watched (``os.fsync`` and ``os.replace``, recorded by path) rather than a
power cut simulated: the order is the guarantee. (Converted recordings are synced in groups,
before the import's journal names them: an fsync per file cost a fifth of the import's speed.)
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from asrkit.core.text import Alphabet
from asrkit.dataset.shards import ShardRecord, write_shard


@pytest.fixture
def calls(monkeypatch):
    """The fsyncs (of which path) and renames, in order."""
    seen: list[tuple[str, str]] = []
    fsync, replace = os.fsync, os.replace

    def watched_fsync(descriptor):
        seen.append(("fsync", os.readlink(f"/proc/self/fd/{descriptor}")))
        fsync(descriptor)

    def watched_replace(source, target):
        seen.append(("replace", str(Path(target).resolve())))
        replace(source, target)

    monkeypatch.setattr(os, "fsync", watched_fsync)
    monkeypatch.setattr(os, "replace", watched_replace)
    return seen


def assert_durable(calls: list[tuple[str, str]], path: Path) -> None:
    path = path.resolve()
    renamed = calls.index(("replace", str(path)))
    synced_before = [p for kind, p in calls[:renamed] if kind == "fsync"]
    assert any(Path(p).name.startswith(path.name) for p in synced_before), calls
    assert ("fsync", str(path.parent)) in calls[renamed:], calls


def test_a_shard_is_on_disk_before_it_has_its_name(calls, tmp_path):
    path = tmp_path / "shards" / "train-00000-of-00001.tfrecord"
    write_shard(path, [ShardRecord("a", b"\0\0" * 1600, "a")])
    assert_durable(calls, path)


def test_an_alphabet_is_written_whole(calls, tmp_path):
    Alphabet().save(tmp_path / "alphabet.txt")
    assert_durable(calls, tmp_path / "alphabet.txt")


@pytest.mark.parametrize("torn", [b'{"step": 7, "lo', b"no newline at all"])
def test_a_torn_last_metrics_line_is_cut_before_the_next_one(tmp_path, torn):
    """A training killed (or a disk filled) mid-line: the resumed run's first line would be glued
    to the torn one, and neither would read back."""
    from asrkit.train.checkpoints import append_metrics

    metrics = tmp_path / "metrics.jsonl"
    whole = b'{"step": 6}\n' if torn.startswith(b"{") else b""
    metrics.write_bytes(whole + torn)
    append_metrics(tmp_path, {"event": "resume", "step": 6})
    lines = metrics.read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        *([{"step": 6}] if whole else []), {"event": "resume", "step": 6}]


def test_an_imports_journal_cuts_a_torn_line_before_the_next_one(tmp_path):
    from asrkit.importing.convert import SegmentResult
    from asrkit.importing.engine import Journal

    path = tmp_path / "journal.jsonl"
    Journal(path).add("a.flac", [SegmentResult("train/a", 16000, 32044, None)])
    with open(path, "ab") as f:
        f.write(b'{"member": "b.fl')  # killed mid-line
    Journal(path).add("c.flac", [SegmentResult("train/c", 8000, 16044, None)])
    assert sorted(Journal(path).done) == ["a.flac", "c.flac"]
    assert all(json.loads(line) for line in path.read_text().splitlines())


@pytest.mark.parametrize("jobs", [1, 2])
def test_an_imports_journal_names_only_recordings_on_disk(monkeypatch, tmp_path, jobs):
    """A journal line makes a rerun trust the member's WAVs, so each WAV, and the folder entries
    naming it up to the dataset folder, are synced before the line is written (the journal is
    read at every fsync to tell). The converters' renames are seen in this process only with
    ``--jobs 1``; then the folder is synced after the WAV's rename."""
    from asrkit.importing.engine import JOURNAL, STATE_DIR, ImportConfig, run_import
    from asrkit_importers.folder import FolderImporter
    from tests.test_import_output import corpus

    root = corpus(tmp_path / "rec", 20)
    dataset = tmp_path / "ds"
    journal = dataset / STATE_DIR / JOURNAL
    events: list[tuple[str, Path, set[str]]] = []

    def journaled() -> set[str]:
        lines = journal.read_text().splitlines(keepends=True) if journal.exists() else []
        return {json.loads(line)["member"] for line in lines if line.endswith("\n")}

    fsync, replace = os.fsync, os.replace

    def watched_fsync(descriptor):
        fsync(descriptor)
        events.append(("fsync", Path(os.readlink(f"/proc/self/fd/{descriptor}")), journaled()))

    def watched_replace(source, target):
        replace(source, target)
        events.append(("replace", Path(target).resolve(), journaled()))

    monkeypatch.setattr(os, "fsync", watched_fsync)
    monkeypatch.setattr(os, "replace", watched_replace)
    config = ImportConfig(home=tmp_path / "home", output=dataset, jobs=jobs, progress=False)
    run_import(FolderImporter(), {"path": root, "split": None, "name": None}, config)

    entries = [json.loads(line) for line in journal.read_text().splitlines()]
    assert sum(len(entry["results"]) for entry in entries) == 20
    top = dataset.resolve()
    for entry in entries:
        for result in entry["results"]:
            wav = top / "audio" / f"{result['key']}.wav"
            renamed = [i for i, (kind, path, _) in enumerate(events)
                       if (kind, path) == ("replace", wav)]
            assert bool(renamed) == (jobs == 1)
            above = [p for p in wav.parent.parents if top in (p, *p.parents)]  # audio/, ds/
            assert synced_unjournaled(events, wav, entry["member"])
            assert synced_unjournaled(events, wav.parent, entry["member"], after=renamed[-1:])
            assert all(synced_unjournaled(events, folder, entry["member"])
                       for folder in above), (entry, above)


def synced_unjournaled(events: list[tuple[str, Path, set[str]]], path: Path, member: str,
                       after: list[int] | None = None) -> bool:
    """Whether ``path`` was fsynced while the journal did not name ``member`` yet (and after
    the event numbered ``after``, if given)."""
    start = after[0] + 1 if after else 0
    return any(kind == "fsync" and synced == path and member not in seen
               for kind, synced, seen in events[start:])
