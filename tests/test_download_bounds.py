"""Downloads' bounds against real HTTP servers on 127.0.0.1: one process at a time downloads a
file, a mirror's SHA256SUMS is read up to a cap, and a download over plain http or without
verification says so in one warning line."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from asrkit.importing.download import (
    PUBLISHED,
    DownloadError,
    DownloadOptions,
    Expected,
    expected_for,
    fetch,
    mirrored,
)
from asrkit.testing import http_server
from asrkit.types import Resource
from tests.conftest import ROOT

DATA = bytes(range(256)) * 8192  # 2 MiB
SHA = hashlib.sha256(DATA).hexdigest()
#: What the first request for a held file gets before the server waits to be released.
FIRST_BYTES = 256 << 10
CHUNK = 64 << 10
CAP = "1,048,576"
QUIET = DownloadOptions(progress=False, retries=1, backoff=0.01)


@dataclass
class SlowServer:
    """Files on 127.0.0.1: a ``held`` file's first request sends :data:`FIRST_BYTES` and waits
    for ``release`` (so that a second download surely overlaps it); an ``unsized`` file is
    streamed without a Content-Length, up to ``stream_bytes``, until the client hangs up."""

    url: str = ""
    files: dict[str, bytes] = field(default_factory=dict)
    held: set[str] = field(default_factory=set)
    unsized: set[str] = field(default_factory=set)
    stream_bytes: int = 64 << 20
    requests: list[str] = field(default_factory=list)
    first_sent: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    streamed: int = -1
    stream_ended: threading.Event = field(default_factory=threading.Event)


def _handler(server: SlowServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            path = self.path.lstrip("/")
            server.requests.append(path)
            if path in server.unsized:
                self._stream(path)
                return
            data = server.files.get(path)
            if data is None:
                self.send_error(404)
                return
            ranged = self.headers.get("Range", "")
            start = int(ranged[6:].split("-", 1)[0]) if ranged.startswith("bytes=") else 0
            self.send_response(206 if start else 200)
            self.send_header("Content-Length", str(len(data) - start))
            self.end_headers()
            body = data[start:]
            if path in server.held and not server.first_sent.is_set():
                self.wfile.write(body[:FIRST_BYTES])
                self.wfile.flush()
                server.first_sent.set()
                server.release.wait(60)
                body = body[FIRST_BYTES:]
            self.wfile.write(body)

        def _stream(self, path: str) -> None:
            self.send_response(200)  # HTTP/1.0 and no Content-Length: the body ends at close
            self.end_headers()
            line = (b"0" * 64 + b"  some-file.tar.gz\n") * (CHUNK // 84)
            sent = 0
            try:
                while sent < server.stream_bytes:
                    self.wfile.write(line)
                    sent += len(line)
            except OSError:
                pass  # the client hung up
            finally:
                server.streamed = sent
                server.stream_ended.set()

    return Handler


@pytest.fixture
def slow_server() -> Iterator[SlowServer]:
    state = SlowServer()
    with http_server(_handler(state)) as state.url:
        try:
            yield state
        finally:
            state.release.set()  # before the server stops: it waits for its handlers


#: Fetches argv[1] into the folder argv[2], as an import does; prints the outcome in one line.
FETCHER = """\
import sys
from pathlib import Path
from asrkit.importing.download import DownloadOptions, Expected, fetch
from asrkit.types import Resource
url, folder, size, sha = sys.argv[1:]
resource = Resource(filename=url.rsplit("/", 1)[1], url=url, size=int(size), sha256=sha)
try:
    path, digest = fetch(resource, Path(folder), DownloadOptions(progress=False, retries=0),
                         Expected(int(size), sha, "published values"))
    print("done", digest, flush=True)
except Exception as error:
    print(type(error).__name__, error, flush=True)
