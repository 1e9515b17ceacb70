"""``asrkit import ted`` against TED-LIUM archives in the real layouts of releases 1, 2 and 3.

Each fixture "talk" is one SPHERE recording made by sox from real clips placed at known times,
with an STM in the release's own dialect: gap lines, ``ignore_time_segment_in_scoring``
segments, noise tokens, pronunciation variants, split clitics, release 1's utterance keys,
release 3's ``<NA>`` labels and ``<unk>``, and release 3's ``legacy/train`` made of symbolic
links into ``data/``. The known answers are the clips' exact samples: every segment must be cut
at exactly the right place.
"""

from __future__ import annotations

import json

import pytest

from asrkit.core.errors import AsrkitError
from asrkit_importers.ted import RELEASES, TedImporter, kaldi_id, parse_stm
from tests import corpora

MIRROR_PATHS = corpora.TED_PATHS


def _legacy(fixture: corpora.Fixture) -> list[corpora.Expected]:
    return [e for e in fixture.expected if e.split != "data"]


def _serve(server, release: int) -> corpora.Fixture:
    fixture = corpora.ted(release)
    server.add_file(MIRROR_PATHS[release], fixture.data)
    return fixture


def test_release_2(asrkit_cli, asrkit_home, corpus_server):
    fixture = _serve(corpus_server, 2)
    result = asrkit_cli(corpora.import_args("ted", "--release", "2", "--json",
                                            mirror=corpus_server.url, jobs=2))
    assert result.exit_code == 0, result.stderr
    report = corpora.check_dataset(asrkit_home / "datasets" / "ted-2", _legacy(fixture))
    # Gap lines and ignore_time_segment_in_scoring segments are dropped, the repeated train
    # line is imported once: 2 segments per split, nothing skipped later.
    assert {s: v["utterances"] for s, v in report["splits"].items()} == {
        "train": 2, "dev": 2, "test": 2}
    assert report["skipped"] == {}
    assert report["license"] == "CC BY-NC-ND 3.0"
    assert json.loads(result.stdout)["name"] == "ted-2"


def test_release_1_keys_and_dev_labels(asrkit_cli, asrkit_home, corpus_server):
    fixture = _serve(corpus_server, 1)
    result = asrkit_cli(corpora.import_args("ted", "--release", "1", mirror=corpus_server.url))
    assert result.exit_code == 0, result.stderr
    corpora.check_dataset(asrkit_home / "datasets" / "ted-1", _legacy(fixture))


def test_release_3_legacy_through_links(asrkit_cli, asrkit_home, corpus_server):
    """The default: legacy/train (links into data/), legacy/dev, legacy/test. The talk that
    is only in data/ and the speaker-adaptation STMs are not imported."""
    fixture = _serve(corpus_server, 3)
    result = asrkit_cli(corpora.import_args("ted", mirror=corpus_server.url))
    assert result.exit_code == 0, result.stderr
    report = corpora.check_dataset(asrkit_home / "datasets" / "ted-3", _legacy(fixture))
    assert report["splits"]["train"]["utterances"] == 2
    assert "AaronHuey" not in (asrkit_home / "datasets" / "ted-3" / "train.csv").read_text()


def test_release_3_all_of_data(asrkit_cli, asrkit_home, corpus_server):
    fixture = _serve(corpus_server, 3)
    result = asrkit_cli(corpora.import_args("ted", "--release", "3", "--train-set", "data",
                                            mirror=corpus_server.url))
    assert result.exit_code == 0, result.stderr
    expected = [corpora.Expected("train", e.id, e.transcript, e.num_samples, e.speaker,
                                 e.samples) if e.split == "data" else e
                for e in fixture.expected if e.split != "train"]
    report = corpora.check_dataset(asrkit_home / "datasets" / "ted-3-data", expected)
    assert {s: v["utterances"] for s, v in report["splits"].items()} == {
        "train": 3, "dev": 2, "test": 2}


def test_release_3_extracted_folder(asrkit_cli, asrkit_home, tmp_path):
    """An extracted release (real symbolic links on disk) given with --archive."""
    fixture = corpora.ted(3)
    folder = corpora.extract(fixture.data, tmp_path / "corpus") / "TEDLIUM_release-3"
    assert (folder / "legacy/train/sph/911Mothers_2010W.sph").is_symlink()
    result = asrkit_cli(corpora.import_args("ted", "--archive", folder))
    assert result.exit_code == 0, result.stderr
    corpora.check_dataset(asrkit_home / "datasets" / "ted-3", _legacy(fixture))


