"""The streaming step of an export: a streaming CTC run's SavedModel and TFLite model hold a
``stream_step`` signature that takes a fixed-size block of audio and the state, and returns a
chunk's logits and the new state, so that a client streams with nothing but the export.

**The block and the lag.** A block is the audio of one encoder chunk: ``chunk_samples`` = the
chunk's feature frames times the feature step (640 ms of 16 kHz audio: 10,240 samples). A chunk's
last frame reaches ``window - step`` samples into the next block (python_speech_features'
framing), so the step computes a chunk from the block before (carried in the state) and the new
one: call ``c`` returns chunk ``c - 1``'s logits, and call 0 none (``ready`` 0). After the last
block (``num_samples`` below ``chunk_samples`` there, the rest zeros), a client calls with
``num_samples`` 0 until it has every logit frame: once more, or more for a model that looks ahead
(``delay`` in the metadata: its first ``delay`` logit frames are not the audio's, and it needs
that many more).

**The state** is every tensor the step carries: the previous block and the sample before it (for
pre-emphasis), the samples and calls so far, the running normalisation's sum and count, then the
model's own (:meth:`asrkit.types.StreamingModel.initial_state`): all zeros at the start. Its
names, shapes and types are in ``asrkit.json`` (``stream``).

The features are computed in the graph exactly as the whole recording's
(:meth:`asrkit.features.SpectralExtractor.frame_features`), so a stream's logits equal the
whole-utterance ``logits`` signature's at the export's chunk; :class:`ExportStream` is the
client loop, and ``export_run`` verifies it on its verification audio.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from asrkit.core.errors import AsrkitError
from asrkit.core.frames import count_frames, frame_geometry
from asrkit.features import SpectralExtractor, running_mean_removed
from asrkit.serving.encoder_stream import StreamOutputs

if TYPE_CHECKING:
    import keras
    import tensorflow as tf

    from asrkit.runs.run import Run

#: The signature's name.
STREAM_SIGNATURE = "stream_step"
#: The front end's state tensors, before the model's.
FRONT_END_STATE = ("previous", "before", "samples", "calls", "norm_sum", "norm_count")


@dataclass(frozen=True)
class StreamGeometry:
    """What a client needs to know of an export's stream."""

    chunk_samples: int
    window: int
    step: int
    chunk_frames: int
    output_frames: int
    delay: int
    state: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return {"signature": STREAM_SIGNATURE, "chunk_samples": self.chunk_samples,
                "window": self.window, "step": self.step, "chunk_frames": self.chunk_frames,
                "output_frames": self.output_frames, "delay": self.delay, "state": self.state}


def streams(run: Run, head: Any) -> bool:
    """Whether the export of ``run`` gets a streaming step: a CTC run whose model streams at
    its chunk, on features the step computes (:func:`check_streamable`)."""
    if head is not None or not run.objective.ctc_outputs or (
            run.spec.streaming(run.model_config) is None):
        return False
    try:
        check_streamable(run)
    except AsrkitError:
        return False
    return True


def check_streamable(run: Run) -> None:
    """One line when ``run``'s features cannot be computed by the step."""
    if not isinstance(run.extractor, SpectralExtractor) or run.pipeline.context:
        raise AsrkitError(f"{run.folder}: a streaming export computes {run.extractor.name} "
                          "features in its graph only for asrkit's spectral extractors without "
                          "context windows; transcribe --stream with the run folder instead")
    if getattr(run.feature_config, "centred_frames", False):
        raise AsrkitError(f"{run.folder}: Kaldi fbank features (features.kaldi=true) do not "
                          "stream (asrkit's streams frame audio as python_speech_features does)")
    if getattr(run.feature_config, "normalize", "none") not in ("none", "running"):
        raise AsrkitError(f"{run.folder}: features normalised over whole utterances cannot "
                          "stream")


