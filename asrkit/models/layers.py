"""Layers the bundled models share.

The LSTM here exists for speed: Keras 3's LSTM on CPU multiplies the input by its weights one
time step at a time on small matrices. Deep Speech's recurrent layer reads a whole utterance at
once, so the input projection of every frame is one large matrix multiply done *before* the
recurrence, and the loop multiplies only the recurrent weights (``benchmarks/bench_train.py``
measures it against Keras' own layers).
"""

from __future__ import annotations

import random
from typing import Any

import keras
import tensorflow as tf


def clipped_relu(x: Any, clip: float = 20.0) -> Any:
    """Deep Speech's activation: ``min(max(0, x), clip)``."""
    return tf.minimum(tf.nn.relu(x), clip)


class HoistedBiLSTM(keras.layers.Layer):
    """A bidirectional LSTM over padded batches, with the input projection hoisted out of the
    time loop.

    Gates are ordered i, f, g, o as in Keras; ``forget_bias`` is added to the forget gate (the
    notebook's ``BasicLSTMCell(forget_bias=1.0)``). The backward direction reads each utterance
    from its own last frame (``tf.reverse_sequence``), so padding never reaches its state.
    Outputs are the two directions concatenated, ``[batch, time, 2 units]``, zero past each
    utterance's length. The two directions run as two independent loops, which TensorFlow runs
    side by side (one loop over both directions, as one batched product a step, measured 10 %
    slower on CPU).
    """

    def __init__(self, units: int, forget_bias: float = 1.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.units = units
        self.forget_bias = forget_bias

    def build(self, input_shape: Any) -> None:
        features, gates = int(input_shape[-1]), 4 * self.units
        self.kernel = self.add_weight(
            name="kernel", shape=(2, features, gates),
            initializer=per_direction(keras.initializers.GlorotUniform, (features, gates)))
        self.recurrent_kernel = self.add_weight(
            name="recurrent_kernel", shape=(2, self.units, gates),
            initializer=per_direction(keras.initializers.Orthogonal, (self.units, gates)))
        self.bias = self.add_weight(name="bias", shape=(2, 1, gates), initializer="zeros")

    def call(self, inputs: Any, lengths: Any) -> Any:
        frames = tf.shape(inputs)[1]
        backward = tf.reverse_sequence(inputs, lengths, seq_axis=1, batch_axis=0)
        out = tf.concat([
            self._direction(inputs, 0),
            tf.reverse_sequence(self._direction(backward, 1), lengths, seq_axis=1, batch_axis=0),
        ], axis=-1)
        mask = tf.sequence_mask(lengths, frames, dtype=out.dtype)
        return out * mask[:, :, None]

    def _direction(self, inputs: Any, index: int) -> Any:
        """One direction's outputs ``[batch, time, units]``: the input projection of every frame
        in one product, then a loop that multiplies only the recurrent weights."""
        batch, frames, features = tf.shape(inputs)[0], tf.shape(inputs)[1], tf.shape(inputs)[2]
        kernel, recurrent = self.kernel[index], self.recurrent_kernel[index]
        projected = tf.matmul(tf.reshape(inputs, [-1, features]), kernel) + self.bias[index]
        projected = tf.transpose(tf.reshape(projected, [batch, frames, 4 * self.units]), [1, 0, 2])
        forget_bias = self.forget_bias

        def step(carry: Any, z: Any) -> Any:
            h, c = carry
            gates = z + tf.matmul(h, recurrent)
            i, f, g, o = tf.split(gates, 4, axis=-1)
            c = tf.sigmoid(f + forget_bias) * c + tf.sigmoid(i) * tf.tanh(g)
            return tf.sigmoid(o) * tf.tanh(c), c

        zeros = tf.zeros([batch, self.units], dtype=projected.dtype)
        outputs, _ = tf.scan(step, projected, initializer=(zeros, zeros))
        return tf.transpose(outputs, [1, 0, 2])


class HoistedBiGRU(keras.layers.Layer):
    """A bidirectional GRU over padded batches, with the input projection hoisted out of the
    time loop, for the reason :class:`HoistedBiLSTM` gives.

    Gates are ordered z, r, h and the reset gate is applied after the recurrent product
    (``reset_after``), both as in Keras' ``GRU``, so the weights have Keras' layout (a test
    compares the two). Each direction has its own initial weights. Outputs are the two
    directions concatenated, zero past each utterance's length.
    """

    def __init__(self, units: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.units = units

    def build(self, input_shape: Any) -> None:
        features, gates = int(input_shape[-1]), 3 * self.units
        self.kernel = self.add_weight(
            name="kernel", shape=(2, features, gates),
            initializer=per_direction(keras.initializers.GlorotUniform, (features, gates)))
        self.recurrent_kernel = self.add_weight(
            name="recurrent_kernel", shape=(2, self.units, gates),
            initializer=per_direction(keras.initializers.Orthogonal, (self.units, gates)))
        # Input and recurrent biases, as Keras' GRU(reset_after=True) keeps them.
        self.bias = self.add_weight(name="bias", shape=(2, 2, gates), initializer="zeros")

    def call(self, inputs: Any, lengths: Any) -> Any:
        frames = tf.shape(inputs)[1]
        backward = tf.reverse_sequence(inputs, lengths, seq_axis=1, batch_axis=0)
        out = tf.concat([
            self._direction(inputs, 0),
            tf.reverse_sequence(self._direction(backward, 1), lengths, seq_axis=1, batch_axis=0),
        ], axis=-1)
        mask = tf.sequence_mask(lengths, frames, dtype=out.dtype)
        return out * mask[:, :, None]

    def _direction(self, inputs: Any, index: int) -> Any:
        batch, frames, features = tf.shape(inputs)[0], tf.shape(inputs)[1], tf.shape(inputs)[2]
        kernel, recurrent = self.kernel[index], self.recurrent_kernel[index]
        input_bias, recurrent_bias = self.bias[index][0], self.bias[index][1]
        projected = tf.matmul(tf.reshape(inputs, [-1, features]), kernel) + input_bias
        projected = tf.transpose(tf.reshape(projected, [batch, frames, 3 * self.units]), [1, 0, 2])
        units = self.units

        def step(h: Any, x: Any) -> Any:
            inner = tf.matmul(h, recurrent) + recurrent_bias
            z = tf.sigmoid(x[:, :units] + inner[:, :units])
            r = tf.sigmoid(x[:, units:2 * units] + inner[:, units:2 * units])
            candidate = tf.tanh(x[:, 2 * units:] + r * inner[:, 2 * units:])
            return z * h + (1 - z) * candidate

        outputs = tf.scan(step, projected, initializer=tf.zeros([batch, units], projected.dtype))
        return tf.transpose(outputs, [1, 0, 2])


def per_direction(initializer: Any, shape: tuple[int, int]) -> Any:
    """An initializer of ``[2, *shape]`` that draws each direction independently: a Keras 3
    initializer without a seed returns the same values on every call, so one instance used
    twice would start both directions identical."""

    def initialize(_shape: Any, dtype: Any = None) -> Any:
        return tf.stack([initializer(seed=random.randrange(2**31))(shape, dtype)
                         for _ in range(2)])

    return initialize


def normal_init(stddev: float) -> keras.initializers.Initializer:
    return keras.initializers.RandomNormal(stddev=stddev)
