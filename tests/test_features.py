"""The in-graph feature extractors against their references, on real speech.

python_speech_features is the reference for ``mfcc`` (the Deep Speech notebook computed its inputs
with it). The tolerance: the extractor computes in float32, python_speech_features in float64, so
FFT rounding (relative 1e-7 of a frame's largest bin) becomes an absolute error in the log of a
quiet filter; measured on these clips the largest difference is about 2e-4, 2.5e-5 of the
coefficient's spread. We allow 1e-3 absolute and 2e-4 of each coefficient's standard deviation
over the utterance: 4-8x above float32 noise, and 1000x below what any real mismatch gives (a
Hann window, tf.signal's smooth mel filterbank or a missing lifter each move coefficients by a
sizeable fraction of their spread; performance.md measured a max difference of 1.25 with only the
filterbank differing).
"""

from __future__ import annotations

import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest
import python_speech_features as psf
import tensorflow as tf

from asrkit import features
from asrkit.features import (
    MFCC,
    FeatureError,
    LogMel,
    LogMelConfig,
    MFCCConfig,
    context_width,
    context_windows,
    count_frames,
    htk_mel_matrix,
    normalize,
    psf_filterbank,
)

SPEECH = Path(__file__).parent / "fixtures" / "speech"
ABSOLUTE_TOLERANCE = 1e-3
RELATIVE_TO_SPREAD = 2e-4


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    """int16 samples and the sample rate of a mono 16-bit WAV."""
    with wave.open(str(path)) as handle:
        assert handle.getnchannels() == 1 and handle.getsampwidth() == 2
        pcm = np.frombuffer(handle.readframes(handle.getnframes()), "<i2")
        return pcm, handle.getframerate()


def speech_clips() -> list[Path]:
    paths = sorted(SPEECH.glob("librispeech/*.wav")) + sorted(SPEECH.glob("speechbrain/*.wav"))
    paths += [*sorted(SPEECH.glob("misc/*.wav")), SPEECH / "ldc93s1" / "LDC93S1.wav"]
    return paths


@pytest.fixture(scope="module")
def clips() -> dict[str, np.ndarray]:
    out = {}
    for path in speech_clips():
        pcm, rate = read_wav(path)
        assert rate == 16000
        out[path.stem] = pcm
    assert len(out) >= 15
    return out


def assert_matches_reference(got: np.ndarray, ref: np.ndarray) -> None:
    assert got.shape == ref.shape
    difference = np.abs(got - ref)
    spread = ref.std(axis=0)
    assert difference.max() < ABSOLUTE_TOLERANCE, difference.max()
    worst = (difference.max(axis=0) / spread).max()
    assert worst < RELATIVE_TO_SPREAD, worst


def test_mfcc_equals_python_speech_features_on_real_speech(clips: dict[str, np.ndarray]) -> None:
    extractor, config = MFCC(), MFCCConfig()
    extract = tf.function(lambda audio: extractor.extract(audio, config))
    for name, pcm in clips.items():
        # The notebook: mfcc(int16 samples, samplerate=16000, numcep=26), other arguments default.
        ref = psf.mfcc(pcm.astype(np.float64), samplerate=16000, numcep=26)
        got = extract(tf.constant(pcm / 32768.0, tf.float32)).numpy()
        assert_matches_reference(got, ref)
        correlation = np.corrcoef(got.ravel(), ref.ravel())[0, 1]
        assert correlation > 0.999999, (name, correlation)


def test_mfcc_of_float_audio_with_pcm_scale_one(clips: dict[str, np.ndarray]) -> None:
    pcm = clips["LDC93S1"]
    audio = pcm / 32768.0
    ref = psf.mfcc(audio, samplerate=16000, numcep=26)
    got = MFCC().extract(audio.astype(np.float32), MFCCConfig(pcm_scale=1.0)).numpy()
    assert_matches_reference(got, ref)
    # Scaling only moves c0, the log energy, by 2 ln(32768).
    scaled = MFCC().extract(audio.astype(np.float32), MFCCConfig()).numpy()
    np.testing.assert_allclose(scaled[:, 0] - got[:, 0], 2 * np.log(32768.0), atol=1e-3)
    np.testing.assert_allclose(scaled[:, 1:], got[:, 1:], atol=1e-3)


