"""The two implementations of the recurrent layers (``rnn_impl``): the hoisted loop and Keras'
cuDNN-eligible layers give the same logits from the same weights, checkpoints move between them
unchanged, and ``auto`` picks by the towers' devices."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

#: A padded batch: utterances of different lengths, zeros past each one's end.
LENGTHS = np.array([23, 9, 16, 1], np.int32)

#: Tiny sizes of each model with a bidirectional RNN, and its features' width.
MODELS = {
    "brnn": ({"n_hidden": 24, "n_cell": 16, "context": 2}, 26),
    "ds2": ({"conv_channels": 4, "rnn_layers": 2, "rnn_units": 12}, 40),
}


def build(name: str, impl: str) -> tuple:
    import keras

    from asrkit import plugins

    spec = plugins.get("model", name)
    sizes, features = MODELS[name]
    config = replace(spec.Config(), **sizes, rnn_impl=impl)
    keras.utils.set_random_seed(0)
    return spec.build(config, features, 29), features


def batch(features: int) -> tuple:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(len(LENGTHS), LENGTHS.max(), features)).astype(np.float32)
    x *= (np.arange(LENGTHS.max())[None, :, None] < LENGTHS[:, None, None])
    return x, LENGTHS


def logits(model, inputs) -> np.ndarray:
    import tensorflow as tf

    x, lengths = inputs
    return model((tf.constant(x), tf.constant(lengths)), training=False).numpy()


def assert_same_logits(name: str, a: np.ndarray, b: np.ndarray) -> None:
    from asrkit import plugins

    spec = plugins.get("model", name)
    config = replace(spec.Config(), **MODELS[name][0])
    out = np.asarray(spec.output_length(config, LENGTHS))
    for row, length in enumerate(out):  # the frames the CTC loss reads
        np.testing.assert_allclose(a[row, :length], b[row, :length], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", list(MODELS))
def test_keras_path_gives_the_loops_logits(name):
    loop, features = build(name, "loop")
    keras_path, _ = build(name, "keras")
    assert (loop.rnn_impl, keras_path.rnn_impl) == ("loop", "keras")
    keras_path.set_weights(loop.get_weights())
    inputs = batch(features)
    assert_same_logits(name, logits(loop, inputs), logits(keras_path, inputs))


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("source, target", [("loop", "keras"), ("keras", "loop")])
def test_a_checkpoint_moves_between_the_paths(name, source, target, tmp_path):
    from asrkit.train.checkpoints import Checkpoints

    trained, features = build(name, source)
    for weight in trained.weights:  # not the initial values, which both builds share
        weight.assign(weight.numpy() + np.random.default_rng(7).normal(
            scale=0.05, size=weight.shape).astype(np.float32))
    Checkpoints(tmp_path, model=trained).save("latest", 1, {"global_step": 1})
    restored, _ = build(name, target)
    assert Checkpoints(tmp_path, model=restored).restore("latest") == {"global_step": 1}
    for a, b in zip(trained.weights, restored.weights, strict=True):
        assert a.path == b.path
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    inputs = batch(features)
    assert_same_logits(name, logits(trained, inputs), logits(restored, inputs))


@pytest.mark.parametrize("name", list(MODELS))
def test_keras_path_is_kerass_cudnn_eligible_layer(name):
    """What Keras requires of a layer to hand it to cuDNN on a GPU."""
    import keras

    model, _ = build(name, "keras")
    rnns = [layer for layer in model._flatten_layers() if hasattr(layer, "_keras")]
    assert rnns
    for rnn in rnns:
        for layer in rnn._keras.items:
            assert isinstance(layer, (keras.layers.LSTM, keras.layers.GRU))
            assert layer.built  # the model's call went through it
            assert layer.activation in (keras.activations.tanh,)
            assert layer.recurrent_activation in (keras.activations.sigmoid,)
            assert layer.use_bias and not layer.unroll and layer.recurrent_dropout == 0
            assert layer.use_cudnn == "auto"
            assert getattr(layer, "reset_after", True)
            assert not layer.weights  # the owner's variables are the only ones


def test_auto_picks_by_the_towers():
    from asrkit.models.layers import choose_rnn_impl

    gpus = ["/job:localhost/replica:0/task:0/device:GPU:0",
            "/job:localhost/replica:0/task:0/device:GPU:1"]
    assert choose_rnn_impl("auto", gpus) == "keras"
    assert choose_rnn_impl("auto", ["/device:CPU:0"]) == "loop"
    assert choose_rnn_impl("auto", [gpus[0], "/device:CPU:0"]) == "loop"
    assert choose_rnn_impl("auto", []) == "loop"
    assert choose_rnn_impl("loop", gpus) == "loop"
    assert choose_rnn_impl("keras", ["/device:CPU:0"]) == "keras"


@pytest.mark.parametrize("name", list(MODELS))
def test_auto_is_the_loop_on_this_cpu(name):
    import tensorflow as tf

    from asrkit.models.layers import tower_devices

    assert tower_devices() == []  # evaluation, transcription, export: no towers
    assert build(name, "auto")[0].rnn_impl == "loop"
    with tf.distribute.OneDeviceStrategy("/cpu:0").scope():  # how the engine builds it
        assert all("CPU" in d for d in tower_devices())
        assert build(name, "auto")[0].rnn_impl == "loop"


def test_auto_is_recorded_in_the_run_config():
    from asrkit.core.settings import override, to_dict
    from asrkit.models.brnn import BRNNConfig
    from asrkit.models.ds2 import DS2Config

    assert to_dict(BRNNConfig())["rnn_impl"] == "auto"
    assert override(DS2Config(), "rnn_impl", "keras").rnn_impl == "keras"
    with pytest.raises(Exception, match="rnn_impl='cudnn'"):
        override(BRNNConfig(), "rnn_impl", "cudnn")


@pytest.mark.parametrize("name", list(MODELS))
def test_keras_path_keeps_the_padding_contract(name):
    """Each utterance's logits on the Keras path do not depend on the padding after it."""
    from asrkit import plugins
    from asrkit.testing import check_padding

    spec = plugins.get("model", name)
    sizes, features = MODELS[name]
    config = replace(spec.Config(), **sizes, rnn_impl="keras")
    assert check_padding(spec, config, features) < 1e-4
