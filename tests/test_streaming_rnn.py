"""The streaming (forward-only) ds2 and brnn: Deep Speech 2's deployable model (forward GRUs,
causal convolutions, a lookahead convolution) and DeepSpeech 0.x's forward LSTM, stepped chunk
by chunk and equal to their whole-utterance calls; the bidirectional models unchanged."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from asrkit import plugins
from asrkit.testing import (
    check_model,
    check_output_lengths,
    check_padding,
    check_precision,
    check_streaming_model,
)
from asrkit.testing.models import _logits, build_model
from asrkit.testing.streaming import streamed_outputs
from asrkit.types import StreamShape

#: Tiny widths: each check builds and steps in seconds on two cores.
DS2_TINY = dict(conv_channels=3, rnn_units=6, rnn_layers=2)
DS2_FEATURES = 12
BRNN_TINY = dict(n_hidden=8, n_cell=6)
BRNN_FEATURES = 5


def ds2(**settings: object) -> tuple:
    spec = plugins.get("model", "ds2")
    return spec, spec.Config(**{**DS2_TINY, **settings})


def brnn(**settings: object) -> tuple:
    spec = plugins.get("model", "brnn")
    return spec, spec.Config(**{**BRNN_TINY, **settings})


@pytest.fixture
def random_lookahead(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lookahead convolutions start as the identity (no weight on the future), which a stream
    that dropped or misplaced its pending frames would still match: draw their weights."""
    from asrkit.models.layers import LookaheadConv

    build = LookaheadConv.build

    def randomised(self: LookaheadConv, input_shape: object) -> None:
        build(self, input_shape)
        rng = np.random.default_rng(5)
        self.kernel.assign(rng.normal(scale=0.7, size=self.kernel.shape).astype(np.float32))

    monkeypatch.setattr(LookaheadConv, "build", randomised)


# -- streams equal the whole utterance -----------------------------------------------------------


@pytest.mark.parametrize("stride, lookahead", [(1, 0), (2, 0), (2, 3), (3, 1), (4, 2)])
def test_a_ds2_stream_equals_the_whole_utterance(stride, lookahead, random_lookahead):
    spec, config = ds2(streaming=True, time_stride=stride, lookahead=lookahead, chunk_frames=2)
    assert spec.streaming(config) == StreamShape(input_frames=2 * stride, delay=lookahead)
    assert check_streaming_model(spec, config, DS2_FEATURES, chunks=(1, 2, 5)) < 1e-4


@pytest.mark.parametrize("context", [0, 2])
def test_a_brnn_stream_equals_the_whole_utterance(context):
    spec, config = brnn(streaming=True, context=context, chunk_frames=3)
    assert spec.streaming(config) == StreamShape(input_frames=3, delay=context)
    assert check_streaming_model(spec, config, BRNN_FEATURES, chunks=(1, 3, 7)) < 1e-4


def test_only_streaming_configs_stream_and_any_chunk_decodes_the_same():
    for spec, config in (ds2(), brnn()):
        assert spec.streaming(config) is None
        assert spec.streaming(replace(config, streaming=True, chunk_frames=0)) is None
        assert spec.trained_chunks(replace(config, streaming=True)) is None
    spec, config = ds2(streaming=True)
    assert spec.streaming(config) == StreamShape(input_frames=32, delay=4)  # the defaults
    model = build_model(spec, ds2()[1], DS2_FEATURES)
    with pytest.raises(ValueError, match="streaming"):
        model.initial_state(1)


