"""``asrkit unlock PATH [--force]``: remove a stale lock (:func:`asrkit.core.locks.unlock`).

A lock a dead process of this host left is taken over by the next writer anyway; this command
is for the lock of another host (a shared filesystem), which nothing takes over, since from
here one cannot tell whether its owner still runs: the user who can tell removes it.
"""

from __future__ import annotations

from pathlib import Path

import click

from asrkit.commands.options import LocationType
from asrkit.core.locks import describe, lock_path, unlock

LOCK_SUFFIX = ".lock"


@click.command("unlock")
@click.argument("path", type=LocationType())
@click.option("--force", is_flag=True,
              help="Also remove a lock left by another host (its owner cannot be checked from "
              "here): only once sure that process has ended.")
def unlock_command(path: Path, force: bool) -> None:
    """Remove the stale lock of a run folder, a dataset folder or a download.

    PATH is the locked folder or file (`runs/x` for `runs/x.lock`), or the lock file itself.
    A lock whose process still runs on this host is never removed.
    """
    folder = _locked_folder(path)
    owner = unlock(folder, force)
    if owner is None:
        click.echo(f"{folder} is not locked")
    elif owner:
        click.echo(f"removed the lock of {folder} left by {describe(owner)}")
    else:
        click.echo(f"removed the empty lock file of {folder}")


def _locked_folder(path: Path) -> Path:
    """What ``path`` locks: itself, unless it is a lock file (``x.lock``) with no lock of its
    own, which names ``x``."""
    if (path.name.endswith(LOCK_SUFFIX) and path.is_file()
            and not lock_path(path).exists()):
        return path.with_name(path.name[:-len(LOCK_SUFFIX)])
    return path
