"""Downloads against a real HTTP server on loopback that fails the way servers do."""

from __future__ import annotations

import hashlib

import pytest

from asrkit.importing.download import DownloadError, DownloadOptions, fetch, mirrored
from asrkit.types import Resource

DATA = bytes(range(256)) * 4096  # 1 MiB
SHA = hashlib.sha256(DATA).hexdigest()
FAST = DownloadOptions(backoff=0.01, progress=False, retries=3)


def resource(server, **overrides):
    values = {"filename": "corpus.tar.gz", "url": f"{server.url}/files/corpus.tar.gz",
              "size": len(DATA), "sha256": SHA}
    values.update(overrides)
    return Resource(**values)


def test_mirrored_keeps_the_path():
    url = "http://www.openslr.org/resources/12/dev-clean.tar.gz"
    assert mirrored(url, "http://127.0.0.1:8080") == (
        "http://127.0.0.1:8080/resources/12/dev-clean.tar.gz")
    assert mirrored(url, "https://m.example/openslr/") == (
        "https://m.example/openslr/resources/12/dev-clean.tar.gz")
    assert mirrored(url, None) == url


def test_transient_errors_are_retried(corpus_server, tmp_path):
    corpus_server.add_file("files/corpus.tar.gz", DATA)
    corpus_server.fail("files/corpus.tar.gz", 503, times=2)
    path, digest = fetch(resource(corpus_server), tmp_path, FAST)
    assert digest == SHA and path.read_bytes() == DATA
    assert len(corpus_server.requested("files/corpus.tar.gz")) == 3


def test_retries_run_out_with_a_clear_error(corpus_server, tmp_path):
    corpus_server.add_file("files/corpus.tar.gz", DATA)
    corpus_server.drop_after("files/corpus.tar.gz", 200_000, times=10)
    with pytest.raises(DownloadError, match=r"failed after 3 retries.*rerun to resume"):
        fetch(resource(corpus_server), tmp_path, FAST)
    partial = tmp_path / "corpus.tar.gz.part"
    kept = partial.read_bytes()
    assert 0 < len(kept) < len(DATA) and DATA.startswith(kept)
    # The next run resumes from the kept partial file and finishes.
    corpus_server.faults.clear()
    path, digest = fetch(resource(corpus_server), tmp_path, FAST)
    assert digest == SHA and path.read_bytes() == DATA
    assert corpus_server.requested("files/corpus.tar.gz")[-1] == f"bytes={len(kept)}-"


def test_killed_download_resumes_from_its_partial_file(corpus_server, tmp_path):
    corpus_server.add_file("files/corpus.tar.gz", DATA)
    (tmp_path / "corpus.tar.gz.part").write_bytes(DATA[:300_000])  # what a killed run left
    _path, digest = fetch(resource(corpus_server), tmp_path, FAST)
    assert digest == SHA
    assert corpus_server.requested("files/corpus.tar.gz") == ["bytes=300000-"]


def test_corrupt_partial_is_set_aside_not_reused(corpus_server, tmp_path):
    corpus_server.add_file("files/corpus.tar.gz", DATA)
    (tmp_path / "corpus.tar.gz.part").write_bytes(b"garbage" * 100)
    with pytest.raises(DownloadError, match=r"set aside as corpus\.tar\.gz\.bad"):
        fetch(resource(corpus_server), tmp_path, FAST)
    assert (tmp_path / "corpus.tar.gz.bad").exists()
    _path, digest = fetch(resource(corpus_server), tmp_path, FAST)
    assert digest == SHA and corpus_server.requested("files/corpus.tar.gz")[-1] is None


def test_missing_file_is_not_retried(corpus_server, tmp_path):
    with pytest.raises(DownloadError, match="HTTP 404"):
        fetch(resource(corpus_server), tmp_path, FAST)
    assert corpus_server.requested("files/corpus.tar.gz") == [None]


def test_a_server_sending_more_than_the_expected_size_is_stopped(corpus_server, tmp_path):
    """A wrong or hostile server (or a tampered http:// download) cannot fill the disk before
    the verification: nothing past the expected size is written."""
    corpus_server.add_file("files/corpus.tar.gz", DATA, checksums=False)
    with pytest.raises(DownloadError, match=r"sends more than the 1,000 bytes expected.*set "
                                            r"aside as corpus\.tar\.gz\.bad"):
        fetch(resource(corpus_server, size=1000), tmp_path, FAST)
    assert (tmp_path / "corpus.tar.gz.bad").stat().st_size <= 1000
    assert not (tmp_path / "corpus.tar.gz.part").exists()


def test_a_partial_file_of_the_wrong_bytes_is_set_aside(corpus_server, tmp_path):
    corpus_server.add_file("files/corpus.tar.gz", DATA[:1000], checksums=False)
    with pytest.raises(DownloadError, match=r"has sha256 .*, expected .*set aside"):
        fetch(resource(corpus_server, size=1000), tmp_path, FAST)
    assert (tmp_path / "corpus.tar.gz.bad").read_bytes() == DATA[:1000]


def test_a_transfer_compressed_in_transit_is_refused(corpus_server, tmp_path):
    """requests would decode it, and the offsets of a resume would then be wrong."""
    corpus_server.add_file("files/corpus.tar.gz", DATA)
    corpus_server.compress("files/corpus.tar.gz")
    with pytest.raises(DownloadError, match=r"compresses it in transit \(Content-Encoding: "
                                            r"gzip\)"):
        fetch(resource(corpus_server), tmp_path, FAST)


def test_verified_file_is_not_read_again(corpus_server, tmp_path):
    corpus_server.add_file("files/corpus.tar.gz", DATA)
    fetch(resource(corpus_server), tmp_path, FAST)
    fetch(resource(corpus_server), tmp_path, FAST)
    assert len(corpus_server.requested("files/corpus.tar.gz")) == 1
