"""One writer at a time for a run folder, a dataset folder or a download.

Two trainings writing into one run folder interleave their checkpoints and metrics, two
imports into one dataset folder overwrite each other's files, and two downloads of one file
append to one ``.part``. The writer (``asrkit train``, ``asrkit import``, a download) holds a
lock on the folder or file; a second one is refused in one line naming the owner. Readers
(``evaluate``, ``transcribe``, ``export``) take no lock: every file they read is replaced
atomically.

The lock is ``<folder>.lock``, beside the folder (its real path, links resolved, so that a link
to the folder finds the same lock) rather than in it, so that an import with ``--force`` can
remove the whole dataset folder while holding it. The kernel's ``flock`` on that file makes
taking it atomic and lets it go when its process dies, however it dies; the file holds the
owner's pid, host, start time and command, for the message, and the process's start in clock
ticks since boot with the boot's id, so that a pid reused by another process (or after a
reboot) is not taken for the owner by :func:`lock_held`, which reads the file without taking
the lock. A lock file left by a process of this host that died is stale: it is taken over with
a warning. One left by another host (a shared filesystem) cannot be judged from here, so it is
respected: the message names that host and pid and says to run ``asrkit unlock FOLDER --force``
once sure it is gone (:func:`unlock`).

A folder at a URL (object storage) has no ``flock``, and TensorFlow's filesystem layer offers no
conditional write (an object generation precondition) to build one with. Its lock is the object
``<folder>.lock`` holding the owner record and a random token: taken when absent (or stale, by
the rules above), then read back after a moment, and refused if another writer's token is there
instead. That catches a second ``asrkit train`` or ``import`` started on a folder in use, which is
the mistake people make; two started within the same second can both pass. Hence the documented
rule for object storage: one writer per run or dataset folder, started by one scheduler. A lock
left by a killed writer is taken over when its owner was a process of this host that is gone;
another host's is respected until ``asrkit unlock URL --force``.
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
from asrkit.core.storage import Location, StoragePath, location

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


class LockError(AsrkitError):
    """A folder is locked by a process that runs, or may run (on another host)."""


class _Held(Exception):
    """Another process holds the ``flock`` of a lock file; ``owner`` is what the file says."""

    def __init__(self, owner: dict[str, Any]) -> None:
        super().__init__()
        self.owner = owner


def lock_path(folder: str | Location) -> Location:
    """``<folder>.lock`` beside the real folder: links resolved, so that ``runs/x`` and a link
    to it (or a path through a linked parent) share one lock."""
    folder = location(folder)
    return _url_lock_path(folder) if isinstance(folder, StoragePath) else _local_lock(folder)


def _url_lock_path(folder: StoragePath) -> StoragePath:
    return folder.with_name(folder.name + ".lock")


def _local_lock(folder: Path) -> Path:
    real = folder.resolve()
    return real.with_name(real.name + ".lock")


def describe(owner: dict[str, Any]) -> str:
    """``pid 123 on host, since 2026-11-30 18:02:11 UTC: asrkit train ...``"""
    if not owner:
        return "a process that has just started"
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(owner.get("started", 0)))
    return (f"pid {owner.get('pid')} on {owner.get('host')}, since {started}: "
            f"{owner.get('command', '?')}")


def boot_id() -> str | None:
    """This boot's id (Linux); a pid recorded in another boot names no process of this one."""
    try:
        return BOOT_ID.read_text().strip() or None
    except OSError:
        return None


