"""``asrkit import commonvoice --archive PATH`` on Common Voice releases in their real layout.

The clips are real speech encoded by sox as 48 kHz MP3 (as Common Voice serves them), so the
import exercises MP3 decoding and resampling; the known lengths are what sox decodes each MP3
to (an MP3 is a few milliseconds longer than its source, by the encoder's padding), and they are
also checked against the source clips' lengths.
"""

from __future__ import annotations

import pytest

from asrkit_importers.commonvoice import CommonVoiceImporter, read_listing
from tests import corpora


@pytest.fixture(scope="session")
def release_5(tmp_path_factory: pytest.TempPathFactory):
    fixture = corpora.commonvoice("5.1")
    path = tmp_path_factory.mktemp("cv5") / fixture.filename
    path.write_bytes(fixture.data)
    return fixture, path


def test_release_archive(asrkit_cli, asrkit_home, release_5):
    fixture, archive = release_5
    result = asrkit_cli(corpora.import_args("commonvoice", "--archive", archive, "--language",
                                            "en"))
    assert result.exit_code == 0, result.stderr
    dataset = asrkit_home / "datasets" / "commonvoice-en"
    report = corpora.check_dataset(dataset, fixture.expected)
    assert {s: v["utterances"] for s, v in report["splits"].items()} == {
        "train": 3, "dev": 1, "test": 1}
    assert report["splits"]["train"]["speakers"] == 1
    # Listed in train.tsv, not in clips/: reported, not fatal.
    assert report["skipped"] == {"audio file missing": {
        "count": 1, "utterances": [f"train/{corpora.CV_MISSING}"]}}
    assert report["source"][0]["sha256"] == fixture.sha256
    assert report["license"] == "CC0 1.0"
    # Each MP3 decodes to within 20 ms of the real clip it was made from.
    clips = corpora.speechbrain_clips()
    for (source, _), expected in zip(corpora.CV_CLIPS.items(), fixture.expected, strict=True):
        assert abs(expected.seconds - clips[source].seconds) < 0.02
    # validated.tsv (a superset) and other.tsv (the real CV clip) are not imported.
    assert "651325" not in "".join(p.read_text() for p in dataset.glob("*.csv"))


def test_newer_release_extracted(asrkit_cli, asrkit_home, tmp_path):
    """A release with the newer columns (sentence_id, accents, variant...), extracted."""
    fixture = corpora.commonvoice("17.0")
    folder = corpora.extract(fixture.data, tmp_path / "extracted")
    result = asrkit_cli(corpora.import_args("commonvoice", "--archive", folder))
    assert result.exit_code == 0, result.stderr
    corpora.check_dataset(asrkit_home / "datasets" / "commonvoice", fixture.expected)


def test_archive_is_required(asrkit_cli, asrkit_home):
    result = asrkit_cli(corpora.import_args("commonvoice"))
    assert result.exit_code == 1
    assert "cannot be downloaded" in result.stderr and "--archive" in result.stderr


def test_wrong_language_is_refused(asrkit_cli, asrkit_home, release_5):
    _, archive = release_5
    result = asrkit_cli(corpora.import_args("commonvoice", "--archive", archive, "--language",
                                            "de"))
    assert result.exit_code == 1
    assert "--language de but the archive holds 'en'" in result.stderr


def test_listing_fields_are_never_quoted():
    data = (b'client_id\tpath\tsentence\tup_votes\n'
            b'abc\tx.mp3\t"Quoted," she said.\t2\n')
    [row] = read_listing(data, "train.tsv")
    assert row["sentence"] == '"Quoted," she said.'
    importer = CommonVoiceImporter()
    assert importer.is_metadata("cv-corpus-5.1-2020-06-22/en/train.tsv")
    assert not importer.is_metadata("cv-corpus-5.1-2020-06-22/en/validated.tsv")
    assert importer.dataset_name({"language": None}) == "commonvoice"
