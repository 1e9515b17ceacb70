"""The bundled models' dropout (:mod:`asrkit.models.dropout`): the rate it drops, the expected
value it keeps, the same mask for the same seed, and layer names and weights as Keras'."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")


@pytest.mark.parametrize("rate", [0.05, 0.1, 0.3, 0.5])
def test_it_drops_the_rate_in_effect_and_keeps_the_expected_value(rate):
    from asrkit.models.dropout import byte_dropout, effective_rate

    assert abs(effective_rate(rate) - rate) <= 1 / 512
    ones = tf.ones([64, 1000, 8])
    out = byte_dropout(ones, rate, tf.constant([3, 4])).numpy()
    dropped = np.mean(out == 0)
    # 512,000 elements: the share dropped is within 0.5 % (absolute) of the rate in effect
    assert abs(dropped - effective_rate(rate)) < 0.005
    assert abs(out.mean() - 1.0) < 0.01
    np.testing.assert_allclose(out[out != 0], 1 / (1 - effective_rate(rate)), rtol=1e-6)


def test_every_byte_of_a_draw_decides_its_own_element():
    """Four elements share a 32-bit draw; their masks must still be independent: the share of
    groups of four with all four dropped is about the rate to the fourth power, not the rate
    (what one byte reused four times would give)."""
    from asrkit.models.dropout import byte_dropout, effective_rate

    out = byte_dropout(tf.ones([400_000, 4]), 0.5, tf.constant([1, 2])).numpy()
    all_dropped = np.mean((out == 0).all(axis=1))
    assert abs(all_dropped - effective_rate(0.5) ** 4) < 0.003
    # and neighbours within a group are uncorrelated
    first, second = (out[:, 0] == 0), (out[:, 1] == 0)
    assert abs(np.mean(first & second) - np.mean(first) * np.mean(second)) < 0.003


def test_the_same_seed_gives_the_same_mask_and_another_seed_another():
    from asrkit.models.dropout import byte_dropout

    x = tf.random.normal([7, 13, 5], dtype=tf.float32)  # a size not a multiple of four
    a = byte_dropout(x, 0.2, tf.constant([1, 1])).numpy()
    np.testing.assert_array_equal(a, byte_dropout(x, 0.2, tf.constant([1, 1])).numpy())
    assert not np.array_equal(a == 0, byte_dropout(x, 0.2, tf.constant([1, 2])).numpy() == 0)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_the_gradient_passes_the_kept_elements_scaled_and_no_others(dtype):
    from asrkit.models.dropout import byte_dropout

    x = tf.cast(tf.random.normal([16, 33]), dtype)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = byte_dropout(x, 0.25, tf.constant([9, 9]))
    gradient = tape.gradient(y, x).numpy().astype(np.float32)
    kept = y.numpy().astype(np.float32) != 0
    assert y.dtype == x.dtype
    np.testing.assert_allclose(gradient[kept], 1 / 0.75, rtol=1e-2)
    assert np.all(gradient[~kept] == 0)


def test_the_layer_is_keras_dropout_where_training_is_off_and_by_name():
    import keras

    from asrkit.models.dropout import Dropout

    layer = Dropout(0.3)
    assert isinstance(layer, keras.layers.Dropout)
    assert layer.name.startswith("dropout")  # Keras' own names: checkpoints and graphs unchanged
    x = tf.random.normal([4, 10])
    np.testing.assert_array_equal(layer(x, training=False).numpy(), x.numpy())
    trained = layer(x, training=True).numpy()
    assert 0 < np.mean(trained == 0) < 1
    # two calls draw two masks (the seed generator moves on)
    assert not np.array_equal(trained == 0, layer(x, training=True).numpy() == 0)
    assert np.array_equal(Dropout(0.0)(x, training=True).numpy(), x.numpy())
