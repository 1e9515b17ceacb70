"""Writing files so that a crash or a power cut never leaves half of one.

Every module that saves state (dataset manifests, run configs, checkpoint pointers) writes
through these, so they sit in the core, below the data and training layers.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from concurrent.futures import Executor
from pathlib import Path
from typing import Any, BinaryIO


def write_durable(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` and wait until it is on disk (not only in the page cache)."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def replace_durably(partial: Path, path: Path) -> None:
    """Rename the finished file ``partial`` to ``path`` so that after a power cut ``path`` is
    either absent or whole: its contents on disk first, then the rename, then the folder's
    entry. (A rename alone can reach the disk before the data: an empty file under the final
    name, which a rerun would trust.)"""
    sync_to_disk(partial)
    os.replace(partial, path)
    sync_to_disk(path.parent)


def sync_to_disk(path: Path) -> None:
    """Wait until ``path`` is on disk, not only in the page cache: a file's contents (written
    by any writer, TensorFlow's record writer included), or a folder's entries (the names last
    created, renamed or removed in it)."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def sync_files(paths: Iterable[Path], pool: Executor | None = None) -> None:
    """Wait until every file of ``paths``, already renamed into place, is on disk under its
    name: its contents and its folder's entry. For a group of files written together (an
    import's converted recordings) this costs far less than :func:`replace_durably` on each:
    each folder is synced once for the group, and with a ``pool`` of threads the fsyncs run
    side by side, so that the filesystem commits them together."""
    files = list(dict.fromkeys(paths))
    targets = files + list(dict.fromkeys(path.parent for path in files))
    if pool is None:
        for target in targets:
            sync_to_disk(target)
    else:
        for _ in pool.map(sync_to_disk, targets):
            pass


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file, so a reader never sees half of it,
    and a crash or power cut leaves either the old file or the new one."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    replace_durably(partial, path)


def append_line(path: Path, line: str, sync: bool = False) -> None:
    """Append ``line`` to a file of lines (``metrics.jsonl``, an import's journal). A torn last
    line, left by a writer killed mid-write or a full disk, is cut off first: otherwise the new
    line would be glued to it and neither would read back. ``sync``: on disk before returning."""
    with open(path, "a+b") as f:
        size = f.seek(0, os.SEEK_END)
        if size:
            f.seek(size - 1)
            if f.read(1) != b"\n":
                f.truncate(_last_line_end(f, size))
        f.write(line.encode("utf-8") + b"\n")  # appended: "a" mode writes at the end
        f.flush()
        if sync:
            os.fsync(f.fileno())


def _last_line_end(f: BinaryIO, size: int, block: int = 1 << 16) -> int:
    """The offset just after the last newline of the open file ``f`` (0 if it has none)."""
    end = size
    while end > 0:
        start = max(0, end - block)
        f.seek(start)
        found = f.read(end - start).rfind(b"\n")
        if found >= 0:
            return start + found + 1
        end = start
    return 0


def write_json(path: Path, data: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
