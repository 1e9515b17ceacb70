"""Verified, resumable downloads.

A download streams into ``<file>.part`` and resumes it with an HTTP ``Range`` request after a
dropped connection or a killed process. Transient failures are retried with exponential backoff.
The finished file is checked against the expected size and sha256 before it is renamed into
place; a file that does not match is set aside (``<file>.bad``), never reused.

A verified file is not read again by the next import: ``<file>.verified`` records its size and
time stamp, its sha256, and the checksum it was verified against. The record counts only for
that same checksum: a file verified against one mirror's ``SHA256SUMS`` is verified again
against the published sha256 when it is next used without that mirror (and set aside and
downloaded again when it does not match), so a mirror cannot leave a file in the downloads
folder that passes for the real one.

One process at a time downloads a file: ``<file>.lock`` (:mod:`asrkit.core.locks`) is held from
the first look at the file to its verification, so two imports of one archive never append to
one ``.part``; the second is refused in one line naming the first. A mirror's ``SHA256SUMS`` is
read up to :data:`MAX_CHECKSUMS_BYTES`, so a wrong or hostile mirror cannot fill the memory with
it. A download over plain ``http://``, and one taken without verification (``--no-verify``),
each print one warning line: either leaves the file's integrity to the network.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import requests
from tqdm import tqdm

from asrkit.core.errors import AsrkitError
from asrkit.core.files import replace_durably
from asrkit.core.locks import folder_lock
from asrkit.types import Resource

CHUNK = 1 << 20
#: Read size of a streamed download: what a dropped connection can lose, at most.
STREAM_CHUNK = 64 << 10
CHECKSUM_FILE = "SHA256SUMS"
#: The most a mirror's ``SHA256SUMS`` may hold (a line per file: thousands of files).
MAX_CHECKSUMS_BYTES = 1 << 20
#: Where a checksum from the mirror's ``SHA256SUMS`` came from, as messages name it.
MIRROR_ORIGIN = f"{CHECKSUM_FILE} of the mirror"
PUBLISHED = "published values"
#: HTTP statuses worth retrying: the server or a proxy is momentarily unable to answer.
TRANSIENT_STATUS = {408, 425, 429, 500, 502, 503, 504}


class DownloadError(AsrkitError):
    """A download failed for good (after retries) or did not verify."""


@dataclass(frozen=True)
class DownloadOptions:
    mirror: str | None = None
    verify: bool = True
    retries: int = 5
    backoff: float = 1.0
    timeout: float = 60.0
    progress: bool = True


@dataclass(frozen=True)
class Expected:
    """What a file must be: its size and sha256, where known, and where that fact came from."""

    size: int | None
    sha256: str | None
    origin: str


def mirrored(url: str, mirror: str | None) -> str:
    """``url`` with its scheme and host (and any path prefix of ``mirror``) replaced."""
    if not mirror:
        return url
    original = urlsplit(url)
    base = urlsplit(mirror)
    path = base.path.rstrip("/") + original.path
    return urlunsplit((base.scheme, base.netloc, path, original.query, ""))


def sha256_of(path: Path, progress: bool = False) -> str:
    digest = hashlib.sha256()
    size = path.stat().st_size
    with open(path, "rb") as f, tqdm(
        total=size, unit="B", unit_scale=True, desc=f"verify {path.name}", disable=not progress,
        leave=False,
    ) as bar:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
            bar.update(len(chunk))
    return digest.hexdigest()


def mirror_checksums(url: str, options: DownloadOptions) -> dict[str, str]:
    """The mirror's own ``SHA256SUMS`` beside ``url`` (file name -> sha256); empty if none."""
    sums_url = url.rsplit("/", 1)[0] + "/" + CHECKSUM_FILE
    try:
        text = _read_capped(sums_url, MAX_CHECKSUMS_BYTES, options)
    except requests.RequestException:
        return {}
    sums = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2:
            sums[parts[1].lstrip("*")] = parts[0].lower()
    return sums


