"""Reading corpus sources member by member, without extracting them.

A source is a tar archive (any compression ``tarfile`` reads), a folder, or a single file. Its
members are named by POSIX paths relative to its root. Archives are read sequentially in a single
stream per pass, so a 54 GB TED-LIUM archive is never unpacked to disk: the importer reads the
small text members in a first pass and hands audio members to the converters in a second.

Safety: a member with an absolute path or a ``..`` component, or a link (symbolic or hard)
whose target leaves the archive, is refused before anything is read, and nothing is ever written
from a member's name. A folder is walked without trusting the filesystem either: every path is
resolved and must stay inside the folder, each real file is read once (links become links, as
in an archive, so a link loop cannot repeat anything), and links that dangle or leave the folder,
pipes, sockets and devices are skipped with the reason (:attr:`Scan.skipped`). A transcript
larger than the importer's bound is refused by name before it is read.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import shutil
import stat
import subprocess
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from tqdm import tqdm

from asrkit.core.errors import AsrkitError
from asrkit.core.text import quote

#: Largest transcript or listing member read by default (an importer may allow more): corpora's
#: transcripts are kilobytes, and the bound keeps a hostile archive from filling the memory.
MAX_METADATA_BYTES = 16 << 20
#: Why a folder's entry was not read (the keys of :attr:`Scan.skipped`'s values).
DANGLING = "dangling link"
LEAVES = "link leaves the folder"
LOOP = "link loop"
SPECIAL = "special file (pipe, socket or device)"
UNREADABLE = "unreadable file"
NOT_UTF8 = "name not in UTF-8 (rename the file to import it)"


class UnsafeArchiveError(AsrkitError):
    """An archive member would land outside the corpus folder."""


@dataclass
class Scan:
    """What a first pass over the sources found: member names, small text members' contents,
    and links (link name -> the member it points to)."""

    members: list[str] = field(default_factory=list)
    metadata: dict[str, bytes] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    #: Entries of a folder that were not read: name -> reason.
    skipped: dict[str, str] = field(default_factory=dict)

    def resolve(self, name: str) -> str:
        seen = set()
        while name in self.links:
            if name in seen:
                raise UnsafeArchiveError(f"link loop at {quote(name)}")
            seen.add(name)
            name = self.links[name]
        return name


def safe_name(name: str, archive: str) -> str:
    """The normalised member path, or an :class:`UnsafeArchiveError`."""
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise UnsafeArchiveError(
            f"{archive} has a member with an absolute path ({quote(name)}); refusing to read it"
        )
    name = name.replace("\\", "/")
    if ".." in name.split("/"):
        raise UnsafeArchiveError(
            f"{archive} has a member that leaves the archive ({quote(name)}); refusing to read it"
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

    def scan(self, into: Scan, is_metadata: Callable[[str], bool],
             limit: int = MAX_METADATA_BYTES) -> None:
        """Add this source's members to ``into`` and read those ``is_metadata`` selects (each
        at most ``limit`` bytes: a larger one is refused by name, before it is read)."""
        for name, read, link, size in self._walk(into.skipped):
            if link is not None:
                into.links[name] = link
                into.members.append(name)
                continue
            if is_metadata(name):
                if size > limit:
                    raise AsrkitError(
                        f"{self.path.name}: {quote(name)} is {size:,} bytes, more than any "
                        f"transcript or listing ({limit:,} at most); refusing to read it"
                    )
                try:
                    into.metadata[name] = read()
                except OSError as error:
                    into.skipped[name] = f"{UNREADABLE}: {error.strerror}"
                    continue
            into.members.append(name)

    # -- pass 2 ------------------------------------------------------------------------------

    def stream(self, wanted: set[str]) -> Iterator[tuple[str, bytes]]:
        """The contents of the ``wanted`` regular members, in the source's own order."""
        if not wanted:
            return
        if self.kind == "dir":
            # Member names of a folder are real files inside it (the scan made links links).
            root = self.path.resolve()
            for name in sorted(wanted):
                member = root / name
                try:
                    data = _file_reader(member)()
                except OSError:
                    continue  # removed or replaced since the scan: reported as unreadable
                yield name, data
            return
        for name, read, link, _ in self._walk({}):
            if link is None and name in wanted:
                yield name, read()

    def listing(self) -> Iterator[tuple[str, int, int]]:
        """``(name, size, mtime_ns)`` of every regular member of a folder or file, cheaply (no
        content is read): what says whether a user's corpus changed since the last import."""
        if self.kind == "tar":
            info = self.path.stat()
            yield self.path.name, info.st_size, info.st_mtime_ns
            return
        for name, _, link, _ in self._walk({}):
            if link is None:
                info = (self.path / name).stat() if self.kind == "dir" else self.path.stat()
                yield name, info.st_size, info.st_mtime_ns

    def _walk(self, skipped: dict[str, str]) -> Iterator[Entry]:
        if self.kind == "file":
            yield self.path.name, self.path.read_bytes, None, self.path.stat().st_size
        elif self.kind == "dir":
            root = self.path.resolve()
            yield from _walk_dir(root, root, "", (root,), set(), {}, skipped)
        else:
            yield from self._walk_tar()

    def _walk_tar(self) -> Iterator[Entry]:
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
                    yield name, _no_read, self._link_target(member, name), 0
                elif member.isfile():
                    yield name, _reader(tar, member), None, member.size
                elif not member.isdir():
                    raise UnsafeArchiveError(
                        f"{self.path.name} has a special file {quote(name)} (device or pipe); "
                        "refusing to read it"
                    )

    def _link_target(self, member: tarfile.TarInfo, name: str) -> str:
        target = member.linkname.replace("\\", "/")
        if target.startswith("/") or (len(target) > 1 and target[1] == ":"):
            # Both kinds: a hard link's target is a member name, and no member is absolute.
            raise UnsafeArchiveError(
                f"{self.path.name} has a link {quote(name)} to an absolute path "
                f"({quote(member.linkname)}); refusing to read it"
            )
        if member.issym():  # relative to the link's folder; a hard link's to the archive's root
            target = posixpath.join(posixpath.dirname(name), target)
        resolved = posixpath.normpath(target)
        if resolved == ".." or resolved.startswith("../"):
            raise UnsafeArchiveError(
                f"{self.path.name} has a link {quote(name)} that points outside the archive "
                f"({quote(member.linkname)}); refusing to read it"
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


#: A walked member: its name, how to read it, the member it links to (or ``None``), its size.
Entry = tuple[str, Callable[[], bytes], "str | None", int]


def _walk_dir(root: Path, folder: Path, prefix: str, chain: tuple[Path, ...],
              seen: set[tuple[int, int]], first: dict[tuple[int, int], str],
              skipped: dict[str, str], linked: bool = False) -> Iterator[Entry]:
    """The entries of the real folder ``folder`` (inside ``root``), named under ``prefix``.

    Links are never followed blindly: each is resolved, and one that dangles or leaves
    ``root`` is skipped. A link to a file becomes a link member (the file itself is read under
    its own name); a link to a folder lists that folder's files as link members, unless the
    folder is one being walked (``chain``) or above one, which would loop. Inside a linked
    folder (``linked``) every file is a link member. A second hard link to a file read already
    is a link member too, so every real file is read once."""
    try:
        entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
    except OSError as error:
        skipped[prefix.rstrip("/") or "."] = f"{UNREADABLE}: {error.strerror}"
        return
    for entry in entries:
        name = prefix + entry.name
        path = Path(entry.path)
        if not _is_utf8(entry.name):  # ids, listings and reports are UTF-8 text
            skipped[_shown_name(name)] = NOT_UTF8
            continue
        if entry.is_symlink():
            target = Path(os.path.realpath(path))
            if target != root and root not in target.parents:
                skipped[name] = LEAVES
                continue
            try:
                mode = target.stat().st_mode
            except OSError:
                skipped[name] = DANGLING
                continue
            if stat.S_ISDIR(mode):
                if any(target == inner or target in inner.parents for inner in chain):
                    skipped[name] = LOOP
                else:
                    yield from _walk_dir(root, target, name + "/", (*chain, target), seen,
                                         first, skipped, linked=True)
            elif stat.S_ISREG(mode):
                yield name, _no_read, target.relative_to(root).as_posix(), 0
            else:
                skipped[name] = SPECIAL
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError as error:
            skipped[name] = f"{UNREADABLE}: {error.strerror}"
            continue
        if stat.S_ISDIR(info.st_mode):
            yield from _walk_dir(root, path, name + "/", (*chain, path), seen, first, skipped,
                                 linked)
        elif not stat.S_ISREG(info.st_mode):
            skipped[name] = SPECIAL
        elif linked:
            yield name, _no_read, path.relative_to(root).as_posix(), 0
        elif (info.st_dev, info.st_ino) in seen:
            yield name, _no_read, first[(info.st_dev, info.st_ino)], 0
        else:
            seen.add((info.st_dev, info.st_ino))
            first[(info.st_dev, info.st_ino)] = name
            yield name, _file_reader(path), None, info.st_size


def _is_utf8(name: str) -> bool:
    """Whether a file name the system gave is UTF-8 (Python decodes other bytes to surrogate
    characters, which no UTF-8 text can hold)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _shown_name(name: str) -> str:
    """``caf\\xe9.wav``: a file name with its undecodable bytes written as escapes."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _file_reader(path: Path) -> Callable[[], bytes]:
    """Read a regular file without blocking, should it have been swapped for a pipe since."""
    def read() -> bytes:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise OSError(0, "not a regular file any more", str(path))
            return f.read()

    return read


def _reader(tar: tarfile.TarFile, member: tarfile.TarInfo) -> Callable[[], bytes]:
    def read() -> bytes:
        handle = tar.extractfile(member)
        return handle.read() if handle else b""

    return read


def scan_sources(sources: list[Source], is_metadata: Callable[[str], bool],
                 limit: int = MAX_METADATA_BYTES) -> Scan:
    """Pass 1 over every source. A corpus split into several archives repeats its top-level
    files (every LibriSpeech subset holds ``LibriSpeech/README.TXT``): a repeated member is listed
    once, unless it is metadata, which would be ambiguous (an error)."""
    scan = Scan()
    for source in sources:
        before = set(scan.members)
        part = Scan()
        source.scan(part, is_metadata, limit)
        clash = sorted(name for name in before.intersection(part.members) if is_metadata(name))
        if clash:
            raise AsrkitError(
                f"{source.path.name} repeats member {quote(clash[0])} of another source"
            )
        scan.members += [name for name in part.members if name not in before]
        scan.metadata.update(part.metadata)
        scan.links.update(part.links)
        scan.skipped.update(part.skipped)
    for link in scan.links:  # a linked transcript reads as its target (TED-LIUM 3's legacy/)
        if is_metadata(link) and scan.resolve(link) in scan.metadata:
            scan.metadata[link] = scan.metadata[scan.resolve(link)]
    return scan
