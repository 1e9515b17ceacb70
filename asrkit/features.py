"""Feature extractors computed inside the TensorFlow graph, and the context windows of Deep Speech.

Why in the graph: features computed with ``tf.signal`` run inside ``tf.data`` (in parallel, ahead
of the model) or on the accelerator, so training never waits for a Python loop. Two extractors are
registered through the ``register_features`` hook:

``mfcc``
    Deep Speech's input: python_speech_features' ``mfcc`` with the notebook's settings (26 cepstra
    at 16 kHz, 25 ms rectangular window, 10 ms step, pre-emphasis 0.97, 26 filters, 512-point FFT,
    lifter 22, c0 replaced by the log frame energy). python_speech_features is the reference:
    tf.signal's defaults differ in every step (window, filterbank shape, lifter, energy), so each
    step here reproduces python_speech_features' own formula, including its mel filterbank
    (triangles on FFT bins, built in numpy with the same arithmetic) and its framing (the last
    frame is zero-padded; ``1 + ceil((samples - window) / step)`` frames).
``logmel``
    80 log mel filterbank energies (Hann window, HTK mel scale as ``tf.signal`` builds it), the
    input of modern convolutional/transformer CTC models. With ``kaldi=true`` it computes
    Kaldi's ``fbank`` instead, exactly as kaldi-native-fbank does under sherpa-onnx's settings
    (:func:`kaldi_fbank`), so that a run trained on it exports to sherpa-onnx, which computes
    its features itself (:mod:`asrkit.serving.export_sherpa`).

Both take float32 audio in [-1, 1] at 16 kHz, shape ``[samples]`` (``extract``) or a padded batch
``[batch, samples]`` with lengths (``extract_batch``), and can normalise each utterance (mean and
variance per coefficient, one mean and variance for the whole utterance, as the notebook did, or
a causal running mean per coefficient, which a stream of audio can compute as it arrives).

TensorFlow and numpy are imported inside the functions: this module is loaded on every start of
the command line (it is a plugin entry point) and must stay cheap to import.
"""

from __future__ import annotations

import functools
from abc import abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from asrkit import hookimpl
from asrkit.core.frames import FeatureError, count_frames, frame_geometry
from asrkit.core.settings import setting, validate
from asrkit.hookspecs import Register
from asrkit.types import FeatureConfig, FeatureExtractor

if TYPE_CHECKING:
    import numpy as np
    import tensorflow as tf

#: python_speech_features floors filterbank energies and frame energies at float64 epsilon before
#: the log (``numpy.finfo(float).eps``); the same floor keeps silent frames identical.
FLOAT64_EPS = 2.220446049250313e-16
#: 2**15: the notebook read 16-bit WAV files as integers, so its MFCCs are of int16-scaled audio.
INT16_SCALE = 32768.0
#: Per-utterance normalisation modes: none; zero mean and unit variance for each coefficient over
#: the utterance's frames (CMVN); one mean and variance over all the utterance's values (the
#: notebook's whitening); or "running", causal mean normalisation: each coefficient minus its
#: mean over the frames so far (0..t), which a stream can compute as audio arrives
#: (:mod:`asrkit.serving.stream_features`) where the other two need the whole utterance.
NORMALIZATIONS = ("none", "feature", "utterance", "running")
#: The modes that need only the frames so far, so that a stream computes them as it goes.
CAUSAL_NORMALIZATIONS = ("none", "running")
#: Added to variances before dividing, so a constant coefficient does not divide by zero.
NORMALIZE_EPSILON = 1e-5


# -- configurations -----------------------------------------------------------------------------

#: Maxima of the extractors' settings: filters and cepstra a frame, an FFT's length (4 s at
#: 16 kHz), frequencies (the Nyquist frequency of 192 kHz audio), and the audio's scale (beyond
#: it, float32 powers overflow).
MAX_BINS, MAX_FFT, MAX_HZ, MAX_PCM_SCALE = 1024, 65_536, 96_000.0, 1e6


