"""Snapshots of checkpoints for ``asrkit evaluate RUN --watch`` (:mod:`asrkit.evaluation.watch`).

A snapshot is a checkpoint folder's files hard-linked (copied where links are impossible) into
``RUN/watch/pending/<folder>`` with the checkpoint's loop state beside them: the links keep the
data after the trainer deletes the checkpoint, until the watcher has scored it. Both sides make
them: the watcher from the pointers it polls, and the trainer itself (:func:`hand_over`) for
each checkpoint it saves while a watcher runs. This module belongs to the training layer, which
the watcher imports and not the other way round.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

from asrkit.core.files import write_atomic
from asrkit.core.locks import lock_held
from asrkit.core.storage import Location

WATCH_FOLDER = "watch"
PENDING = "pending"
#: Prefix of a snapshot being linked (a kill can leave one; the next watcher removes it).
STAGING = "linking-"
#: Marks a complete snapshot; written after every file is linked.
SNAPSHOT_STATE = "state.json"


def watched(run_folder: Path) -> bool:
    """Whether a watcher holds the run's ``watch`` lock (``RUN/watch.lock``)."""
    return lock_held(run_folder / WATCH_FOLDER)


def link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError as error:
        if isinstance(error, FileNotFoundError):
            raise
        shutil.copy2(source, target)


def link_snapshot(checkpoints: Path, pending: Path, name: str, state: dict[str, Any]) -> Path:
    """Hard-link the files of the checkpoint folder ``checkpoints/name`` into ``pending/name``
    with its ``state``, under a staging name renamed once complete; raises FileNotFoundError
    when the folder is gone or incomplete. A snapshot of ``name`` that is already there (the
    trainer and the watcher may both link one checkpoint) is kept and this one dropped."""
    staging = pending / f"{STAGING}{name}-{secrets.token_hex(4)}"
    staging.mkdir(parents=True)
    try:
        files = [p for p in (checkpoints / name).iterdir() if p.is_file()]
        if not any(p.name == "ckpt.index" for p in files):
            raise FileNotFoundError(checkpoints / name / "ckpt.index")
        for path in files:
            link_or_copy(path, staging / path.name)
        write_atomic(staging / SNAPSHOT_STATE, json.dumps(state) + "\n")
        target = pending / name
        try:
            os.rename(staging, target)
        except OSError:
            if not target.is_dir():
                raise
        return target
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def hand_over(run_folder: Location, name: str, state: dict[str, Any]) -> None:
    """Called by the trainer after each save, before it deletes the checkpoints no pointer
    names: when a watcher watches the run, link the new checkpoint into its ``pending`` folder
    at once. The watcher's own reading of the pointers can miss a checkpoint that the next save
    replaces within its poll (a small model saving every few steps, a loaded machine); this
    way every checkpoint saved while a watcher runs reaches it. A failure here never stops a
    training: the watcher still reads the pointers. A run at a URL has no watcher (``evaluate
    --watch`` links snapshots, which object storage cannot)."""
    if not isinstance(run_folder, Path) or not watched(run_folder):
        return
    with contextlib.suppress(OSError):
        link_snapshot(run_folder / "checkpoints", run_folder / WATCH_FOLDER / PENDING, name,
                      state)
