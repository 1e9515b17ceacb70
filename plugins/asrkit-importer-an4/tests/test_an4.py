"""The an4 importer, end to end: a real AN4 subset in the real archive layout, served over HTTP
on 127.0.0.1 and imported through the public command ``asrkit import an4 --mirror URL``.

Uses only the fixtures of asrkit's pytest plugin (``asrkit.testing``), as any third-party
plugin's tests can. The AN4 recordings come from the real subset in asrkit's repository
(``tests/fixtures/speech/an4-mini/mini_an4_downloads.tar.gz``, from ESPnet's mini_an4 recipe,
members under ``downloads/an4/``); ``AN4_MINI`` may point elsewhere.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import tarfile
from pathlib import Path

import pytest
from asrkit_importer_an4 import AN4Importer, parse_transcription

HERE = Path(__file__).resolve().parent
AN4_MINI = Path(os.environ.get("AN4_MINI") or HERE.parents[2] / "tests" / "fixtures" / "speech"
                / "an4-mini" / "mini_an4_downloads.tar.gz")
MIRROR_PATH = "databases/an4/an4_sphere.tar.gz"

#: The subset's utterances: split -> id -> (normalised transcript, speaker, samples at 16 kHz).
EXPECTED = {
    "train": {
        "an152-mwhw-b": ("start", "mwhw", 16000),
        "an251-fash-b": ("yes", "fash", 16000),
        "an253-fash-b": ("go", "fash", 11200),
        "cen8-fbbh-b": ("march third nineteen twenty eight", "fbbh", 44800),
        "cen8-mwhw-b": ("eleven seventeen fifty one", "mwhw", 35200),
    },
    "test": {
        "cen8-fcaw-b": ("eleven twenty seven fifty seven", "fcaw", 46400),
        "cen8-mmxg-b": ("october twenty four nineteen seventy", "mmxg", 36800),
    },
}


def an4_sphere_tar_gz() -> bytes:
    """``an4_sphere.tar.gz`` as CMU serves it (root ``an4/``), from the real subset."""
    if not AN4_MINI.exists():
        pytest.skip(f"the AN4 subset is not at {AN4_MINI} (set AN4_MINI)")
    raw = io.BytesIO()
    with tarfile.open(AN4_MINI, "r:gz") as source, \
            gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w") as out:
        for info in source:
            if not info.name.startswith("downloads/an4"):
                continue  # ESPnet's noise and RIR files are not part of AN4
            data = source.extractfile(info).read() if info.isfile() else None
            info.name = info.name[len("downloads/"):]
            out.addfile(info, io.BytesIO(data) if data is not None else None)
    return raw.getvalue()


def test_plugin_is_listed(asrkit_cli):
    result = asrkit_cli(["plugins", "--json"])
    assert result.exit_code == 0, result.stderr
    [an4] = [p for p in json.loads(result.stdout)["plugins"] if p["name"] == "an4"]
    assert an4["distribution"] == "asrkit-importer-an4"
    assert an4["registered"] == {"importer": ["an4"]}


def test_import_through_a_mirror(asrkit_cli, asrkit_home, corpus_server):
    corpus_server.add_file(MIRROR_PATH, an4_sphere_tar_gz())
    result = asrkit_cli(["import", "an4", "--mirror", corpus_server.url, "--jobs", "1",
                         "--no-progress", "--json"])
    assert result.exit_code == 0, result.stderr
    dataset = asrkit_home / "datasets" / "an4"
    report = json.loads((dataset / "dataset.json").read_text())
    assert report["provider"] == "asrkit-importer-an4"
    assert {split: info["utterances"] for split, info in report["splits"].items()} == {
        "train": 5, "test": 2}
    assert report["skipped"] == {}
    for split, utterances in EXPECTED.items():
        with open(dataset / f"{split}.csv", newline="") as f:
            rows = list(csv.reader(f))
        assert rows[0] == ["wav_filename", "wav_filesize", "transcript", "duration", "speaker"]
        found = {Path(row[0]).stem: row for row in rows[1:]}
        assert sorted(found) == sorted(utterances)  # cen7-fash-b has no transcript: not read
        for utterance, (text, speaker, samples) in utterances.items():
            wav_filename, size, transcript, duration, who = found[utterance]
            assert transcript == text and who == speaker
            assert int(size) == (dataset / wav_filename).stat().st_size == 44 + 2 * samples
            assert abs(float(duration) - samples / 16000) < 0.001
        from asrkit.api import read_records, shard_paths

        records = [r for shard in shard_paths(dataset, split) for r in read_records(shard)]
        assert sorted(r.id for r in records) == sorted(utterances)
        assert all(r.transcript == utterances[r.id][0] for r in records)
        assert all(r.num_samples == utterances[r.id][2] for r in records)


def test_cmu_publishes_no_checksum(asrkit_cli, asrkit_home, corpus_server):
    """Without a SHA256SUMS on the mirror, an unverifiable download needs --no-verify."""
    corpus_server.add_file(MIRROR_PATH, an4_sphere_tar_gz(), checksums=False)
    args = ["import", "an4", "--mirror", corpus_server.url, "--jobs", "1", "--no-progress"]
    refused = asrkit_cli(args)
    assert refused.exit_code == 1
    assert "no sha256 is known for an4_sphere.tar.gz" in refused.stderr
    accepted = asrkit_cli([*args, "--no-verify"])
    assert accepted.exit_code == 0, accepted.stderr


def test_transcription_format():
    text = ("<s> MARCH THIRD NINETEEN TWENTY EIGHT </s> (cen8-fbbh-b)\n"
            "ELEVEN TWENTY SEVEN FIFTY SEVEN (cen8-fcaw-b)\n")
    parsed = parse_transcription(text, "an4_train.transcription")
    assert parsed == {"cen8-fbbh-b": "<s> MARCH THIRD NINETEEN TWENTY EIGHT </s>",
                      "cen8-fcaw-b": "ELEVEN TWENTY SEVEN FIFTY SEVEN"}
    importer = AN4Importer()
    assert importer.normalize(parsed["cen8-fbbh-b"]) == "MARCH THIRD NINETEEN TWENTY EIGHT"
    assert importer.normalize("<s> <sil> YES ++NOISE++ </s>") == "YES"
    assert importer.is_metadata("an4/etc/an4_test.fileids")
    assert not importer.is_metadata("an4/etc/an4.dic")