def start_ticks(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (field 22 of
    ``/proc/PID/stat``, Linux); ``None`` where unknown. A pid the kernel reuses gets another
    start time, so pid and start time together name one process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:  # the command name (field 2) is in parentheses and may hold spaces and parentheses
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (IndexError, ValueError):
        return None


def is_foreign(owner: dict[str, Any]) -> bool:
    """Whether ``owner`` names a process of another host, which cannot be checked from here."""
    return bool(owner.get("host")) and owner.get("host") != socket.gethostname()


def owner_alive(owner: dict[str, Any]) -> bool | None:
    """Whether the process ``owner`` names still runs: ``None`` when that cannot be told from
    here (another host, no pid). A live pid whose start time or boot differs from the one
    recorded is another process that reuses it. Lock files written before the start time was
    recorded are judged by their pid alone."""
    pid = owner.get("pid")
    if is_foreign(owner) or not owner.get("host") or type(pid) is not int or pid <= 0:
        return None
    recorded_boot, current_boot = owner.get("boot_id"), boot_id()
    if recorded_boot and current_boot and recorded_boot != current_boot:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, as another user's
    recorded_start = owner.get("start_ticks")
    current_start = start_ticks(pid)
    return not (recorded_start is not None and current_start is not None
                and recorded_start != current_start)


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


def _take(path: Path, create: bool) -> int:
    """A descriptor of the lock file ``path`` with its ``flock`` taken; :class:`_Held` when
    another process holds it, ``FileNotFoundError`` when there is no such file and ``create``
    is false."""
    while True:
        descriptor = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            owner = _owner_of_held_lock(descriptor) if error.errno in (
                errno.EAGAIN, errno.EACCES) else None
            os.close(descriptor)
            if owner is None:
                raise LockError(f"cannot lock {path} ({error.strerror}); the filesystem may "
                                "not support locks") from None
            raise _Held(owner) from None
        # The owner may have removed the file between our open and our flock: then we hold
        # a lock on a file nobody else sees, and must start again on the new one.
        try:
            if os.stat(path).st_ino == os.fstat(descriptor).st_ino:
                return descriptor
        except FileNotFoundError:
            pass
        os.close(descriptor)


def _foreign_lock(folder: Location, owner: dict[str, Any]) -> str:
    """The cross-host rule: a lock of another host is respected, since whether its owner
    still runs cannot be told from here; the user, who can, removes it with ``unlock``."""
    return (f"{folder} is locked by {describe(owner)}, and from {socket.gethostname()} one "
            f"cannot tell whether that still runs; once sure it has ended, run "
            f"`asrkit unlock {folder} --force`")


def _owner_record(purpose: str) -> dict[str, Any]:
    pid = os.getpid()
    return {"pid": pid, "host": socket.gethostname(), "started": time.time(),
            "start_ticks": start_ticks(pid), "boot_id": boot_id(),
            "command": shlex.join(["asrkit", *sys.argv[1:]]), "purpose": purpose}


@contextlib.contextmanager
def folder_lock(folder: str | Location, purpose: str,
                hint: str = "wait for it to finish") -> Iterator[None]:
    """Hold ``folder``'s lock for a ``purpose`` (``training``, ``import``) while the block runs;
    a :class:`LockError` naming the owner and ending with ``hint`` if another process holds
    it, or naming the host if a process of another host left it."""
    folder = location(folder)
    if isinstance(folder, StoragePath):
        with _url_lock(folder, purpose, hint):
            yield
        return
    path = _local_lock(folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        descriptor = _take(path, create=True)
    except _Held as held:
        raise LockError(
            f"{folder} is in use by another {purpose} ({describe(held.owner)}); {hint}"
        ) from None
    stale = _read_owner(descriptor)
    if is_foreign(stale):
        os.close(descriptor)
        raise LockError(_foreign_lock(folder, stale))
    try:
        if stale:
            print(f"asrkit: warning: took over the stale lock of {folder} from pid "
                  f"{stale.get('pid')} (its {stale.get('purpose', purpose)} was interrupted and "
                  "no longer runs)", file=sys.stderr)
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, (json.dumps(_owner_record(purpose)) + "\n").encode(), 0)
        os.fsync(descriptor)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(descriptor)


def lock_held(folder: str | Location) -> bool:
    """Whether a live process holds ``folder``'s lock. Read without taking it (taking it, even
    for a moment, could refuse an owner that starts then): the lock file exists only while its
    owner lives, unless the owner was killed with SIGKILL; then, on this host, its pid is gone
    or names another process (another start time or boot). A lock of another host is taken to
    be alive."""
    path = lock_path(folder)
    try:
        owner = json.loads(path.read_text() or "{}")
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        return True  # being written
    if not isinstance(owner, dict):
        return True
    return owner_alive(owner) is not False


def unlock(folder: str | Location, force: bool = False) -> dict[str, Any] | None:
    """Remove ``folder``'s stale lock; return what it said of its owner (``None``: there was
    no lock). A lock whose owner runs on this host is never removed; one of another host only
    with ``force``, since from here one cannot tell whether its owner still runs."""
    folder = location(folder)
    if isinstance(folder, StoragePath):
        return _url_unlock(folder, force)
    path = _local_lock(folder)
    try:
        descriptor = _take(path, create=False)
    except FileNotFoundError:
        return None
    except _Held as held:
        raise LockError(_still_runs(folder, held.owner)) from None
    try:
        owner = _read_owner(descriptor)
        if owner_alive(owner):
            raise LockError(_still_runs(folder, owner))
        if is_foreign(owner) and not force:
            raise LockError(_foreign_lock(folder, owner))
        os.unlink(path)
        return owner
    finally:
        os.close(descriptor)


def _still_runs(folder: Location, owner: dict[str, Any]) -> str:
    return (f"{folder} is locked by {describe(owner)}, which still runs; wait for it to end "
            "(or stop it), then rerun")


# -- folders at a URL --------------------------------------------------------------------------

#: How long a writer waits before reading its lock object back: long enough for a second writer
#: that read "no lock" at the same moment to have written its own.
READ_BACK_SECONDS = 1.0


def _url_owner(path: StoragePath) -> dict[str, Any] | None:
    """What a lock object says (``{}`` when unreadable or half-written); ``None`` if absent."""
    try:
        owner = json.loads(path.read_text() or "{}")
    except FileNotFoundError:
        return None
    except ValueError:
        return {}
    return owner if isinstance(owner, dict) else {}


@contextlib.contextmanager
def _url_lock(folder: StoragePath, purpose: str, hint: str) -> Iterator[None]:
    path = _url_lock_path(folder)
    stale = _url_owner(path)
    if stale is not None:
        if is_foreign(stale):
            raise LockError(_foreign_lock(folder, stale))
        if owner_alive(stale) is not False:
            raise LockError(f"{folder} is in use by another {purpose} ({describe(stale)}); "
                            f"{hint}")
        print(f"asrkit: warning: took over the stale lock of {folder} from pid "
              f"{stale.get('pid')} (its {stale.get('purpose', purpose)} was interrupted and no "
              "longer runs)", file=sys.stderr)
    mine = {**_owner_record(purpose), "token": os.urandom(8).hex()}
    path.write_text(json.dumps(mine) + "\n")
    time.sleep(READ_BACK_SECONDS)
    found = _url_owner(path)
    if found is None or found.get("token") != mine["token"]:
        raise LockError(f"{folder} is in use by another {purpose} "
                        f"({describe(found or {})}), which took it at the same moment; {hint}")
    try:
        yield
    finally:
        if (_url_owner(path) or {}).get("token") == mine["token"]:
            path.unlink(missing_ok=True)


def _url_unlock(folder: StoragePath, force: bool) -> dict[str, Any] | None:
    path = _url_lock_path(folder)
    owner = _url_owner(path)
    if owner is None:
        return None
    if owner_alive(owner):
        raise LockError(_still_runs(folder, owner))
    if is_foreign(owner) and not force:
        raise LockError(_foreign_lock(folder, owner))
    path.unlink(missing_ok=True)
    return owner
