"""``asrkit import librispeech`` against archives in LibriSpeech's real layout, served over HTTP.

The archives hold real LibriSpeech utterances (their original FLAC, or FLAC made by sox from
the fixture WAVs); the known answers are the published transcripts and the clips' exact samples.
"""

from __future__ import annotations

import json

import pytest

from asrkit_importers.librispeech import SUBSETS, LibriSpeechImporter
from tests import corpora


@pytest.fixture(scope="session")
def test_clean() -> corpora.Fixture:
    return corpora.librispeech("test-clean")


@pytest.fixture(scope="session")
def test_other() -> corpora.Fixture:
    return corpora.librispeech("test-other")


def test_two_subsets_into_one_dataset(asrkit_cli, asrkit_home, corpus_server, test_clean,
                                      test_other):
    corpus_server.add_file("resources/12/test-clean.tar.gz", test_clean.data)
    corpus_server.add_file("resources/12/test-other.tar.gz", test_other.data)
    # Given in the "wrong" order: the dataset and the import are the same either way.
    result = asrkit_cli(corpora.import_args("librispeech", "--subset", "test-other", "--subset",
                                            "test-clean", "--json", mirror=corpus_server.url))
    assert result.exit_code == 0, result.stderr
    dataset = asrkit_home / "datasets" / "librispeech-test-clean+test-other"
    assert json.loads(result.stdout)["dataset"] == str(dataset)
    report = corpora.check_dataset(dataset, test_clean.expected + test_other.expected)
    # 7 test-clean + 1 test-other utterances, all in the test split, 6 speakers.
    assert report["splits"]["test"]["utterances"] == 8
    assert report["splits"]["test"]["speakers"] == 6
    assert report["skipped"] == {}
    assert [s["filename"] for s in report["source"]] == ["test-clean.tar.gz", "test-other.tar.gz"]
    assert report["source"][0]["sha256"] == test_clean.sha256
    assert report["license"] == "CC BY 4.0"
    # The mirror kept the openslr paths.
    assert corpus_server.requested("resources/12/test-clean.tar.gz")

    again = asrkit_cli(corpora.import_args("librispeech", "--subset", "test-clean", "--subset",
                                           "test-other", mirror=corpus_server.url))
    assert again.exit_code == 0, again.stderr
    assert "nothing to do" in again.stdout


def test_mini_librispeech_is_verified_by_the_mirror(asrkit_cli, asrkit_home, corpus_server):
    """openslr publishes no sha256 for mini LibriSpeech: the mirror's SHA256SUMS verifies it."""
    fixture = corpora.librispeech("dev-clean-2")
    corpus_server.add_file("resources/31/dev-clean-2.tar.gz", fixture.data)
    result = asrkit_cli(corpora.import_args("librispeech", "--subset", "dev-clean-2",
                                            mirror=corpus_server.url))
    assert result.exit_code == 0, result.stderr
    expected = [corpora.Expected("dev", e.id, e.transcript, e.num_samples, e.speaker, e.samples)
                for e in fixture.expected]
    report = corpora.check_dataset(asrkit_home / "datasets" / "librispeech-dev-clean-2",
                                   expected)
    assert report["splits"]["dev"]["utterances"] == 2
    assert report["splits"]["dev"]["speakers"] == 2


def test_mini_librispeech_without_checksums_needs_no_verify(asrkit_cli, asrkit_home,
                                                            corpus_server):
    fixture = corpora.librispeech("dev-clean-2")
    corpus_server.add_file("resources/31/dev-clean-2.tar.gz", fixture.data, checksums=False)
    args = corpora.import_args("librispeech", "--subset", "dev-clean-2", mirror=corpus_server.url)
    refused = asrkit_cli(args)
    assert refused.exit_code == 1
    assert "no sha256 is known for dev-clean-2.tar.gz" in refused.stderr
    accepted = asrkit_cli([*args, "--no-verify"])
    assert accepted.exit_code == 0, accepted.stderr
    report = json.loads((asrkit_home / "datasets" / "librispeech-dev-clean-2" /
                         "dataset.json").read_text())
    assert report["splits"]["dev"]["utterances"] == 2


def test_published_checksum_is_checked(asrkit_cli, asrkit_home, corpus_server, test_clean):
    """Without a SHA256SUMS on the mirror, dev-clean must match openslr's published sha256:
    a file that is not the real dev-clean is refused before anything is read."""
    corpus_server.add_file("resources/12/dev-clean.tar.gz", test_clean.data, checksums=False)
    result = asrkit_cli(corpora.import_args("librispeech", mirror=corpus_server.url))
    assert result.exit_code == 1
    assert f"is {len(test_clean.data):,} bytes, expected 337,926,286" in result.stderr
    assert not (asrkit_home / "datasets" / "librispeech-dev-clean" / "dataset.json").exists()


def test_resources_and_names():
    importer = LibriSpeechImporter()
    resources = importer.resources({"subset": ("dev-clean", "train-clean-5")})
    assert [r.url for r in resources] == [
        "http://www.openslr.org/resources/12/dev-clean.tar.gz",
        "http://www.openslr.org/resources/31/train-clean-5.tar.gz",
    ]
    assert resources[0].size == 337_926_286
    assert resources[0].sha256 == SUBSETS["dev-clean"][2]
    assert resources[1].size is None and resources[1].sha256 is None
    assert importer.dataset_name({"subset": ("train-clean-100", "dev-clean")}) == (
        "librispeech-train-clean-100+dev-clean")
    assert importer.dataset_name({}) == "librispeech-dev-clean"
    assert importer.is_metadata("LibriSpeech/dev-clean/1272/128104/1272-128104.trans.txt")
    assert not importer.is_metadata("LibriSpeech/SPEAKERS.TXT")
    assert not importer.is_metadata("LibriSpeech/README.TXT")


def test_help_lists_every_subset(asrkit_cli):
    result = asrkit_cli(["import", "librispeech", "--help"])
    assert result.exit_code == 0
    for subset in SUBSETS:
        assert subset in result.stdout


def test_archive_without_the_subset_is_reported(asrkit_cli, asrkit_home, corpus_server,
                                                test_clean):
    corpus_server.add_file("resources/12/dev-clean.tar.gz", test_clean.data)
    result = asrkit_cli(corpora.import_args("librispeech", mirror=corpus_server.url))
    assert result.exit_code == 1
    assert "no transcripts of dev-clean in the sources" in result.stderr
