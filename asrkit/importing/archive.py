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

Memory and time are bounded whatever the source holds, since a few kilobytes of archive can
describe gigabytes (a ``tar --sparse`` member, a gzip bomb): every member's size is known before
it is read (an archive's header says it, a folder's ``stat``), so a recording larger than
:data:`MAX_MEMBER_BYTES` is skipped and named unread, and the transcripts and listings of one
import stop at :data:`MAX_METADATA_TOTAL_BYTES`. A folder nested more than
:data:`MAX_FOLDER_DEPTH` deep is skipped and named, and folders are walked without recursion. A
``gzip`` that stops producing output for :data:`GZIP_STALL_SECONDS` ends the import with one line
instead of hanging it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import shutil
import signal
import stat
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, cast

from tqdm import tqdm

from asrkit.core.errors import AsrkitError
from asrkit.core.process import WatchedProcess, describe
from asrkit.core.text import quote
from asrkit.dataset.folders import MAX_MEMBER_BYTES

#: Largest transcript or listing member read by default (an importer may allow more): corpora's
#: transcripts are kilobytes, and the bound keeps a hostile archive from filling the memory.
MAX_METADATA_BYTES = 16 << 20
#: Largest total of the transcripts and listings one import reads (or an importer's own bound
#: for one member, when larger): LibriSpeech's 960 hours hold 60 MB of transcripts, a large
#: Common Voice language's listings a few hundred MB.
MAX_METADATA_TOTAL_BYTES = 2 << 30
#: Deepest folder read. Corpora nest a few folders deep; a file's id is its path, which at a
#: thousand folders is far too long to name the file it is converted to.
MAX_FOLDER_DEPTH = 100
#: Longest ``gzip`` may go without producing a byte while the archive is read, in seconds. Not
#: a bound on the whole decompression, which lasts as long as the import consumes the archive
#: (hours for TED-LIUM); gzip produces megabytes a second, so two silent minutes mean it is hung
#: (or the disk holding the archive is).
GZIP_STALL_SECONDS = 120.0
#: Why a folder's entry was not read (the keys of :attr:`Scan.skipped`'s values).
DANGLING = "dangling link"
LEAVES = "link leaves the folder"
LOOP = "link loop"
SPECIAL = "special file (pipe, socket or device)"
UNREADABLE = "unreadable file"
NOT_UTF8 = "name not in UTF-8 (rename the file to import it)"
TOO_DEEP = f"more than {MAX_FOLDER_DEPTH} folders deep (move it up to import it)"


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
    #: Bytes of metadata read so far, over all sources (bounded by ``scan_sources``' total).
    metadata_bytes: int = 0

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

    def __init__(self, path: str | Path, progress: bool = True,
                 member_limit: int = MAX_MEMBER_BYTES) -> None:
        self.path = Path(path)
        self.progress = progress
        #: Largest member other than metadata that is read (see :data:`MAX_MEMBER_BYTES`).
        self.member_limit = member_limit
        if not self.path.exists():
            raise AsrkitError(f"{self.path} does not exist")
        self.kind = "dir" if self.path.is_dir() else (
            "tar" if tarfile.is_tarfile(self.path) else "file"
        )

    def __repr__(self) -> str:
        return f"Source({str(self.path)!r}, {self.kind})"

    # -- pass 1 ------------------------------------------------------------------------------

    def scan(self, into: Scan, is_metadata: Callable[[str], bool],
             limit: int = MAX_METADATA_BYTES, total: int = MAX_METADATA_TOTAL_BYTES) -> None:
        """Add this source's members to ``into`` and read those ``is_metadata`` selects (each
        at most ``limit`` bytes, all of them together at most ``total``: a member past either
        is refused by name, before it is read). Any other member larger than
        :attr:`member_limit` is left out and named in ``into.skipped``, unread."""
        for name, read, link, size in self._walk(into.skipped):
            if link is not None:
                into.links[name] = link
                into.members.append(name)
                continue
            if is_metadata(name):
                self._check_metadata(name, size, limit, total, into.metadata_bytes)
                try:
                    into.metadata[name] = read(limit)
                except OSError as error:
                    into.skipped[name] = f"{UNREADABLE}: {error.strerror}"
                    continue
                into.metadata_bytes += len(into.metadata[name])
            elif size > self.member_limit:
                into.skipped[name] = too_large(self.member_limit)
                continue
            into.members.append(name)

    def _check_metadata(self, name: str, size: int, limit: int, total: int, read: int) -> None:
        """Refuse a transcript or listing larger than ``limit``, or one that would take the
        metadata read so far (``read`` bytes) past ``total``: one line, before reading it."""
        if size > limit:
            raise AsrkitError(
                f"{self.path.name}: {quote(name)} is {size:,} bytes, more than any "
                f"transcript or listing ({limit:,} at most); refusing to read it"
            )
        if read + size > total:
            raise AsrkitError(
                f"{self.path.name}: {quote(name)} would take the transcripts and listings read "
                f"to {read + size:,} bytes, more than one import reads ({total:,} at most); "
                "refusing to read it (import the corpus in parts)"
            )

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
                    data = _file_reader(member)(self.member_limit)
                except OSError:
                    continue  # removed, replaced or grown since the scan: reported as unreadable
                yield name, data
            return
        for name, read, link, size in self._walk({}):
            # A size over the bound: a second member of that name (the scan listed the first).
            if link is None and name in wanted and size <= self.member_limit:
                yield name, read(self.member_limit)

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
            yield self.path.name, _file_reader(self.path), None, self.path.stat().st_size
        elif self.kind == "dir":
            yield from _walk_dir(self.path.resolve(), skipped)
        else:
            yield from self._walk_tar(skipped)

    def _walk_tar(self, skipped: dict[str, str]) -> Iterator[Entry]:
        size = self.path.stat().st_size
        with open(self.path, "rb") as raw, _decompressed(raw) as stream, tqdm(
            total=size, unit="B", unit_scale=True, unit_divisor=1024, leave=False,
            desc=f"read {self.path.name}", disable=not self.progress,
        ) as bar, tarfile.open(fileobj=stream, mode="r|*") as tar:
            for member in tar:
                # The file offset is shared with a gzip child process: it is what gzip has read.
                bar.update(os.lseek(raw.fileno(), 0, os.SEEK_CUR) - bar.n)
                name = safe_name(member.name, self.path.name)
                if name.count("/") > MAX_FOLDER_DEPTH and not member.isdir():
                    skipped[name] = TOO_DEEP
                elif member.issym() or member.islnk():
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