"""


def start_fetch(url: str, folder: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get(
        "PYTHONPATH", "")]).rstrip(os.pathsep)}
    return subprocess.Popen([sys.executable, "-c", FETCHER, url, str(folder), str(len(DATA)),
                             SHA], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)


def test_a_second_download_of_a_file_is_refused_while_the_first_runs(slow_server, tmp_path):
    """Both would resume the partial file a killed run left, appending to one ``.part``."""
    slow_server.files["files/corpus.tar.gz"] = DATA
    slow_server.held.add("files/corpus.tar.gz")
    url = f"{slow_server.url}/files/corpus.tar.gz"
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    final = downloads / "corpus.tar.gz"
    final.with_name("corpus.tar.gz.part").write_bytes(DATA[:300_000])
    first = start_fetch(url, downloads)
    try:
        assert slow_server.first_sent.wait(60), first.communicate()
        second = start_fetch(url, downloads)
        out, err = second.communicate(timeout=60)
        assert out.startswith(f"LockError {final} is in use by another download (pid "
                              f"{first.pid} on "), out + err
        assert out.rstrip().endswith("; wait for it to finish, then rerun")
        assert len(out.splitlines()) == 1 and first.poll() is None
    finally:
        slow_server.release.set()
        out, err = first.communicate(timeout=60)
    assert out == f"done {SHA}\n", err
    assert final.read_bytes() == DATA
    assert sorted(p.name for p in downloads.iterdir()) == [
        "corpus.tar.gz", "corpus.tar.gz.verified"]  # no .part, no lock left
    assert slow_server.requests == ["files/corpus.tar.gz"]  # the second asked for nothing


def resource(url: str) -> Resource:
    return Resource(filename="corpus.tar.gz", url=url, size=len(DATA), sha256=SHA)


def test_an_oversized_sha256sums_of_a_mirror_is_refused(corpus_server):
    corpus_server.add_file("files/corpus.tar.gz", DATA, checksums=False)
    line = SHA.encode() + b"  corpus.tar.gz\n"
    corpus_server.add_file("files/SHA256SUMS", line * ((1 << 20) // len(line) + 1),
                           checksums=False)
    options = DownloadOptions(mirror=corpus_server.url, progress=False)
    published = resource("https://corpora.example/files/corpus.tar.gz")
    with pytest.raises(DownloadError) as refused:
        expected_for(published, mirrored(published.url, corpus_server.url), options)
    assert str(refused.value) == (
        f"{corpus_server.url}/files/SHA256SUMS is larger than the {CAP} bytes a SHA256SUMS may "
        "be; the mirror is wrong or hostile: check --mirror, or import without it")


def test_a_sha256sums_of_no_stated_size_is_read_only_up_to_the_cap(slow_server):
    """Without a Content-Length, the stream is cut at the cap, not read to its end."""
    slow_server.unsized.add("files/SHA256SUMS")
    options = DownloadOptions(mirror=slow_server.url, progress=False)
    published = resource("https://corpora.example/files/corpus.tar.gz")
    with pytest.raises(DownloadError, match=f"SHA256SUMS is larger than the {CAP} bytes"):
        expected_for(published, mirrored(published.url, slow_server.url), options)
    assert slow_server.stream_ended.wait(30)
    assert slow_server.streamed < slow_server.stream_bytes // 2


def test_a_sha256sums_within_the_cap_still_gives_the_checksum(corpus_server):
    corpus_server.add_file("files/corpus.tar.gz", DATA)
    options = DownloadOptions(mirror=corpus_server.url, progress=False)
    published = resource("https://corpora.example/files/corpus.tar.gz")
    expected = expected_for(published, mirrored(published.url, corpus_server.url), options)
    assert expected == Expected(None, SHA, "SHA256SUMS of the mirror")


def warnings(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("asrkit: warning:")]


def test_plain_http_checked_against_the_published_sha256_says_nothing(corpus_server, tmp_path,
                                                                       capsys):
    """The published checksum guards the file whatever the transport (openslr serves both)."""
    url = corpus_server.add_file("files/corpus.tar.gz", DATA)
    fetch(resource(url), tmp_path, QUIET)
    assert warnings(capsys.readouterr().err) == []


def test_a_mirror_over_plain_http_warns_that_its_checksums_can_be_altered_too(
        corpus_server, tmp_path, capsys):
    corpus_server.add_file("files/corpus.tar.gz", DATA)
    options = DownloadOptions(mirror=corpus_server.url, progress=False)
    fetch(resource("https://corpora.example/files/corpus.tar.gz"), tmp_path, options)
    assert warnings(capsys.readouterr().err) == [
        f"asrkit: warning: {corpus_server.url}/files/corpus.tar.gz is downloaded over plain "
        "http, which anyone on the way can alter; so can the SHA256SUMS it is checked against: "
        "prefer an https mirror"]


def test_no_verify_warns_once_and_plain_http_says_nothing_checks_it(corpus_server, tmp_path,
                                                                    capsys):
    url = corpus_server.add_file("files/corpus.tar.gz", DATA)
    unverified = DownloadOptions(verify=False, progress=False)
    fetch(Resource(filename="corpus.tar.gz", url=url), tmp_path, unverified,
          Expected(None, None, PUBLISHED))
    assert warnings(capsys.readouterr().err) == [
        "asrkit: warning: corpus.tar.gz is not verified (--no-verify): whatever the server "
        "sends is imported",
        f"asrkit: warning: {url} is downloaded over plain http, which anyone on the way can "
        "alter; and nothing checks it (--no-verify): prefer an https mirror"]
