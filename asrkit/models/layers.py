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


class HoistedBiRNN(keras.layers.Layer):
    """What the bidirectional recurrent layers share: per-direction weights ``kernel``
    ``[2, features, gates * units]`` and ``recurrent_kernel`` ``[2, units, gates * units]`` in
    Keras' layout, each direction drawn independently; the input projection of every frame in
    one product before the time loop, which then multiplies only the recurrent weights.

    The backward direction reads each utterance from its own last frame
    (``tf.reverse_sequence``), so padding never reaches its state. Outputs are the two directions
    concatenated, ``[batch, time, 2 units]``, zero past each utterance's length. The two
    directions run as two independent loops, which TensorFlow runs side by side (one loop over
    both directions, as one batched product a step, measured 10 % slower on CPU).
    """

    #: Gates per unit, and bias rows (input only, or input and recurrent).
    GATES: int
    BIASES: int

    def __init__(self, units: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.units = units

    def build(self, input_shape: Any) -> None:
        features, gates = int(input_shape[-1]), self.GATES * self.units
        self.kernel = self.add_weight(
            name="kernel", shape=(2, features, gates),
            initializer=per_direction(keras.initializers.GlorotUniform, (features, gates)))
        self.recurrent_kernel = self.add_weight(
            name="recurrent_kernel", shape=(2, self.units, gates),
            initializer=per_direction(keras.initializers.Orthogonal, (self.units, gates)))
        self.bias = self.add_weight(name="bias", shape=(2, self.BIASES, gates),
                                    initializer="zeros")

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
        """One direction's outputs ``[batch, time, units]``."""
        batch, frames, features = tf.shape(inputs)[0], tf.shape(inputs)[1], tf.shape(inputs)[2]
        projected = tf.matmul(tf.reshape(inputs, [-1, features]), self.kernel[index])
        projected = tf.reshape(projected + self.bias[index][0],
                               [batch, frames, self.GATES * self.units])
        outputs = self._loop(tf.transpose(projected, [1, 0, 2]), index, batch)
        return tf.transpose(outputs, [1, 0, 2])

    def _loop(self, projected: Any, index: int, batch: Any) -> Any:
        """The recurrence over time-major projected inputs; outputs ``[time, batch, units]``."""
        raise NotImplementedError


class HoistedBiLSTM(HoistedBiRNN):
    """A bidirectional LSTM (:class:`HoistedBiRNN`). Gates are ordered i, f, g, o as in Keras;
    ``forget_bias`` is added to the forget gate (the notebook's
    ``BasicLSTMCell(forget_bias=1.0)``)."""

    GATES, BIASES = 4, 1

    def __init__(self, units: int, forget_bias: float = 1.0, **kwargs: Any) -> None:
        super().__init__(units, **kwargs)
        self.forget_bias = forget_bias

    def _loop(self, projected: Any, index: int, batch: Any) -> Any:
        recurrent, forget_bias = self.recurrent_kernel[index], self.forget_bias

        def step(carry: Any, z: Any) -> Any:
            h, c = carry
            gates = z + tf.matmul(h, recurrent)
            i, f, g, o = tf.split(gates, 4, axis=-1)
            c = tf.sigmoid(f + forget_bias) * c + tf.sigmoid(i) * tf.tanh(g)
            return tf.sigmoid(o) * tf.tanh(c), c

        zeros = tf.zeros([batch, self.units], dtype=projected.dtype)
        outputs, _ = tf.scan(step, projected, initializer=(zeros, zeros))
        return outputs


class HoistedBiGRU(HoistedBiRNN):
    """A bidirectional GRU (:class:`HoistedBiRNN`). Gates are ordered z, r, h and the reset
    gate is applied after the recurrent product (``reset_after``), with input and recurrent
    biases, all as in Keras' ``GRU`` (a test compares the two)."""

    GATES, BIASES = 3, 2

    def _loop(self, projected: Any, index: int, batch: Any) -> Any:
        recurrent, recurrent_bias = self.recurrent_kernel[index], self.bias[index][1]
        units = self.units

        def step(h: Any, x: Any) -> Any:
            inner = tf.matmul(h, recurrent) + recurrent_bias
            z = tf.sigmoid(x[:, :units] + inner[:, :units])
            r = tf.sigmoid(x[:, units:2 * units] + inner[:, units:2 * units])
            candidate = tf.tanh(x[:, 2 * units:] + r * inner[:, 2 * units:])
            return z * h + (1 - z) * candidate

        return tf.scan(step, projected, initializer=tf.zeros([batch, units], projected.dtype))


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
