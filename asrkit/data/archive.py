"""Reading corpus sources member by member, without extracting them.

A source is a tar archive (any compression ``tarfile`` reads), a folder, or a single file. Its
members are named by POSIX paths relative to its root. Archives are read sequentially in a single
stream per pass, so a 54 GB TED-LIUM archive is never unpacked to disk: the importer reads the
small text members in a first pass and hands audio members to the converters in a second.

Safety: a member with an absolute path or a ``..`` component, or a link whose target leaves
the archive, is refused before anything is read, and nothing is ever written from a member's name.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import shutil
import subprocess
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from tqdm import tqdm

from asrkit.errors import AsrkitError


class UnsafeArchiveError(AsrkitError):
    """An archive member would land outside the corpus folder."""


@dataclass
class Scan:
    """What a first pass over the sources found: member names, small text members' contents,
    and links (link name -> the member it points to)."""

    members: list[str] = field(default_factory=list)
    metadata: dict[str, bytes] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)

    def resolve(self, name: str) -> str:
        seen = set()
        while name in self.links:
            if name in seen:
                raise UnsafeArchiveError(f"link loop at {name!r}")
            seen.add(name)
            name = self.links[name]
        return name


def safe_name(name: str, archive: str) -> str:
    """The normalised member path, or an :class:`UnsafeArchiveError`."""
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise UnsafeArchiveError(
            f"{archive} has a member with an absolute path ({name!r}); refusing to read it"
        )
    name = name.replace("\\", "/")
    if ".." in name.split("/"):
        raise UnsafeArchiveError(
            f"{archive} has a member that leaves the archive ({name!r}); refusing to read it"
        )
    normal = posixpath.normpath(name)
    return "" if normal == "." else normal


class Source:
    """A tar archive, a folder or a single file, read member by member."""

    def __init__(self, path: str | Path, progress: bool = True) -> None:
        self.path = Path(path)
        self.progress = progress
        if not self.path.exists():
            raise AsrkitError(f"{self.path} does not exist")
        self.kind = "dir" if self.path.is_dir() else (
            "tar" if tarfile.is_tarfile(self.path) else "file"
        )

    def __repr__(self) -> str:
        return f"Source({str(self.path)!r}, {self.kind})"

    # -- pass 1 ------------------------------------------------------------------------------

    def scan(self, into: Scan, is_metadata: Callable[[str], bool]) -> None:
        """Add this source's members to ``into`` and read those ``is_metadata`` selects."""
        for name, read, link in self._walk(read_all=False):
            if link is not None:
                into.links[name] = link
                into.members.append(name)
                continue
            into.members.append(name)
            if is_metadata(name):
                into.metadata[name] = read()

    # -- pass 2 ------------------------------------------------------------------------------

    def stream(self, wanted: set[str]) -> Iterator[tuple[str, bytes]]:
        """The contents of the ``wanted`` regular members, in the source's own order."""
        if not wanted:
            return
        if self.kind == "dir":
            for name in sorted(wanted):
                member = self.path / name
                if member.is_file():
                    yield name, member.read_bytes()
            return
        for name, read, link in self._walk(read_all=False):
            if link is None and name in wanted:
                yield name, read()

    def _walk(self, read_all: bool) -> Iterator[tuple[str, Callable[[], bytes], str | None]]:
        if self.kind == "file":
            yield self.path.name, self.path.read_bytes, None
        elif self.kind == "dir":
            yield from self._walk_dir()
        else:
            yield from self._walk_tar()

    def _walk_dir(self) -> Iterator[tuple[str, Callable[[], bytes], str | None]]:
        for root, dirs, files in os.walk(self.path, followlinks=True):
            dirs.sort()
            for filename in sorted(files):
                full = Path(root) / filename
                name = full.relative_to(self.path).as_posix()
                yield name, full.read_bytes, None

    def _walk_tar(self) -> Iterator[tuple[str, Callable[[], bytes], str | None]]:
        size = self.path.stat().st_size
        with open(self.path, "rb") as raw, _decompressed(raw) as stream, tqdm(
            total=size, unit="B", unit_scale=True, unit_divisor=1024, leave=False,
            desc=f"read {self.path.name}", disable=not self.progress,
        ) as bar, tarfile.open(fileobj=stream, mode="r|*") as tar:
            for member in tar:
                # The file offset is shared with a gzip child process: it is what gzip has read.
                bar.update(os.lseek(raw.fileno(), 0, os.SEEK_CUR) - bar.n)
                name = safe_name(member.name, self.path.name)
                if member.issym() or member.islnk():
                    yield name, _no_read, self._link_target(member, name)
                elif member.isfile():
                    yield name, _reader(tar, member), None
                elif not member.isdir():
                    raise UnsafeArchiveError(
                        f"{self.path.name} has a special file {name!r} (device or pipe); "
                        "refusing to read it"
                    )

    def _link_target(self, member: tarfile.TarInfo, name: str) -> str:
        target = member.linkname
        if member.issym():
            if target.startswith("/"):
                raise UnsafeArchiveError(
                    f"{self.path.name} has a link {name!r} to an absolute path ({target!r}); "
                    "refusing to read it"
                )
            target = posixpath.join(posixpath.dirname(name), target)
        resolved = posixpath.normpath(target)
        if resolved == ".." or resolved.startswith("../"):
            raise UnsafeArchiveError(
                f"{self.path.name} has a link {name!r} that points outside the archive "
                f"({member.linkname!r}); refusing to read it"
            )
        return resolved


