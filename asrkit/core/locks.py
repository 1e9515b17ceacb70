"""One writer at a time for a run folder or a dataset folder.

Two trainings writing into one run folder interleave their checkpoints and metrics, and two
imports into one dataset folder overwrite each other's files. The writer (``asrkit train``,
``asrkit import``) holds a lock on the folder; a second one is refused in one line naming the
owner. Readers (``evaluate``, ``transcribe``, ``export``) take no lock: every file they read is
replaced atomically.

The lock is ``<folder>.lock``, beside the folder (its real path, links resolved, so that a link
to the folder finds the same lock) rather than in it, so that an import with ``--force`` can
remove the whole dataset folder while holding it. The kernel's ``flock`` on that
file makes taking it atomic and lets it go when its process dies, however it dies; the file
holds the owner's pid, host, start time and command, for the message. A lock file left by a
process of this host that died is stale: it is taken over with a warning. One left by another
host (a shared filesystem) is not judged: the message says to delete it if its owner is gone.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shlex
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from asrkit.core.errors import AsrkitError


def lock_path(folder: str | Path) -> Path:
    """``<folder>.lock`` beside the real folder: links resolved, so that ``runs/x`` and a link
    to it (or a path through a linked parent) share one lock."""
    folder = Path(folder).resolve()
    return folder.with_name(folder.name + ".lock")


def describe(owner: dict[str, Any]) -> str:
    """``pid 123 on host, since 2026-11-30 18:02:11 UTC: asrkit train ...``"""
    if not owner:
        return "a process that has just started"
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(owner.get("started", 0)))
    return (f"pid {owner.get('pid')} on {owner.get('host')}, since {started}: "
            f"{owner.get('command', '?')}")


def _read_owner(descriptor: int) -> dict[str, Any]:
    try:
        owner = json.loads(os.pread(descriptor, 65536, 0).decode("utf-8"))
    except (OSError, ValueError):
        return {}
    return owner if isinstance(owner, dict) else {}


def _owner_of_held_lock(descriptor: int, patience: float = 2.0) -> dict[str, Any]:
    """The owner of a lock another process holds. It writes its name just after it takes the
    lock, so a process that lost the race by a hair waits a moment to read it, to name it."""
    deadline = time.monotonic() + patience
    while not (owner := _read_owner(descriptor)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return owner


@contextlib.contextmanager
def folder_lock(folder: str | Path, purpose: str,
                hint: str = "wait for it to finish") -> Iterator[None]:
    """Hold ``folder``'s lock for a ``purpose`` (``training``, ``import``) while the block runs;
    an :class:`AsrkitError` naming the owner and ending with ``hint`` if another process holds
    it."""
    folder = Path(folder)
    path = lock_path(folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            owner = _owner_of_held_lock(descriptor)
            os.close(descriptor)
            if error.errno not in (errno.EAGAIN, errno.EACCES):
                raise AsrkitError(f"cannot lock {path} ({error.strerror}); the filesystem "
                                  "may not support locks") from None
            raise AsrkitError(
                f"{folder} is in use by another {purpose} ({describe(owner)}); {hint}"
            ) from None
        # The owner may have removed the file between our open and our flock: then we hold
        # a lock on a file nobody else sees, and must start again on the new one.
        try:
            if os.stat(path).st_ino == os.fstat(descriptor).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(descriptor)
    host = socket.gethostname()
    stale = _read_owner(descriptor)
    if stale and stale.get("host") != host:
        os.close(descriptor)
        raise AsrkitError(
            f"{folder} is locked by {describe(stale)}, and from {host} one cannot tell whether "
            f"that still runs; if it does not, delete {path}"
        )
    try:
        if stale:
            print(f"asrkit: warning: took over the stale lock of {folder} from pid "
                  f"{stale.get('pid')} (its {stale.get('purpose', purpose)} was interrupted and "
                  "no longer runs)", file=sys.stderr)
        owner = {"pid": os.getpid(), "host": host, "started": time.time(),
                 "command": shlex.join(["asrkit", *sys.argv[1:]]), "purpose": purpose}
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, (json.dumps(owner) + "\n").encode(), 0)
        os.fsync(descriptor)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(descriptor)


def lock_held(folder: str | Path) -> bool:
    """Whether a live process holds ``folder``'s lock. Read without taking it (taking it, even
    for a moment, could refuse an owner that starts then): the lock file exists only while its
    owner lives, unless the owner was killed with SIGKILL; then, on this host, its pid is gone.
    A lock of another host is taken to be alive."""
    path = lock_path(folder)
    try:
        owner = json.loads(path.read_text() or "{}")
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        return True  # being written
    if not isinstance(owner, dict) or owner.get("host") != socket.gethostname():
        return True
    try:
        os.kill(int(owner.get("pid", 0)), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError, TypeError):
        return True
    return True
