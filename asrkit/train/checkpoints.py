"""Checkpoints that are never half-written.

A checkpoint is written into a fresh folder (``ckpt-<step>``); only then is the pointer file
(``latest.json`` or ``best.json``) replaced atomically to name it, together with the loop state
(epoch, step, counters) needed to resume exactly. A crash at any moment leaves the previous
pointer and its complete folder in place. Folders no pointer names are removed afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any


class Checkpoints:
    def __init__(self, folder: Path, **trackables: Any) -> None:
        import tensorflow as tf

        from asrkit.errors import AsrkitError

        model = trackables.get("model")
        missing = untracked_weights(model) if model is not None else []
        if missing:
            raise AsrkitError(
                f"the model's weights {', '.join(missing[:3])} would not be saved in checkpoints "
                "(its layers are kept in a plain Python list); the model plugin must assign "
                "each layer to an attribute"
            )
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.checkpoint = tf.train.Checkpoint(**trackables)

    def _pointer(self, kind: str) -> Path:
        return self.folder / f"{kind}.json"

    def save(self, kind: str, step: int, state: dict[str, Any]) -> None:
        name = f"ckpt-{step:09d}-{kind}"
        target = self.folder / name
        if target.exists():
            shutil.rmtree(target)
        self.checkpoint.write(str(target / "ckpt"))
        partial = self._pointer(kind).with_suffix(".json.partial")
        partial.write_text(json.dumps({"folder": name, "state": state}, indent=2))
        os.replace(partial, self._pointer(kind))
        self._clean()

    def state(self, kind: str) -> dict[str, Any] | None:
        pointer = self._pointer(kind)
        if not pointer.exists():
            return None
        return json.loads(pointer.read_text())["state"]

    def restore(self, kind: str) -> dict[str, Any] | None:
        """Load the ``kind`` checkpoint into the trackables; return its state (None if none)."""
        pointer = self._pointer(kind)
        if not pointer.exists():
            return None
        saved = json.loads(pointer.read_text())
        self.checkpoint.read(str(self.folder / saved["folder"] / "ckpt")).expect_partial()
        return saved["state"]

    def _clean(self) -> None:
        keep = set()
        for kind in ("latest", "best"):
            pointer = self._pointer(kind)
            if pointer.exists():
                keep.add(json.loads(pointer.read_text())["folder"])
        for folder in self.folder.glob("ckpt-*"):
            if folder.name not in keep:
                shutil.rmtree(folder, ignore_errors=True)


def untracked_weights(model: Any) -> list[str]:
    """Paths of the model's weights that a ``tf.train.Checkpoint`` of it would not save.

    Keras 3 tracks layers held in a plain Python list for itself, but TensorFlow's object graph
    does not follow them; their weights are then silently missing from every checkpoint, and a
    restored model (evaluation, transcription, export) would run with fresh random values.
    """
    import tensorflow as tf

    seen = {id(obj) for obj in tf.train.TrackableView(model).descendants()}
    return [weight.path for weight in model.weights
            if id(weight) not in seen and id(getattr(weight, "value", weight)) not in seen]
