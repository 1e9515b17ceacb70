"""Pytest fixtures for testing asrkit and asrkit plugins.

Installed as an opt-in pytest plugin (entry point ``pytest11``): it only defines fixtures, so it
changes nothing unless a test asks for one. A plugin author's tests can use them directly::

    def test_my_importer(asrkit_cli, asrkit_home, corpus_server):
        corpus_server.add_file("corpus.tar.gz", build_archive())
        result = asrkit_cli(["import", "foo", "--mirror", corpus_server.url])
        assert result.exit_code == 0, result.stderr

Fixtures:

``asrkit_home``
    a fresh ``ASRKIT_HOME`` (datasets and downloads) in a temporary folder.
``make_plugins``
    builds an isolated :class:`~asrkit.plugins.PluginSet` from plugin modules, with or without
    the installed entry points.
``asrkit_cli``
    runs the ``asrkit`` command line in-process and returns exit code, stdout and stderr.
``corpus_server``
    a real HTTP server on 127.0.0.1 with ``Range`` support that can drop connections or fail
    requests on purpose, for testing downloads as they fail in the wild; ``serve_corpora()`` is
    the same server as a context manager, for a fixture of a wider scope, and
    ``http_server(handler)`` runs a request handler class of your own the same way.
``tiny_dataset``
    (session) the folder of asrkit's bundled ``sample`` corpus imported once: 19 real clips
    (train 16, dev 2, test 1), for ``asrkit train --dataset <folder>``.
``tiny_run``
    (session) a run folder as ``asrkit train`` leaves it, of a tiny random ``brnn``: what
    ``asrkit evaluate``, ``transcribe`` and ``export`` read, built in a second.

Contract checks for a plugin author's own component, each a plain function that raises
``AssertionError`` naming what is wrong: ``check_model`` (:mod:`asrkit.testing.models`: padding
independence, declared stride, a few training steps, export), ``check_extractor``
(:mod:`asrkit.testing.features`: frame counts, ``extract_batch`` against ``extract``),
``check_decoder`` (:mod:`asrkit.testing.decoders`: settings round-trip, greedy equivalence),
``check_tokenizer`` (:mod:`asrkit.testing.tokenizers`: one file built, ``decode(encode(text))
== text``, words from ``symbols`` and ``word_marker`` alone, unknown characters refused) and
``check_objective`` (:mod:`asrkit.testing.objectives`: settings, output width, finite losses
that agree with ``frames_needed``, gradients to the encoder and the head, ``tf.function``).
"""

from __future__ import annotations

import gzip
import hashlib
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from asrkit import cli
from asrkit.plugins import PluginSet, set_plugins
from asrkit.registry import Provider
from asrkit.testing.decoders import *  # noqa: F403  (the decoder contract checks)
from asrkit.testing.decoders import __all__ as _decoder_checks
from asrkit.testing.features import check_extractor
from asrkit.testing.models import (
    check_export,
    check_model,
    check_output_lengths,
    check_padding,
    check_precision,
    check_training,
    make_tiny_run,
)
from asrkit.testing.objectives import *  # noqa: F403  (the objective contract checks)
from asrkit.testing.objectives import __all__ as _objective_checks
from asrkit.testing.streaming import check_streaming_model
from asrkit.testing.tokenizers import *  # noqa: F403  (the tokenizer contract checks)
from asrkit.testing.tokenizers import __all__ as _tokenizer_checks

__all__ = ["check_export", "check_extractor", "check_model", "check_output_lengths",
           "check_streaming_model",
           "check_padding", "check_precision", "check_training", "import_sample", "make_tiny_run",
           "http_server", "serve_corpora",
           *_decoder_checks, *_objective_checks, *_tokenizer_checks]


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str


@pytest.fixture
def asrkit_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty ``ASRKIT_HOME`` for this test; no mirror from the environment."""
    home = tmp_path / "asrkit-home"
    home.mkdir()
    monkeypatch.setenv("ASRKIT_HOME", str(home))
    monkeypatch.delenv("ASRKIT_MIRROR", raising=False)
    return home


@pytest.fixture
def make_plugins(monkeypatch: pytest.MonkeyPatch) -> Callable[..., PluginSet]:
    """``make_plugins(*modules, entry_points=False, distribution="test")``: a plugin set holding
    ``modules`` (each registered under its ``__name__``), plus the installed plugins if asked.
    The set becomes the process-wide one for the test, and is reset afterwards."""
    monkeypatch.delenv("ASRKIT_STRICT_PLUGINS", raising=False)
    monkeypatch.delenv("ASRKIT_DISABLE_PLUGINS", raising=False)

    def make(*modules: ModuleType | Any, entry_points: bool = False,
             distribution: str = "test") -> PluginSet:
        plugins = PluginSet()
        if entry_points:
            plugins.load_entry_points()
        for module in modules:
            name = getattr(module, "__name__", type(module).__name__).rsplit(".", 1)[-1]
            plugins.add_module(module, Provider(name, distribution, "0"))
        set_plugins(plugins)
        return plugins

    yield make
    set_plugins(None)


@pytest.fixture
def asrkit_cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., CliResult]:
    """``asrkit_cli(args, plugins=None)`` runs ``asrkit ARGS`` in this process. Its result holds
    what the command printed; what the test printed before stays in the test's own output."""
    def invoke(args: list[str], plugins: PluginSet | None = None) -> CliResult:
        earlier = capsys.readouterr()
        code = cli.run([str(a) for a in args], plugins)
        out, err = capsys.readouterr()
        sys.stdout.write(earlier.out)  # captured again, for the test and pytest's report
        sys.stderr.write(earlier.err)
        return CliResult(code, out, err)

    yield invoke
    set_plugins(None)


