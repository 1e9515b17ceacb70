"""Writing files so that a crash or a power cut never leaves half of one.

Every module that saves state (dataset manifests, run configs, checkpoint pointers) writes
through these, so they sit in the core, below the data and training layers. Each takes a local
``Path`` or a :class:`~asrkit.core.storage.StoragePath` (a URL): in object storage an object is
durable once written and replaced whole, so the fsyncs fall away and the rest holds as it is.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from concurrent.futures import Executor
from pathlib import Path
from typing import Any, BinaryIO

from asrkit.core.storage import Location, StoragePath, as_text


def write_durable(path: Location, text: str) -> None:
    """Write ``text`` to ``path`` and wait until it is on disk (not only in the page cache)."""
    if isinstance(path, StoragePath):
        path.write_text(text)
        return
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def replace_durably(partial: Location, path: Location) -> None:
    """Rename the finished file ``partial`` to ``path`` so that after a power cut ``path`` is
    either absent or whole: its contents on disk first, then the rename, then the folder's
    entry. (A rename alone can reach the disk before the data: an empty file under the final
    name, which a rerun would trust.)"""
    if isinstance(partial, StoragePath):
        assert isinstance(path, StoragePath), "an object replaces an object"
        partial.replace(path)
        return
    assert isinstance(path, Path), "a local file replaces a local file"
    sync_to_disk(partial)
    partial.replace(path)
    sync_to_disk(path.parent)


def sync_to_disk(path: Location) -> None:
    """Wait until ``path`` is on disk, not only in the page cache: a file's contents (written
    by any writer, TensorFlow's record writer included), or a folder's entries (the names last
    created, renamed or removed in it). Nothing to wait for at a URL: a closed object is
    stored."""
    if isinstance(path, StoragePath):
        return
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def sync_files(paths: Iterable[Location], pool: Executor | None = None) -> None:
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


def write_atomic(path: Location, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file, so a reader never sees half of it,
    and a crash or power cut leaves either the old file or the new one."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    replace_durably(partial, path)


def copy_file(source: Location, target: Location) -> None:
    """Copy one file between any two locations (local or URL) so that ``target`` appears only
    whole: through a ``.partial`` name renamed into place, except in an object store (``gs://``,
    ``s3://``), where an object appears only once its upload completes and a rename would cost
    a second copy."""
    import tensorflow as tf

    if isinstance(target, StoragePath) and target.in_object_store:
        tf.io.gfile.copy(as_text(source), str(target), overwrite=True)
        return
    partial = target.with_name(target.name + ".partial")
    target.parent.mkdir(parents=True, exist_ok=True)
    tf.io.gfile.copy(as_text(source), as_text(partial), overwrite=True)
    _before_rename(partial, target)
    replace_durably(partial, target)


def append_line(path: Location, line: str, sync: bool = False) -> None:
    """Append ``line`` to a file of lines (``metrics.jsonl``, an import's journal). A torn last
    line, left by a writer killed mid-write or a full disk, is cut off first: otherwise the new
    line would be glued to it and neither would read back. ``sync``: on disk before returning.
    An object cannot grow, so at a URL the file is rewritten with the line added, atomically."""
    if isinstance(path, StoragePath):
        text = path.read_text() if path.exists() else ""
        if text and not text.endswith("\n"):
            text = text[:text.rfind("\n") + 1]
        write_atomic(path, text + line + "\n")
        return
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


def write_json(path: Location, data: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def upload_folder(source: Path, target: StoragePath, last: str, exclude: tuple[str, ...] = (),
                  progress: bool = False) -> int:
    """Copy the local folder ``source`` to the URL ``target`` (every file but those under the
    top-level names ``exclude``), each one whole (:func:`copy_file`), the file ``last`` after
    all others: its presence at ``target`` says the copy is whole, so a killed upload is
    never taken for a finished one. Objects already there whole (the same size) are not copied
    again: a rerun continues. Returns how many files were copied."""
    from tqdm import tqdm

    names = sorted(
        str(path.relative_to(source)) for path in source.rglob("*")
        if path.is_file() and path.relative_to(source).parts[0] not in exclude
        and not path.name.endswith(".partial")
    )
    if last not in names:
        raise FileNotFoundError(2, "nothing finished to upload", str(source / last))
    names = [name for name in names if name != last] + [last]
    sizes = {name: (source / name).stat().st_size for name in names}
    fresh = not target.is_dir()  # nothing there to skip: no request per object to ask
    copied = 0
    with tqdm(total=sum(sizes.values()), unit="B", unit_scale=True, desc=f"upload {target}",
              disable=not progress) as bar:
        for name in names:
            there = target / name
            if fresh or name == last or not there.exists() or there.size() != sizes[name]:
                copy_file(source / name, there)
                copied += 1
            bar.update(sizes[name])
    return copied


def _before_rename(partial: Location, target: Location) -> None:
    """Called by :func:`copy_file` between writing ``partial`` and renaming it to ``target``.
    Does nothing: the tests that kill an upload midway replace it in their processes
    (``tests/faults/sitecustomize.py``)."""


def download_file(source: StoragePath) -> Path:
    """A local copy of the file at the URL ``source`` (for readers of local files only: a
    tokenizer's model), in a temporary folder removed when the process exits."""
    local = _scratch_folder() / source.name
    copy_file(source, local)
    return local


def download_folder(source: StoragePath) -> Path:
    """A local copy of the folder at the URL ``source`` (an export, for runtimes that read
    local files only), in a temporary folder removed when the process exits."""
    local = _scratch_folder()
    for name in source.files():
        copy_file(source / name, local / name)
    return local


def _scratch_folder() -> Path:
    import atexit
    import shutil
    import tempfile

    local = Path(tempfile.mkdtemp(prefix="asrkit-download-"))
    atexit.register(shutil.rmtree, local, ignore_errors=True)
    return local
