"""Features of audio that arrives in pieces, equal to the whole recording's.

Why: a streaming model decodes audio chunk by chunk as it arrives, and it must see exactly the
features it was trained on, which :meth:`asrkit.features.SpectralExtractor.extract` computed of
whole utterances (then :func:`asrkit.features.context_windows`). :class:`FeatureStream` gives
the same frames (to float32 rounding), as soon as each can be computed:

- Pre-emphasis crosses piece boundaries: the previous piece's last sample is carried.
- A frame is computed once all of its samples have arrived; :meth:`FeatureStream.finish` adds
  the frames ``extract`` gives the end of the audio (the last one zero-padded; a stream shorter
  than a window, even an empty one, gets ``extract``'s single frame).
- The spectrum is the extractor's own
  (:meth:`~asrkit.features.SpectralExtractor.frame_features`, which ``extract`` calls too), run
  on all of a piece's complete frames at once by one ``tf.function`` of fixed signature
  ``[None, window]``, traced once per extractor and configuration, whatever the pieces' sizes.
- Normalisation must be causal: ``none``, or ``running`` (each coefficient minus its mean so
  far; the stream carries the sum and count). ``feature`` and ``utterance`` need the whole
  utterance and are refused when the stream is made.
- With ``context`` frames each side, a frame's window is out once its ``context`` successors
  are; ``finish`` pads the end with zeros, as ``context_windows`` does.

Memory does not grow with the stream: it holds less than a window of samples, the last
``2 * context`` frames, and the running sum. Only extractors that frame audio as
:class:`~asrkit.features.SpectralExtractor` does can stream; any other extractor (a third-party
plugin's) is refused with one line, since its features of a piece need not be those of the whole.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from asrkit.core.errors import AsrkitError
from asrkit.core.frames import count_frames, frame_geometry
from asrkit.features import CAUSAL_NORMALIZATIONS, SpectralExtractor, _preemphasize

if TYPE_CHECKING:
    from asrkit.types import FeatureConfig, FeatureExtractor


class StreamError(AsrkitError):
    """A stream that cannot give the whole utterance's features, or is used after its end."""


@functools.lru_cache(maxsize=16)
def _spectral_fn(extractor: SpectralExtractor, config: Any, window: int) -> Callable[..., Any]:
    """One ``tf.function`` from frames ``[None, window]`` to un-normalised features, shared by
    every stream of the same extractor and configuration: a stream of any piece sizes (and a
    new stream) reuses its one trace."""
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([None, window], tf.float32)])
    def features(frames: tf.Tensor) -> tf.Tensor:
        return extractor.frame_features(frames, config)

    return features


