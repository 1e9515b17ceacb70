"""Layers the bundled models share.

The LSTM here exists for speed: Keras 3's LSTM on CPU multiplies the input by its weights one
time step at a time on small matrices. Deep Speech's recurrent layer reads a whole utterance at
once, so the input projection of every frame is one large matrix multiply done *before* the
recurrence, and the loop multiplies only the recurrent weights (1.6x faster training on CPU,
docs/performance.md; ``benchmarks/bench_train.py`` measures it).
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf


def clipped_relu(x: Any, clip: float = 20.0) -> Any:
    """Deep Speech's activation: ``min(max(0, x), clip)``."""
    return tf.minimum(tf.nn.relu(x), clip)


class HoistedLSTM(keras.layers.Layer):
    """An LSTM over padded batches whose input projection is hoisted out of the time loop.

    Gates are ordered i, f, g, o as in Keras; ``forget_bias`` is added to the forget gate (the
    notebook's ``BasicLSTMCell(forget_bias=1.0)``). With ``reverse=True`` each utterance is read
    backwards from its own last frame (``tf.reverse_sequence``), so padding never reaches the
    backward state. Outputs past an utterance's length are zero.
    """

    def __init__(self, units: int, forget_bias: float = 1.0, reverse: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.units = units
        self.forget_bias = forget_bias
        self.reverse = reverse

    def build(self, input_shape: Any) -> None:
        features = int(input_shape[-1])
        self.kernel = self.add_weight(name="kernel", shape=(features, 4 * self.units),
                                      initializer="glorot_uniform")
        self.recurrent_kernel = self.add_weight(name="recurrent_kernel",
                                                shape=(self.units, 4 * self.units),
                                                initializer="orthogonal")
        self.bias = self.add_weight(name="bias", shape=(4 * self.units,), initializer="zeros")

    def call(self, inputs: Any, lengths: Any) -> Any:
        x = inputs
        if self.reverse:
            x = tf.reverse_sequence(x, lengths, seq_axis=1, batch_axis=0)
        batch, frames = tf.shape(x)[0], tf.shape(x)[1]
        projected = tf.matmul(tf.reshape(x, [-1, tf.shape(x)[2]]), self.kernel) + self.bias
        projected = tf.transpose(tf.reshape(projected, [batch, frames, 4 * self.units]), [1, 0, 2])
        recurrent = tf.convert_to_tensor(self.recurrent_kernel)
        forget_bias = self.forget_bias

        def step(carry: Any, z: Any) -> Any:
            h, c = carry
            gates = z + tf.matmul(h, recurrent)
            i, f, g, o = tf.split(gates, 4, axis=-1)
            c = tf.sigmoid(f + forget_bias) * c + tf.sigmoid(i) * tf.tanh(g)
            return tf.sigmoid(o) * tf.tanh(c), c

        zeros = tf.zeros([batch, self.units], dtype=projected.dtype)
        outputs, _ = tf.scan(step, projected, initializer=(zeros, zeros))
        outputs = tf.transpose(outputs, [1, 0, 2])
        if self.reverse:
            outputs = tf.reverse_sequence(outputs, lengths, seq_axis=1, batch_axis=0)
        mask = tf.sequence_mask(lengths, frames, dtype=outputs.dtype)
        return outputs * mask[:, :, None]


def normal_init(stddev: float) -> keras.initializers.Initializer:
    return keras.initializers.RandomNormal(stddev=stddev)
