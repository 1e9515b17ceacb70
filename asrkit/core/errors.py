"""Errors that reach the user as one line, without a traceback.

Anything raised as an :class:`AsrkitError` is printed by the CLI as ``asrkit: error: <message>``
and ends the command with exit status 1. The message says what went wrong and what to do.
The operating system's errors that a user can act on (a full disk, a read-only folder, a file
where a folder should be) and running out of memory are described here the same way, so that
every command reports them alike without catching them itself.
"""

from __future__ import annotations

import errno
import io
import os
from types import TracebackType


class AsrkitError(Exception):
    """A failure the user can act on; its message is the whole report."""


class PluginError(AsrkitError):
    """A plugin failed to load or registered something invalid."""


OUT_OF_MEMORY = ("out of memory; free memory or make the work smaller (e.g. a smaller "
                 "--batch-size or fewer --jobs) and rerun")

MIB = 1 << 20
DISK_QUOTA = getattr(errno, "EDQUOT", errno.ENOSPC)  # not on every system


def describe_os_error(error: OSError) -> str | None:
    """A one-line report of ``error`` when it is one of the operating system's errors a user
    can fix (disk full, read-only, not writable, a file in a folder's place, missing); else
    ``None``."""
    path = error.filename if error.filename is not None else _written_file(error.__traceback__)
    code = error.errno
    if code in (errno.ENOSPC, DISK_QUOTA):
        what = "disk full" if code == errno.ENOSPC else "disk quota exceeded"
        if path is None:
            return f"{what} ({error.strerror}); free space and rerun to continue"
        free = _free_mib(os.fsdecode(path))
        room = f"{free} MiB free on that filesystem" if free is not None else "free space unknown"
        return f"{what} writing {os.fsdecode(path)} ({room}); free space and rerun to continue"
    if path is None:
        return None
    where = os.fsdecode(path)
    if code == errno.EROFS:
        return f"{where} is on a read-only filesystem; write somewhere else"
    if code in (errno.EACCES, errno.EPERM):
        if os.path.exists(where) and not os.access(where, os.R_OK):
            return f"{where} is not readable (permission denied); fix its permissions"
        return (f"{where} is not writable (permission denied); fix its permissions or write "
                "somewhere else")
    if code == errno.ENOTDIR:
        blocker = next((p for p in _ancestors(where) if os.path.lexists(p)
                        and not os.path.isdir(p)), where)
        return (f"{blocker} is a file, but {where} needs it to be a folder; move it away or "
                "choose another path")
    if code == errno.EEXIST:
        if os.path.lexists(where) and not os.path.isdir(where):
            return (f"{where} is a file where a folder is needed; move it away or choose "
                    "another path")
        return f"{where} already exists"
    if code == errno.EISDIR:
        return f"{where} is a folder where a file is needed"
    if code == errno.ENOENT:
        return f"no such file or folder: {where}"
    return None


def _ancestors(path: str) -> list[str]:
    """``path``'s folders from the top down, then ``path`` itself."""
    parts = []
    current = os.path.abspath(path)
    while True:
        parts.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            return parts[::-1]
        current = parent


def _free_mib(path: str) -> int | None:
    """Free MiB on the filesystem holding ``path`` (or its nearest existing folder)."""
    import shutil

    for folder in reversed(_ancestors(path)):
        if os.path.exists(folder):
            try:
                return shutil.disk_usage(folder).free // MIB
            except OSError:
                return None
    return None


def _written_file(tb: TracebackType | None) -> str | None:
    """The name of the file being written when a write failed: an error from ``write()`` or
    ``flush()`` names no file, but the open file object is a local of a frame near the top."""
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        for value in frame.f_locals.values():
            if not isinstance(value, io.IOBase):
                continue
            try:  # still answers once closed, as it is when a ``with`` block has ended
                name, mode = value.name, value.mode  # type: ignore[attr-defined]
            except (AttributeError, ValueError):
                continue
            if isinstance(name, str) and any(c in str(mode) for c in "wax+"):
                return name
    return None