class FeatureStream:
    """Features of audio that arrives in pieces, equal to the whole recording's."""

    def __init__(self, extractor: FeatureExtractor, config: FeatureConfig,
                 context: int = 0) -> None:
        if not isinstance(extractor, SpectralExtractor):
            raise StreamError(
                f"feature extractor {getattr(extractor, 'name', type(extractor).__name__)!r} "
                "cannot stream: streaming needs a spectral extractor (asrkit's mfcc or logmel, "
                "or a subclass of asrkit.features.SpectralExtractor)"
            )
        if getattr(config, "centred_frames", False):
            raise StreamError(
                "Kaldi fbank features (features.kaldi=true) do not stream: asrkit's feature "
                "stream frames audio as python_speech_features does; train a streaming model "
                "on asrkit's own logmel (features.kaldi=false)"
            )
        mode = getattr(config, "normalize", "none")
        if mode not in CAUSAL_NORMALIZATIONS:
            raise StreamError(
                f"features.normalize={mode} needs the whole utterance and cannot stream; train "
                "a streaming model with -o features.normalize=running (or none)"
            )
        if context < 0:
            raise StreamError(f"context must be >= 0, not {context}")
        self._context = context
        #: An MFCC or log-mel configuration (what a SpectralExtractor reads), not just framing.
        self._config: Any = config
        self._window, self._step = frame_geometry(config)
        self._num_features = extractor.num_features(config)
        self._spectral = _spectral_fn(extractor, config, self._window)
        self._running = mode == "running"
        # Pre-emphasised samples from the start of the next frame to compute (under a window).
        self._signal = np.zeros([0], np.float32)
        self._previous: np.ndarray | None = None  # the last raw sample, for pre-emphasis
        self._samples = 0  # samples pushed so far
        self._computed = 0  # frames computed so far (each frame's spectrum once)
        self._sum = np.zeros([self._num_features], np.float64)  # running normalisation
        # Normalised frames whose context windows are not out yet, after `context` zero frames
        # standing for the frames before the start.
        self._held = np.zeros([context, self._num_features], np.float32)
        self._frames_out = 0
        self._done = False

    @property
    def width(self) -> int:
        """Width of an output frame: ``(2 * context + 1) * num_features``."""
        return (2 * self._context + 1) * self._num_features

    @property
    def frames_out(self) -> int:
        """Feature frames returned so far."""
        return self._frames_out

    def push(self, samples: np.ndarray) -> np.ndarray:
        """Take float32 samples ``[n]`` in [-1, 1] (``n`` may be 0); return the feature frames
        ``[k, width]`` (``k >= 0``) that they complete."""
        self._check_open()
        samples = np.asarray(samples, np.float32)
        if samples.ndim != 1:
            raise StreamError(f"push takes mono samples [n], not an array of shape "
                              f"{samples.shape}")
        if not samples.size:
            return self._empty()
        coefficient = self._config.preemphasis
        if self._previous is None:
            emphasised = _preemphasize(samples, coefficient)
        else:
            emphasised = _preemphasize(np.concatenate([self._previous, samples]), coefficient)[1:]
        self._previous = samples[-1:].copy()
        self._samples += samples.size
        self._signal = np.concatenate([self._signal, emphasised])
        complete = max(0, (self._signal.size - self._window) // self._step + 1)
        return self._emit(self._compute(self._signal, complete))

    def finish(self) -> np.ndarray:
        """The rest at the end of the stream: the frames ``extract`` gives the whole audio that
        are not out yet (the last zero-padded), and the windows held back for their context.
        The stream is then done."""
        self._check_open()
        self._done = True
        remaining = count_frames(self._samples, self._window, self._step) - self._computed
        padded = np.zeros([max(0, (remaining - 1) * self._step + self._window)], np.float32)
        padded[: min(self._signal.size, padded.size)] = self._signal[: padded.size]
        features = self._compute(padded, remaining)
        zeros = np.zeros([self._context, self._num_features], np.float32)
        return self._emit(np.concatenate([features, zeros]))

    # -- the steps ----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._done:
            raise StreamError("the feature stream is finished; start a new one")

    def _empty(self) -> np.ndarray:
        return np.zeros([0, self.width], np.float32)

    def _compute(self, signal: np.ndarray, count: int) -> np.ndarray:
        """The (normalised) features of the first ``count`` frames of ``signal``, which starts
        at the next frame; the signal they alone needed is dropped."""
        if count <= 0:
            return np.zeros([0, self._num_features], np.float32)
        span = (count - 1) * self._step + self._window
        frames = np.lib.stride_tricks.sliding_window_view(signal[:span], self._window)
        frames = np.ascontiguousarray(frames[:: self._step])
        features = self._spectral(frames).numpy()
        self._signal = signal[count * self._step :].copy()
        self._computed += count
        if self._running:
            total = np.cumsum(features, axis=0, dtype=np.float64) + self._sum
            seen = self._computed - count + np.arange(1, count + 1)
            self._sum = total[-1]
            features = (features - total / seen[:, np.newaxis]).astype(np.float32)
        return features

    def _emit(self, features: np.ndarray) -> np.ndarray:
        """Context windows of the held frames and ``features`` whose ``context`` successors
        are known; the last ``2 * context`` frames stay held for the next windows."""
        if self._context == 0:
            self._frames_out += len(features)
            return features.reshape(-1, self.width)
        held = np.concatenate([self._held, features])
        span = 2 * self._context + 1
        ready = held.shape[0] - span + 1
        if ready <= 0:
            self._held = held
            return self._empty()
        windows = np.lib.stride_tricks.sliding_window_view(held, span, axis=0)  # [n, F, span]
        out = np.ascontiguousarray(windows.transpose(0, 2, 1)).reshape(ready, self.width)
        self._held = held[ready:].copy()
        self._frames_out += ready
        return out