def _read_capped(url: str, limit: int, options: DownloadOptions) -> str | None:
    """The text at ``url`` (``None`` unless it answers 200), read in chunks and refused past
    ``limit`` bytes: a small file read whole, which a server must not make large."""
    headers = {"Accept-Encoding": "identity"}  # what is counted is what is sent
    with requests.get(url, headers=headers, stream=True, timeout=options.timeout) as response:
        if response.status_code != 200:
            return None
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > limit:
            raise _too_large(url, limit)
        data = bytearray()
        for chunk in response.iter_content(STREAM_CHUNK):
            data += chunk
            if len(data) > limit:
                raise _too_large(url, limit)
    return data.decode("utf-8", errors="replace")


def _too_large(url: str, limit: int) -> DownloadError:
    return DownloadError(
        f"{url} is larger than the {limit:,} bytes a {CHECKSUM_FILE} may be; the mirror is "
        "wrong or hostile: check --mirror, or import without it"
    )


def expected_for(resource: Resource, url: str, options: DownloadOptions) -> Expected:
    """What the file at ``url`` (``resource`` there, or on the mirror) must be: the mirror's
    ``SHA256SUMS`` where it lists the file, else the importer's published values."""
    if options.mirror:
        sums = mirror_checksums(url, options)
        if resource.filename in sums:
            return Expected(None, sums[resource.filename], MIRROR_ORIGIN)
    return Expected(resource.size, resource.sha256, PUBLISHED)


def mismatch(path: Path, expected: Expected, digest: str) -> str | None:
    """How ``path`` (whose sha256 is ``digest``) differs from ``expected``; ``None`` if not."""
    size = path.stat().st_size
    if expected.size is not None and size != expected.size:
        return f"is {size:,} bytes, expected {expected.size:,}"
    if expected.sha256 is not None and digest != expected.sha256:
        return f"has sha256 {digest}, expected {expected.sha256}"
    return None


def verify_file(path: Path, expected: Expected, options: DownloadOptions,
                set_aside: bool = True, digest: str | None = None) -> str:
    """Check ``path`` against ``expected``; return its sha256 (``digest``, when the caller
    hashed the bytes as it wrote them, else read from the file). A mismatch raises; a download
    that does not match is set aside as ``<name>.bad`` (a user's own file is left alone)."""
    actual = digest or sha256_of(path, options.progress)
    problem = mismatch(path, expected, actual)
    if problem and options.verify:
        if not set_aside:
            raise DownloadError(
                f"{path} {problem} ({expected.origin}); nothing was read from it. Use the "
                "right file, or pass --no-verify to import it anyway"
            )
        aside = _set_aside(path)
        raise DownloadError(
            f"{path.name} {problem} ({expected.origin}); set aside as {aside.name}, nothing was "
            "extracted. Rerun to download it again, or check the mirror"
        )
    return actual


def _set_aside(path: Path) -> Path:
    aside = path.with_name(path.name + ".bad")
    os.replace(path, aside)
    return aside


