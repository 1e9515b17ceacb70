"""Checkpoints that survive a kill at any moment.

A save never touches what a pointer names. It writes the new checkpoint into a fresh folder
(``ckpt-<step>-<kind>-<token>``, a new name even when the same step is saved again), waits until
it is on disk, then replaces the pointer file (``latest.json`` or ``best.json``, which also holds
the loop state needed to resume exactly) atomically: a temporary file, fsync, ``os.replace``.
Only then are the folders no pointer names removed. A kill at any point leaves each pointer
naming a complete checkpoint, the old one or the new one.

Loading checks what a pointer says: a pointer that is damaged or names a missing or incomplete
folder is passed over, with a warning, for the other pointer; with neither usable, it is a
one-line error.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from asrkit.core.errors import AsrkitError
from asrkit.core.files import (
    append_line,
    replace_durably,
    sync_to_disk,
    write_atomic,
    write_durable,
)
from asrkit.core.storage import Location, StoragePath, rmtree

if TYPE_CHECKING:
    import keras

KINDS = ("latest", "best")
#: A checkpoint ``asrkit average`` writes (:mod:`asrkit.evaluation.average`); never a fallback of
#: the others.
AVERAGED = "averaged"
#: The newest ``latest`` checkpoints kept besides the pointers' (``keep_checkpoints``), oldest
#: first: ``[{"folder": ..., "step": ...}, ...]``.
HISTORY = "history.json"

#: The stages of a save, in order: the new folder made; the checkpoint written to disk; the new
#: pointer written beside the old; the pointer replaced; unnamed folders removed.
SAVE_STAGES = ("begin", "written", "pointer", "switched", "cleaned")


class DamagedCheckpoint(Exception):
    """A pointer that cannot be used; its message says which file and why."""


def _reached(stage: str, save_number: int) -> None:
    """The ``save_number``-th save reached ``stage`` of :data:`SAVE_STAGES`. Does nothing: the
    tests that kill a training at each stage replace it in their processes
    (``tests/faults/sitecustomize.py``), so no switch in the shipped code can end a run."""


def _sync_tree(folder: Location) -> None:
    """Flush every file under ``folder`` to disk, then the names in it (at a URL, each object
    is stored when its writer closes it)."""
    if isinstance(folder, StoragePath):
        return
    for path in folder.iterdir():
        if path.is_dir():
            _sync_tree(path)
            continue
        with open(path, "rb") as f:
            os.fsync(f.fileno())
    sync_to_disk(folder)


class Checkpoints:
    def __init__(self, folder: Location, keep: int = 0,
                 on_saved: Callable[[str, dict[str, Any]], None] | None = None,
                 **trackables: Any) -> None:
        import tensorflow as tf

        for key, owner in (("model", "model"), ("head", "objective")):
            missing = (untracked_weights(trackables[key])
                       if trackables.get(key) is not None else [])
            if missing:
                raise AsrkitError(
                    f"the {key}'s weights {', '.join(missing[:3])} would not be saved in "
                    f"checkpoints (its layers are kept in a plain Python list); the {owner} "
                    "plugin must assign each layer to an attribute"
                )
        # The folder is made by the first save: reading a run's checkpoints (evaluate, a
        # best-by lookup that finds none) must not leave an empty folder behind.
        self.folder = folder
        self.checkpoint = tf.train.Checkpoint(**trackables)
        self.saves = 0
        #: How many of the newest ``latest`` saves to keep in :data:`HISTORY`.
        self.keep = keep
        #: Called with each new folder's name and state once its pointer names it, before the
        #: folders no pointer names are removed (the trainer hands checkpoints to a watcher).
        self.on_saved = on_saved

    def _pointer(self, kind: str) -> Location:
        return self.folder / f"{kind}.json"

    def save(self, kind: str, step: int, state: dict[str, Any]) -> None:
        self.saves += 1
        name = f"ckpt-{step:09d}-{kind}-{secrets.token_hex(4)}"
        target = self.folder / name
        target.mkdir(parents=True)
        _reached("begin", self.saves)
        self.checkpoint.write(str(target / "ckpt"))
        _sync_tree(target)
        sync_to_disk(self.folder)
        _reached("written", self.saves)
        pointer = self._pointer(kind)
        partial = pointer.with_name(pointer.name + ".partial")
        write_durable(partial, json.dumps({"folder": name, "state": state}, indent=2) + "\n")
        _reached("pointer", self.saves)
        replace_durably(partial, pointer)  # at a URL: the pointer object replaced whole
        _reached("switched", self.saves)
        if kind == "latest" and self.keep:
            self._remember(name, step)
        if self.on_saved is not None:
            self.on_saved(name, state)
        self._clean()
        _reached("cleaned", self.saves)

    def _remember(self, name: str, step: int) -> None:
        """Add a ``latest`` save to :data:`HISTORY` (replacing one of the same step), keeping
        the newest :attr:`keep`; written like a pointer."""
        kept = [entry for entry in self.history() if entry["step"] != step]
        kept = [*kept, {"folder": name, "step": step}][-self.keep:]
        write_atomic(self.folder / HISTORY, json.dumps(kept, indent=2) + "\n")

    def history(self) -> list[dict[str, Any]]:
        """The kept ``latest`` checkpoints, oldest first, those whose folders are complete."""
        try:
            entries = json.loads((self.folder / HISTORY).read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):  # RecursionError: absurdly nested JSON
            return []
        return [e for e in entries if isinstance(e, dict)
                and (self.folder / str(e.get("folder")) / "ckpt.index").exists()]

    def _read(self, kind: str) -> dict[str, Any] | None:
        """The pointer's contents, None if there is no pointer; raises DamagedCheckpoint."""
        pointer = self._pointer(kind)
        try:
            saved = json.loads(pointer.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise DamagedCheckpoint(f"{pointer} is damaged ({error})") from None
        except RecursionError:  # absurdly nested JSON, which no checkpoint pointer is
            raise DamagedCheckpoint(f"{pointer} is damaged (nested too deeply)") from None
        name = saved.get("folder") if isinstance(saved, dict) else None
        if (not isinstance(name, str) or not name.startswith("ckpt-") or "/" in name
                or not isinstance(saved.get("state"), dict)):
            raise DamagedCheckpoint(f"{pointer} is damaged (not a checkpoint pointer)")
        if not (self.folder / name / "ckpt.index").exists():
            raise DamagedCheckpoint(f"{pointer} names {name}, which is missing or incomplete")
        return saved

    def state(self, kind: str) -> dict[str, Any] | None:
        """The loop state saved with the ``kind`` checkpoint; None if it has none (or a damaged
        one)."""
        try:
            saved = self._read(kind)
        except DamagedCheckpoint:
            return None
        return saved["state"] if saved else None

    def restore(self, kind: str, complete: bool = False) -> dict[str, Any] | None:
        """Load the ``kind`` checkpoint into the trackables and return its state; the other
        kind's when ``kind`` has none or a damaged one (with a warning for the latter); None
        when there is no checkpoint at all. ``complete``: every variable the trackables have
        must come from the checkpoint (a model that is only used, not trained further: one
        that matches in part is another architecture)."""
        problems = []
        others = () if kind == AVERAGED else tuple(k for k in KINDS if k != kind)
        for candidate in (kind, *others):
            try:
                state = self._load(candidate, complete)
            except DamagedCheckpoint as problem:
                problems.append(str(problem))
                continue
            if state is not None:
                if problems:
                    print(f"asrkit: warning: {problems[0]}; using the {candidate} checkpoint "
                          "instead", file=sys.stderr)
                return state
        if problems:
            raise AsrkitError(
                f"no usable checkpoint in {self.folder}: {'; '.join(problems)}; train it "
                "afresh in a new --run-dir"
            )
        return None

    def _load(self, kind: str, complete: bool = False) -> dict[str, Any] | None:
        import tensorflow as tf

        for _ in range(3):  # a training may replace the checkpoint while it is being read
            saved = self._read(kind)
            if saved is None:
                return None
            try:
                status = self.checkpoint.read(str(self.folder / saved["folder"] / "ckpt"))
                if complete:
                    status.assert_existing_objects_matched()
                status.expect_partial()
            except (tf.errors.OpError, ValueError, AssertionError) as error:
                try:
                    again = self._read(kind)
                except DamagedCheckpoint:
                    again = None
                if again is not None and again["folder"] != saved["folder"]:
                    continue
                reason = str(error).strip().splitlines()[0]
                raise DamagedCheckpoint(
                    f"{self._pointer(kind)} names {saved['folder']}, which cannot be read "
                    f"({reason})"
                ) from None
            return saved["state"]
        raise DamagedCheckpoint(f"{self._pointer(kind)} keeps changing")

    def _clean(self) -> None:
        """Remove the folders (and temporary files) no pointer names; nothing at all when a
        pointer cannot be read, since it may name any of them."""
        keep = {entry["folder"] for entry in self.history()}
        for kind in (*KINDS, AVERAGED):
            try:
                saved = json.loads(self._pointer(kind).read_text(encoding="utf-8"))
                keep.add(saved["folder"])
            except FileNotFoundError:
                continue
            except (OSError, ValueError, TypeError, KeyError, RecursionError):
                return
        for path in self.folder.iterdir() if self.folder.is_dir() else ():
            if path.name.startswith("ckpt-") and path.name not in keep:
                rmtree(path)
            elif path.name.endswith(".partial"):
                path.unlink(missing_ok=True)


def networks(model: keras.Model, head: keras.Model | None) -> dict[str, keras.Model]:
    """The trackables of a run's networks in its checkpoints: ``model``, and ``head`` (the
    training objective's network, :meth:`asrkit.types.Objective.build`) only when there is
    one, so that a run without (CTC's) keeps the structure its checkpoints always had."""
    return {"model": model, **({"head": head} if head is not None else {})}


def trainable_variables(model: keras.Model, head: keras.Model | None) -> list[Any]:
    """What training updates, in a fixed order: the model's trainable variables, then the
    head's (when the objective has one)."""
    return [*model.trainable_variables, *(head.trainable_variables if head is not None else ())]


def untracked_weights(model: keras.Model) -> list[str]:
    """Paths of the model's weights that a ``tf.train.Checkpoint`` of it would not save.

    Keras 3 tracks layers held in a plain Python list for itself, but TensorFlow's object graph
    does not follow them; their weights are then silently missing from every checkpoint, and a
    restored model (evaluation, transcription, export) would run with fresh random values.
    """
    import tensorflow as tf

    seen = {id(obj) for obj in tf.train.TrackableView(model).descendants()}
    return [weight.path for weight in model.weights
            if id(weight) not in seen and id(getattr(weight, "value", weight)) not in seen]


def append_metrics(folder: Location, *records: dict[str, Any]) -> None:
    """Append ``records`` to the run's ``metrics.jsonl``, on disk before the next step."""
    append_line(folder / "metrics.jsonl",
                "\n".join(json.dumps(record, sort_keys=True) for record in records), sync=True)