@dataclass
class _Fault:
    kind: str  # "drop" (close after N bytes) or "status" (answer with an HTTP status)
    value: int
    times: int


@dataclass
class CorpusServer:
    """Files served over HTTP on 127.0.0.1, with faults to order."""

    url: str = ""
    files: dict[str, bytes] = field(default_factory=dict)
    faults: dict[str, list[_Fault]] = field(default_factory=dict)
    requests: list[tuple[str, str | None]] = field(default_factory=list)  # (path, Range header)
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: Paths sent gzip-compressed in transit (``Content-Encoding: gzip``), asked for or not.
    compressed: set[str] = field(default_factory=set)

    def add_file(self, path: str, data: bytes, checksums: bool = True) -> str:
        """Serve ``data`` at ``/path``; also list it in a ``SHA256SUMS`` beside it unless
        ``checksums`` is false. Returns its URL."""
        path = path.lstrip("/")
        self.files[path] = data
        if checksums:
            folder = path.rsplit("/", 1)[0] + "/" if "/" in path else ""
            sums = self.files.get(folder + "SHA256SUMS", b"").decode()
            line = f"{hashlib.sha256(data).hexdigest()}  {path.rsplit('/', 1)[-1]}\n"
            self.files[folder + "SHA256SUMS"] = (sums + line).encode()
        return f"{self.url}/{path}"

    def drop_after(self, path: str, nbytes: int, times: int = 1) -> None:
        """Close the connection after sending ``nbytes`` of the body, ``times`` times."""
        self.faults.setdefault(path.lstrip("/"), []).append(_Fault("drop", nbytes, times))

    def fail(self, path: str, status: int = 503, times: int = 1) -> None:
        """Answer ``status`` instead of the file, ``times`` times."""
        self.faults.setdefault(path.lstrip("/"), []).append(_Fault("status", status, times))

    def compress(self, path: str) -> None:
        """Send ``path`` gzip-compressed in transit, as a misconfigured server does whatever the
        client accepts."""
        self.compressed.add(path.lstrip("/"))

    def _take_fault(self, path: str) -> _Fault | None:
        with self.lock:
            for fault in self.faults.get(path, []):
                if fault.times > 0:
                    fault.times -= 1
                    return fault
        return None

    def requested(self, path: str) -> list[str | None]:
        """The Range headers of the requests for ``path`` so far."""
        return [r for p, r in self.requests if p == path.lstrip("/")]


def _handler(server: CorpusServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # keep test output clean
            pass

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0].lstrip("/")
            server.requests.append((path, self.headers.get("Range")))
            data = server.files.get(path)
            if data is None:
                self.send_error(404)
                return
            fault = server._take_fault(path)
            if fault and fault.kind == "status":
                self.send_error(fault.value)
                return
            start = 0
            ranged = self.headers.get("Range")
            if ranged and ranged.startswith("bytes="):
                start = int(ranged[6:].split("-", 1)[0] or 0)
                if start >= len(data):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(data)}")
                    self.end_headers()
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            else:
                self.send_response(200)
            body = data[start:]
            if path in server.compressed:
                body = gzip.compress(body)
                self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()
            if fault and fault.kind == "drop":
                self.wfile.write(body[: fault.value])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(body)

    return Handler


@pytest.fixture
def corpus_server() -> Iterator[CorpusServer]:
    """A real HTTP server on 127.0.0.1 serving in-memory files, with fault injection."""
    with serve_corpora() as server:
        yield server


@contextmanager
def http_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 (a free port) answering with ``handler``, a request
    handler class of your own, each request in a thread of its own, until the ``with`` block
    ends; yields its URL (``http://127.0.0.1:PORT``). For a server whose behaviour
    :func:`corpus_server` does not have: an API an importer calls, a slow or stalling one."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@contextmanager
def serve_corpora() -> Iterator[CorpusServer]:
    """The :func:`corpus_server` fixture's server, for a fixture of a wider scope (a module's
    tests sharing one mirror): it serves until the ``with`` block ends."""
    state = CorpusServer()
    with http_server(_handler(state)) as state.url:
        yield state


def import_sample(home: Path) -> Path:
    """Import asrkit's bundled ``sample`` corpus (real clips shipped inside asrkit, no network)
    into the asrkit home ``home``; returns the dataset's folder."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ASRKIT_HOME", str(home))
        patch.delenv("ASRKIT_MIRROR", raising=False)
        code = cli.run(["import", "sample", "--no-progress"])
    if code != 0:
        raise RuntimeError(f"asrkit import sample failed with exit status {code}")
    return home / "datasets" / "sample"


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``sample`` corpus imported once per session; pass the folder as ``--dataset``."""
    return import_sample(tmp_path_factory.mktemp("asrkit-tiny-dataset"))


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder of a tiny random ``brnn`` (:func:`asrkit.testing.models.make_tiny_run`)."""
    return make_tiny_run(tmp_path_factory.mktemp("asrkit-tiny-run") / "run")