def _marker(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _stat_key(path: Path) -> str:
    stat = path.stat()
    return f"{stat.st_size} {stat.st_mtime_ns}"


def _verified_before(final: Path, expected: Expected) -> str | None:
    """The sha256 of ``final`` when an earlier run verified this very file against the same
    checksum and size as ``expected``; ``None`` when it must be verified (again)."""
    marker = _marker(final)
    if not (final.exists() and marker.exists()):
        return None
    try:
        record = json.loads(marker.read_text(encoding="utf-8"))
        same = (record["file"] == _stat_key(final)
                and record["verified_sha256"] == expected.sha256
                and record["verified_size"] == expected.size)
        return str(record["sha256"]) if same else None
    except (ValueError, TypeError, KeyError, UnicodeDecodeError):
        return None  # damaged, or written before it recorded what it was verified against


def _record_verified(final: Path, digest: str, expected: Expected) -> None:
    """Remember that ``final`` (as it is now) has ``digest`` and matched ``expected``, or was
    taken although it does not (``--no-verify``): then no checksum is recorded, so a verified
    import checks the file again."""
    matched = mismatch(final, expected, digest) is None
    record = {"file": _stat_key(final), "sha256": digest,
              "verified_sha256": expected.sha256 if matched else None,
              "verified_size": expected.size if matched else None,
              "verified_by": expected.origin if matched else "nothing (--no-verify)"}
    _marker(final).write_text(json.dumps(record, sort_keys=True) + "\n", encoding="utf-8")


def fetch(resource: Resource, directory: Path, options: DownloadOptions,
          expected: Expected | None = None) -> tuple[Path, str]:
    """Download ``resource`` into ``directory`` (resuming) and verify it against ``expected``
    (by default :func:`expected_for`); return the path and its sha256. A file verified on an
    earlier run against the same checksum is not read again; one verified against another
    checksum is verified again, and downloaded again when it does not match. The file's lock
    is held throughout: another process fetching it is refused."""
    if not resource.url:
        raise DownloadError(f"{resource.filename} has no download URL; pass --archive PATH")
    url = mirrored(resource.url, options.mirror)
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / resource.filename
    expected = expected or expected_for(resource, url, options)
    if options.verify and expected.sha256 is None:
        raise DownloadError(
            f"no sha256 is known for {resource.filename}; serve a {CHECKSUM_FILE} beside it on "
            "the mirror, or pass --no-verify to import it unverified"
        )
    if not options.verify:
        _warn(f"{resource.filename} is not verified (--no-verify): whatever the server sends "
              "is imported")
    with folder_lock(final, "download", "wait for it to finish, then rerun"):
        return _fetch_locked(url, final, expected, options)


def _fetch_locked(url: str, final: Path, expected: Expected,
                  options: DownloadOptions) -> tuple[Path, str]:
    """:func:`fetch`'s work on ``final``, whose lock the caller holds."""
    known = _verified_before(final, expected)
    if known is not None:
        return final, known
    if final.exists():  # from an earlier run, verified against something else or not at all
        digest = sha256_of(final, options.progress)
        problem = mismatch(final, expected, digest)
        if problem is None or not options.verify:
            _record_verified(final, digest, expected)
            return final, digest
        aside = _set_aside(final)
        _warn(f"{final} {problem} ({expected.origin}); set aside as {aside.name}, downloading "
              "it again")
    if urlsplit(url).scheme == "http" and (expected.origin != PUBLISHED or not options.verify):
        _warn(_plain_http(url, expected, options))
    partial = final.with_name(final.name + ".part")
    streamed = _download(url, partial, expected.size, options)
    replace_durably(partial, final)
    digest = verify_file(final, expected, options, digest=streamed)
    _record_verified(final, digest, expected)
    return final, digest


def _plain_http(url: str, expected: Expected, options: DownloadOptions) -> str:
    """The warning for a download anyone on the way can alter, saying what still guards it. A
    file checked against the importer's published sha256 gets none: the check guards it
    whatever the transport."""
    if not options.verify or expected.sha256 is None:
        guard = "and nothing checks it (--no-verify)"
    else:
        guard = f"so can the {CHECKSUM_FILE} it is checked against"
    return (f"{url} is downloaded over plain http, which anyone on the way can alter; {guard}: "
            "prefer an https mirror")


def _warn(message: str) -> None:
    print(f"asrkit: warning: {message}", file=sys.stderr)


class _Hash:
    """The sha256 of the first ``length`` bytes of the file being written. Bytes are hashed as
    they are written, so a 54 GB download is not read a second time to be verified; only a
    partial file left by a killed run is read once, to catch up."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.digest, self.length = hashlib.sha256(), 0

    def catch_up(self, path: Path) -> None:
        size = path.stat().st_size if path.exists() else 0
        if size == self.length:
            return
        self.reset()
        if size:
            with open(path, "rb") as f:
                while chunk := f.read(CHUNK):
                    self.update(chunk)

    def update(self, chunk: bytes) -> None:
        self.digest.update(chunk)
        self.length += len(chunk)


def _download(url: str, partial: Path, size: int | None, options: DownloadOptions) -> str:
    """Stream ``url`` into ``partial``, resuming what is there and retrying transient errors;
    return the file's sha256."""
    attempt = 0
    hashed = _Hash()
    while True:
        hashed.catch_up(partial)
        offset = hashed.length
        if size is not None and offset == size:
            return hashed.digest.hexdigest()
        try:
            _stream(url, partial, offset, size, options, hashed)
            hashed.catch_up(partial)  # a 416 (already complete) wrote nothing new
            return hashed.digest.hexdigest()
        except _Oversized:
            aside = partial.with_name(partial.name.removesuffix(".part") + ".bad")
            os.replace(partial, aside)
            raise DownloadError(
                f"{url} sends more than the {size:,} bytes expected; the download stopped there, "
                f"so that it cannot fill the disk, and is set aside as {aside.name}: check the "
                "URL or --mirror"
            ) from None
        except (requests.ConnectionError, requests.Timeout,
                requests.exceptions.ChunkedEncodingError, _Transient) as error:
            attempt += 1
            if attempt > options.retries:
                raise DownloadError(
                    f"downloading {url} failed after {options.retries} retries ({error}); the "
                    f"partial file {partial.name} is kept: rerun to resume"
                ) from None
            time.sleep(options.backoff * 2 ** (attempt - 1))


class _Transient(Exception):
    pass


class _Oversized(Exception):
    """The server sends more bytes than the file's expected size."""


def _stream(url: str, partial: Path, offset: int, size: int | None,
            options: DownloadOptions, hashed: _Hash) -> None:
    # The file's own bytes, never re-encoded in transit: a compressed transfer is decoded by
    # requests, which breaks both the byte offsets a resume asks for and the size cap below.
    headers = {"Accept-Encoding": "identity", **({"Range": f"bytes={offset}-"} if offset else {})}
    with requests.get(url, headers=headers, stream=True, timeout=options.timeout) as response:
        if response.status_code == 416 and offset:
            return  # the partial file is already complete
        if response.status_code in TRANSIENT_STATUS:
            raise _Transient(f"HTTP {response.status_code}")
        if response.status_code not in (200, 206):
            raise DownloadError(
                f"downloading {url} failed: HTTP {response.status_code} {response.reason}; "
                "check the URL or --mirror"
            )
        if response.status_code == 200 and offset:
            offset = 0  # the server ignored the Range: start again
            hashed.reset()
        encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise DownloadError(
                f"downloading {url} failed: the server compresses it in transit "
                f"(Content-Encoding: {encoding}), which breaks resuming and verification; "
                "use another --mirror"
            )
        length = response.headers.get("Content-Length")
        total = size if size is not None else (offset + int(length) if length else None)
        mode = "ab" if offset else "wb"
        with open(partial, mode) as out, tqdm(
            total=total, initial=offset, unit="B", unit_scale=True, unit_divisor=1024,
            desc=f"download {partial.name[:-5]}", disable=not options.progress,
        ) as bar:
            for chunk in response.iter_content(STREAM_CHUNK):
                if size is not None and hashed.length + len(chunk) > size:
                    raise _Oversized  # a bound on the disk a wrong or hostile server can fill
                out.write(chunk)
                hashed.update(chunk)
                bar.update(len(chunk))
        received = partial.stat().st_size
        if total is not None and received < total:
            raise requests.exceptions.ChunkedEncodingError(
                f"connection closed at {received:,} of {total:,} bytes"
            )
