"""The feature-extractor contract: asrkit's own extractors keep it, the checks catch an extractor
that breaks it, and every place that counts frames counts them from the declared framing."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pytest

from asrkit.core import frames
from asrkit.core.frames import SAMPLE_RATE, FeatureError, Framing
from asrkit.features import MFCC, LogMel, LogMelConfig, MFCCConfig
from asrkit.testing import check_extractor
from asrkit.testing.features import check_batch, check_config, check_extract, contract_lengths
from asrkit.types import FeatureConfig, FeatureExtractor


@pytest.mark.parametrize("extractor, config", [
    (MFCC(), None),
    (MFCC(), MFCCConfig(normalize="utterance", window_ms=32.0, step_ms=12.5)),
    (LogMel(), None),
    (LogMel(), LogMelConfig(num_mel_bins=40, normalize="feature", step_ms=20.0)),
], ids=["mfcc", "mfcc-utterance-32ms", "logmel", "logmel-40-feature-20ms"])
def test_bundled_extractors_keep_the_contract(extractor, config):
    check_extractor(extractor, config)


def test_lengths_include_the_framing_edges():
    framing = Framing.of(MFCCConfig())
    assert (framing.sample_rate, framing.window, framing.step) == (16000, 400, 160)
    assert contract_lengths(framing) == [1, 399, 400, 401, 559, 560, 561, 16000, 17523]
    assert [framing.frames(n) for n in (1, 399, 400, 401, 560, 561)] == [1, 1, 1, 2, 2, 3]


# -- extractors that break it, each in one way --------------------------------------------------


@dataclass(frozen=True)
class EnergyConfig(FeatureConfig):
    floor: float = 1e-10


class Energy(FeatureExtractor):
    """Log energy per frame, framed as its config declares: the docs' example done right."""

    name = "energy"
    description = "log frame energy"
    Config = EnergyConfig

    def num_features(self, config):
        return 1

    def extract(self, audio, config):
        import tensorflow as tf

        return tf.math.log(tf.maximum(self.energy(audio, config), config.floor))

    def energy(self, audio, config):
        import tensorflow as tf

        framing = Framing.of(config)
        audio = tf.convert_to_tensor(audio, tf.float32)
        count = framing.frames(tf.size(audio))
        padded = tf.pad(audio, [[0, (count - 1) * framing.step + framing.window - tf.size(audio)]])
        windows = tf.signal.frame(padded, framing.window, framing.step)
        return tf.reduce_sum(windows * windows, axis=-1, keepdims=True)


class Unpadded(Energy):
    """Drops the last partial frame (``tf.signal.frame``'s default): too few frames."""

    def extract(self, audio, config):
        import tensorflow as tf

        framing = Framing.of(config)
        audio = tf.convert_to_tensor(audio, tf.float32)
        audio = tf.pad(audio, [[0, tf.maximum(0, framing.window - tf.size(audio))]])
        windows = tf.signal.frame(audio, framing.window, framing.step)
        return tf.math.log(tf.maximum(tf.reduce_sum(windows * windows, -1, keepdims=True), 1e-10))


class Unfloored(Energy):
    """Takes the log of silence: -inf."""

    def extract(self, audio, config):
        import tensorflow as tf

        return tf.math.log(self.energy(audio, config))


class PaddingSees(Energy):
    """Normalises over the whole padded batch: the padding changes the features."""

    def extract_batch(self, audio, lengths, config):
        import tensorflow as tf

        features, frame_lengths = super().extract_batch(audio, lengths, config)
        shift = tf.cast(tf.shape(audio)[1], tf.float32) / 1e4
        mask = tf.sequence_mask(frame_lengths, tf.shape(features)[1], tf.float32)[..., None]
        return (features + shift) * mask, frame_lengths


@dataclass(frozen=True)
class NoFraming:
    floor: float = 1e-10


class Undeclared(Energy):
    """The docs' old example: a Config that declares no framing."""

    Config = NoFraming