def too_large(limit: int) -> str:
    """Why a member larger than ``limit`` bytes was not read (a key of the import's report)."""
    return (f"larger than {limit / (1 << 20):,.0f} MiB, the most read of one recording (raise "
            "--max-file-size, or cut it into shorter files)")


@contextlib.contextmanager
def _decompressed(raw: BinaryIO) -> Iterator[BinaryIO]:
    """``raw`` itself, or for a gzip file the output of a ``gzip -dc`` process reading it: the
    decompression then runs on another core, in parallel with the tar parsing and the hand-off
    to converters (both archive passes are about twice as fast). A gzip that hangs ends the
    import with one line (:class:`_Gunzip`)."""
    gzip = shutil.which("gzip")
    if os.pread(raw.fileno(), 2, 0) != b"\x1f\x8b" or gzip is None:
        yield raw
        return
    process = _Gunzip(gzip, raw)
    try:
        yield cast(BinaryIO, process)  # full reads, all that tar parsing of a stream uses
    finally:
        process.stop()  # the tar stream ends before gzip's output does
        if process.returncode not in (0, -signal.SIGKILL) and process.message():
            raise AsrkitError(f"{raw.name} is not a valid gzip file: {process.message()}")


class _Gunzip(WatchedProcess):
    """``gzip -dc`` reading an archive, where a read that waits more than
    :data:`GZIP_STALL_SECONDS` for a byte is an error naming the archive, not a hang."""

    def __init__(self, gzip: str, raw: BinaryIO) -> None:
        super().__init__([gzip, "-dc"], raw, stall=GZIP_STALL_SECONDS)
        self.archive = raw.name

    def timed_out(self, kind: str, seconds: float) -> AsrkitError:
        return AsrkitError(
            f"{self.archive}: gzip {describe(kind, seconds)}, so it is hung (or the disk holding "
            "the archive is); check the disk and rerun: the import continues where it stopped"
        )