def test_a_streaming_ds2_reads_no_further_ahead_than_its_lookahead(random_lookahead):
    """Changing the input from feature frame ``k`` on changes no output before the frame that
    reads ``k`` through the causal convolutions and the lookahead convolution."""
    import tensorflow as tf

    stride, lookahead, frames, k = 2, 3, 60, 37
    spec, config = ds2(streaming=True, time_stride=stride, lookahead=lookahead)
    model = build_model(spec, config, DS2_FEATURES)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(1, frames, DS2_FEATURES)).astype(np.float32)
    y = x.copy()
    y[:, k:] = rng.normal(size=y[:, k:].shape)
    lengths = tf.constant([frames])
    a, b = (model((tf.constant(v), lengths)).numpy()[0] for v in (x, y))
    first = -(-k // stride) - lookahead  # output i reads feature frames up to stride * i
    np.testing.assert_array_equal(a[:first], b[:first])
    assert not np.array_equal(a[first:], b[first:])


# -- the model contract for streaming configs ----------------------------------------------------


STREAMING = {
    "ds2-stride2": lambda: ds2(streaming=True, lookahead=2),
    "ds2-stride4": lambda: ds2(streaming=True, time_stride=4, lookahead=1),
    "ds2-stride3-causal": lambda: ds2(streaming=True, time_stride=3, lookahead=0),
    "brnn": lambda: brnn(streaming=True, context=2),
}


@pytest.mark.parametrize("name", sorted(STREAMING))
def test_streaming_configs_keep_the_padding_and_length_contract(name, random_lookahead):
    spec, config = STREAMING[name]()
    features = DS2_FEATURES if spec.name == "ds2" else BRNN_FEATURES
    assert check_output_lengths(spec, config, features) == spec.time_stride(config)
    assert check_padding(spec, config, features) < 1e-4


@pytest.mark.parametrize("name", ["ds2-stride2", "brnn"])
def test_streaming_configs_train_in_bfloat16(name):
    spec, config = STREAMING[name]()
    features = DS2_FEATURES if spec.name == "ds2" else BRNN_FEATURES
    check_precision(spec, config, features, precision="mixed_bfloat16")


@pytest.mark.parametrize("name", ["ds2-stride2", "brnn"])
def test_a_stream_in_bfloat16_keeps_its_state_in_float32(name, random_lookahead):
    """A model built under mixed precision streams too, its recurrent state carried in float32
    across chunks as across the frames of the whole-utterance call (Keras would cast a layer's
    float arguments to 16 bits)."""
    from asrkit.train.precision import policy

    spec, config = STREAMING[name]()
    config = replace(config, chunk_frames=2)
    features = DS2_FEATURES if spec.name == "ds2" else BRNN_FEATURES
    x = np.random.default_rng(0).normal(size=(33, features)).astype(np.float32)
    with policy("mixed_bfloat16"):
        model = build_model(spec, config, features)
        whole = _logits(model, x[None], [33])[0]
        streamed = streamed_outputs(model, spec, config, x, [5, 1, 7])
    assert streamed.shape == whole.shape
    assert np.max(np.abs(streamed - whole)) <= 1e-3 * np.max(np.abs(whole))


# -- the recurrent paths -------------------------------------------------------------------------


def test_the_forward_gru_and_lstm_are_kerass():
    import keras
    import tensorflow as tf

    from asrkit.models.layers import HoistedGRU, HoistedLSTM

    rng = np.random.default_rng(0)
    lengths = np.array([9, 5, 7], np.int32)
    x = rng.normal(size=(3, 9, 6)).astype(np.float32)
    x *= np.arange(9)[None, :, None] < lengths[:, None, None]
    mask = tf.sequence_mask(lengths, 9)
    for ours, theirs in ((HoistedGRU(4), keras.layers.GRU(4, return_sequences=True)),
                         (HoistedLSTM(4, forget_bias=0.0),
                          keras.layers.LSTM(4, return_sequences=True, unit_forget_bias=False))):
        ours(tf.constant(x), tf.constant(lengths))
        ours.bias.assign(rng.normal(size=ours.bias.shape).astype(np.float32))
        theirs(x, mask=mask)
        bias = ours.bias.numpy()[0]
        theirs.set_weights([ours.kernel.numpy()[0], ours.recurrent_kernel.numpy()[0],
                            bias if len(bias) == 2 else bias[0]])
        got = ours(tf.constant(x), tf.constant(lengths)).numpy()
        want = theirs(x, mask=mask).numpy() * mask.numpy()[:, :, None]
        np.testing.assert_allclose(got, want, atol=1e-5)
        # Stepped in chunks of 4 from its state, frames past a length leaving it unchanged.
        state, outputs = ours.initial_state(3), []
        for start in (0, 4, 8):
            chunk = np.zeros([3, 4, 6], np.float32)
            piece = x[:, start:start + 4]
            chunk[:, :piece.shape[1]] = piece
            valid = (start + np.arange(4))[None, :] < lengths[:, None]
            out, state = ours(tf.constant(chunk), state=state, valid=tf.constant(valid))
            outputs.append(out.numpy())
        np.testing.assert_allclose(np.concatenate(outputs, 1)[:, :9], got, atol=1e-5)


@pytest.mark.parametrize("name", ["ds2", "brnn"])
def test_the_keras_path_gives_the_loops_streaming_logits(name):
    spec, config = ds2(streaming=True, lookahead=2) if name == "ds2" else brnn(
        streaming=True, context=1)
    features = DS2_FEATURES if name == "ds2" else BRNN_FEATURES
    loop = build_model(spec, replace(config, rnn_impl="loop"), features)
    keras_path = build_model(spec, replace(config, rnn_impl="keras"), features)
    assert (loop.rnn_impl, keras_path.rnn_impl) == ("loop", "keras")
    keras_path.set_weights(loop.get_weights())
    import tensorflow as tf

    x = np.random.default_rng(2).normal(size=(2, 21, features)).astype(np.float32)
    lengths = np.array([21, 12], np.int32)
    a, b = (m((tf.constant(x), tf.constant(lengths))).numpy() for m in (loop, keras_path))
    out = np.asarray(spec.output_length(config, lengths))
    for row, n in enumerate(out):
        np.testing.assert_allclose(a[row, :n], b[row, :n], atol=1e-5)


@pytest.mark.parametrize("name", ["ds2", "brnn"])
def test_gpu_towers_get_cudnn_eligible_forward_layers(name, monkeypatch):
    """``auto`` on towers that are all GPUs (as ``asrkit train`` builds there) gives the
    forward-only recurrences Keras' layers in the configuration cuDNN accepts."""
    import keras

    from asrkit.models import layers

    monkeypatch.setattr(layers, "tower_devices",
                        lambda: ["/job:localhost/replica:0/task:0/device:GPU:0"])
    spec, config = ds2(streaming=True) if name == "ds2" else brnn(streaming=True, context=1)
    features = DS2_FEATURES if name == "ds2" else BRNN_FEATURES
    model = build_model(spec, config, features)
    assert model.rnn_impl == "keras"
    rnns = [layer for layer in model._flatten_layers() if isinstance(layer, layers.HoistedForward)]
    assert len(rnns) == (DS2_TINY["rnn_layers"] if name == "ds2" else 1)
    for rnn in rnns:
        assert rnn.impl == "keras" and len(rnn._keras.items) == 1
        for layer in rnn._keras.items:
            assert isinstance(layer, (keras.layers.LSTM, keras.layers.GRU))
            assert layer.built  # the model's call went through it
            assert layer.activation is keras.activations.tanh
            assert layer.recurrent_activation is keras.activations.sigmoid
            assert layer.use_bias and not layer.unroll and layer.recurrent_dropout == 0
            assert layer.use_cudnn == "auto" and not layer.go_backwards
            assert getattr(layer, "reset_after", True)
            assert not layer.weights


# -- the bidirectional models unchanged ----------------------------------------------------------


def test_the_bidirectional_models_keep_their_variables():
    """Checkpoints of the non-streaming models load: the same variables, in the same order."""
    spec, config = ds2(rnn_layers=1)
    shapes = [(w.path, tuple(w.shape)) for w in build_model(spec, config, 40).weights]
    assert shapes == [
        ("ds2/conv1/kernel", (11, 41, 1, 3)), ("ds2/conv2/kernel", (11, 21, 3, 3)),
        ("ds2/bn1/gamma", (3,)), ("ds2/bn1/beta", (3,)), ("ds2/bn1/moving_mean", (3,)),
        ("ds2/bn1/moving_variance", (3,)), ("ds2/bn2/gamma", (3,)), ("ds2/bn2/beta", (3,)),
        ("ds2/bn2/moving_mean", (3,)), ("ds2/bn2/moving_variance", (3,)),
        ("ds2/bigru0/kernel", (2, 30, 18)), ("ds2/bigru0/recurrent_kernel", (2, 6, 18)),
        ("ds2/bigru0/bias", (2, 2, 18)), ("ds2/logits/kernel", (12, 29)),
        ("ds2/logits/bias", (29,))]
    spec, config = brnn(context=1)
    shapes = [(w.path, tuple(w.shape)) for w in build_model(spec, config, 5).weights]
    assert shapes == [
        ("brnn/h1/kernel", (15, 8)), ("brnn/h1/bias", (8,)), ("brnn/h2/kernel", (8, 8)),
        ("brnn/h2/bias", (8,)), ("brnn/h3/kernel", (8, 12)), ("brnn/h3/bias", (12,)),
        ("brnn/bilstm/kernel", (2, 12, 24)), ("brnn/bilstm/recurrent_kernel", (2, 6, 24)),
        ("brnn/bilstm/bias", (2, 1, 24)), ("brnn/h5/kernel", (12, 8)), ("brnn/h5/bias", (8,)),
        ("brnn/logits/kernel", (8, 29)), ("brnn/logits/bias", (29,))]


def test_the_streaming_models_variables():
    spec, config = ds2(rnn_layers=1, streaming=True, lookahead=3)
    shapes = {w.path: tuple(w.shape) for w in build_model(spec, config, 40).weights}
    assert shapes["ds2/gru0/kernel"] == (1, 30, 18)
    assert shapes["ds2/lookahead/kernel"] == (4, 6)
    assert shapes["ds2/logits/kernel"] == (6, 29)
    assert not any("bigru" in path for path in shapes)
    spec, config = brnn(context=1, streaming=True)
    shapes = {w.path: tuple(w.shape) for w in build_model(spec, config, 5).weights}
    assert shapes["brnn/h3/kernel"] == (8, 6)  # DeepSpeech 0.x: h3 as wide as the cell
    assert shapes["brnn/lstm/kernel"] == (1, 6, 24)
    assert shapes["brnn/h5/kernel"] == (6, 8)


@pytest.mark.parametrize("name", ["ds2", "brnn"])
def test_streaming_settings_change_nothing_without_streaming(name):
    """``lookahead`` and ``chunk_frames`` are the streaming model's: the bidirectional model
    built with other values is the same model, with the same logits."""
    import tensorflow as tf

    if name == "ds2":
        (spec, config), other, features = ds2(), dict(lookahead=9, chunk_frames=3), 40
    else:
        (spec, config), other, features = brnn(context=1), dict(chunk_frames=3), 5
    a = build_model(spec, config, features)
    b = build_model(spec, replace(config, **other), features)
    assert [w.path for w in a.weights] == [w.path for w in b.weights]
    x = tf.random.normal([2, 20, features], seed=1)
    lengths = tf.constant([20, 13])
    np.testing.assert_array_equal(a((x, lengths)).numpy(), b((x, lengths)).numpy())


# -- training ------------------------------------------------------------------------------------


@pytest.mark.parametrize("model, settings", [
    ("ds2", ["model.conv_channels=4", "model.rnn_units=16", "model.rnn_layers=1",
             "features.num_mel_bins=20", "model.streaming=true", "model.lookahead=2"]),
    ("brnn", ["model.n_hidden=16", "model.n_cell=16", "model.context=2",
              "model.streaming=true"]),
])
def test_a_streaming_model_trains_and_exports(model, settings, tiny_dataset, tmp_path):
    """``asrkit train --model NAME -o model.streaming=true``, then every contract check and the
    exports."""
    report = check_model(model, tmp_path / "run", tiny_dataset, settings, steps=3)
    assert report.padding_max_abs_diff < 1e-4
    assert set(report.export_max_abs_diff) == {"savedmodel", "tflite"}


def test_a_streaming_ds2_grows_by_forward_gru_layers():
    """Pretraining by growth adds ``gru<i>`` under the lookahead convolution; every weight of
    the smaller model carries over."""
    from asrkit.train.model import carry_over

    spec, config = ds2(rnn_layers=1, streaming=True, lookahead=2)
    small = build_model(spec, config, DS2_FEATURES)
    big = build_model(spec, replace(config, rnn_layers=2), DS2_FEATURES, seed=1)
    old = {v.path: v.numpy() for v in small.variables if v.path.startswith("ds2/")}
    assert carry_over(small, big) >= len(old)
    new = [v.path for v in big.variables if v.path.startswith("ds2/") and v.path not in old]
    assert new and all(path.startswith("ds2/gru1/") for path in new)
    for variable in big.variables:
        if variable.path in old:
            assert np.array_equal(variable.numpy(), old[variable.path]), variable.path
