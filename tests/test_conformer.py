"""The ``conformer`` model: its size, its output lengths, padding invariance, and a run through
train, evaluate, transcribe and both export formats."""

from __future__ import annotations

import json

import numpy as np
import pytest

from asrkit.models.conformer import Conformer, ConformerConfig
from tests.conftest import SPEECH

SPEC = Conformer()
#: Small but with every part: two blocks, two heads, a kernel wide enough to spill padding.
SMALL = ConformerConfig(d_model=16, num_heads=2, num_blocks=2, ff_multiplier=2, conv_kernel=7,
                        subsampling_channels=4)
TINY = ["-o", "preset=tiny"]


def build(config: ConformerConfig, seed: int = 0):
    import keras

    keras.utils.set_random_seed(seed)
    return SPEC.build(config, 80, 29)


def test_default_config_is_conformer_s_sized():
    model = build(ConformerConfig())
    assert 8e6 <= model.count_params() <= 12e6


def test_presets_are_settings_of_the_right_sections():
    from asrkit.config.train import TrainConfig
    from asrkit.core.settings import override

    assert set(Conformer.presets) == {"full", "cpu", "tiny"}
    configs = {}
    for name, preset in Conformer.presets.items():
        config, train = ConformerConfig(), TrainConfig()
        for key, value in preset.items():
            section, field = key.split(".")
            if section == "model":
                config = override(config, field, value)
            elif section == "train":
                train = override(train, field, value)
            else:
                assert section in ("features", "pipeline"), key
        configs[name] = config
    assert configs["full"] == ConformerConfig()
    assert 1e6 <= build(configs["cpu"]).count_params() <= 2e6