@contextlib.contextmanager
def _decompressed(raw: BinaryIO) -> Iterator[BinaryIO]:
    """``raw`` itself, or for a gzip file the output of a ``gzip -dc`` process reading it: the
    decompression then runs on another core, in parallel with the tar parsing and the hand-off
    to converters (both archive passes are about twice as fast)."""
    gzip = shutil.which("gzip")
    if os.pread(raw.fileno(), 2, 0) != b"\x1f\x8b" or gzip is None:
        yield raw
        return
    process = subprocess.Popen([gzip, "-dc"], stdin=raw, stdout=subprocess.PIPE, bufsize=1 << 20,
                               stderr=subprocess.PIPE)
    assert process.stdout is not None
    try:
        yield process.stdout
    finally:
        process.stdout.close()
        process.kill()
        _, error = process.communicate()
        if process.returncode not in (0, -9) and error:
            raise AsrkitError(f"{raw.name} is not a valid gzip file: "
                              f"{' '.join(error.decode(errors='replace').split())}")


def _no_read() -> bytes:
    return b""


def _reader(tar: tarfile.TarFile, member: tarfile.TarInfo) -> Callable[[], bytes]:
    def read() -> bytes:
        handle = tar.extractfile(member)
        return handle.read() if handle else b""

    return read


def scan_sources(sources: list[Source], is_metadata: Callable[[str], bool]) -> Scan:
    """Pass 1 over every source. A corpus split into several archives repeats its top-level
    files (every LibriSpeech subset holds ``LibriSpeech/README.TXT``): a repeated member is listed
    once, unless it is metadata, which would be ambiguous (an error)."""
    scan = Scan()
    for source in sources:
        before = set(scan.members)
        part = Scan()
        source.scan(part, is_metadata)
        clash = sorted(name for name in before.intersection(part.members) if is_metadata(name))
        if clash:
            raise AsrkitError(
                f"{source.path.name} repeats member {clash[0]!r} of another source"
            )
        scan.members += [name for name in part.members if name not in before]
        scan.metadata.update(part.metadata)
        scan.links.update(part.links)
    for link in scan.links:  # a linked transcript reads as its target (TED-LIUM 3's legacy/)
        if is_metadata(link) and scan.resolve(link) in scan.metadata:
            scan.metadata[link] = scan.metadata[scan.resolve(link)]
    return scan
