"""Data augmentation inside the TensorFlow graph: speed, pitch, vocal tract, formants, room,
noise and SpecAugment.

Each is off unless asked for, and each is *seeded*: every random choice comes from TensorFlow's
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
- Vocal-tract-length perturbation (VTLP; Jaitly & Hinton, 2013): the frequency axis is warped
  by a factor ``alpha`` drawn uniformly from ``vtlp_alpha`` (0.9-1.1 in the paper), linearly up to a
  boundary (``4800 Hz * min(alpha, 1) / alpha``) and piecewise linearly above it so that the
  Nyquist frequency maps to itself: formants move as with a shorter or longer vocal tract while
  the pitch's harmonics move with them and the tempo stays. The paper warps the power spectrum
  before the mel filterbank; here the warp is done on the audio's STFT (magnitudes read at the
  source frequency, phases advanced at the warped instantaneous frequency, as a phase vocoder),
  because features come from pluggable extractors that see only audio: one STFT and its
  inverse per utterance, as pitch perturbation costs.
- Formant shift: the formants move by a ratio drawn from ``formant_ratio`` (VTLP's line) while
  the pitch, tempo and loudness stay: each STFT frame's spectral envelope (its cepstrum below
  1.5 ms) is warped and what rides on it (the harmonics, the phases) is not, so the same voice
  comes through another vocal tract, which VTLP and pitch shifts (both move the harmonics too)
  cannot give.
- Room reverberation: the utterance convolved (FFT convolution, cut to its length) with a room
  impulse response, for a share ``reverb_prob`` of the utterances (the others stay dry):
  synthesised per utterance (a direct path of 1.0, a 2-10 ms pre-delay, then Gaussian noise
  decaying 60 dB in an RT60 drawn from ``reverb_rt60``, at a direct-to-reverberant energy ratio
  drawn from ``reverb_drr_db``), or drawn from ``rir_folder``'s recorded responses, each aligned
  on its direct path (the largest sample, moved to the start and scaled to 1) so the dry sound
  keeps its level and its timing. A model trained on close-talk speech alone fails in rooms;
  this is the cheap way to show it rooms.
- Additive noise at a signal-to-noise ratio drawn uniformly from a range (dB, over the
  utterance's mean power): a random stretch of a noise bank (recordings loaded from a folder),
  or, without one, synthesised coloured noise whose power falls as ``f ** slope`` with the slope
  drawn from white (0) to brown (-2).

TensorFlow is imported inside the functions (see :mod:`asrkit.hookspecs`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from asrkit.core.frames import SAMPLE_RATE

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


def _stft(audio: tf.Tensor) -> tf.Tensor:
    """The STFT that time stretching, VTLP and formant shifts change, over ``audio`` padded by
    a whole window each side (so its edges are in whole windows)."""
    import tensorflow as tf

    padded = tf.pad(audio, [[STRETCH_FFT, STRETCH_FFT]])
    return tf.signal.stft(padded, STRETCH_FFT, STRETCH_HOP, pad_end=True)


def _istft(stft: tf.Tensor, audio: tf.Tensor, start: tf.Tensor | int = STRETCH_FFT,
           length: tf.Tensor | None = None) -> tf.Tensor:
    """The audio of a changed :func:`_stft`: ``length`` samples (``audio``'s by default) from
    ``start``, at ``audio``'s loudness (overlap-adding frames whose neighbouring bins' phases
    disagree, as a change of speech leaves them, loses a quarter of the energy or more)."""
    import tensorflow as tf

    window = tf.signal.inverse_stft_window_fn(STRETCH_HOP)
    signal = tf.signal.inverse_stft(stft, STRETCH_FFT, STRETCH_HOP, window_fn=window)
    signal = signal[start:start + (tf.size(audio) if length is None else length)]
    gain = tf.sqrt((tf.reduce_mean(tf.square(audio)) + 1e-12)
                   / (tf.reduce_mean(tf.square(signal)) + 1e-12))
    return signal * gain


def time_stretch(audio: tf.Tensor, rate: float | tf.Tensor) -> tf.Tensor:
    """Play ``audio`` ``rate`` times faster at the same pitch (a phase vocoder)."""
    import math

    import tensorflow as tf

    rate = tf.cast(rate, tf.float32)
    samples = tf.size(audio)
    stft = _stft(audio)
    frames, bins = tf.shape(stft)[0], STRETCH_FFT // 2 + 1
    positions = tf.range(0.0, tf.cast(frames - 1, tf.float32), rate)
    # A float range can end on its limit itself (620 / rate rounded up to 662 elements, the
    # last 661 * rate = 620.0): that position reads the last frame, not one past it.
    index = tf.minimum(tf.cast(tf.floor(positions), tf.int32), frames - 2)
    weight = tf.clip_by_value(positions - tf.cast(index, tf.float32), 0.0, 1.0)[:, tf.newaxis]
    left, right = tf.gather(stft, index), tf.gather(stft, index + 1)
    magnitude = (1 - weight) * tf.abs(left) + weight * tf.abs(right)
    expected = 2 * math.pi * STRETCH_HOP * tf.range(bins, dtype=tf.float32) / STRETCH_FFT
    advance = tf.math.angle(right) - tf.math.angle(left) - expected
    advance -= 2 * math.pi * tf.round(advance / (2 * math.pi))
    phase = tf.math.angle(stft[0]) + tf.cumsum(expected + advance, axis=0, exclusive=True)
    out = tf.complex(magnitude * tf.cos(phase), magnitude * tf.sin(phase))
    length = tf.cast(tf.round(tf.cast(samples, tf.float32) / rate), tf.int32)
    return _istft(out, audio, tf.cast(tf.round(STRETCH_FFT / rate), tf.int32), length)


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


# -- vocal-tract-length perturbation ------------------------------------------------------------

#: VTLP's boundary frequency ``F_hi`` (Jaitly & Hinton's 4,800 Hz): the warp is linear below
#: ``F_hi * min(alpha, 1) / alpha`` and bends above it so that the Nyquist frequency stays put.
VTLP_HIGH_HZ = 4800.0


def vtlp_frequency(frequency: tf.Tensor, alpha: float | tf.Tensor, nyquist: float,
                   high: float = VTLP_HIGH_HZ) -> tf.Tensor:
    """Jaitly & Hinton's piecewise-linear warp of ``frequency`` (any unit, as ``nyquist`` and
    ``high``): ``f * alpha`` up to the boundary ``high * min(alpha, 1) / alpha``, then the line
    from the boundary's image to ``(nyquist, nyquist)``, so no content leaves the band."""
    import tensorflow as tf

    alpha = tf.cast(alpha, tf.float32)
    corner = high * tf.minimum(alpha, 1.0)  # where the boundary lands
    boundary = corner / alpha
    slope = (nyquist - corner) / (nyquist - boundary)
    return tf.where(frequency <= boundary, frequency * alpha,
                    nyquist - slope * (nyquist - frequency))


