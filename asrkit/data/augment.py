"""Data augmentation inside the TensorFlow graph: SpecAugment and speed perturbation.

Both are off unless asked for, and both are *seeded*: every random choice comes from TensorFlow's
stateless random ops with a per-utterance seed that the pipeline draws from a seeded stream, so a
run with the same seed sees the same masks and speeds in the same epochs, and a different epoch
sees different ones.

- SpecAugment (Park et al., 2019, arXiv:1904.08779): ``freq_masks`` bands of up to
  ``freq_mask_width`` features and ``time_masks`` spans of up to ``time_mask_width`` frames (and at
  most ``time_mask_max_ratio`` of the utterance, so short utterances are not wiped out) are set to
  the utterance's mean of each feature, which is zero when the features are normalised, as in
  the paper.
- Speed perturbation (Ko et al., 2015): the audio is resampled by a factor drawn from
  ``factors`` (Kaldi's recipe uses 0.9, 1.0, 1.1), which changes tempo and pitch together. The
  resampling is band-limited, done on the spectrum of the whole utterance (zero-pad or truncate
  the FFT), so a slowed utterance gains no aliasing and a sped-up one keeps no content above the
  new Nyquist frequency.

TensorFlow is imported inside the functions (see :mod:`asrkit.hookspecs`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tensorflow as tf

#: Audio is zero-padded to a multiple of this many samples before its FFT: lengths with only
#: small prime factors keep the FFT fast, and trailing silence changes nothing that is kept.
FFT_BLOCK = 1024


def _span_mask(size: tf.Tensor, count: int, max_width: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """``[size]`` booleans, true inside ``count`` random spans of width ``0 .. max_width``."""
    import tensorflow as tf

    widths_seed, starts_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    max_width = tf.minimum(max_width, size)
    widths = tf.random.stateless_uniform(
        [count], widths_seed, minval=0, maxval=max_width + 1, dtype=tf.int32
    )
    room = tf.cast(size - widths + 1, tf.float32)
    starts = tf.cast(tf.floor(tf.random.stateless_uniform([count], starts_seed) * room), tf.int32)
    positions = tf.range(size)[tf.newaxis, :]
    inside = (positions >= starts[:, tf.newaxis]) & (positions < (starts + widths)[:, tf.newaxis])
    return tf.reduce_any(inside, axis=0)


def spec_augment(
    features: tf.Tensor,
    seed: tf.Tensor,
    *,
    freq_masks: int = 2,
    freq_mask_width: int = 27,
    time_masks: int = 2,
    time_mask_width: int = 100,
    time_mask_max_ratio: float = 0.2,
) -> tf.Tensor:
    """Mask ``features`` ``[frames, features]`` (one utterance) with SpecAugment's frequency and
    time masks; ``seed`` is a stateless seed, shape ``[2]`` int. Masked values become the
    utterance's mean of that feature."""
    import tensorflow as tf

    if freq_masks <= 0 and time_masks <= 0:
        return features
    frames, width = tf.shape(features)[0], tf.shape(features)[1]
    freq_seed, time_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    masked = tf.zeros_like(features, dtype=tf.bool)
    if freq_masks > 0:
        bands = _span_mask(width, freq_masks, tf.constant(freq_mask_width), freq_seed)
        masked = masked | bands[tf.newaxis, :]
    if time_masks > 0:
        limit = tf.cast(time_mask_max_ratio * tf.cast(frames, tf.float32), tf.int32)
        spans = _span_mask(frames, time_masks, tf.minimum(time_mask_width, limit), time_seed)
        masked = masked | spans[:, tf.newaxis]
    mean = tf.reduce_mean(features, axis=0, keepdims=True)
    return tf.where(masked, tf.broadcast_to(mean, tf.shape(features)), features)


def resample(audio: tf.Tensor, factor: float | tf.Tensor) -> tf.Tensor:
    """Play ``audio`` ``[samples]`` ``factor`` times faster: ``round(samples / factor)`` samples,
    band-limited (the spectrum is truncated or zero-extended, then inverted)."""
    import tensorflow as tf

    factor = tf.cast(factor, tf.float32)
    samples = tf.size(audio)
    block = tf.maximum(1, -(-samples // FFT_BLOCK)) * FFT_BLOCK
    padded = tf.pad(audio, [[0, block - samples]])
    target = tf.cast(tf.round(tf.cast(block, tf.float32) / factor), tf.int32)
    spectrum = tf.signal.rfft(padded)
    bins_in, bins_out = tf.size(spectrum), target // 2 + 1
    kept = spectrum[: tf.minimum(bins_in, bins_out)]
    spectrum = tf.pad(kept, [[0, bins_out - tf.size(kept)]])
    scale = tf.cast(target, tf.float32) / tf.cast(block, tf.float32)
    out = tf.signal.irfft(spectrum, [target]) * scale
    length = tf.cast(tf.round(tf.cast(samples, tf.float32) / factor), tf.int32)
    return out[:length]


def speed_perturb(audio: tf.Tensor, seed: tf.Tensor, factors: Sequence[float]) -> tf.Tensor:
    """Resample ``audio`` by one of ``factors``, drawn uniformly with the stateless ``seed``; a
    factor of 1 leaves the audio untouched (no FFT)."""
    import tensorflow as tf

    if not factors:
        return audio
    choice = tf.random.stateless_uniform([], seed, minval=0, maxval=len(factors), dtype=tf.int32)
    factor = tf.gather(tf.constant(list(factors), tf.float32), choice)
    return tf.cond(
        tf.equal(factor, 1.0), lambda: tf.identity(audio), lambda: resample(audio, factor)
    )
