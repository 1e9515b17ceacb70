"""The bundled models' building blocks against Keras' own layers."""

from __future__ import annotations

import numpy as np


def test_hoisted_bilstm_equals_keras_bidirectional_lstm():
    import keras
    import tensorflow as tf

    from asrkit.models.layers import HoistedBiLSTM

    rng = np.random.default_rng(0)
    lengths = np.array([9, 5, 7], np.int32)
    x = rng.normal(size=(3, 9, 6)).astype(np.float32)
    x *= np.arange(9)[None, :, None] < lengths[:, None, None]

    ours = HoistedBiLSTM(4, forget_bias=0.0)
    ours(tf.constant(x), tf.constant(lengths))
    ours.bias.assign(rng.normal(size=(2, 1, 16)).astype(np.float32))
    theirs = keras.layers.Bidirectional(
        keras.layers.LSTM(4, return_sequences=True, unit_forget_bias=False))
    mask = tf.sequence_mask(lengths, 9)
    theirs(x, mask=mask)
    kernel, recurrent, bias = (w.numpy() for w in (ours.kernel, ours.recurrent_kernel, ours.bias))
    theirs.forward_layer.set_weights([kernel[0], recurrent[0], bias[0, 0]])
    theirs.backward_layer.set_weights([kernel[1], recurrent[1], bias[1, 0]])

    got = ours(tf.constant(x), tf.constant(lengths)).numpy()
    want = theirs(x, mask=mask).numpy()
    for row, length in enumerate(lengths):
        np.testing.assert_allclose(got[row, :length], want[row, :length], atol=1e-5)
        assert not got[row, length:].any()  # nothing past the end


def test_forget_bias_is_added_to_the_forget_gate():
    import tensorflow as tf

    from asrkit.models.layers import HoistedBiLSTM

    x, lengths = tf.ones([1, 3, 2]), tf.constant([3])
    plain, biased = HoistedBiLSTM(2, forget_bias=0.0), HoistedBiLSTM(2, forget_bias=1.0)
    plain(x, lengths)
    biased(x, lengths)
    biased.set_weights(plain.get_weights())
    bias = np.zeros((2, 1, 8), np.float32)
    bias[:, :, 2:4] = 1.0  # the forget gate's slice (i, f, g, o)
    plain.bias.assign(bias)
    np.testing.assert_allclose(plain(x, lengths).numpy(), biased(x, lengths).numpy(), atol=1e-6)


def test_hoisted_bigru_equals_keras_bidirectional_gru():
    import keras
    import tensorflow as tf

    from asrkit.models.layers import HoistedBiGRU

    rng = np.random.default_rng(1)
    lengths = np.array([8, 4, 6], np.int32)
    x = rng.normal(size=(3, 8, 5)).astype(np.float32)
    x *= np.arange(8)[None, :, None] < lengths[:, None, None]

    ours = HoistedBiGRU(3)
    ours(tf.constant(x), tf.constant(lengths))
    ours.bias.assign(rng.normal(size=(2, 2, 9)).astype(np.float32))
    theirs = keras.layers.Bidirectional(keras.layers.GRU(3, return_sequences=True))
    mask = tf.sequence_mask(lengths, 8)
    theirs(x, mask=mask)
    kernel, recurrent, bias = (w.numpy() for w in (ours.kernel, ours.recurrent_kernel, ours.bias))
    theirs.forward_layer.set_weights([kernel[0], recurrent[0], bias[0]])
    theirs.backward_layer.set_weights([kernel[1], recurrent[1], bias[1]])

    got = ours(tf.constant(x), tf.constant(lengths)).numpy()
    want = theirs(x, mask=mask).numpy()
    for row, length in enumerate(lengths):
        np.testing.assert_allclose(got[row, :length], want[row, :length], atol=1e-5)
        assert not got[row, length:].any()


def test_recurrent_directions_start_from_different_weights():
    """Keras 3 initializers without a seed repeat their values: each direction draws its own."""
    import tensorflow as tf

    from asrkit.models.layers import HoistedBiGRU, HoistedBiLSTM

    for layer in (HoistedBiLSTM(4), HoistedBiGRU(4)):
        layer(tf.ones([1, 2, 3]), tf.constant([2]))
        for weights in (layer.kernel.numpy(), layer.recurrent_kernel.numpy()):
            assert not np.allclose(weights[0], weights[1])