def test_mfcc_other_settings_follow_python_speech_features() -> None:
    pcm, rate = read_wav(SPEECH / "ldc93s1" / "LDC93S1_8k_mono.wav")
    assert rate == 8000
    config = MFCCConfig(
        sample_rate=8000,
        num_cepstra=13,
        num_filters=20,
        fft_length=256,
        lifter=0,
        append_energy=False,
        preemphasis=0.95,
        low_hz=100.0,
        high_hz=3800.0,
    )
    ref = psf.mfcc(
        pcm.astype(np.float64),
        samplerate=8000,
        numcep=13,
        nfilt=20,
        nfft=256,
        ceplifter=0,
        appendEnergy=False,
        preemph=0.95,
        lowfreq=100,
        highfreq=3800,
    )
    got = MFCC().extract(pcm.astype(np.float32) / 32768.0, config).numpy()
    assert_matches_reference(got, ref)


@pytest.mark.parametrize("samples", [1, 399, 400, 401, 559, 560, 561, 16000, 16001])
def test_frame_count_matches_python_speech_features(samples: int) -> None:
    audio = np.random.default_rng(samples).uniform(-0.5, 0.5, samples).astype(np.float32)
    ref = psf.mfcc(audio.astype(np.float64) * 32768, samplerate=16000, numcep=26)
    got = MFCC().extract(audio, MFCCConfig()).numpy()
    assert got.shape == ref.shape == (count_frames(samples, 400, 160), 26)
    assert int(count_frames(tf.constant(samples), 400, 160)) == ref.shape[0]
    assert MFCC().num_frames(samples, MFCCConfig()) == ref.shape[0]
    np.testing.assert_allclose(got, ref, atol=ABSOLUTE_TOLERANCE)


def test_filterbank_is_python_speech_features_own() -> None:
    np.testing.assert_array_equal(
        psf_filterbank(26, 512, 16000, 0.0, None), psf.get_filterbanks(26, 512, 16000)
    )


def test_silence_is_finite_and_floored() -> None:
    got = MFCC().extract(np.zeros(8000, np.float32), MFCCConfig()).numpy()
    ref = psf.mfcc(np.zeros(8000), samplerate=16000, numcep=26)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, ref, atol=ABSOLUTE_TOLERANCE)


def logmel_reference(audio: np.ndarray, config: LogMelConfig) -> np.ndarray:
    """Log mel energies in float64 numpy with tf.signal's own mel matrix and Hann window."""
    emphasized = np.append(audio[0], audio[1:] - config.preemphasis * audio[:-1])
    frames = count_frames(len(audio), 400, 160)
    padded = np.concatenate([emphasized, np.zeros((frames - 1) * 160 + 400 - len(audio))])
    windows = np.stack([padded[i * 160 : i * 160 + 400] for i in range(frames)])
    windows = windows * tf.signal.hann_window(400, periodic=True).numpy()
    power = np.abs(np.fft.rfft(windows, 512)) ** 2 / 512
    mel = tf.signal.linear_to_mel_weight_matrix(80, 257, 16000, 0.0, 8000.0).numpy()
    return np.log(power @ mel + config.log_guard)


def test_logmel_matches_a_numpy_reference(clips: dict[str, np.ndarray]) -> None:
    config = LogMelConfig()
    assert LogMel().num_features(config) == 80
    for name in ("LDC93S1", "arctic_a0024"):
        audio = clips[name] / 32768.0
        got = LogMel().extract(audio.astype(np.float32), config).numpy()
        ref = logmel_reference(audio, config)
        assert got.shape == ref.shape and got.shape[1] == 80
        # Bins fed by quiet high frequencies sit near the guard; compare in absolute log units.
        np.testing.assert_allclose(got, ref, atol=2e-3)


def test_mel_matrix_equals_tf_signal() -> None:
    ours = htk_mel_matrix(80, 512, 16000, 0.0, None)
    theirs = tf.signal.linear_to_mel_weight_matrix(80, 257, 16000, 0.0, 8000.0).numpy()
    np.testing.assert_allclose(ours, theirs, atol=1e-5)


@pytest.mark.parametrize("extractor", [MFCC(), LogMel()], ids=["mfcc", "logmel"])
@pytest.mark.parametrize("mode", ["none", "feature"])
def test_batched_extraction_equals_one_at_a_time(
    clips: dict[str, np.ndarray], extractor: features.SpectralExtractor, mode: str
) -> None:
    config = extractor.Config(normalize=mode)
    names = ["2830-3980-0043", "arctic_a0024", "spk2_snt2"]
    audios = [clips[name] / 32768.0 for name in names]
    longest = max(len(a) for a in audios)
    batch = np.zeros([len(audios), longest], np.float32)
    for row, audio in enumerate(audios):
        batch[row, : len(audio)] = audio
    lengths = [len(a) for a in audios]
    got, frame_lengths = extractor.extract_batch(batch, lengths, config)
    got = got.numpy()
    for row, audio in enumerate(audios):
        alone = extractor.extract(audio.astype(np.float32), config).numpy()
        assert frame_lengths[row] == len(alone)
        np.testing.assert_allclose(got[row, : len(alone)], alone, atol=1e-3, rtol=1e-4)
        assert not got[row, len(alone) :].any()
    assert got.shape[1] == max(frame_lengths.numpy())