@dataclass(frozen=True)
class MFCCConfig(FeatureConfig):
    """python_speech_features' ``mfcc`` parameters; the defaults are the Deep Speech notebook's
    (with :class:`~asrkit.types.FeatureConfig`'s framing: 25 ms windows every 10 ms, 16 kHz)."""

    num_cepstra: int = setting(26, min=1, max=MAX_BINS)
    num_filters: int = setting(26, min=1, max=MAX_BINS)
    fft_length: int = setting(512, min=1, max=MAX_FFT)
    preemphasis: float = setting(0.97, min=0, max=1)
    lifter: int = setting(22, min=0, max=1000)
    append_energy: bool = True
    low_hz: float = setting(0.0, min=0, max=MAX_HZ)
    high_hz: float | None = setting(None, above=0, max=MAX_HZ)  # None: the Nyquist frequency
    #: Audio is multiplied by this before analysis. 32768 reproduces the notebook, which computed
    #: MFCCs of int16 samples; 1.0 analyses [-1, 1] floats. Only c0 changes (by 2 ln(scale)).
    pcm_scale: float = setting(INT16_SCALE, above=0, max=MAX_PCM_SCALE)
    normalize: str = setting("none", choices=NORMALIZATIONS)

    def __post_init__(self) -> None:
        validate(self, FeatureError)
        _check_common(self)
        if not 0 < self.num_cepstra <= self.num_filters:
            raise FeatureError(
                f"num_cepstra={self.num_cepstra} must be between 1 and num_filters="
                f"{self.num_filters}: the cepstra are the DCT of the filter energies"
            )


@dataclass(frozen=True)
class LogMelConfig(FeatureConfig):
    """Log mel filterbank energies, as modern CTC models (Conformer, QuartzNet) read them."""

    num_mel_bins: int = setting(80, min=1, max=MAX_BINS)
    fft_length: int = setting(512, min=1, max=MAX_FFT)
    preemphasis: float = setting(0.97, min=0, max=1)
    #: "hann" (periodic, as tf.signal and torch use) or "rectangular".
    window: str = setting("hann", choices=("hann", "rectangular"))
    low_hz: float = setting(0.0, min=0, max=MAX_HZ)
    high_hz: float | None = setting(None, above=0, max=MAX_HZ)
    #: Added to the mel energies before the log (NeMo's 2**-24), so silence stays finite.
    log_guard: float = setting(2.0**-24, above=0, max=1)
    pcm_scale: float = setting(1.0, above=0, max=MAX_PCM_SCALE)
    normalize: str = setting("none", choices=NORMALIZATIONS)
    #: Kaldi's fbank (as kaldi-native-fbank and sherpa-onnx compute it) instead: frames centred
    #: on multiples of the step with the ends reflected (``snip_edges=false``), each frame's DC
    #: offset removed and pre-emphasised on its own, the povey window, Kaldi's mel banks (HTK
    #: scale, no Nyquist bin), the log floored at float32's epsilon instead of ``log_guard``.
    #: sherpa-onnx's defaults are ``low_hz=20``, ``high_hz=7600``.
    kaldi: bool = False

    def __post_init__(self) -> None:
        validate(self, FeatureError)
        _check_common(self)
        if self.kaldi and self.window != "hann":
            raise FeatureError(f"window={self.window} does not apply with kaldi=true: Kaldi's "
                               "fbank uses the povey window (leave window at its default)")

    @property
    def centred_frames(self) -> bool:
        """Kaldi's fbank frames as Kaldi does (``snip_edges=false``)."""
        return self.kaldi


def _check_common(config: MFCCConfig | LogMelConfig) -> None:
    """What the two configurations share beyond each field's own range: consistent framing and
    a frequency band inside the Nyquist frequency."""
    window, step = frame_geometry(config)
    if not 0 < step <= window <= config.fft_length:
        raise FeatureError(
            f"need 0 < step ({step} samples) <= window ({window}) <= fft_length "
            f"({config.fft_length})"
        )
    high = config.high_hz or config.sample_rate / 2
    if not 0 <= config.low_hz < high <= config.sample_rate / 2:
        raise FeatureError(
            f"need 0 <= low_hz ({config.low_hz}) < high_hz ({high}) <= sample_rate / 2"
        )


# -- the spectrum (frame counts are asrkit.core.frames') -------------------------------------------


def _preemphasize(audio: tf.Tensor | np.ndarray, coefficient: float) -> tf.Tensor | np.ndarray:
    """``y[0] = x[0]``, ``y[n] = x[n] - a x[n-1]`` along the last axis. A float32 numpy array
    stays one (with the same float32 arithmetic, so the same values): a stream of audio
    (:mod:`asrkit.serving.stream_features`) pre-emphasises its pieces without a TensorFlow call."""
    import numpy as np
    import tensorflow as tf

    if coefficient == 0:
        return audio
    rest = audio[..., 1:] - coefficient * audio[..., :-1]
    if isinstance(audio, np.ndarray):
        return np.concatenate([audio[..., :1], rest.astype(audio.dtype, copy=False)], axis=-1)
    return tf.concat([audio[..., :1], rest], axis=-1)


