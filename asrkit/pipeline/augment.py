"""Data augmentation inside the TensorFlow graph: speed, pitch, noise and SpecAugment.

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
- Pitch perturbation: the pitch (and the formants) move by a number of semitones drawn
  uniformly from a range while the tempo stays: a phase-vocoder time stretch (the STFT's
  magnitudes interpolated between frames, its phases advanced by each bin's measured frequency,
  as librosa's ``phase_vocoder``), then the band-limited resampling above. A voice shifted a
  semitone or two is another plausible speaker, which is what makes a model generalise to
  speakers it never heard.
- Additive noise at a signal-to-noise ratio drawn uniformly from a range (dB, over the
  utterance's mean power): a random stretch of a noise bank (recordings loaded from a folder),
  or, without one, synthesised coloured noise whose power falls as ``f ** slope`` with the slope
  drawn from white (0) to brown (-2).

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


#: Phase-vocoder STFT: 32 ms windows with a 75 % overlap at 16 kHz.
STRETCH_FFT, STRETCH_HOP = 512, 128


def time_stretch(audio: tf.Tensor, rate: float | tf.Tensor) -> tf.Tensor:
    """Play ``audio`` ``rate`` times faster at the same pitch (a phase vocoder)."""
    import math

    import tensorflow as tf

    rate = tf.cast(rate, tf.float32)
    samples = tf.size(audio)
    padded = tf.pad(audio, [[STRETCH_FFT, STRETCH_FFT]])  # whole windows over the edges
    stft = tf.signal.stft(padded, STRETCH_FFT, STRETCH_HOP, pad_end=True)
    frames, bins = tf.shape(stft)[0], STRETCH_FFT // 2 + 1
    positions = tf.range(0.0, tf.cast(frames - 1, tf.float32), rate)
    index = tf.cast(tf.floor(positions), tf.int32)
    weight = (positions - tf.floor(positions))[:, tf.newaxis]
    left, right = tf.gather(stft, index), tf.gather(stft, index + 1)
    magnitude = (1 - weight) * tf.abs(left) + weight * tf.abs(right)
    expected = 2 * math.pi * STRETCH_HOP * tf.range(bins, dtype=tf.float32) / STRETCH_FFT
    advance = tf.math.angle(right) - tf.math.angle(left) - expected
    advance -= 2 * math.pi * tf.round(advance / (2 * math.pi))
    phase = tf.math.angle(stft[0]) + tf.cumsum(expected + advance, axis=0, exclusive=True)
    out = tf.complex(magnitude * tf.cos(phase), magnitude * tf.sin(phase))
    window = tf.signal.inverse_stft_window_fn(STRETCH_HOP)
    signal = tf.signal.inverse_stft(out, STRETCH_FFT, STRETCH_HOP, window_fn=window)
    length = tf.cast(tf.round(tf.cast(samples, tf.float32) / rate), tf.int32)
    start = tf.cast(tf.round(STRETCH_FFT / rate), tf.int32)
    signal = signal[start:start + length]
    # Overlap-adding frames whose neighbouring bins' phases disagree (speech, unlike a tone)
    # loses a quarter of the energy or more: keep the utterance's loudness.
    gain = tf.sqrt((tf.reduce_mean(tf.square(audio)) + 1e-12)
                   / (tf.reduce_mean(tf.square(signal)) + 1e-12))
    return signal * gain


def pitch_shift(audio: tf.Tensor, semitones: float | tf.Tensor) -> tf.Tensor:
    """``audio`` with its pitch moved by ``semitones`` and its length kept: stretched to
    ``2 ** (semitones / 12)`` times its length, then played that much faster."""
    import tensorflow as tf

    factor = tf.pow(2.0, tf.cast(semitones, tf.float32) / 12.0)
    shifted = resample(time_stretch(audio, 1.0 / factor), factor)
    samples = tf.size(audio)
    shifted = shifted[:samples]
    return tf.pad(shifted, [[0, samples - tf.size(shifted)]])


def pitch_perturb(audio: tf.Tensor, seed: tf.Tensor, semitones: Sequence[float]) -> tf.Tensor:
    """Shift ``audio``'s pitch by a number of semitones drawn uniformly from
    ``(low, high)`` with the stateless ``seed``."""
    import tensorflow as tf

    if not semitones:
        return audio
    low, high = semitones
    shift = tf.random.stateless_uniform([], seed, minval=low, maxval=high)
    return pitch_shift(audio, shift)


def coloured_noise(samples: tf.Tensor, slope: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """``samples`` of Gaussian noise whose power spectrum falls as ``f ** slope`` (0 white,
    -1 pink, -2 brown)."""
    import tensorflow as tf

    block = tf.maximum(1, -(-samples // FFT_BLOCK)) * FFT_BLOCK
    white = tf.random.stateless_normal([block], seed)
    spectrum = tf.signal.rfft(white)
    frequencies = tf.maximum(tf.range(tf.size(spectrum), dtype=tf.float32), 1.0)
    shaped = spectrum * tf.cast(tf.pow(frequencies, slope / 2.0), tf.complex64)
    return tf.signal.irfft(shaped, [block])[:samples]


def add_noise(audio: tf.Tensor, seed: tf.Tensor, snr_db: Sequence[float],
              bank: tf.Tensor | None = None) -> tf.Tensor:
    """``audio`` plus noise at a signal-to-noise ratio drawn uniformly from ``(low, high)`` dB:
    a random stretch of ``bank`` (looped when shorter), else synthesised coloured noise."""
    import tensorflow as tf

    if not snr_db:
        return audio
    snr_seed, slope_seed, noise_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 3))
    low, high = snr_db
    snr = tf.random.stateless_uniform([], snr_seed, minval=low, maxval=high)
    samples = tf.size(audio)
    if bank is None:
        slope = tf.random.stateless_uniform([], slope_seed, minval=-2.0, maxval=0.0)
        noise = coloured_noise(samples, slope, noise_seed)
    else:
        start = tf.random.stateless_uniform([], noise_seed, minval=0, maxval=tf.size(bank),
                                            dtype=tf.int32)
        noise = tf.gather(bank, (start + tf.range(samples)) % tf.size(bank))
    signal_power = tf.reduce_mean(tf.square(audio)) + 1e-10
    noise_power = tf.reduce_mean(tf.square(noise)) + 1e-10
    scale = tf.sqrt(signal_power / (noise_power * tf.pow(10.0, snr / 10.0)))
    return audio + scale * noise
