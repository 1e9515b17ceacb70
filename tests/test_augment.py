"""Pitch perturbation, time stretching and additive noise: what each does to real signals."""

from __future__ import annotations

import numpy as np
import pytest

from asrkit.config.pipeline import PipelineConfig, PipelineError
from asrkit.pipeline.batches import load_noise_bank
from tests.conftest import SPEECH

RATE = 16000


def tone(frequency: float, seconds: float = 1.0) -> np.ndarray:
    t = np.arange(int(RATE * seconds)) / RATE
    return (0.5 * np.sin(2 * np.pi * frequency * t)).astype(np.float32)


def peak(audio: np.ndarray) -> float:
    spectrum = np.abs(np.fft.rfft(audio * np.hanning(len(audio))))
    return float(np.fft.rfftfreq(len(audio), 1 / RATE)[np.argmax(spectrum)])


@pytest.mark.parametrize("rate", [0.8, 1.25])
def test_time_stretch_changes_length_not_pitch(rate):
    from asrkit.pipeline.augment import time_stretch

    stretched = time_stretch(tone(220.0), rate).numpy()
    assert len(stretched) == round(RATE / rate)
    assert abs(peak(stretched) - 220.0) <= 2.0


def test_time_stretch_by_one_gives_the_signal_back():
    from asrkit.pipeline.augment import time_stretch

    audio = tone(330.0)
    np.testing.assert_allclose(time_stretch(audio, 1.0).numpy(), audio, atol=1e-3)


@pytest.mark.parametrize("semitones", [-2.0, 1.0, 12.0])
def test_pitch_shift_moves_the_pitch_and_keeps_the_length(semitones):
    from asrkit.pipeline.augment import pitch_shift

    shifted = pitch_shift(tone(220.0), semitones).numpy()
    assert len(shifted) == RATE
    assert abs(peak(shifted) - 220.0 * 2 ** (semitones / 12)) <= 2.0


def test_pitch_shift_of_real_speech_keeps_its_energy():
    import soundfile

    from asrkit.pipeline.augment import pitch_shift

    speech, rate = soundfile.read(SPEECH / "ldc93s1" / "LDC93S1.wav", dtype="float32")
    assert rate == RATE
    shifted = pitch_shift(speech, 2.0).numpy()
    assert len(shifted) == len(speech)
    ratio = np.sqrt(np.mean(shifted ** 2) / np.mean(speech ** 2))
    assert 0.7 < ratio < 1.3


@pytest.mark.parametrize("snr", [0.0, 10.0, 30.0])
def test_noise_is_mixed_at_the_drawn_snr(snr):
    import tensorflow as tf

    from asrkit.pipeline.augment import add_noise

    audio = tone(440.0)
    for seed in range(3):
        noisy = add_noise(audio, tf.constant([seed, 7]), (snr, snr)).numpy()
        measured = 10 * np.log10(np.mean(audio ** 2) / np.mean((noisy - audio) ** 2))
        assert abs(measured - snr) < 0.01


def test_synthesised_noise_is_coloured_by_its_slope():
    import tensorflow as tf

    from asrkit.pipeline.augment import coloured_noise

    def low_to_high(slope: float) -> float:
        noise = coloured_noise(tf.constant(RATE), tf.constant(slope), tf.constant([1, 2])).numpy()
        power = np.abs(np.fft.rfft(noise)) ** 2
        return power[1:800].mean() / power[4000:].mean()  # below 400 Hz / above 2 kHz

    assert 0.5 < low_to_high(0.0) < 2.0  # white
    assert low_to_high(-2.0) > 100  # brown


def test_noise_bank_from_a_folder(tmp_path):
    import soundfile
    import tensorflow as tf

    from asrkit.pipeline.augment import add_noise

    noise = np.random.default_rng(0).normal(size=RATE // 2).astype(np.float32) * 0.1
    soundfile.write(tmp_path / "hum.wav", noise, RATE)
    bank = load_noise_bank(str(tmp_path))
    assert bank.shape == (RATE // 2,)
    audio = tone(440.0)  # longer than the bank: it is looped
    noisy = add_noise(audio, tf.constant([3, 4]), (5.0, 5.0), bank).numpy()
    assert abs(10 * np.log10(np.mean(audio ** 2) / np.mean((noisy - audio) ** 2)) - 5.0) < 0.01

    soundfile.write(tmp_path / "other.wav", noise, 8000)
    with pytest.raises(PipelineError, match="8000 Hz"):
        load_noise_bank(str(tmp_path))
    with pytest.raises(PipelineError, match=r"no \.wav or \.flac"):
        load_noise_bank(str(tmp_path / "missing"))


def test_augmentation_settings_are_checked():
    with pytest.raises(PipelineError, match="pitch_semitones must be a range"):
        PipelineConfig(pitch_semitones=(2.0, -2.0))
    with pytest.raises(PipelineError, match=r"pitch_semitones=-24.0,0.0 .* \[-12, 12\]"):
        PipelineConfig(pitch_semitones=(-24.0, 0.0))
    with pytest.raises(PipelineError, match="noise_snr_db must be a range"):
        PipelineConfig(noise_snr_db=(10.0,))
    with pytest.raises(PipelineError, match="needs noise_snr_db"):
        PipelineConfig(noise_folder="noise")
    evaluation = PipelineConfig(pitch_semitones=(-1.0, 1.0), noise_snr_db=(10.0, 30.0),
                                speed_factors=(0.9, 1.1)).for_evaluation()
    assert not evaluation.audio_augment