def test_output_length_is_the_logits_length():
    import tensorflow as tf

    model = build(SMALL)
    for frames in (1, 2, 3, 4, 5, 7, 8, 9, 16, 101, 302):
        logits = model((tf.zeros([1, frames, 80]), tf.constant([frames])), training=False)
        assert logits.shape[1] == SPEC.output_length(SMALL, frames) == -(-frames // 4), frames
        assert int(SPEC.output_length(SMALL, tf.constant(frames))) == logits.shape[1]


def test_rel_shift_puts_each_relative_position_in_place():
    import tensorflow as tf

    from asrkit.models.conformer_layers import rel_shift

    frames = 5
    # Column k of each row scores relative position (frames - 1 - k); fill with row*100 + pos.
    rows = np.arange(frames)[:, None] * 100
    positions = frames - 1 - np.arange(2 * frames - 1)[None, :]
    scores = np.broadcast_to(rows + positions, (2, 3, frames, 2 * frames - 1)).astype(np.float32)
    shifted = rel_shift(tf.constant(scores)).numpy()
    i, j = np.meshgrid(np.arange(frames), np.arange(frames), indexing="ij")
    np.testing.assert_array_equal(shifted, np.broadcast_to(i * 100 + (i - j), shifted.shape))


def test_rel_shift_sends_each_gradient_back_to_the_score_it_came_from():
    """The shift only moves scores: each output's gradient lands on the one relative-position
    score it was read from, and the scores it drops get none (checked against a gather)."""
    import tensorflow as tf

    from asrkit.models.conformer_layers import rel_shift

    rng = np.random.default_rng(0)
    for queries, keys in ((5, 5), (3, 7)):
        scores = tf.constant(rng.normal(size=(2, 3, queries, keys + queries - 1)), tf.float32)
        upstream = tf.constant(rng.normal(size=(2, 3, queries, keys)), tf.float32)
        with tf.GradientTape() as tape:
            tape.watch(scores)
            shifted = rel_shift(scores, keys)
        gradient = tape.gradient(shifted, scores, output_gradients=upstream).numpy()
        # Output [i, j] reads relative position keys - queries + i - j, at column
        # (keys - 1) - (keys - queries + i - j) = queries - 1 - i + j.
        i, j = np.meshgrid(np.arange(queries), np.arange(keys), indexing="ij")
        column = queries - 1 - i + j
        expected = np.zeros(scores.shape, np.float32)
        np.add.at(expected, (slice(None), slice(None), i, column), upstream.numpy())
        np.testing.assert_allclose(shifted.numpy(),
                                   np.take_along_axis(scores.numpy(),
                                                      np.broadcast_to(column, shifted.shape),
                                                      axis=3))
        np.testing.assert_allclose(gradient, expected, rtol=1e-6, atol=1e-6)


def test_an_utterance_gives_the_same_logits_alone_and_in_a_padded_batch():
    """Random weights; the padding is noise, not zeros, so anything that leaks shows."""
    import tensorflow as tf

    model = build(SMALL, seed=3)
    rng = np.random.default_rng(0)
    lengths = [64, 37, 22]  # padded to 64: odd, even, odd after each subsampling
    batch = rng.normal(size=(3, 64, 80)).astype(np.float32)
    logits = model((tf.constant(batch), tf.constant(lengths)), training=False).numpy()
    for row, length in enumerate(lengths):
        alone = model((tf.constant(batch[row:row + 1, :length]), tf.constant([length])),
                      training=False).numpy()[0]
        frames = SPEC.output_length(SMALL, length)
        assert alone.shape[0] == frames
        np.testing.assert_allclose(logits[row, :frames], alone, atol=1e-4, rtol=0)


def test_checkpoints_track_every_weight():
    from asrkit.train.checkpoints import untracked_weights

    model = build(SMALL)
    assert untracked_weights(model) == []
    names = {w.path for w in model.weights}
    assert any("content_bias" in n for n in names) and any("depthwise" in n for n in names)


def test_bad_settings_are_one_line_errors():
    from asrkit.core.errors import AsrkitError

    with pytest.raises(AsrkitError, match="multiple of num_heads"):
        ConformerConfig(d_model=10, num_heads=4)
    with pytest.raises(AsrkitError, match="conv_kernel must be odd"):
        ConformerConfig(conv_kernel=32)
    with pytest.raises(AsrkitError, match=r"setting dropout=1\.0 is not allowed"):
        ConformerConfig(dropout=1.0)


@pytest.fixture
def cli(datasets_cli):
    return datasets_cli


def test_train_evaluate_transcribe_and_export(cli, tmp_path):
    from asrkit.core.frames import count_frames, frame_geometry
    from asrkit.features import LogMelConfig
    from asrkit.serving.export import ExportedModel
    from asrkit.serving.transcribe import load_audio

    run = tmp_path / "run"
    trained = cli(["train", "--model", "conformer", *TINY, "--epochs", "1", "--batch-size", "4",
                   "--run-dir", run, "--no-progress"])
    assert trained.exit_code == 0, trained.stderr[-3000:]
    config = json.loads((run / "config.json").read_text())
    assert config["model"]["d_model"] == 16 and config["train"]["model"] == "conformer"
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any(e["event"] == "epoch" for e in steps)

    evaluated = cli(["evaluate", run, "--split", "dev", "--json", "-", "--no-progress"])
    assert evaluated.exit_code == 0, evaluated.stderr[-3000:]
    assert json.loads(evaluated.stdout)["utterances"] == 2

    clip = SPEECH / "ldc93s1" / "LDC93S1.wav"
    transcribed = cli(["transcribe", clip, "--model", run, "--json"])
    assert transcribed.exit_code == 0, transcribed.stderr[-3000:]
    report = json.loads(transcribed.stdout)
    assert report["duration"] == pytest.approx(46797 / 16000, abs=1e-3) and "text" in report

    audio = load_audio(clip).astype(np.float32) / 32768
    outputs = {}
    for fmt in ("savedmodel", "tflite"):
        exported = cli(["export", run, "--format", fmt, "--output", tmp_path / fmt])
        assert exported.exit_code == 0, exported.stderr[-3000:]
        model = ExportedModel(tmp_path / fmt)
        meta = model.metadata
        assert meta["model"] == "conformer" and meta["features"] == "logmel"
        assert meta["frame_seconds"] == pytest.approx(0.04)
        assert meta["verified_max_abs_diff"] < 1e-4
        outputs[fmt] = model.logits(audio)
    frames = count_frames(len(audio), *frame_geometry(LogMelConfig()))
    assert outputs["savedmodel"].shape == outputs["tflite"].shape
    assert outputs["savedmodel"].shape[0] == SPEC.output_length(ConformerConfig(), frames)
    np.testing.assert_allclose(outputs["tflite"], outputs["savedmodel"], atol=1e-4)