def _no_read(most: int) -> bytes:
    return b""


#: A walked member: its name, how to read it (at most how many bytes: more is an ``OSError``),
#: the member it links to (or ``None``), its size.
Entry = tuple[str, Callable[[int], bytes], "str | None", int]


@dataclass
class _Folder:
    """A folder being walked: its entries not yet seen, the prefix naming them, the real
    folders from the root down to it (``chain``), and whether a link led to it."""

    entries: Iterator[os.DirEntry[str]]
    prefix: str
    chain: tuple[Path, ...]
    linked: bool


def _walk_dir(root: Path, skipped: dict[str, str]) -> Iterator[Entry]:
    """The entries of the real folder ``root``, depth first in name order.

    Links are never followed blindly: each is resolved, and one that dangles or leaves
    ``root`` is skipped. A link to a file becomes a link member (the file itself is read under
    its own name); a link to a folder lists that folder's files as link members, unless the
    folder is one being walked or above one, which would loop. Inside a linked folder every file
    is a link member. A second hard link to a file read already is a link member too, so every
    real file is read once. The open folders are a stack, not a recursion (a corpus a thousand
    folders deep would be a ``RecursionError``), and one deeper than :data:`MAX_FOLDER_DEPTH`
    is skipped and named."""
    first: dict[tuple[int, int], str] = {}  # (device, inode) of each file read -> its name
    stack = [folder for folder in [_open(root, "", (root,), False, skipped)] if folder]
    while stack:
        entry = next(stack[-1].entries, None)
        if entry is None:
            stack.pop()
            continue
        found = _visit(entry, stack[-1], root, first, skipped)
        if isinstance(found, _Folder):
            stack.append(found)
        elif found is not None:
            yield found


def _open(folder: Path, prefix: str, chain: tuple[Path, ...], linked: bool,
          skipped: dict[str, str]) -> _Folder | None:
    """The real folder ``folder``, named ``prefix``, ready to walk; ``None`` when it is too deep
    or cannot be listed (both named in ``skipped``)."""
    shown = prefix.rstrip("/") or "."
    if prefix.count("/") > MAX_FOLDER_DEPTH:
        skipped[shown] = TOO_DEEP
        return None
    try:
        entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
    except OSError as error:
        skipped[shown] = f"{UNREADABLE}: {error.strerror}"
        return None
    return _Folder(iter(entries), prefix, chain, linked)


def _visit(entry: os.DirEntry[str], folder: _Folder, root: Path,
           first: dict[tuple[int, int], str], skipped: dict[str, str]) -> Entry | _Folder | None:
    """What one entry of ``folder`` is: a member, a folder to walk, or nothing (skipped)."""
    name = folder.prefix + entry.name
    path = Path(entry.path)
    if not _is_utf8(entry.name):  # ids, listings and reports are UTF-8 text
        skipped[_shown_name(name)] = NOT_UTF8
        return None
    if entry.is_symlink():
        return _visit_link(name, path, folder, root, skipped)
    try:
        info = entry.stat(follow_symlinks=False)
    except OSError as error:
        skipped[name] = f"{UNREADABLE}: {error.strerror}"
        return None
    if stat.S_ISDIR(info.st_mode):
        return _open(path, name + "/", (*folder.chain, path), folder.linked, skipped)
    if not stat.S_ISREG(info.st_mode):
        skipped[name] = SPECIAL
        return None
    if folder.linked:
        return name, _no_read, path.relative_to(root).as_posix(), 0
    key = (info.st_dev, info.st_ino)
    if key in first:
        return name, _no_read, first[key], 0
    first[key] = name
    return name, _file_reader(path), None, info.st_size