def stream_step(run: Run, model: keras.Model) -> tuple[Any, StreamGeometry]:
    """The ``stream_step`` function (a ``tf.function`` with its input signature) and its
    geometry."""
    import tensorflow as tf

    check_streamable(run)
    config, extractor, spec = run.feature_config, run.extractor, run.spec
    shape = spec.streaming(run.model_config)
    assert shape is not None
    window, step = frame_geometry(config)
    frames = shape.input_frames
    block = frames * step
    if window - step > block:
        raise AsrkitError(f"a chunk of {block} samples is shorter than a frame's reach past "
                          f"it ({window - step}): export with a larger --chunk-ms")
    width = run.num_features()
    running = getattr(config, "normalize", "none") == "running"
    preemphasis = float(getattr(config, "preemphasis", 0.0))
    model_state = model.initial_state(1)
    for tensor in model_state:
        if np.any(tensor.numpy()):
            raise AsrkitError(f"{spec.name}'s stream does not start from zeros: it cannot "
                              "be exported as a step")
    front = [tf.TensorSpec([block], tf.float32, name="previous"),
             tf.TensorSpec([], tf.float32, name="before"),
             tf.TensorSpec([], tf.int32, name="samples"),
             tf.TensorSpec([], tf.int32, name="calls"),
             tf.TensorSpec([width], tf.float32, name="norm_sum"),
             tf.TensorSpec([], tf.float32, name="norm_count")]
    own = [tf.TensorSpec(t.shape, t.dtype, name=f"state_{i}") for i, t in enumerate(model_state)]
    signature = [tf.TensorSpec([block], tf.float32, name="audio"),
                 tf.TensorSpec([], tf.int32, name="num_samples"), *front, *own]

    @tf.function(input_signature=signature)
    def step_fn(audio: tf.Tensor, num_samples: tf.Tensor, previous: tf.Tensor,
                before: tf.Tensor, samples: tf.Tensor, calls: tf.Tensor, norm_sum: tf.Tensor,
                norm_count: tf.Tensor, *state: tf.Tensor) -> dict[str, tf.Tensor]:
        total = samples + num_samples
        audio = audio * tf.cast(tf.range(block) < num_samples, tf.float32)
        raw = tf.concat([previous, audio], axis=0)  # samples (calls-1)*block onwards
        first = (calls - 1) * block
        with tf.name_scope("asrkit_features"):
            signal = raw
            if preemphasis:
                earlier = tf.concat([before[None], raw[:-1]], axis=0)
                signal = raw - preemphasis * earlier
            signal = signal * tf.cast(first + tf.range(2 * block) < total, tf.float32)
            framed = tf.signal.frame(signal[: (frames - 1) * step + window], window, step)
            features = tf.cast(extractor.frame_features(framed, config), tf.float32)
            valid = tf.clip_by_value(
                tf.cast(count_frames(total, window, step), tf.int32) - (calls - 1) * frames,
                0, frames)
            mask = tf.cast(tf.range(frames) < valid, tf.float32)[:, None]
            features = features * mask
            new_sum, new_count = norm_sum, norm_count
            if running:
                features, (new_sum, new_count) = running_mean_removed(
                    features, mask, axis=0, carried=(norm_sum, norm_count))
        logits, stepped = model.step(features[None], valid[None], list(state))
        ready = calls > 0
        keep = [tf.where(ready, new, old) for new, old in zip(stepped, state, strict=True)]
        return {"logits": tf.cast(logits[0], tf.float32), "frames": valid,
                "ready": tf.cast(ready, tf.int32), "previous": audio,
                "before": previous[-1], "samples": total, "calls": calls + 1,
                "norm_sum": tf.where(ready, new_sum, norm_sum),
                "norm_count": tf.where(ready, new_count, norm_count),
                **{f"state_{i}": t for i, t in enumerate(keep)}}

    state = [{"name": s.name, "shape": s.shape.as_list(), "dtype": s.dtype.name}
             for s in (*front, *own)]
    outputs = frames // spec.time_stride(run.model_config)
    geometry = StreamGeometry(block, window, step, frames, outputs, shape.delay, state)
    return step_fn, geometry


class ExportStream:
    """The client loop: audio pushed in pieces of any size through an export's ``stream_step``
    (``runner(**inputs) -> outputs``: a SavedModel signature or a TFLite signature runner);
    :meth:`push` returns the logits now known, :meth:`finish` the rest."""

    def __init__(self, runner: Any, geometry: dict[str, Any], output_length: Any) -> None:
        self._runner, self._geometry = runner, geometry
        self._output_length = output_length  # feature frames -> logit frames
        self._state = {s["name"]: np.zeros(s["shape"], s["dtype"]) for s in geometry["state"]}
        self._pending = np.zeros(0, np.float32)
        self._samples = 0
        self._stepped = 0  # feature frames the step has turned into logits
        self._outputs = StreamOutputs(geometry["delay"])

    def push(self, samples: np.ndarray) -> np.ndarray:
        block = self._geometry["chunk_samples"]
        self._pending = np.concatenate([self._pending, np.asarray(samples, np.float32)])
        out = []
        while len(self._pending) >= block:
            out.append(self._call(self._pending[:block], block))
            self._pending = self._pending[block:]
        return self._emit(out, self._stepped)

    def finish(self) -> np.ndarray:
        """The last partial block, then calls of no samples until every chunk with frames has
        been stepped (the step lags one block) and the delayed logits are out."""
        out = [self._call(self._pending, len(self._pending))] if len(self._pending) else []
        self._pending = np.zeros(0, np.float32)
        frames = self._frames_total()
        needed = int(self._output_length(frames)) + self._outputs.delay
        raw = self._outputs.raw + sum(len(o) for o in out if o is not None)
        while raw < needed or self._stepped < frames:
            out.append(self._call(np.zeros(0, np.float32), 0))
            raw += 0 if out[-1] is None else len(out[-1])
        return self._emit(out, frames)

    def _frames_total(self) -> int:
        """Feature frames of the samples pushed, as ``extract`` counts them."""
        window, step = self._geometry["window"], self._geometry["step"]
        return int(count_frames(self._samples, window, step)) if self._samples else 0

    def _call(self, samples: np.ndarray, count: int) -> np.ndarray | None:
        block = np.zeros(self._geometry["chunk_samples"], np.float32)
        block[:count] = samples[:count]
        self._samples += count
        inputs = {"audio": block, "num_samples": np.int32(count), **self._state}
        outputs = {k: np.asarray(v) for k, v in self._runner(**inputs).items()}
        for name in self._state:
            self._state[name] = outputs[name].astype(self._state[name].dtype)
        if not int(outputs["ready"]):
            return None
        self._stepped += int(outputs["frames"])
        return outputs["logits"]

    def _emit(self, out: list[np.ndarray | None], frames: int) -> np.ndarray:
        """The logits of ``frames`` feature frames not returned yet."""
        return self._outputs.take([o for o in out if o is not None],
                                  int(self._output_length(frames)))
