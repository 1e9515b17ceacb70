"""A streaming run decoded at a chunk size of the user's choosing (``--chunk-ms`` of ``asrkit
evaluate``, ``transcribe`` and ``export``).

A streaming model's ``Config`` holds ``chunk_frames`` (:meth:`asrkit.types.ModelSpec.streaming`):
the chunk its whole-utterance call attends within, and the one its stream steps by. Decoding at
another size is the same run with that field replaced: no weight depends on it. A size the
model never trained at is refused, since its error rate is unknown.
"""

from __future__ import annotations

from dataclasses import fields, replace

from asrkit.core.errors import AsrkitError
from asrkit.core.frames import frame_seconds
from asrkit.runs.run import Run

#: Tolerance on a chunk being a whole number of frames (floating-point milliseconds).
_WHOLE = 1e-6


def chunk_ms_of(run: Run) -> float | None:
    """The run's chunk in milliseconds (0: the whole utterance; ``None``: not streaming)."""
    if not run.spec.streams(run.model_config):
        return None
    return getattr(run.model_config, "chunk_frames", 0) * _frame_ms(run)


def with_chunk(run: Run, chunk_ms: float | None) -> Run:
    """``run`` decoding in chunks of ``chunk_ms`` milliseconds (0: the whole utterance at once;
    ``None``: the run's own); a one-line error when its model does not stream, the size is not
    a whole number of its frames, or it was not trained at it."""
    if chunk_ms is None:
        return run
    spec, config = run.spec, run.model_config
    if not spec.streams(config) or "chunk_frames" not in {f.name for f in fields(config)}:
        raise AsrkitError(f"--chunk-ms: {run.folder}'s model ({spec.name}) does not stream: "
                          f"train one with -o model.streaming=true")
    frame_ms = _frame_ms(run)
    frames = round(chunk_ms / frame_ms)
    if chunk_ms < 0 or abs(frames * frame_ms - chunk_ms) > _WHOLE:
        lower = max(1, int(chunk_ms // frame_ms))
        raise AsrkitError(f"--chunk-ms {chunk_ms:g} is not a whole number of the model's "
                          f"{frame_ms:g} ms frames (e.g. {lower * frame_ms:g} or "
                          f"{(lower + 1) * frame_ms:g}; 0 for the whole utterance)")
    trained = spec.trained_chunks(config)
    if frames and trained is not None and not trained[0] <= frames <= trained[1]:
        lo, hi = (trained[0] * frame_ms, trained[1] * frame_ms)
        sizes = f"{lo:g} ms" if lo == hi else f"{lo:g} to {hi:g} ms"
        raise AsrkitError(f"--chunk-ms {chunk_ms:g}: {run.folder} was trained on chunks of "
                          f"{sizes} and the whole utterance (0), not on {chunk_ms:g} ms")
    return replace(run, config=replace(run.config, model=replace(config, chunk_frames=frames)))


def _frame_ms(run: Run) -> float:
    return 1000 * frame_seconds(run.feature_config, run.spec, run.model_config)