def test_a_well_made_plugin_extractor_passes_with_the_default_extract_batch():
    check_extractor(Energy())
    check_extractor(Energy(), EnergyConfig(window_ms=20.0, step_ms=20.0))


@pytest.mark.parametrize("check, message", [
    (lambda: check_extract(Unpadded(), lengths=[401, 561]),
     "extract of 401 samples has shape (1, 1); the framing counts 2 frames"),
    (lambda: check_extract(Unfloored(), lengths=[401]), "of silence has non-finite values"),
    (lambda: check_batch(PaddingSees(), lengths=[401, 561]), "differs from extract alone"),
    (lambda: check_config(Undeclared()), "Config must subclass asrkit.types.FeatureConfig"),
], ids=["frame-count", "finite", "padding", "framing"])
def test_the_checks_name_what_is_broken(check, message):
    with pytest.raises(AssertionError, match=re.escape(message)):
        check()


# -- one count of frames everywhere -------------------------------------------------------------


def test_a_config_without_framing_is_a_one_line_error():
    with pytest.raises(FeatureError, match="declare no sample_rate, window_ms, step_ms"):
        Framing.of(NoFraming())
    with pytest.raises(FeatureError, match="at least one sample"):
        Framing.of(EnergyConfig(sample_rate=100, window_ms=2.0))


def test_output_frames_follow_the_features_and_the_models_stride():
    from asrkit import plugins

    ds2 = plugins.get("model", "ds2")
    brnn = plugins.get("model", "brnn")
    second, twenty_ms = LogMelConfig(), LogMelConfig(step_ms=20.0)
    assert frames.output_frames(SAMPLE_RATE, second) == 99
    assert frames.output_frames(SAMPLE_RATE, second, brnn, brnn.Config()) == 99
    assert frames.output_frames(SAMPLE_RATE, second, ds2, ds2.Config(time_stride=4)) == 25
    assert frames.output_frames(SAMPLE_RATE, twenty_ms, ds2, ds2.Config()) == 25
    assert frames.frame_seconds(second, ds2, ds2.Config()) == pytest.approx(0.02)
    assert frames.frame_seconds(twenty_ms, ds2, ds2.Config(time_stride=4)) == pytest.approx(0.08)
    # 30 characters in a second: fine for 10 ms frames, not for ds2's 40 ms ones.
    assert frames.fits(SAMPLE_RATE, 30, FeatureConfig())
    assert not frames.fits(SAMPLE_RATE, 30, second, ds2, ds2.Config(time_stride=4))


def test_the_importer_keeps_what_some_model_can_align(tmp_path):
    """The import check is the loosest (10 ms frames, no subsampling): an utterance a ds2 run
    cannot align is still imported; one that nothing reading 10 ms frames could align is not."""
    from asrkit.dataset.audio import wav_bytes
    from asrkit.importing.convert import SegmentJob, convert_member

    second = wav_bytes(np.zeros(SAMPLE_RATE, np.int16))
    jobs = [SegmentJob("train/a", "a.wav", None, None, 30),
            SegmentJob("train/b", "b.wav", None, None, 100)]
    _, results = convert_member(str(tmp_path), "x.wav", second, jobs, max_seconds=10)
    assert [r.reason for r in results] == [None, "too short for its transcript"]


def test_frame_seconds_come_from_a_plugin_configs_framing():
    """What transcription's word times and an export's metadata read (the docs' old example
    failed there with AttributeError: window_ms)."""
    from asrkit import plugins

    ds2 = plugins.get("model", "ds2")
    assert frames.frame_seconds(EnergyConfig(step_ms=15.0), ds2, ds2.Config()) == \
        pytest.approx(0.03)
    with pytest.raises(FeatureError, match="declare no sample_rate"):
        frames.frame_seconds(NoFraming(), ds2, ds2.Config())
    with pytest.raises(FeatureError, match="features at 8000 Hz"):
        frames.check_sample_rate(EnergyConfig(sample_rate=8000), "run")