def _vtlp_source(frequency: tf.Tensor, alpha: tf.Tensor, nyquist: float,
                 high: float) -> tf.Tensor:
    """The inverse of :func:`vtlp_frequency`: which frequency lands on ``frequency``."""
    import tensorflow as tf

    corner = high * tf.minimum(alpha, 1.0)
    boundary = corner / alpha
    slope = (nyquist - corner) / (nyquist - boundary)
    return tf.where(frequency <= corner, frequency / alpha,
                    nyquist - (nyquist - frequency) / slope)


def _source_bins(alpha: tf.Tensor, high_hz: float) -> tf.Tensor:
    """For each bin of a :func:`_stft`, the fractional bin whose content VTLP's warp by
    ``alpha`` (boundary ``high_hz``) moves there: what VTLP and formant shifts read."""
    import tensorflow as tf

    nyquist, high = STRETCH_FFT / 2, high_hz * STRETCH_FFT / SAMPLE_RATE  # in bins
    return _vtlp_source(tf.range(STRETCH_FFT // 2 + 1, dtype=tf.float32), alpha, nyquist, high)


def _interpolate_bins(values: tf.Tensor, positions: tf.Tensor) -> tf.Tensor:
    """``values`` ``[frames, bins]`` read at fractional bin ``positions`` ``[bins]``, linearly."""
    import tensorflow as tf

    last = tf.shape(values)[1] - 1
    low = tf.clip_by_value(tf.cast(tf.floor(positions), tf.int32), 0, last - 1)
    weight = tf.clip_by_value(positions - tf.cast(low, tf.float32), 0.0, 1.0)
    return ((1 - weight) * tf.gather(values, low, axis=1)
            + weight * tf.gather(values, low + 1, axis=1))


def vtlp_warp(audio: tf.Tensor, alpha: float | tf.Tensor, high_hz: float = VTLP_HIGH_HZ
              ) -> tf.Tensor:
    """``audio`` with its frequency axis warped by :func:`vtlp_frequency` and its length kept:
    a longer or shorter vocal tract with the same tempo and the same loudness.

    Done on the audio, so that it suits every feature extractor: each STFT bin takes the
    magnitude found at its source frequency, and its phase advances at the warped instantaneous
    frequency measured there (a phase vocoder across frequency), so a tone at ``f`` comes out at
    ``vtlp_frequency(f)``; ``alpha = 1`` gives the audio back."""
    import math

    import tensorflow as tf

    alpha = tf.cast(alpha, tf.float32)
    bins = STRETCH_FFT // 2 + 1
    stft = _stft(audio)
    nyquist, high = STRETCH_FFT / 2, high_hz * STRETCH_FFT / SAMPLE_RATE  # in bins
    source = _source_bins(alpha, high_hz)
    # Each bin's instantaneous frequency (in bins) from its phase advance between frames.
    per_bin = 2 * math.pi * STRETCH_HOP / STRETCH_FFT
    phase = tf.math.angle(stft)
    expected = per_bin * tf.range(bins, dtype=tf.float32)
    deviation = phase[1:] - phase[:-1] - expected
    deviation -= 2 * math.pi * tf.round(deviation / (2 * math.pi))
    measured = tf.range(bins, dtype=tf.float32) + deviation / per_bin
    measured = tf.concat([measured[:1], measured], axis=0)
    warped = vtlp_frequency(_interpolate_bins(measured, source), alpha, nyquist, high)
    # Advances wrapped to (-pi, pi] before summing: the sum stays small, and precise.
    advance = per_bin * warped[1:]
    advance -= 2 * math.pi * tf.round(advance / (2 * math.pi))
    start = tf.gather(phase[0], tf.clip_by_value(tf.cast(tf.round(source), tf.int32), 0,
                                                 bins - 1))
    phases = start + tf.cumsum(tf.pad(advance, [[1, 0], [0, 0]]), axis=0)
    magnitude = _interpolate_bins(tf.abs(stft), source)
    return _istft(tf.complex(magnitude * tf.cos(phases), magnitude * tf.sin(phases)), audio)


def vtlp_perturb(audio: tf.Tensor, seed: tf.Tensor, alpha: Sequence[float]) -> tf.Tensor:
    """Warp ``audio`` by a factor drawn uniformly from ``(low, high)`` with the stateless
    ``seed`` (:func:`vtlp_warp`)."""
    import tensorflow as tf

    if not alpha:
        return audio
    low, high = alpha
    return vtlp_warp(audio, tf.random.stateless_uniform([], seed, minval=low, maxval=high))


# -- formant shift ------------------------------------------------------------------------------

#: A frame's spectral envelope is its real cepstrum below this quefrency (1.5 ms, 24 samples at
#: 16 kHz): shorter than the pitch period of any voice (2.5 ms at 400 Hz), so the envelope
#: holds the formants and none of the harmonics.
ENVELOPE_SECONDS = 0.0015


def log_envelope(magnitude: tf.Tensor) -> tf.Tensor:
    """The log spectral envelope of each frame of an STFT's ``magnitude`` ``[frames, bins]``:
    the log magnitude's real cepstrum liftered below :data:`ENVELOPE_SECONDS`, back in bins."""
    import tensorflow as tf

    size = 2 * (magnitude.shape[-1] - 1)
    cepstrum = tf.signal.irfft(tf.complex(tf.math.log(magnitude + 1e-6),
                                          tf.zeros_like(magnitude)))
    keep = int(ENVELOPE_SECONDS * SAMPLE_RATE)
    quefrency = tf.range(size)
    lifter = tf.cast((quefrency <= keep) | (quefrency >= size - keep), tf.float32)
    return tf.math.real(tf.signal.rfft(cepstrum * lifter))


def formant_shift(audio: tf.Tensor, ratio: float | tf.Tensor, high_hz: float = VTLP_HIGH_HZ
                  ) -> tf.Tensor:
    """``audio`` with its formants moved by ``ratio`` (VTLP's piecewise line,
    :func:`vtlp_frequency`) and its pitch, tempo and loudness kept: another speaker's vocal
    tract with the same voice, which VTLP (formants and harmonics together) and pitch shifts
    (both again) cannot give.

    Each STFT frame is split into its spectral envelope (:func:`log_envelope`) and what rides on
    it (the harmonics, the phases); only the envelope is warped, so every harmonic stays at its
    frequency with the loudness the new envelope gives it there. Praat's "change gender" and
    WORLD's formant shifts make the same split; the cepstral envelope is the cheap one, one
    more FFT pair a frame, all of it in the graph. ``ratio = 1`` gives the audio back."""
    import tensorflow as tf

    stft = _stft(audio)
    envelope = log_envelope(tf.abs(stft))
    source = _source_bins(tf.cast(ratio, tf.float32), high_hz)
    gain = tf.exp(_interpolate_bins(envelope, source) - envelope)
    return _istft(stft * tf.complex(gain, tf.zeros_like(gain)), audio)


def formant_perturb(audio: tf.Tensor, seed: tf.Tensor, ratio: Sequence[float]) -> tf.Tensor:
    """Move ``audio``'s formants by a ratio drawn uniformly from ``(low, high)`` with the
    stateless ``seed`` (:func:`formant_shift`)."""
    import tensorflow as tf

    if not ratio:
        return audio
    low, high = ratio
    return formant_shift(audio, tf.random.stateless_uniform([], seed, minval=low, maxval=high))


# -- reverberation ------------------------------------------------------------------------------

#: A synthesised room's reverberant tail starts this long after the direct path (seconds, drawn
#: uniformly): the first reflections arrive a few milliseconds after the direct sound.
PREDELAY_SECONDS = (0.002, 0.01)
#: ``ln(1000)``: the amplitude falls 60 dB (a factor 1000) in one RT60.
SIXTY_DB = 6.907755278982137


class RirBank(NamedTuple):
    """Room impulse responses, each aligned on its direct path (index 0, amplitude 1), end to end
    in ``samples``; response ``i`` is ``samples[starts[i]:starts[i + 1]]``."""

    samples: tf.Tensor
    starts: tf.Tensor


def synthetic_rir(seed: tf.Tensor, rt60: Sequence[float], drr_db: Sequence[float]
                  ) -> tf.Tensor:
    """A room impulse response: the direct path (1.0 at index 0), silence for a pre-delay, then
    Gaussian noise decaying 60 dB in an RT60 drawn from ``rt60`` (seconds), scaled so the direct
    path's energy over the tail's is a ratio drawn from ``drr_db`` (dB). The response ends where
    the tail is 60 dB down."""
    import tensorflow as tf

    rt60_seed, drr_seed, delay_seed, noise_seed = tf.unstack(
        tf.random.experimental.stateless_split(seed, 4))
    time60 = tf.random.stateless_uniform([], rt60_seed, minval=rt60[0], maxval=rt60[1])
    drr = tf.random.stateless_uniform([], drr_seed, minval=drr_db[0], maxval=drr_db[1])
    delay = tf.random.stateless_uniform(
        [], delay_seed, minval=round(PREDELAY_SECONDS[0] * SAMPLE_RATE),
        maxval=round(PREDELAY_SECONDS[1] * SAMPLE_RATE) + 1, dtype=tf.int32)
    length = tf.cast(tf.math.ceil(time60 * SAMPLE_RATE), tf.int32)
    seconds = tf.range(length, dtype=tf.float32) / SAMPLE_RATE
    tail = tf.random.stateless_normal([length], noise_seed) * tf.exp(-SIXTY_DB * seconds / time60)
    tail *= tf.sqrt(tf.pow(10.0, -drr / 10.0) / tf.reduce_sum(tf.square(tail)))
    return tf.concat([[1.0], tf.zeros([delay - 1]), tail], axis=0)


def bank_rir(bank: RirBank, seed: tf.Tensor) -> tf.Tensor:
    """One of ``bank``'s responses, drawn uniformly with the stateless ``seed``."""
    import tensorflow as tf

    count = tf.size(bank.starts) - 1
    index = tf.random.stateless_uniform([], seed, minval=0, maxval=count, dtype=tf.int32)
    return bank.samples[bank.starts[index]:bank.starts[index + 1]]


def convolve(audio: tf.Tensor, rir: tf.Tensor) -> tf.Tensor:
    """``audio`` convolved with ``rir`` by FFT, cut to ``audio``'s length (the tail that rings
    on past the end is dropped, as the labels end there)."""
    import tensorflow as tf

    samples = tf.size(audio)
    total = samples + tf.size(rir) - 1
    block = tf.maximum(1, -(-total // FFT_BLOCK)) * FFT_BLOCK
    spectrum = tf.signal.rfft(audio, [block]) * tf.signal.rfft(rir, [block])
    return tf.signal.irfft(spectrum, [block])[:samples]


def add_reverb(audio: tf.Tensor, seed: tf.Tensor, *, rt60: Sequence[float] = (),
               drr_db: Sequence[float] = (0.0, 10.0), probability: float = 1.0,
               bank: RirBank | None = None) -> tf.Tensor:
    """``audio`` in a room, with ``probability``: convolved with one of ``bank``'s responses,
    else with a :func:`synthetic_rir` of ``rt60`` and ``drr_db``; unchanged without either."""
    import tensorflow as tf

    if bank is None and not rt60:
        return audio
    draw_seed, rir_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))

    def wet() -> tf.Tensor:
        rir = bank_rir(bank, rir_seed) if bank is not None else synthetic_rir(
            rir_seed, rt60, drr_db)
        return convolve(audio, rir)

    wetted = tf.random.stateless_uniform([], draw_seed) < probability
    return tf.cond(wetted, wet, lambda: tf.identity(audio))
