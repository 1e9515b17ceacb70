"""Output folders asrkit owns, and the one rule for replacing one (``--force``).

asrkit writes each output (an imported dataset, an export) into a folder it creates, and marks
the folder with :data:`MARKER` when it does. ``--force`` deletes such a folder to start over,
and nothing else: never the current folder or a folder above it, never a folder holding the run
or the corpus being read, never a folder without the marker, and never one holding files asrkit
does not write there (a user's notes, another model). Each refusal is one line, and nothing is
deleted. A typo in ``--output`` can then cost at worst a refusal, never a user's files.

A folder made by a version of asrkit before the marker (it holds ``dataset.json`` or
``asrkit.json``, and nothing asrkit does not write) counts as asrkit's.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from asrkit import __version__
from asrkit.core.errors import AsrkitError
from asrkit.core.storage import StoragePath

#: The file that says "asrkit made this folder", written when asrkit creates an output folder.
MARKER = ".asrkit-output"


class OutputError(AsrkitError):
    """An output folder that asrkit must not write into or replace."""


@dataclass(frozen=True)
class Layout:
    """What asrkit writes into one kind of output folder: top-level file patterns, and folders
    with the patterns of the files inside them (at any depth)."""

    kind: str
    files: tuple[str, ...]
    folders: dict[str, tuple[str, ...]]
    #: Names only asrkit's own folders of this kind hold (to adopt one made before the marker).
    evidence: tuple[str, ...] = ()

    def owns(self, relative: str, is_dir: bool) -> bool:
        top, _, rest = relative.partition("/")
        if top in self.folders:
            return is_dir or any(fnmatch.fnmatchcase(rest.rsplit("/", 1)[-1], pattern)
                                 for pattern in self.folders[top])
        return not is_dir and not rest and any(fnmatch.fnmatchcase(top, p) for p in self.files)


#: Everything ``asrkit import`` writes (``*.partial``: files being written; ``*.lock``: locks).
DATASET = Layout("dataset", (MARKER, "dataset.json", "alphabet.txt", "*.csv", "*.partial",
                             "*.lock"),
                 {"audio": ("*.wav", "*.partial"), "shards": ("*.tfrecord", "*.partial"),
                  ".import": ("*",)},
                 evidence=("dataset.json", ".import"))
#: Everything ``asrkit export`` writes: a SavedModel, a TFLite flatbuffer or an ONNX model, and
#: their metadata (``*.partial``: objects of an upload to a URL cut short).
EXPORT = Layout("export", (MARKER, "saved_model.pb", "fingerprint.pb", "model.tflite",
                           "model.onnx", "encoder.onnx", "decoder.onnx", "joiner.onnx",
                           "tokens.txt", "asrkit.json", "alphabet.txt", "*.partial"),
                {"variables": ("*",), "assets": ("*",)}, evidence=("asrkit.json",))


def holds_ours(url: StoragePath, layout: Layout) -> bool:
    """Whether the folder at ``url`` holds an output of asrkit's (False: nothing is there). One
    that holds objects asrkit does not write, or no marker, is an :class:`OutputError`: a
    bucket's folder is written into or replaced only when asrkit made it, as a local one. Only
    its top level is read (a dataset's ``audio/`` may hold a million objects)."""
    entries = {child.name: child.is_dir() for child in url.iterdir()} if url.is_dir() else {}
    if not entries:
        return False
    others = [name for name, is_dir in entries.items() if not layout.owns(name, is_dir)]
    # An upload killed in its first copy leaves only a ``.partial`` object, the marker's own.
    unmarked = MARKER not in entries and not all(name.endswith(".partial") for name in entries)
    if others or unmarked:
        shown = ", ".join((others or sorted(entries))[:3])
        raise OutputError(f"{url} holds objects asrkit did not write ({shown}); refusing to "
                          "write into it: choose another --output")
    return True


def mark(folder: Path, layout: Layout) -> None:
    """Write the marker into ``folder`` (which asrkit has just created)."""
    (folder / MARKER).write_text(json.dumps({"made_by": "asrkit", "kind": layout.kind,
                                             "asrkit_version": __version__}) + "\n")


def foreign(folder: Path, layout: Layout, limit: int = 3) -> list[str]:
    """Up to ``limit`` paths in ``folder`` that asrkit does not write there (links and special
    files count: asrkit writes neither)."""
    found: list[str] = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        base = Path(root).relative_to(folder)
        for name in sorted(dirs):
            path = Path(root) / name
            relative = (base / name).as_posix()
            if path.is_symlink() or not layout.owns(relative, is_dir=True):
                found.append(relative)
                dirs.remove(name)
        for name in sorted(files):
            path = Path(root) / name
            relative = (base / name).as_posix()
            if path.is_symlink() or not path.is_file() or not layout.owns(relative, False):
                found.append(relative)
        if len(found) >= limit:
            break
    return found[:limit]


def is_empty(folder: Path) -> bool:
    """Whether ``folder`` holds nothing yet, or nothing but locks (taken before the work)."""
    return all(fnmatch.fnmatchcase(p.name, "*.lock") and p.is_file() for p in folder.iterdir())


def check_not_current(target: Path, what: str) -> None:
    """Refuse ``target`` when it is the current folder or a folder above it."""
    real, here = target.resolve(), Path.cwd().resolve()
    if real == here or real in here.parents:
        where = "the current folder" if real == here else "a folder above the current folder"
        raise OutputError(f"{target} is {where}; refusing to {what} it: give a new folder "
                          "name, e.g. --output ./out")


def check_replaceable(target: Path, layout: Layout, holds: Iterable[tuple[Path, str]] = ()
                      ) -> None:
    """Raise an :class:`OutputError` unless ``--force`` may delete ``target``: a folder asrkit
    made, holding only what asrkit writes, and none of ``holds`` (path, what it is)."""
    if target.is_symlink():
        raise OutputError(f"{target} is a link; refusing to replace it: give the folder itself")
    check_not_current(target, "replace")
    real = target.resolve()
    for path, what in holds:
        inner = Path(path).resolve()
        if inner == real or real in inner.parents:
            raise OutputError(f"{target} holds {what} ({path}); refusing to replace it: choose "
                              "another --output")
    if not real.is_dir():
        raise OutputError(f"{target} is a file, not a folder asrkit made; refusing to replace "
                          "it: remove it yourself or choose another --output")
    legacy = any((real / name).exists() for name in layout.evidence)  # made before the marker
    if not (real / MARKER).is_file() and not legacy:
        raise OutputError(f"{target} was not made by asrkit (it has no {MARKER} file); refusing "
                          "to replace it: remove it yourself or choose another --output")
    others = foreign(real, layout)
    if others:
        raise OutputError(f"{target} holds files asrkit did not write ({', '.join(others)}); "
                          "refusing to replace it: move them away or choose another --output")


def remove(target: Path, layout: Layout, holds: Iterable[tuple[Path, str]] = ()) -> None:
    """Delete ``target`` after :func:`check_replaceable` allowed it."""
    check_replaceable(target, layout, holds)
    shutil.rmtree(target.resolve())


def claim(folder: Path, layout: Layout) -> None:
    """Make ``folder`` an output folder of asrkit's: create and mark it, or check that it is
    already one. A folder asrkit did not make is used only while it is empty (it is then
    marked); an unmarked one holding only what asrkit writes (made by a version before the
    marker) is adopted."""
    if folder.is_dir() and (folder / MARKER).is_file():
        return
    if folder.exists() and not folder.is_dir():
        raise OutputError(f"{folder} is a file, not a folder; choose another --output")
    folder.mkdir(parents=True, exist_ok=True)
    if not is_empty(folder):
        others = foreign(folder, layout)
        legacy = any((folder / name).exists() for name in layout.evidence)
        if others or not legacy:
            shown = ", ".join(others or sorted(p.name for p in folder.iterdir())[:3])
            raise OutputError(f"{folder} holds files asrkit did not write ({shown}); write "
                              f"the {layout.kind} into a new or empty folder")
    mark(folder, layout)
