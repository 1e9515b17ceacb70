"""Contract checks for streaming models (:class:`asrkit.types.StreamingModel`): a model that
says it streams (:meth:`asrkit.types.ModelSpec.streaming`) gives, chunk by chunk, exactly what it
gives for the whole utterance. A plugin author calls it from their own tests::

    from asrkit.testing import check_streaming_model

    def test_my_model_streams():
        spec = asrkit.plugins.get("model", "mymodel")
        check_streaming_model(spec, spec.Config(streaming=True, chunk_frames=4), num_features=40)

TensorFlow is imported inside; each check raises ``AssertionError`` saying what broke.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from asrkit.serving.encoder_stream import EncoderStream
from asrkit.testing.models import NUM_CLASSES, _logits, build_model
from asrkit.types import ModelSpec

__all__ = ["STREAM_TOLERANCE", "check_streaming_model", "streamed_outputs"]

#: Largest output difference allowed between a stream and the whole utterance: the same sums
#: in another order (chunks, caches) differ by about 1e-6 of the outputs' size.
STREAM_TOLERANCE = 1e-4
#: Utterance lengths (feature frames) of the check: shorter than a chunk, whole chunks, and
#: every remainder of the strides 2 and 4.
STREAM_LENGTHS = (1, 3, 16, 33, 58, 77)


def streamed_outputs(model: Any, spec: ModelSpec, config: Any, features: Any,
                     pieces: Sequence[int]) -> Any:
    """The outputs of ``features`` ``[T, F]`` streamed through ``model`` in pieces of the
    sizes ``pieces`` (cycled), then finished."""
    import numpy as np

    stream = EncoderStream(model, spec, config, int(features.shape[1]))
    outputs, start, index = [], 0, 0
    while start < len(features):
        size = int(pieces[index % len(pieces)])
        outputs.append(stream.push(features[start:start + size]))
        start, index = start + size, index + 1
    outputs.append(stream.finish())
    return np.concatenate([out for out in outputs if out.size] or [np.zeros([0, 0])])


def check_streaming_model(spec: ModelSpec, config: Any, num_features: int,
                          num_classes: int = NUM_CLASSES, seed: int = 0,
                          chunks: Sequence[int] = (),
                          lengths: Sequence[int] = STREAM_LENGTHS,
                          tolerance: float = STREAM_TOLERANCE) -> float:
    """For each chunk size in ``chunks`` (``chunk_frames`` values; default: the config's own),
    every utterance of ``lengths`` frames streamed in pieces of irregular sizes gives the
    whole-utterance call's outputs, its ``output_length`` frames of them; the model's
    :class:`~asrkit.types.StreamShape` is consistent with its stride. Returns the largest
    difference."""
    import numpy as np

    shape = spec.streaming(config)
    assert shape is not None, (
        f"{spec.name}: streaming() returns None for {config}: the check needs a config that "
        "streams")
    model = build_model(spec, config, num_features, num_classes, seed)
    for method in ("initial_state", "step"):
        assert callable(getattr(model, method, None)), (
            f"{spec.name}: its model streams but has no {method}() (asrkit.types."
            "StreamingModel)")
    rng = np.random.default_rng(seed)
    worst = 0.0
    for chunk in chunks or (config.chunk_frames,):
        chunked = replace(config, chunk_frames=chunk)
        shape = spec.streaming(chunked)
        assert shape is not None, f"{spec.name}: chunk_frames={chunk} does not stream"
        stride = spec.time_stride(chunked)
        assert shape.input_frames > 0 and shape.input_frames % stride == 0, (
            f"{spec.name}: input_frames={shape.input_frames} must be a positive multiple of "
            f"time_stride={stride}")
        if chunked != config:  # the same weights, the chunk in the whole-utterance call too
            other = build_model(spec, chunked, num_features, num_classes, seed)
            other.set_weights(model.get_weights())
        else:
            other = model
        for n in lengths:
            features = rng.normal(size=(n, num_features)).astype(np.float32)
            frames = int(spec.output_length(chunked, n))
            whole = _logits(other, features[None], [n])[0, :frames]
            pieces = [int(p) for p in rng.integers(0, 2 * shape.input_frames + 2, size=7)]
            streamed = streamed_outputs(other, spec, chunked, features, [*pieces, 1])
            assert streamed.shape == whole.shape, (
                f"{spec.name}: {n} frames streamed in chunks of {shape.input_frames} give "
                f"outputs of shape {streamed.shape}; the whole utterance gives {whole.shape}")
            diff = float(np.max(np.abs(streamed - whole))) if whole.size else 0.0
            worst = max(worst, diff)
            assert diff <= tolerance, (
                f"{spec.name}: {n} frames streamed in chunks of {shape.input_frames} frames "
                f"differ from the whole utterance's outputs by {diff:.3g} (allowed "
                f"{tolerance:g}): the step reads or keeps something the whole-utterance call "
                "does not (a future frame, a cache of the wrong length, padding)")
    return worst
