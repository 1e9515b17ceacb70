"""A streaming model stepped through one stream of feature frames, chunk by chunk.

What ``asrkit transcribe --stream``, the streaming exports' checks and the streaming contract
check (:func:`asrkit.testing.check_streaming_model`) all run: frames arrive in pieces of any
size, the model steps whenever a chunk (:attr:`asrkit.types.StreamShape.input_frames`) is full,
and :meth:`EncoderStream.finish` steps the last partial chunk and the steps its delay needs. The
outputs, the first ``delay`` dropped and cut at the model's ``output_length``, are the
whole-utterance call's (:class:`asrkit.types.StreamingModel`).

Memory holds one chunk of frames and the model's state, whatever the stream's length.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from asrkit.types import ModelSpec, StreamShape

if TYPE_CHECKING:
    import tensorflow as tf


def step_function(model: Any, shape: StreamShape, num_features: int,
                  state: list[tf.Tensor]) -> Any:
    """``model.step`` of one stream in a ``tf.function`` traced once: a chunk ``[1,
    input_frames, num_features]``, its valid frames ``[1]``, the state (shapes of ``state``)."""
    import tensorflow as tf

    signature = [tf.TensorSpec([1, shape.input_frames, num_features], tf.float32),
                 tf.TensorSpec([1], tf.int32),
                 [tf.TensorSpec(tensor.shape, tensor.dtype) for tensor in state]]

    @tf.function(input_signature=signature)
    def step(features: tf.Tensor, lengths: tf.Tensor,
             state: list[tf.Tensor]) -> tuple[tf.Tensor, list[tf.Tensor]]:
        outputs, state = model.step(features, lengths, state)
        return tf.cast(outputs, tf.float32), state

    return step


#: The last model's step function: streams of one model, one after another (a test's, a
#: transcription's files), trace it once.
_last_step: tuple[Any, tuple[int, int], Any] | None = None


def _cached_step(model: Any, shape: StreamShape, num_features: int,
                 state: list[tf.Tensor]) -> Any:
    global _last_step
    key = (shape.input_frames, num_features)
    if _last_step is None or _last_step[0]() is not model or _last_step[1] != key:
        _last_step = (weakref.ref(model), key, step_function(model, shape, num_features, state))
    return _last_step[2]


class StreamOutputs:
    """A stream's output frames as its steps give them, cut to the utterance's: the first
    ``delay`` (a model that looks ahead) are not the audio's, and none goes past
    ``output_length`` of the frames in. What :class:`EncoderStream` and a streaming export's
    client (:class:`asrkit.serving.export_stream.ExportStream`) both return."""

    def __init__(self, delay: int) -> None:
        self.delay = delay
        #: Output frames the steps gave (the delayed ones included), and those returned.
        self.raw = 0
        self.returned = 0
        self._width = 0

    def take(self, outputs: list[np.ndarray], limit: int) -> np.ndarray:
        """``outputs`` (the steps' since the last call, in order) less what is not the audio's
        and what lies past ``limit`` output frames of it."""
        if not outputs:
            return np.zeros([0, self._width], np.float32)
        joined = np.concatenate(outputs)
        self._width = joined.shape[1]
        before, self.raw = self.raw, self.raw + len(joined)
        joined = joined[max(0, self.delay - before):]
        joined = joined[: max(0, limit - self.returned)]
        self.returned += len(joined)
        return joined


class EncoderStream:
    """One stream through a streaming ``model`` built by ``spec`` with ``config``.

    :meth:`push` feature frames ``[n, num_features]`` as they come; each returns the output
    frames ``[m, width]`` now known (``m`` may be 0; before the first step, ``width`` is 0
    too); :meth:`finish` returns the rest."""

    def __init__(self, model: Any, spec: ModelSpec, config: Any, num_features: int) -> None:
        shape = spec.streaming(config)
        if shape is None:
            raise ValueError(f"{spec.name} with these settings does not stream")
        self.shape, self._spec, self._config = shape, spec, config
        self._state = model.initial_state(1)
        self._step = _cached_step(model, shape, num_features, self._state)
        self._pending = np.zeros([0, num_features], np.float32)
        self._frames_in = 0
        self._outputs = StreamOutputs(shape.delay)
        self._finished = False

    def push(self, features: np.ndarray) -> np.ndarray:
        """The output frames that ``features`` (the next frames of the stream) complete."""
        if self._finished:
            raise ValueError("the stream has finished")
        features = np.asarray(features, np.float32)
        self._frames_in += len(features)
        self._pending = np.concatenate([self._pending, features])
        chunk = self.shape.input_frames
        outputs = []
        while len(self._pending) >= chunk:
            outputs.append(self._run(self._pending[:chunk], chunk))
            self._pending = self._pending[chunk:]
        return self._emit(outputs)

    def finish(self) -> np.ndarray:
        """The stream's remaining output frames: its last partial chunk's, then steps of no
        frames until the delayed ones are out, all cut at ``output_length`` of the frames in."""
        if self._finished:
            raise ValueError("the stream has finished")
        self._finished = True
        outputs = []
        if len(self._pending):
            outputs.append(self._run(self._pending, len(self._pending)))
        raw = self._outputs.raw + sum(len(out) for out in outputs)
        needed = self._limit() + self.shape.delay
        while raw < needed:
            outputs.append(self._run(np.zeros([0, self._pending.shape[1]], np.float32), 0))
            raw += len(outputs[-1])
        return self._emit(outputs)

    def _run(self, frames: np.ndarray, length: int) -> np.ndarray:
        import tensorflow as tf

        chunk = np.zeros([1, self.shape.input_frames, frames.shape[1]], np.float32)
        chunk[0, : len(frames)] = frames
        outputs, self._state = self._step(tf.constant(chunk), tf.constant([length], tf.int32),
                                          self._state)
        return outputs[0].numpy()

    def _limit(self) -> int:
        """Output frames of the feature frames pushed so far."""
        return int(self._spec.output_length(self._config, self._frames_in))

    def _emit(self, outputs: list[np.ndarray]) -> np.ndarray:
        return self._outputs.take(outputs, self._limit())