def _visit_link(name: str, path: Path, folder: _Folder, root: Path,
                skipped: dict[str, str]) -> Entry | _Folder | None:
    """A symbolic link named ``name``: a link member, a linked folder to walk, or skipped."""
    target = Path(os.path.realpath(path))
    if target != root and root not in target.parents:
        skipped[name] = LEAVES
        return None
    try:
        mode = target.stat().st_mode
    except OSError:
        skipped[name] = DANGLING
        return None
    if stat.S_ISDIR(mode):
        if any(target == inner or target in inner.parents for inner in folder.chain):
            skipped[name] = LOOP
            return None
        return _open(target, name + "/", (*folder.chain, target), True, skipped)
    if stat.S_ISREG(mode):
        return name, _no_read, target.relative_to(root).as_posix(), 0
    skipped[name] = SPECIAL
    return None


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


def _file_reader(path: Path) -> Callable[[int], bytes]:
    """Read a regular file of at most ``most`` bytes, without blocking should it have been
    swapped for a pipe since it was listed; a file grown past ``most`` since is an
    ``OSError`` (``EFBIG``), read no further."""
    def read(most: int) -> bytes:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise OSError(0, "not a regular file any more", str(path))
            data = f.read(most + 1)
        if len(data) > most:
            raise OSError(errno.EFBIG, f"grown past {most:,} bytes", str(path))
        return data

    return read


def _reader(tar: tarfile.TarFile, member: tarfile.TarInfo) -> Callable[[int], bytes]:
    """Read a member whose header says it holds at most ``most`` bytes (checked before)."""
    def read(most: int) -> bytes:
        if member.size > most:
            raise OSError(errno.EFBIG, f"larger than {most:,} bytes", member.name)
        handle = tar.extractfile(member)
        return handle.read() if handle else b""

    return read


def scan_sources(sources: list[Source], is_metadata: Callable[[str], bool],
                 limit: int = MAX_METADATA_BYTES, total: int | None = None) -> Scan:
    """Pass 1 over every source. A corpus split into several archives repeats its top-level
    files (every LibriSpeech subset holds ``LibriSpeech/README.TXT``): a repeated member is listed
    once, unless it is metadata, which would be ambiguous (an error). The metadata of all the
    sources together is at most ``total`` bytes (by default :data:`MAX_METADATA_TOTAL_BYTES`,
    or ``limit`` when an importer allows one member more)."""
    total = max(MAX_METADATA_TOTAL_BYTES, limit) if total is None else total
    scan = Scan()
    for source in sources:
        before = set(scan.members)
        part = Scan(metadata_bytes=scan.metadata_bytes)
        source.scan(part, is_metadata, limit, total)
        clash = sorted(name for name in before.intersection(part.members) if is_metadata(name))
        if clash:
            raise AsrkitError(
                f"{source.path.name} repeats member {quote(clash[0])} of another source"
            )
        scan.members += [name for name in part.members if name not in before]
        scan.metadata.update(part.metadata)
        scan.links.update(part.links)
        scan.skipped.update(part.skipped)
        scan.metadata_bytes = part.metadata_bytes
    for link in scan.links:  # a linked transcript reads as its target (TED-LIUM 3's legacy/)
        if is_metadata(link) and scan.resolve(link) in scan.metadata:
            scan.metadata[link] = scan.metadata[scan.resolve(link)]
    return scan
