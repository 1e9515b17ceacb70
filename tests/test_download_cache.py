"""The downloads folder cannot be poisoned through a mirror.

A file verified against a mirror's ``SHA256SUMS`` used to be reused by every later import
without being checked against the importer's published sha256 (its ``.verified`` marker said
"verified", not against what), so one import through a dishonest or broken mirror left a fake
that later passed for the real corpus; and ``dataset.json``'s fingerprint recorded the
published sha256 instead of the one the import actually verified. Real HTTP on loopback
(``corpus_server``), a real import through the CLI.
"""

from __future__ import annotations

import csv
import hashlib
import json

import pytest

from asrkit.api import Importer, Resource, Utterance, hookimpl
from asrkit.importing.download import DownloadOptions, fetch
from tests.archives import tar_gz
from tests.conftest import SPEECH

CLIP = (SPEECH / "speechbrain" / "spk1_snt1.wav").read_bytes()
PATH = "corpora/clip.tar.gz"
FAST = DownloadOptions(backoff=0.01, progress=False, retries=1)


def archive(text: str) -> bytes:
    return tar_gz({"clip/clip.wav": CLIP, "clip/transcripts.tsv": f"clip.wav\t{text}\n".encode()})


REAL, FAKE = archive("the child almost hurt the small dog"), archive("send all your money")
REAL_SHA, FAKE_SHA = hashlib.sha256(REAL).hexdigest(), hashlib.sha256(FAKE).hexdigest()


class ClipImporter(Importer):
    """One recording, published at ``url`` with ``sha256`` (None: no checksum published)."""

    name = "clip"
    description = "One clip (tests)."
    splits = ("train",)

    def __init__(self, url: str, sha256: str | None) -> None:
        self.url, self.sha256 = url, sha256

    def resources(self, options):
        return [Resource("clip.tar.gz", self.url, sha256=self.sha256)]

    def is_metadata(self, member):
        return member == "clip/transcripts.tsv"

    def prepare(self, metadata, members, options):
        for line in metadata["clip/transcripts.tsv"].decode().splitlines():
            name, text = line.split("\t")
            yield Utterance(id=name[:-4], split="train", audio=f"clip/{name}", transcript=text)


class ClipPlugin:
    def __init__(self, importer: ClipImporter) -> None:
        self.importer = importer

    @hookimpl
    def register_importers(self, register):
        register(self.importer)


@pytest.fixture
def servers(corpus_server):
    """The publisher serves the real archive; a mirror (a path prefix of the same server)
    serves a fake, with a ``SHA256SUMS`` that vouches for the fake."""
    corpus_server.add_file(PATH, REAL, checksums=False)
    corpus_server.add_file(f"evil/{PATH}", FAKE)
    return corpus_server, f"{corpus_server.url}/evil"


def transcripts(dataset) -> list[str]:
    with open(dataset / "train.csv", newline="") as f:
        return [row["transcript"] for row in csv.DictReader(f)]


def test_a_file_verified_by_a_mirror_is_checked_against_the_published_sha256(servers, tmp_path,
                                                                              capfd):
    server, mirror = servers
    resource = Resource("clip.tar.gz", f"{server.url}/{PATH}", sha256=REAL_SHA)
    path, digest = fetch(resource, tmp_path, DownloadOptions(**{**FAST.__dict__,
                                                                "mirror": mirror}))
    assert digest == FAKE_SHA  # the mirror's SHA256SUMS vouches for it: accepted from there
    capfd.readouterr()
    path, digest = fetch(resource, tmp_path, FAST)
    assert digest == REAL_SHA and path.read_bytes() == REAL
    assert (tmp_path / "clip.tar.gz.bad").read_bytes() == FAKE
    assert "set aside as clip.tar.gz.bad, downloading it again" in capfd.readouterr().err
    assert server.requested(PATH) == [None]
    marker = json.loads((tmp_path / "clip.tar.gz.verified").read_text())
    assert marker["verified_sha256"] == REAL_SHA and marker["verified_by"] == "published values"
    fetch(resource, tmp_path, FAST)  # verified against this very checksum: not fetched again
    assert server.requested(PATH) == [None]


def test_a_file_taken_with_no_verify_is_verified_later(servers, tmp_path):
    server, _mirror = servers
    server.add_file(f"other/{PATH}", FAKE, checksums=False)
    taken = Resource("clip.tar.gz", f"{server.url}/other/{PATH}", sha256=REAL_SHA)
    _path, digest = fetch(taken, tmp_path, DownloadOptions(**{**FAST.__dict__,
                                                              "verify": False}))
    assert digest == FAKE_SHA
    _path, digest = fetch(Resource("clip.tar.gz", f"{server.url}/{PATH}", sha256=REAL_SHA),
                          tmp_path, FAST)
    assert digest == REAL_SHA


def test_a_mirror_import_is_not_taken_for_the_published_corpus(servers, asrkit_cli, asrkit_home,
                                                               make_plugins):
    server, mirror = servers
    plugins = make_plugins(ClipPlugin(ClipImporter(f"{server.url}/{PATH}", REAL_SHA)))
    dataset = asrkit_home / "datasets" / "clip"
    through_mirror = asrkit_cli(["import", "clip", "--mirror", mirror, "--no-progress"], plugins)
    assert through_mirror.exit_code == 0, through_mirror.stderr
    assert transcripts(dataset) == ["send all your money"]
    report = json.loads((dataset / "dataset.json").read_text())
    assert report["fingerprint"]["sources"][0]["sha256"] == FAKE_SHA  # what was verified
    assert report["source"][0]["sha256"] == FAKE_SHA

    again = asrkit_cli(["import", "clip", "--no-progress"], plugins)
    assert again.exit_code == 1 and "nothing to do" not in again.stdout
    assert "other files" in again.stderr and "--force" in again.stderr
    forced = asrkit_cli(["import", "clip", "--force", "--no-progress"], plugins)
    assert forced.exit_code == 0, forced.stderr
    assert transcripts(dataset) == ["the child almost hurt the small dog"]
    report = json.loads((dataset / "dataset.json").read_text())
    assert report["fingerprint"]["sources"][0]["sha256"] == REAL_SHA
    assert report["source"][0]["sha256"] == REAL_SHA


def test_the_fingerprint_records_the_mirrors_checksum_when_none_is_published(
        servers, asrkit_cli, asrkit_home, make_plugins):
    server, mirror = servers
    plugins = make_plugins(ClipPlugin(ClipImporter(f"{server.url}/{PATH}", None)))
    result = asrkit_cli(["import", "clip", "--mirror", mirror, "--no-progress"], plugins)
    assert result.exit_code == 0, result.stderr
    report = json.loads((asrkit_home / "datasets" / "clip" / "dataset.json").read_text())
    assert report["fingerprint"]["sources"][0]["sha256"] == FAKE_SHA
    rerun = asrkit_cli(["import", "clip", "--mirror", mirror, "--no-progress"], plugins)
    assert rerun.exit_code == 0 and "nothing to do" in rerun.stdout