def test_stm_variants():
    stm = "\n".join([
        ";; a comment line",
        "AimeeMullins_2009P 1 inter_segment_gap 0 17.82 <o,,unknown> "
        "ignore_time_segment_in_scoring",
        "AimeeMullins_2009P 1 AimeeMullins 17.82 28.81 <o,f0,female> i 'd like to share",
        "AimeeMullins_2009P 1 AimeeMullins 28.81 30.00 <o,f0,female> "
        "ignore_time_segment_in_scoring",
        "AaronHuey_2010X 1 AaronHuey_2010X 16.13 24.16 <o,f0,male> some {NOISE} words "
        "(AaronHuey_2010X-1613-2416)",
        "AlGore_2009 1 AlGore 0.29 1.5 <F0_M> well(2) <sil> it 's",
        "X_2010 1 X_2010 3.0 4.0 <NA> <unk> ok",
    ])
    assert list(parse_stm(stm)) == [
        ("AimeeMullins_2009P", "AimeeMullins", 17.82, 28.81, "i 'd like to share"),
        ("AaronHuey_2010X", "AaronHuey_2010X", 16.13, 24.16, "some {NOISE} words"),
        ("AlGore_2009", "AlGore", 0.29, 1.5, "well(2) <sil> it 's"),
        ("X_2010", "X_2010", 3.0, 4.0, "<unk> ok"),
    ]
    importer = TedImporter()
    assert importer.normalize("some {NOISE} words {SMACK} {BREATH}") == "some words"
    assert importer.normalize("well(2) <sil> it 's <unk> ok") == "well it 's ok"
    with pytest.raises(AsrkitError, match="start/end are not numbers"):
        list(parse_stm("T 1 S zero 1.0 <NA> words", "T.stm"))


def test_kaldi_ids_round_to_centiseconds():
    assert kaldi_id("AimeeMullins_2009P", 17.82, 28.81) == "AimeeMullins_2009P-0001782-0002881"
    assert kaldi_id("T", 0.29, 0.57) == "T-0000029-0000057"  # int(0.29 * 100) is 28


def test_options_and_resources():
    importer = TedImporter()
    assert importer.dataset_name({"release": "3", "train_set": "legacy"}) == "ted-3"
    assert importer.dataset_name({"release": "3", "train_set": "data"}) == "ted-3-data"
    assert importer.dataset_name({"release": "1", "train_set": "legacy"}) == "ted-1"
    with pytest.raises(AsrkitError, match="only in TED-LIUM release 3"):
        importer.dataset_name({"release": "2", "train_set": "data"})
    for release, path in MIRROR_PATHS.items():
        [resource] = importer.resources({"release": str(release)})
        assert resource.url == "http://www.openslr.org/" + path
        assert (resource.size, resource.sha256) == (RELEASES[release].size,
                                                    RELEASES[release].sha256)
    assert importer.is_metadata("TEDLIUM_release-3/legacy/dev/stm/AlGore_2009.stm")
    assert not importer.is_metadata("TEDLIUM_release-3/speaker-adaptation/dev/stm/A.stm")
    assert not importer.is_metadata("TEDLIUM_release-3/TEDLIUM.152k.dic")


def test_wrong_release_archive_is_reported(asrkit_cli, asrkit_home, corpus_server):
    """Release 2's archive where release 1's should be: a clear error, not an empty dataset."""
    corpus_server.add_file(MIRROR_PATHS[1], corpora.ted(2).data)
    result = asrkit_cli(corpora.import_args("ted", "--release", "1", mirror=corpus_server.url))
    assert result.exit_code == 1
    assert "has no talks in train/stm/" in result.stderr
    assert "TEDLIUM_release1.tar.gz" in result.stderr


def test_dev_and_test_talks_are_never_trained_on():
    """Should a legacy dev/test talk also be in release 3's data/, train leaves it out."""
    root = "TEDLIUM_release-3"
    metadata = {
        f"{root}/data/stm/AlGore_2009.stm": b"AlGore_2009 1 AlGore 0.00 2.75 <NA> a b\n",
        f"{root}/data/stm/X_2010.stm": b"X_2010 1 X_2010 0.00 1.00 <NA> c d\n",
        f"{root}/legacy/dev/stm/AlGore_2009.stm": b"AlGore_2009 1 AlGore 0.00 2.75 <NA> a b\n",
        f"{root}/legacy/test/stm/T_2010.stm": b"T_2010 1 T 0.00 1.00 <NA> e f\n",
    }
    members = [*metadata, *(name.replace("stm", "sph") for name in metadata)]
    utterances = list(TedImporter().prepare(metadata, members,
                                            {"release": "3", "train_set": "data"}))
    assert [(u.split, u.id, u.audio) for u in utterances] == [
        ("train", "X_2010-0000000-0000100", f"{root}/data/sph/X_2010.sph"),
        ("dev", "AlGore_2009-0000000-0000275", f"{root}/legacy/dev/sph/AlGore_2009.sph"),
        ("test", "T_2010-0000000-0000100", f"{root}/legacy/test/sph/T_2010.sph"),
    ]
