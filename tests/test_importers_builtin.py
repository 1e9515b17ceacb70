"""The importers that need no fixture archive: the built-in `sample` corpus and LDC93S1."""

from __future__ import annotations

import csv
import json

from asrkit.dataset.shards import read_records, shard_paths
from tests.archives import wav_seconds
from tests.conftest import SPEECH

LDC_TEXT = "she had your dark suit in greasy wash water all year"


def test_sample_corpus(asrkit_home, asrkit_cli):
    result = asrkit_cli(["import", "sample", "--no-progress", "--json"])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["did_work"] is True
    assert {s: v["utterances"] for s, v in report["splits"].items()} == {
        "train": 16, "dev": 2, "test": 1}
    assert report["skipped"] == {}
    assert report["splits"]["train"]["speakers"] == 7
    dataset = asrkit_home / "datasets" / "sample"
    with open(dataset / "train.csv", newline="") as f:
        train = {row["wav_filename"]: row for row in csv.DictReader(f)}
    # The 22.05 kHz LJSpeech clip is resampled by sox: the duration is kept.
    lj = train["audio/train/LJ002-0020.wav"]
    assert lj["transcript"] == "in eighteen thirteen"
    assert abs(float(lj["duration"]) - wav_seconds(SPEECH / "ljspeech/LJ002-0020.wav")) < 1e-3
    spk1 = train["audio/train/spk1_snt2.wav"]
    assert spk1["transcript"] == "drop the tue when you add the figures"
    (record,) = [r for p in shard_paths(dataset, "test") for r in read_records(p)]
    assert record.transcript == LDC_TEXT and record.num_samples == 46797


def test_ldc93s1_through_a_mirror(asrkit_home, asrkit_cli, corpus_server):
    for name in ("LDC93S1.wav", "LDC93S1.txt"):
        corpus_server.add_file(f"desc/addenda/{name}", (SPEECH / "ldc93s1" / name).read_bytes())
    result = asrkit_cli(["import", "ldc93s1", "--mirror", corpus_server.url, "--no-progress"])
    assert result.exit_code == 0, result.stderr
    dataset = asrkit_home / "datasets" / "ldc93s1"
    for split in ("train", "dev", "test"):
        lines = (dataset / f"{split}.csv").read_text().splitlines()
        assert lines[1] == f"audio/{split}/LDC93S1.wav,93638,{LDC_TEXT},2.9248,LDC93S1"
    # The converted file is the published one, sample for sample.
    assert (dataset / "audio/train/LDC93S1.wav").read_bytes()[44:] == (
        SPEECH / "ldc93s1/LDC93S1.wav").read_bytes()[44:]


def test_ldc93s1_published_checksums_hold(asrkit_home, asrkit_cli, corpus_server):
    """Without a SHA256SUMS on the mirror the published size and sha256 apply; the real files
    match them."""
    for name in ("LDC93S1.wav", "LDC93S1.txt"):
        corpus_server.add_file(f"desc/addenda/{name}", (SPEECH / "ldc93s1" / name).read_bytes(),
                               checksums=False)
    result = asrkit_cli(["import", "ldc93s1", "--mirror", corpus_server.url, "--no-progress"])
    assert result.exit_code == 0, result.stderr