def test_normalisation_modes(clips: dict[str, np.ndarray]) -> None:
    audio = (clips["LDC93S1"] / 32768.0).astype(np.float32)
    per_feature = MFCC().extract(audio, MFCCConfig(normalize="feature")).numpy()
    np.testing.assert_allclose(per_feature.mean(axis=0), 0.0, atol=1e-4)
    np.testing.assert_allclose(per_feature.std(axis=0), 1.0, atol=1e-3)
    whole = MFCC().extract(audio, MFCCConfig(normalize="utterance")).numpy()
    assert abs(whole.mean()) < 1e-4 and abs(whole.std() - 1.0) < 1e-3
    # Per-utterance: the statistics of padded frames must not count.
    raw = MFCC().extract(audio, MFCCConfig()).numpy()
    padded = np.concatenate([raw, np.full([7, 26], 99.0, np.float32)])[np.newaxis]
    batched = normalize(tf.constant(padded), "feature", tf.constant([len(raw)])).numpy()[0]
    np.testing.assert_allclose(batched[: len(raw)], per_feature, atol=1e-4)
    assert not batched[len(raw) :].any()


def notebook_context(inputs: np.ndarray, numcontext: int) -> np.ndarray:
    """The Deep Speech notebook's loop (``audiofile_to_input_vector``), without its whitening."""
    numcep = inputs.shape[1]
    out = np.zeros([len(inputs), numcep + 2 * numcep * numcontext], np.float32)
    empty = np.zeros(numcep)
    for t in range(len(inputs)):
        need_past = max(0, numcontext - t)
        past = [empty] * need_past + list(inputs[max(0, t - numcontext) : t])
        need_future = max(0, t + numcontext - (len(inputs) - 1))
        future = list(inputs[t + 1 : t + numcontext + 1]) + [empty] * need_future
        out[t] = np.concatenate([*past, inputs[t], *future])
    return out


def test_context_windows_are_the_notebooks(clips: dict[str, np.ndarray]) -> None:
    mfcc = MFCC().extract((clips["spk2_snt2"] / 32768.0).astype(np.float32), MFCCConfig())
    windows = context_windows(mfcc, 9).numpy()
    assert windows.shape == (mfcc.shape[0], 494) and context_width(26, 9) == 494
    np.testing.assert_array_equal(windows, notebook_context(mfcc.numpy(), 9))
    # On a zero-padded batch, each utterance gets the windows it gets alone.
    short = mfcc[:20]
    batch = tf.stack([tf.pad(short, [[0, 10], [0, 0]]), mfcc[:30]])
    batched = context_windows(batch, 5).numpy()
    np.testing.assert_array_equal(batched[0, :20], context_windows(short, 5).numpy())
    np.testing.assert_array_equal(batched[1], context_windows(mfcc[:30], 5).numpy())
    assert context_windows(mfcc, 0) is mfcc


def test_invalid_configurations_are_explained() -> None:
    with pytest.raises(FeatureError, match="num_cepstra"):
        MFCCConfig(num_cepstra=30)
    with pytest.raises(FeatureError, match="normalize"):
        MFCCConfig(normalize="global")
    with pytest.raises(FeatureError, match="fft_length"):
        LogMelConfig(window_ms=40.0)
    with pytest.raises(FeatureError, match="window"):
        LogMelConfig(window="hamming")
    with pytest.raises(FeatureError, match="context"):
        context_windows(tf.zeros([3, 2]), -1)


def test_register_features_hook_registers_both() -> None:
    registered: list = []
    features.register_features(registered.append)
    assert [e.name for e in registered] == ["mfcc", "logmel"]
    assert [e.num_features(e.Config()) for e in registered] == [26, 80]


def test_plugin_system_finds_the_extractors() -> None:
    from asrkit.plugins import PluginSet
    from asrkit.registry import Provider

    plugins = PluginSet()
    plugins.add_module(features, Provider("features", "asrkit", "test"))
    assert plugins.problems() == []
    assert isinstance(plugins.registry.get("feature", "mfcc"), MFCC)
    assert isinstance(plugins.registry.get("feature", "logmel"), LogMel)


def test_modules_import_without_tensorflow() -> None:
    code = (
        "import sys, asrkit.features, asrkit.pipeline.batches, asrkit.pipeline.augment; "
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
