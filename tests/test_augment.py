"""Pitch perturbation, time stretching, VTLP, formant shifts, reverberation and additive noise:
what each does to real signals, and that the pipeline applies them, seeded, in a training."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import tensorflow as tf

from asrkit.config.pipeline import PipelineConfig, PipelineError
from asrkit.pipeline.batches import load_noise_bank, load_rir_bank
from tests.conftest import SPEECH, TINY

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


@pytest.mark.parametrize(("samples", "rate"), [(53248, 0.8961864113807678),
                                               (55040, 0.9010308980941772)])
def test_time_stretch_where_a_float_range_ends_on_its_limit(samples, rate):
    """For these lengths and rates ``tf.range(0, frames - 1, rate)`` holds ``frames - 1``
    itself; it crashed a 2-hour training with pitch shifts after an hour ("indices[661] = 621
    is not in [0, 621)"). The last position reads the last frame."""
    from asrkit.pipeline.augment import STRETCH_FFT, STRETCH_HOP, time_stretch

    frames = -(-(samples + 2 * STRETCH_FFT) // STRETCH_HOP)
    assert tf.range(0.0, float(frames - 1), rate).numpy()[-1] >= frames - 1
    audio = tone(220.0, samples / RATE)
    stretched = time_stretch(audio, rate).numpy()
    assert len(stretched) == round(samples / rate)
    assert np.isfinite(stretched).all() and abs(peak(stretched) - 220.0) <= 2.0


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


def speech() -> np.ndarray:
    import soundfile

    audio, rate = soundfile.read(SPEECH / "ldc93s1" / "LDC93S1.wav", dtype="float32")
    assert rate == RATE
    return audio


# -- vocal-tract-length perturbation ------------------------------------------------------------


@pytest.mark.parametrize("alpha", [0.8, 0.9, 1.1, 1.25])
def test_vtlp_warp_is_the_papers_piecewise_line(alpha):
    """Linear by alpha up to F_hi * min(alpha, 1) / alpha, then straight to the Nyquist frequency,
    which maps to itself; continuous and increasing, so the band maps onto itself."""
    from asrkit.pipeline.augment import VTLP_HIGH_HZ, vtlp_frequency

    frequencies = np.linspace(0.0, 8000.0, 8001).astype(np.float32)
    warped = vtlp_frequency(frequencies, alpha, 8000.0).numpy()
    boundary = VTLP_HIGH_HZ * min(alpha, 1.0) / alpha
    below = frequencies <= boundary
    np.testing.assert_allclose(warped[below], alpha * frequencies[below], rtol=1e-6)
    assert warped[0] == 0.0 and warped[-1] == pytest.approx(8000.0)
    assert np.all(np.diff(warped) > 0)
    corner = alpha * boundary  # one straight segment from the boundary's image to Nyquist
    line = 8000.0 - (8000.0 - corner) / (8000.0 - boundary) * (8000.0 - frequencies[~below])
    np.testing.assert_allclose(warped[~below], line, atol=0.01)


def test_vtlp_by_one_gives_the_speech_back():
    from asrkit.pipeline.augment import vtlp_warp

    audio = speech()
    np.testing.assert_allclose(vtlp_warp(audio, 1.0).numpy(), audio, atol=1e-4)


@pytest.mark.parametrize(("frequency", "alpha"), [(300.0, 1.1), (1000.0, 1.1), (1000.0, 0.9),
                                                  (2500.0, 1.2), (6000.0, 1.1)])
def test_vtlp_moves_a_tone_where_the_warp_says(frequency, alpha):
    """Below the boundary a tone moves to alpha times its frequency (6 kHz is above it, where
    the warp bends towards the Nyquist frequency); the length and loudness stay."""
    from asrkit.pipeline.augment import vtlp_frequency, vtlp_warp

    audio = tone(frequency)
    warped = vtlp_warp(audio, alpha).numpy()
    assert len(warped) == len(audio)
    target = float(vtlp_frequency(np.float32(frequency), alpha, 8000.0))
    if frequency < 4000:
        assert target == pytest.approx(alpha * frequency)
    assert abs(peak(warped) - target) <= 2.0
    assert np.sqrt(np.mean(warped ** 2)) == pytest.approx(np.sqrt(np.mean(audio ** 2)), rel=1e-3)


def test_vtlp_draws_a_factor_per_seed_from_the_range():
    import tensorflow as tf

    from asrkit.pipeline.augment import vtlp_perturb

    audio = tone(1000.0)
    moved = {seed: peak(vtlp_perturb(audio, tf.constant([seed, 5]), (0.9, 1.1)).numpy())
             for seed in range(8)}
    assert all(900.0 <= hz <= 1100.0 for hz in moved.values())
    assert max(moved.values()) - min(moved.values()) > 50.0  # the factor varies with the seed
    again = vtlp_perturb(audio, tf.constant([3, 5]), (0.9, 1.1)).numpy()
    np.testing.assert_array_equal(again, vtlp_perturb(audio, tf.constant([3, 5]),
                                                      (0.9, 1.1)).numpy())
    assert vtlp_perturb(audio, tf.constant([3, 5]), ()) is audio


# -- formant shift ------------------------------------------------------------------------------


def vowel(pitch: float = 120.0, seconds: float = 1.0) -> np.ndarray:
    """A steady vowel: the harmonics of ``pitch`` under formants at 700 Hz and (weaker)
    1,800 Hz, so its strongest harmonic is the one nearest the first formant (720 Hz)."""
    t = np.arange(int(RATE * seconds)) / RATE
    audio = np.zeros_like(t)
    for harmonic in np.arange(pitch, 7800.0, pitch):
        level = (np.exp(-0.5 * ((harmonic - 700.0) / 90.0) ** 2)
                 + 0.4 * np.exp(-0.5 * ((harmonic - 1800.0) / 120.0) ** 2) + 1e-3)
        audio += level * np.sin(2 * np.pi * harmonic * t)
    return (0.3 * audio / np.abs(audio).max()).astype(np.float32)


def harmonic_share(audio: np.ndarray, pitch: float = 120.0) -> float:
    """The share of ``audio``'s power within 6 Hz of a harmonic of ``pitch``."""
    power = np.abs(np.fft.rfft(audio * np.hanning(len(audio)))) ** 2
    offset = np.fft.rfftfreq(len(audio), 1 / RATE) % pitch
    near = np.minimum(offset, pitch - offset) <= 6.0
    return float(power[near].sum() / power.sum())


@pytest.mark.parametrize(("ratio", "first_formant"), [(0.85, 600.0), (1.2, 840.0)])
def test_formant_shift_moves_the_formants_and_keeps_the_pitch(ratio, first_formant):
    """The strongest harmonic follows the first formant (700 Hz x ratio, to the nearest
    harmonic), while all the power stays on the harmonics of 120 Hz: the pitch is kept, which
    VTLP and pitch shifts (that move the harmonics too) do not do. Length and loudness stay."""
    from asrkit.pipeline.augment import formant_shift, vtlp_warp

    audio = vowel()
    shifted = formant_shift(audio, ratio).numpy()
    assert len(shifted) == len(audio)
    assert peak(shifted) == pytest.approx(first_formant, abs=2.0)
    assert harmonic_share(shifted) > 0.99
    assert harmonic_share(vtlp_warp(audio, ratio).numpy()) < 0.5
    assert np.sqrt(np.mean(shifted ** 2)) == pytest.approx(np.sqrt(np.mean(audio ** 2)), rel=1e-3)


def test_formant_shift_by_one_gives_the_speech_back():
    from asrkit.pipeline.augment import formant_shift

    audio = speech()
    np.testing.assert_allclose(formant_shift(audio, 1.0).numpy(), audio, atol=1e-4)


def test_formant_shift_draws_a_ratio_per_seed_from_the_range():
    import tensorflow as tf

    from asrkit.pipeline.augment import formant_perturb

    audio = vowel()
    moved = {seed: peak(formant_perturb(audio, tf.constant([seed, 5]), (0.8, 1.25)).numpy())
             for seed in range(8)}
    assert set(moved.values()) <= {600.0, 720.0, 840.0}  # 560-875 Hz, to the nearest harmonic
    assert len(set(moved.values())) > 1  # the ratio varies with the seed
    again = formant_perturb(audio, tf.constant([3, 5]), (0.8, 1.25)).numpy()
    np.testing.assert_array_equal(again, formant_perturb(audio, tf.constant([3, 5]),
                                                         (0.8, 1.25)).numpy())
    assert formant_perturb(audio, tf.constant([3, 5]), ()) is audio


def test_formant_settings_are_checked():
    with pytest.raises(PipelineError, match="formant_ratio must be a range"):
        PipelineConfig(formant_ratio=(1.1, 0.9))
    with pytest.raises(PipelineError, match=r"formant_ratio=0.3,1.0 .* \[0.5, 2\]"):
        PipelineConfig(formant_ratio=(0.3, 1.0))
    assert PipelineConfig(formant_ratio=(0.9, 1.1)).audio_augment
    assert not PipelineConfig(formant_ratio=(0.9, 1.1)).for_evaluation().audio_augment


# -- reverberation ------------------------------------------------------------------------------


def impulse(samples: int = 3 * RATE) -> np.ndarray:
    audio = np.zeros(samples, np.float32)
    audio[0] = 1.0
    return audio


def onset(response: np.ndarray) -> int:
    """Where a response's reverberant tail starts (the FFT leaves ~1e-7 in the silence)."""
    return int(np.flatnonzero(np.abs(response[1:]) > 1e-5)[0]) + 1


def schroeder_rt60(response: np.ndarray) -> float:
    """RT60 of a response's reverberant tail (after the direct path and the silence behind it):
    the Schroeder backward-integrated energy decay, fitted from -5 to -35 dB (T30)."""
    tail = response[onset(response):]
    decay = np.cumsum((tail.astype(np.float64) ** 2)[::-1])[::-1]
    decibels = 10 * np.log10(decay / decay[0])
    fitted = (decibels <= -5) & (decibels >= -35)
    slope = np.polyfit(np.flatnonzero(fitted) / RATE, decibels[fitted], 1)[0]
    return -60.0 / slope


def test_fft_convolution_equals_numpys_cut_to_the_input():
    from asrkit.pipeline.augment import convolve

    rng = np.random.default_rng(1)
    audio, rir = rng.normal(size=5000).astype(np.float32), rng.normal(size=700).astype(np.float32)
    out = convolve(audio, rir).numpy()
    np.testing.assert_allclose(out, np.convolve(audio, rir)[:5000], atol=1e-3)


def test_reverb_of_an_impulse_is_a_room_with_the_drawn_rt60_and_drr():
    """The response a room gives an impulse: the direct path at 1.0, a 2-10 ms pre-delay, then a
    tail whose energy decay (Schroeder) gives an RT60 within the drawn range, at the drawn
    direct-to-reverberant ratio."""
    import tensorflow as tf

    from asrkit.pipeline.augment import add_reverb

    measured = []
    for seed in range(6):
        room = add_reverb(impulse(), tf.constant([seed, 3]), rt60=(0.2, 0.8),
                          drr_db=(4.0, 4.0)).numpy()
        assert len(room) == 3 * RATE and room[0] == pytest.approx(1.0)
        assert 0.002 * RATE <= onset(room) <= 0.01 * RATE + 1
        assert 10 * np.log10(1.0 / np.sum(room[1:] ** 2)) == pytest.approx(4.0, abs=0.01)
        measured.append(schroeder_rt60(room))
        assert 0.2 * 0.95 <= measured[-1] <= 0.8 * 1.05
    assert max(measured) - min(measured) > 0.15  # drawn per seed, not fixed
    fixed = add_reverb(impulse(), tf.constant([9, 9]), rt60=(0.5, 0.5)).numpy()
    assert schroeder_rt60(fixed) == pytest.approx(0.5, rel=0.05)
    np.testing.assert_array_equal(
        fixed, add_reverb(impulse(), tf.constant([9, 9]), rt60=(0.5, 0.5)).numpy())


def test_reverb_keeps_the_length_and_leaves_the_drawn_share_dry():
    import tensorflow as tf

    from asrkit.pipeline.augment import add_reverb

    audio = speech()
    wet = 0
    for seed in range(40):
        out = add_reverb(audio, tf.constant([seed, 1]), rt60=(0.3, 0.6), probability=0.5).numpy()
        assert len(out) == len(audio)
        wet += not np.array_equal(out, audio)
    assert 10 <= wet <= 30
    dry = add_reverb(audio, tf.constant([1, 1]), rt60=(0.3, 0.6), probability=0.0).numpy()
    np.testing.assert_array_equal(dry, audio)


def test_recorded_rooms_come_from_the_folder_aligned_on_their_direct_path(tmp_path):
    """Each file's largest sample (here after 50 samples of flight time, and negative) becomes
    1.0 at the start, and one file is drawn per utterance: an echo 0.5 x the direct path,
    800 or 2000 samples late, is what the reverberated signal gains."""
    import soundfile
    import tensorflow as tf

    from asrkit.pipeline.augment import add_reverb

    for name, echo in (("a.wav", 800), ("b.flac", 2000)):
        response = np.zeros(50 + echo + 100, np.float32)
        response[50], response[50 + echo] = -0.8, -0.4
        soundfile.write(tmp_path / name, response, RATE)
    bank = load_rir_bank(str(tmp_path))
    audio = np.random.default_rng(2).normal(size=RATE).astype(np.float32) * 0.1
    echoes = set()
    for seed in range(8):
        out = add_reverb(audio, tf.constant([seed, 2]), probability=1.0, bank=bank).numpy()
        added = out - audio
        delay = int(np.flatnonzero(np.abs(added) > 1e-4)[0])
        np.testing.assert_allclose(added[delay:], 0.5 * audio[:RATE - delay], atol=1e-4)
        echoes.add(delay)
    assert echoes == {800, 2000}


def test_rir_folder_errors_are_one_line(tmp_path):
    import soundfile

    with pytest.raises(PipelineError, match=r"rir_folder .*: no \.wav or \.flac"):
        load_rir_bank(str(tmp_path))
    soundfile.write(tmp_path / "quiet.wav", np.zeros(100, np.float32), RATE)
    with pytest.raises(PipelineError, match=r"quiet\.wav is silent"):
        load_rir_bank(str(tmp_path))
    soundfile.write(tmp_path / "quiet.wav", impulse(100), 8000)
    with pytest.raises(PipelineError, match="8000 Hz"):
        load_rir_bank(str(tmp_path))


def test_vtlp_and_reverb_settings_are_checked():
    with pytest.raises(PipelineError, match="vtlp_alpha must be a range"):
        PipelineConfig(vtlp_alpha=(1.1, 0.9))
    with pytest.raises(PipelineError, match=r"vtlp_alpha=0.2,1.0 .* \[0.5, 2\]"):
        PipelineConfig(vtlp_alpha=(0.2, 1.0))
    with pytest.raises(PipelineError, match="reverb_rt60 must be a range"):
        PipelineConfig(reverb_rt60=(0.5,))
    with pytest.raises(PipelineError, match=r"reverb_rt60=0.0,0.5 .* \(0, 4\]"):
        PipelineConfig(reverb_rt60=(0.0, 0.5))
    with pytest.raises(PipelineError, match=r"reverb_prob=1\.5"):
        PipelineConfig(reverb_prob=1.5)
    with pytest.raises(PipelineError, match="reverb_drr_db must be a range"):
        PipelineConfig(reverb_rt60=(0.2, 0.5), reverb_drr_db=(10.0, 0.0))
    with pytest.raises(PipelineError, match="reverb_rt60 needs reverb_drr_db"):
        PipelineConfig(reverb_rt60=(0.2, 0.5), reverb_drr_db=())
    with pytest.raises(PipelineError, match="not both"):
        PipelineConfig(reverb_rt60=(0.2, 0.5), rir_folder="rooms")
    assert PipelineConfig(vtlp_alpha=(0.9, 1.1)).audio_augment
    assert PipelineConfig(rir_folder="rooms").audio_augment
    assert not PipelineConfig(reverb_rt60=(0.2, 0.5), reverb_prob=0.0).audio_augment
    evaluation = PipelineConfig(vtlp_alpha=(0.9, 1.1), reverb_rt60=(0.2, 0.5)).for_evaluation()
    assert not evaluation.audio_augment


# -- in the pipeline and in a training ----------------------------------------------------------


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """Four utterances of real speech in one shard of split ``train``."""
    import soundfile

    from asrkit.dataset.shards import ShardRecord, shard_name, write_shard

    folder = tmp_path_factory.mktemp("voices")
    clips = [*sorted((SPEECH / "librispeech").glob("*.wav"))[:3],
             SPEECH / "ldc93s1" / "LDC93S1.wav"]
    records = []
    for number, path in enumerate(clips):
        audio, rate = soundfile.read(path, dtype="int16")
        assert rate == RATE
        records.append(ShardRecord(f"u{number}", audio.tobytes(), "a transcript"))
    write_shard(folder / "shards" / shard_name("train", 0, 1), records)
    return folder


#: The four utterances in order, unaugmented, with their ids.
PLAIN = PipelineConfig(batch_size=4, shuffle=False, deterministic=True, with_text=True, seed=5)


def make(folder, config: PipelineConfig) -> tf.data.Dataset:
    from asrkit.core.text import Alphabet
    from asrkit.pipeline.batches import make_dataset

    return make_dataset(folder, "train", Alphabet(), "mfcc", config=config)


def features_by_id(dataset: tf.data.Dataset) -> dict[str, np.ndarray]:
    return {uid.decode(): features[:length]
            for batch in dataset.as_numpy_iterator()
            for uid, features, length in zip(batch["ids"], batch["features"],
                                             batch["feature_lengths"], strict=True)}


@pytest.mark.parametrize("settings", [{"vtlp_alpha": (0.9, 1.1)}, {"formant_ratio": (0.8, 1.2)},
                                      {"reverb_rt60": (0.3, 0.6), "reverb_prob": 1.0}])
def test_pipeline_augments_seeded_and_anew_each_epoch(dataset, settings):
    """VTLP, formant shifts and reverb (reverb_prob=1) each change every utterance and keep its
    length; the same seed gives the same features, the next epoch other ones."""
    dry = features_by_id(make(dataset, PLAIN))
    augmented = make(dataset, replace(PLAIN, **settings))
    first, second = features_by_id(augmented), features_by_id(augmented)
    again = features_by_id(make(dataset, replace(PLAIN, **settings)))
    assert sorted(first) == sorted(dry) == ["u0", "u1", "u2", "u3"]
    for uid, features in dry.items():
        assert first[uid].shape == features.shape
        assert not np.allclose(first[uid], features, atol=1e-2)
        np.testing.assert_array_equal(first[uid], again[uid])
        assert not np.array_equal(first[uid], second[uid])


def test_pipeline_reverberates_in_the_folders_rooms(dataset, tmp_path):
    import soundfile

    response = np.zeros(1600, np.float32)
    response[0], response[1500] = 1.0, 0.7
    soundfile.write(tmp_path / "room.wav", response, RATE)
    dry = features_by_id(make(dataset, PLAIN))
    recorded = features_by_id(make(dataset, replace(PLAIN, rir_folder=str(tmp_path),
                                                    reverb_prob=1.0)))
    assert all(not np.allclose(recorded[uid], dry[uid], atol=1e-2) for uid in dry)


@pytest.fixture
def home(datasets, monkeypatch):
    monkeypatch.setenv("ASRKIT_HOME", str(datasets))
    return datasets


def test_a_training_with_vtlp_and_reverb_runs_end_to_end(home, asrkit_cli, tmp_path):
    import json

    run = tmp_path / "voices"
    result = asrkit_cli(["train", "--epochs", "1", "--batch-size", "4", *TINY,
                         "-o", "pipeline.vtlp_alpha=0.9,1.1", "-o", "pipeline.reverb_rt60=0.2,0.8",
                         "-o", "pipeline.reverb_prob=0.5", "-o", "log_every=1", "--run-dir", run,
                         "--no-progress"])
    assert result.exit_code == 0, result.stderr[-3000:]
    pipeline = json.loads((run / "config.json").read_text())["pipeline"]
    assert pipeline["vtlp_alpha"] == [0.9, 1.1] and pipeline["reverb_rt60"] == [0.2, 0.8]
    events = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [e["step"] for e in events if e["event"] == "epoch"] == [4]
    losses = [e["loss"] for e in events if e["event"] == "step"]
    assert len(losses) == 4 and np.isfinite(losses).all()