def _squared_magnitude(frames: tf.Tensor, fft_length: int, window: np.ndarray | None) -> tf.Tensor:
    """``|FFT|^2`` of each frame. python_speech_features' power spectrum is this divided by
    ``fft_length`` (of audio times ``pcm_scale``); the extractors fold both constants into their
    filterbank matrices, which saves two passes over the data."""
    import tensorflow as tf

    if window is not None:
        frames = frames * tf.constant(window, tf.float32)
    spectrum = tf.signal.rfft(frames, [fft_length])
    real, imag = tf.math.real(spectrum), tf.math.imag(spectrum)
    return real * real + imag * imag


def _power_scale(config: MFCCConfig | LogMelConfig) -> float:
    """The factor from ``|FFT|^2`` of [-1, 1] audio to the power spectrum of scaled audio."""
    return config.pcm_scale**2 / config.fft_length


# -- constant matrices, built once per configuration in float64 numpy ---------------------------


def _hz_to_mel_psf(hz: float) -> float:
    import numpy as np

    return 2595 * np.log10(1 + hz / 700.0)


def _mel_to_hz_psf(mel: np.ndarray) -> np.ndarray:
    return 700 * (10 ** (mel / 2595.0) - 1)


@functools.lru_cache(maxsize=32)
def psf_filterbank(
    num_filters: int, fft_length: int, sample_rate: int, low_hz: float, high_hz: float | None
) -> np.ndarray:
    """python_speech_features' ``get_filterbanks``: ``[num_filters, fft_length // 2 + 1]``.

    Its triangles start, peak and end on whole FFT bins (the mel points are floored to bins), which
    is why a smooth mel matrix such as tf.signal's does not reproduce its MFCCs.
    """
    import numpy as np

    high_hz = high_hz or sample_rate / 2
    mels = np.linspace(_hz_to_mel_psf(low_hz), _hz_to_mel_psf(high_hz), num_filters + 2)
    bins = np.floor((fft_length + 1) * _mel_to_hz_psf(mels) / sample_rate)
    bank = np.zeros([num_filters, fft_length // 2 + 1])
    for j in range(num_filters):
        left, centre, right = bins[j], bins[j + 1], bins[j + 2]
        for i in range(int(left), int(centre)):
            bank[j, i] = (i - left) / (centre - left)
        for i in range(int(centre), int(right)):
            bank[j, i] = (right - i) / (right - centre)
    return bank


@functools.lru_cache(maxsize=32)
def _mfcc_matrices(config: MFCCConfig) -> tuple[np.ndarray, np.ndarray]:
    """Two matrices that turn a power spectrum into MFCCs with two matrix multiplies.

    ``energies = |FFT|^2 @ first`` gives the filter energies plus, in the last column, the total
    frame energy (a column of ones), scaled to python_speech_features' power spectrum.
    ``log(energies) @ second`` is the orthonormal DCT-II of the log filter energies, truncated,
    liftered, and with c0 taken from the log energy row.
    """
    import numpy as np

    bank = psf_filterbank(
        config.num_filters, config.fft_length, config.sample_rate, config.low_hz, config.high_hz
    )
    first = np.concatenate([bank.T, np.ones([bank.shape[1], 1])], axis=1) * _power_scale(config)

    n = config.num_filters
    k = np.arange(config.num_cepstra)[None, :]
    i = np.arange(n)[:, None]
    dct = np.cos(np.pi * k * (2 * i + 1) / (2 * n)) * np.sqrt(2.0 / n)  # [filters, cepstra]
    dct[:, 0] = np.sqrt(1.0 / n)
    if config.lifter > 0:
        dct = dct * (1 + (config.lifter / 2.0) * np.sin(np.pi * k / config.lifter))
    energy_row = np.zeros([1, config.num_cepstra])
    if config.append_energy:
        dct[:, 0] = 0.0
        energy_row[0, 0] = 1.0
    second = np.concatenate([dct, energy_row], axis=0)
    return first.astype(np.float32), second.astype(np.float32)


@functools.lru_cache(maxsize=32)
def htk_mel_matrix(
    num_mel_bins: int, fft_length: int, sample_rate: int, low_hz: float, high_hz: float | None
) -> np.ndarray:
    """``tf.signal.linear_to_mel_weight_matrix``'s formula in numpy: ``[bins, num_mel_bins]``
    triangles on the HTK mel scale evaluated at each FFT bin's frequency; the DC bin is zero."""
    import numpy as np

    high_hz = high_hz or sample_rate / 2
    num_bins = fft_length // 2 + 1

    def mel(hz: float | np.ndarray) -> np.ndarray:
        return 1127.0 * np.log1p(np.asarray(hz) / 700.0)

    bin_mels = mel(np.linspace(0.0, sample_rate / 2, num_bins))[1:, None]
    edges = np.linspace(mel(low_hz), mel(high_hz), num_mel_bins + 2)
    lower, centre, upper = edges[:-2], edges[1:-1], edges[2:]
    rising = (bin_mels - lower) / (centre - lower)
    falling = (upper - bin_mels) / (upper - centre)
    weights = np.maximum(0.0, np.minimum(rising, falling))
    return np.pad(weights, [[1, 0], [0, 0]]).astype(np.float32)


@functools.lru_cache(maxsize=32)
def kaldi_mel_matrix(num_mel_bins: int, fft_length: int, sample_rate: int, low_hz: float,
                     high_hz: float | None) -> np.ndarray:
    """Kaldi's ``MelBanks`` as kaldi-native-fbank builds them, in the same float32 arithmetic:
    ``[fft_length // 2 + 1, num_mel_bins]`` triangles on the HTK mel scale
    (``1127 ln(1 + f / 700)``) over ``[low_hz, high_hz]``, evaluated at each FFT bin's
    frequency, strictly inside each triangle; the Nyquist bin has no weight (Kaldi leaves it
    out)."""
    import numpy as np

    f32 = np.float32
    high = f32(high_hz or sample_rate / 2)

    def mel(hz: np.ndarray) -> np.ndarray:
        return f32(1127.0) * np.log(f32(1.0) + np.asarray(hz, f32) / f32(700.0))

    low_mel, high_mel = mel(f32(low_hz)), mel(high)
    delta = (high_mel - low_mel) / f32(num_mel_bins + 1)
    bins = fft_length // 2
    bin_mels = mel(f32(sample_rate / fft_length) * np.arange(bins, dtype=f32))[:, None]
    index = np.arange(num_mel_bins, dtype=f32)[None, :]
    left, centre = low_mel + index * delta, low_mel + (index + 1) * delta
    right = low_mel + (index + 2) * delta
    rising = (bin_mels - left) / (centre - left)
    falling = (right - bin_mels) / (right - centre)
    weights = np.where(bin_mels <= centre, rising, falling)
    weights = np.where((bin_mels > left) & (bin_mels < right), weights, f32(0))
    return np.pad(weights, [[0, 1], [0, 0]]).astype(np.float32)


@functools.lru_cache(maxsize=8)
def _povey_window(length: int) -> np.ndarray:
    """Kaldi's default window: a Hann window (over ``length - 1``) to the power 0.85."""
    import numpy as np

    n = np.arange(length, dtype=np.float64)
    return ((0.5 - 0.5 * np.cos(2 * np.pi * n / (length - 1))) ** 0.85).astype(np.float32)


#: Kaldi floors the mel energies at float32's epsilon before the log.
FLOAT32_EPS = 1.1920928955078125e-07


def kaldi_fbank(audio: tf.Tensor, lengths: tf.Tensor, config: LogMelConfig
                ) -> tuple[tf.Tensor, tf.Tensor]:
    """Kaldi's log mel filterbank energies of a zero-padded batch ``[batch, samples]`` with
    ``lengths``: ``([batch, frames, num_mel_bins], frame_lengths)``, frames past an
    utterance's end zero. What kaldi-native-fbank's ``OnlineFbank`` computes with sherpa-onnx's
    options (dither 0, ``snip_edges=false``, ``remove_dc_offset``, povey window, Kaldi mel
    banks, ``use_log_fbank``), the window, step, FFT length, pre-emphasis and band the
    config's:

    - frame ``t`` holds samples ``t * step + step // 2 - window // 2`` on; samples before the
      start or past the end are reflected (``-s - 1``, ``2 n - 1 - s``, until inside);
    - each frame loses its mean, then is pre-emphasised on its own
      (``y[0] = x[0] - a x[0]``), windowed and zero-padded to ``fft_length``;
    - ``log(max(|FFT|^2 @ mel_banks, float32 epsilon))``, the power of audio times
      ``pcm_scale`` (sherpa-onnx feeds [-1, 1] samples: scale 1).
    """
    import tensorflow as tf

    window, step = frame_geometry(config)
    audio = tf.convert_to_tensor(audio, tf.float32)
    lengths = tf.cast(lengths, tf.int32)
    frame_lengths = count_frames(lengths, window, step, centred=True)
    frames = tf.reduce_max(frame_lengths)
    starts = tf.range(frames) * step + (step // 2 - window // 2)
    index = starts[:, tf.newaxis] + tf.range(window)[tf.newaxis, :]       # [frames, window]
    # Reflected until inside, as Kaldi's loop does: the mirror image repeats every 2 n samples.
    n = tf.maximum(lengths, 1)[:, tf.newaxis, tf.newaxis]
    index = tf.math.floormod(index[tf.newaxis], 2 * n)
    index = tf.where(index >= n, 2 * n - 1 - index, index)
    pieces = tf.gather(audio, index, batch_dims=1)                         # [b, frames, window]
    pieces = pieces - tf.reduce_mean(pieces, axis=-1, keepdims=True)
    if config.preemphasis:
        pieces = tf.concat([pieces[..., :1] * (1 - config.preemphasis),
                            pieces[..., 1:] - config.preemphasis * pieces[..., :-1]], axis=-1)
    power = _squared_magnitude(pieces, config.fft_length, _povey_window(window))
    matrix = kaldi_mel_matrix(config.num_mel_bins, config.fft_length, config.sample_rate,
                              config.low_hz, config.high_hz) * config.pcm_scale**2
    features = tf.math.log(tf.maximum(power @ tf.constant(matrix), FLOAT32_EPS))
    mask = tf.sequence_mask(frame_lengths, frames, dtype=tf.float32)[:, :, tf.newaxis]
    return features * mask, frame_lengths


@functools.lru_cache(maxsize=8)
def _periodic_hann(length: int) -> np.ndarray:
    import numpy as np

    return (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(length) / length)).astype(np.float32)


# -- normalisation and context ------------------------------------------------------------------


def running_mean_removed(features: tf.Tensor, mask: tf.Tensor | None, axis: int,
                         carried: tuple[tf.Tensor, tf.Tensor] | None = None) -> Any:
    """``x[t] - mean(x[0..t])`` along ``axis`` (frames), vectorised with ``tf.cumsum``; with a
    ``mask`` (1 on an utterance's frames, 0 on padding) padding neither counts nor survives.
    No variance: a causal variance of a few frames is noise that the division would blow up.

    ``carried``: the sum and count of the frames before these (a streaming export's step,
    :mod:`asrkit.serving.export_stream`, whose frames come a chunk at a time, ``axis`` 0); then
    the result is ``(features, (sum, count))`` with the totals to carry on."""
    import tensorflow as tf

    if mask is None:
        frames = tf.shape(features)[axis]
        count = tf.cast(tf.range(1, frames + 1), features.dtype)[:, tf.newaxis]
        return features - tf.cumsum(features, axis=axis) / count
    sums = tf.cumsum(features * mask, axis=axis)
    counts = tf.cumsum(mask, axis=axis)
    if carried is not None:
        sums, counts = carried[0] + sums, carried[1] + counts
    removed = (features - sums / tf.maximum(counts, 1.0)) * mask
    if carried is None:
        return removed
    return removed, (sums[-1], counts[-1, 0])


def normalize(features: tf.Tensor, mode: str, lengths: tf.Tensor | None = None) -> tf.Tensor:
    """Normalise each utterance: ``mode`` is one of :data:`NORMALIZATIONS`.

    ``features`` is ``[frames, features]`` or a padded batch ``[batch, frames, features]`` with
    ``lengths``; padded frames do not count in the statistics and stay zero.
    """
    import tensorflow as tf

    if mode == "none":
        return features
    if mode not in NORMALIZATIONS:
        raise FeatureError(f"normalize={mode!r} is not one of {', '.join(NORMALIZATIONS)}")
    if features.shape.rank == 2 and lengths is None and mode == "running":
        return running_mean_removed(features, None, axis=0)
    if features.shape.rank == 2 and lengths is None:  # one utterance: no padding to mask
        axes = [0] if mode == "feature" else [0, 1]
        mean, variance = tf.nn.moments(features, axes=axes, keepdims=True)
        return (features - mean) * tf.math.rsqrt(variance + NORMALIZE_EPSILON)
    batched = features.shape.rank == 3
    if not batched:
        features = features[tf.newaxis]
    frames = tf.shape(features)[1]
    if lengths is None:
        lengths = tf.fill([tf.shape(features)[0]], frames)
    mask = tf.sequence_mask(lengths, frames, dtype=features.dtype)[:, :, tf.newaxis]
    if mode == "running":
        result = running_mean_removed(features, mask, axis=1)
        return result if batched else result[0]
    axes = [1] if mode == "feature" else [1, 2]
    count = tf.reduce_sum(mask, axis=1, keepdims=True)
    if mode == "utterance":
        count = count * tf.cast(tf.shape(features)[2], features.dtype)
    count = tf.maximum(count, 1.0)
    mean = tf.reduce_sum(features * mask, axis=axes, keepdims=True) / count
    centred = (features - mean) * mask
    variance = tf.reduce_sum(centred * centred, axis=axes, keepdims=True) / count
    result = centred * tf.math.rsqrt(variance + NORMALIZE_EPSILON)
    return result if batched else result[0]


def context_width(num_features: int, context: int) -> int:
    """Inputs a step with ``context`` frames each side: 26 + 2 * 26 * 9 = 494 for Deep Speech."""
    return num_features * (2 * context + 1)


def context_windows(features: tf.Tensor, context: int) -> tf.Tensor:
    """Stack each frame with ``context`` frames before and after it, as the Deep Speech notebook
    fed its network: ``[..., frames, F] -> [..., frames, (2 * context + 1) * F]``, in time order
    (``x[t-C], ..., x[t], ..., x[t+C]``). Frames beyond the ends are zeros, so on a zero-padded
    batch every utterance gets exactly the windows it would get alone.
    """
    import tensorflow as tf

    if context < 0:
        raise FeatureError(f"context must be >= 0, not {context}")
    if context == 0:
        return features
    rank = features.shape.rank
    paddings = [[0, 0]] * (rank - 2) + [[context, context], [0, 0]]
    padded = tf.pad(features, paddings)
    windows = tf.signal.frame(padded, 2 * context + 1, 1, axis=-2)  # [..., T, 2C+1, F]
    shape = tf.shape(windows)
    width = (2 * context + 1) * features.shape[-1] if features.shape[-1] is not None else -1
    return tf.reshape(windows, tf.concat([shape[:-2], [width]], axis=0))


# -- extractors ---------------------------------------------------------------------------------


class SpectralExtractor(FeatureExtractor):
    """Shared framing of the spectral extractors: pre-emphasis, python_speech_features' framing
    (:mod:`asrkit.core.frames`), power spectrum; subclasses turn the power spectrum into
    features."""

    @abstractmethod
    def _window(self, config: Any) -> np.ndarray | None:
        """The analysis window, or None for a rectangular one."""

    @abstractmethod
    def _from_power(self, power: tf.Tensor, config: Any) -> tf.Tensor:
        """Features ``[..., frames, num_features]`` of ``|FFT|^2`` ``[..., frames, bins]``."""

    def frame_features(self, frames: tf.Tensor | np.ndarray, config: Any) -> tf.Tensor:
        """Un-normalised features ``[..., frames, num_features]`` of frames of pre-emphasised
        samples ``[..., frames, window]``: window, power spectrum and the subclass's features.

        Why one function: ``extract``, ``extract_batch`` and a stream of audio
        (:class:`asrkit.serving.stream_features.FeatureStream`, which frames as samples arrive)
        all call it, so a stream's features cannot drift from the whole utterance's."""
        power = _squared_magnitude(frames, config.fft_length, self._window(config))
        return self._from_power(power, config)

    def extract(self, audio: tf.Tensor | np.ndarray, config: Any) -> tf.Tensor:
        """Features ``[frames, num_features]`` of float32 audio ``[samples]`` in [-1, 1]."""
        import tensorflow as tf

        window, step = frame_geometry(config)
        audio = tf.convert_to_tensor(audio, tf.float32)
        signal = _preemphasize(audio, config.preemphasis)
        frames_count = count_frames(tf.size(signal), window, step)
        padding = (frames_count - 1) * step + window - tf.size(signal)
        frames = tf.signal.frame(tf.pad(signal, [[0, padding]]), window, step)
        return normalize(self.frame_features(frames, config), config.normalize)

    def extract_batch(self, audio: tf.Tensor | np.ndarray, lengths: tf.Tensor | np.ndarray,
                      config: Any) -> tuple[tf.Tensor, tf.Tensor]:
        """Features of a zero-padded batch ``[batch, samples]`` with ``lengths`` (samples):
        ``([batch, frames, num_features], frame_lengths [batch])``. Each utterance gets the
        features ``extract`` gives it alone; frames past its end are zero."""
        import tensorflow as tf

        window, step = frame_geometry(config)
        audio = tf.convert_to_tensor(audio, tf.float32)
        lengths = tf.cast(lengths, tf.int32)
        samples = tf.shape(audio)[1]
        in_range = tf.sequence_mask(lengths, samples, dtype=tf.float32)
        # Pre-emphasis would leak the last sample into the padding; python_speech_features pads
        # with zeros *after* pre-emphasis, so mask after it.
        signal = _preemphasize(audio * in_range, config.preemphasis) * in_range
        frame_lengths = count_frames(lengths, window, step)
        padding = (count_frames(samples, window, step) - 1) * step + window - samples
        frames = tf.signal.frame(tf.pad(signal, [[0, 0], [0, padding]]), window, step)
        features = self.frame_features(frames, config)
        features = features[:, : tf.reduce_max(frame_lengths)]
        mask = tf.sequence_mask(frame_lengths, tf.shape(features)[1], dtype=tf.float32)
        features = normalize(features * mask[:, :, tf.newaxis], config.normalize, frame_lengths)
        return features, frame_lengths


class MFCC(SpectralExtractor):
    """Deep Speech's MFCCs, equal to python_speech_features' ``mfcc`` (see the module docstring)."""

    name = "mfcc"
    description = "MFCC as python_speech_features computes it (Deep Speech's input)"
    Config = MFCCConfig

    def num_features(self, config: MFCCConfig) -> int:
        return config.num_cepstra

    def _window(self, config: MFCCConfig) -> None:
        return None

    def _from_power(self, power: tf.Tensor, config: MFCCConfig) -> tf.Tensor:
        import tensorflow as tf

        first, second = _mfcc_matrices(config)
        energies = power @ tf.constant(first)
        logs = tf.math.log(tf.maximum(energies, FLOAT64_EPS))
        return logs @ tf.constant(second)


class LogMel(SpectralExtractor):
    """Log mel filterbank energies (80 by default) for modern models."""

    name = "logmel"
    description = "log mel filterbank energies (80 bins, Hann window), for modern CTC models"
    Config = LogMelConfig

    def num_features(self, config: LogMelConfig) -> int:
        return config.num_mel_bins

    def extract(self, audio: tf.Tensor | np.ndarray, config: LogMelConfig) -> tf.Tensor:
        if not config.kaldi:
            return super().extract(audio, config)
        import tensorflow as tf

        audio = tf.convert_to_tensor(audio, tf.float32)
        features, _ = kaldi_fbank(audio[tf.newaxis], tf.size(audio)[tf.newaxis], config)
        return normalize(features[0], config.normalize)

    def extract_batch(self, audio: tf.Tensor | np.ndarray, lengths: tf.Tensor | np.ndarray,
                      config: LogMelConfig) -> tuple[tf.Tensor, tf.Tensor]:
        if not config.kaldi:
            return super().extract_batch(audio, lengths, config)
        features, frame_lengths = kaldi_fbank(audio, lengths, config)
        return normalize(features, config.normalize, frame_lengths), frame_lengths

    def _window(self, config: LogMelConfig) -> np.ndarray | None:
        window, _ = frame_geometry(config)
        return _periodic_hann(window) if config.window == "hann" else None

    def _from_power(self, power: tf.Tensor, config: LogMelConfig) -> tf.Tensor:
        import tensorflow as tf

        matrix = htk_mel_matrix(
            config.num_mel_bins,
            config.fft_length,
            config.sample_rate,
            config.low_hz,
            config.high_hz,
        )
        matrix = matrix * _power_scale(config)
        return tf.math.log(power @ tf.constant(matrix) + config.log_guard)


@hookimpl
def register_features(register: Register) -> None:
    """asrkit's own extractors, registered like any plugin's."""
    register(MFCC())
    register(LogMel())
