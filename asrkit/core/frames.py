"""Frame geometry: how many feature frames, and model output frames, a length of audio becomes.

Every place that counts frames asks this module, so that they cannot disagree: the importer's
check that a transcript fits its audio, the training engine's check of a run's split, the
seconds of audio a batch holds, transcription's word times and an export's metadata.

A feature extractor's ``Config`` declares its framing (:class:`asrkit.types.FeatureConfig`):
``sample_rate`` (Hz), ``window_ms`` and ``step_ms``. Window and step are rounded half up to
whole samples, and audio is framed as python_speech_features frames it: one frame for anything
up to a window, else ``1 + ceil((samples - window) / step)``, the last frame zero-padded; or,
where the ``Config``'s ``centred_frames`` is true (Kaldi's framing with ``snip_edges=false``,
which sherpa-onnx's features use), ``(samples + step // 2) // step`` frames centred on
multiples of the step (at least one). An
extractor's ``extract`` must return exactly that many frames (``asrkit.testing.features``
checks it). A model then maps ``frames`` to ``output_length(config, frames)`` output frames
(its time stride: 1 for ``brnn``, 2 or more for ``ds2`` and ``conformer``); CTC can align a
transcript only when there are at least as many output frames as labels.

This module sits below the contracts (:mod:`asrkit.types` builds ``FeatureExtractor.num_frames``
and ``FeatureConfig``'s default rate on it), so it imports nothing of asrkit but its errors:
asrkit's one sample rate is defined here, where audio first becomes frames.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from asrkit.core.errors import AsrkitError

if TYPE_CHECKING:
    import tensorflow as tf

#: The one sample rate of asrkit: imports convert to it, features and models read it.
SAMPLE_RATE = 16000

#: What a feature configuration must declare, in this order.
DECLARED = ("sample_rate", "window_ms", "step_ms")


class FeatureError(AsrkitError):
    """A feature configuration that cannot work (no framing declared, a window of no samples,
    more cepstra than filters)."""


def _round_half_up(value: float) -> int:
    # python_speech_features rounds the window and step in samples half up (not to even).
    return math.floor(value + 0.5)


@dataclass(frozen=True)
class Framing:
    """A feature configuration's framing in samples."""

    sample_rate: int
    window: int
    step: int
    #: Kaldi's ``snip_edges=false`` framing instead of python_speech_features'.
    centred: bool = False

    @classmethod
    def of(cls, config: Any) -> Framing:
        """The framing ``config`` declares; a one-line :class:`FeatureError` when it declares
        none (a ``Config`` that is not a :class:`~asrkit.types.FeatureConfig`) or one that
        frames nothing."""
        missing = [name for name in DECLARED if not hasattr(config, name)]
        if missing:
            raise FeatureError(
                f"feature settings {type(config).__name__} declare no {', '.join(missing)}: a "
                "feature extractor's Config must declare sample_rate, window_ms and step_ms "
                "(subclass asrkit.types.FeatureConfig; see docs/hooks-data.md)"
            )
        rate = config.sample_rate
        window = _round_half_up(config.window_ms / 1000 * rate)
        step = _round_half_up(config.step_ms / 1000 * rate)
        if window < 1 or step < 1:
            raise FeatureError(
                f"window_ms={config.window_ms} and step_ms={config.step_ms} at {rate} Hz are "
                f"{window} and {step} samples; both must be at least one sample"
            )
        return cls(int(rate), window, step, bool(getattr(config, "centred_frames", False)))

    @property
    def step_seconds(self) -> float:
        return self.step / self.sample_rate

    def frames(self, num_samples: int | tf.Tensor) -> int | tf.Tensor:
        """Feature frames of ``num_samples`` samples (a Python int or an integer tensor)."""
        return count_frames(num_samples, self.window, self.step, self.centred)


def count_frames(num_samples: int | tf.Tensor, window: int, step: int,
                 centred: bool = False) -> int | tf.Tensor:
    """Frames of ``num_samples`` samples: one frame for anything up to a window, else
    ``1 + ceil((num_samples - window) / step)``, the last frame zero-padded; ``centred``
    (Kaldi's ``snip_edges=false``): ``(num_samples + step // 2) // step``, at least one. Works
    on Python ints and on integer tensors."""
    if centred:
        if isinstance(num_samples, numbers.Integral):
            return max(1, (int(num_samples) + step // 2) // step)
        import tensorflow as tf

        return tf.maximum(1, (tf.cast(num_samples, tf.int32) + step // 2) // step)
    if isinstance(num_samples, numbers.Integral):
        return 1 + max(0, -(-(int(num_samples) - window) // step))
    import tensorflow as tf

    n = tf.cast(num_samples, tf.int32)
    return 1 + tf.maximum(0, -((window - n) // step))


def frame_geometry(config: Any) -> tuple[int, int]:
    """``(window, step)`` in samples of a feature configuration."""
    framing = Framing.of(config)
    return framing.window, framing.step


def output_frames(num_samples: int | tf.Tensor, feature_config: Any, spec: Any = None,
                  model_config: Any = None) -> int | tf.Tensor:
    """Frames the model ``spec`` (with ``model_config``) outputs for ``num_samples`` samples of
    audio featurised with ``feature_config``; the feature frames when ``spec`` is None."""
    frames = Framing.of(feature_config).frames(num_samples)
    return frames if spec is None else spec.output_length(model_config, frames)


def fits(num_samples: int, num_labels: int, feature_config: Any, spec: Any = None,
         model_config: Any = None) -> bool:
    """Whether CTC can align ``num_labels`` labels with that much audio: at least as many output
    frames as labels (``asrkit.core.ctc.frames_needed`` of the labels counts their repeats too, as
    a run's check does). Without ``spec`` (an import, before any model is chosen) this is the
    loosest check, a model that keeps every feature frame."""
    return int(output_frames(num_samples, feature_config, spec, model_config)) >= num_labels


def frame_seconds(feature_config: Any, spec: Any = None, model_config: Any = None) -> float:
    """Seconds per output frame: the feature step times the model's time stride (10 ms for
    ``brnn``, 20 ms for ``ds2``); per feature frame without ``spec``."""
    step = Framing.of(feature_config).step_seconds
    return step if spec is None else step * spec.time_stride(model_config)


def check_sample_rate(feature_config: Any, what: str) -> None:
    """A one-line error when features expect another rate than asrkit's audio has."""
    rate = Framing.of(feature_config).sample_rate
    if rate != SAMPLE_RATE:
        raise FeatureError(f"{what}: features at {rate} Hz; asrkit decodes all audio to "
                           f"{SAMPLE_RATE} Hz (set -o features.sample_rate={SAMPLE_RATE})")
