"""Writing files so that a crash or a power cut never leaves half of one.

Every module that saves state (dataset manifests, run configs, checkpoint pointers) writes
through these, so they sit in the core, below the data and training layers.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_durable(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` and wait until it is on disk (not only in the page cache)."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def sync_file(path: Path) -> None:
    """Wait until the contents of ``path`` (written by another writer, such as TensorFlow's
    record writer) are on disk."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def replace_durably(partial: Path, path: Path) -> None:
    """Rename the finished file ``partial`` to ``path`` so that after a power cut ``path`` is
    either absent or whole: its contents on disk first, then the rename, then the folder's
    entry. (A rename alone can reach the disk before the data: an empty file under the final
    name, which a rerun would trust.)"""
    sync_file(partial)
    os.replace(partial, path)
    sync_folder(path.parent)


def sync_folder(folder: Path) -> None:
    """Make the names last created, renamed or removed in ``folder`` durable."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file, so a reader never sees half of it,
    and a crash or power cut leaves either the old file or the new one."""
    partial = path.with_name(path.name + ".partial")
    write_durable(partial, text)
    os.replace(partial, path)
    sync_folder(path.parent)


def write_json(path: Path, data: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
