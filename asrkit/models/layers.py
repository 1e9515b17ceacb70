"""Layers the bundled models share.

The LSTM here exists for speed: Keras 3's LSTM on CPU multiplies the input by its weights one
time step at a time on small matrices. Deep Speech's recurrent layer reads a whole utterance at
once, so the input projection of every frame is one large matrix multiply done *before* the
recurrence, and the loop multiplies only the recurrent weights; both directions share one
loop (``benchmarks/bench_train.py`` measures it against Keras' own layers).
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf


def clipped_relu(x: Any, clip: float = 20.0) -> Any:
    """Deep Speech's activation: ``min(max(0, x), clip)``."""
    return tf.minimum(tf.nn.relu(x), clip)


class HoistedBiLSTM(keras.layers.Layer):
    """A bidirectional LSTM over padded batches, with the input projection hoisted out of the
    time loop and both directions in one loop.

    Why one loop: the work in each step is small (a ``[batch, units]`` by ``[units, 4 units]``
    product), so the loop's own overhead counts; stacking the directions makes each step one
    batched product of twice the size, and halves the number of steps the loop takes.

    Gates are ordered i, f, g, o as in Keras; ``forget_bias`` is added to the forget gate (the
    notebook's ``BasicLSTMCell(forget_bias=1.0)``). The backward direction reads each utterance
    from its own last frame (``tf.reverse_sequence``), so padding never reaches its state.
    Outputs are the two directions concatenated, ``[batch, time, 2 units]``, zero past each
    utterance's length.
    """

    def __init__(self, units: int, forget_bias: float = 1.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.units = units
        self.forget_bias = forget_bias

    def build(self, input_shape: Any) -> None:
        features, gates = int(input_shape[-1]), 4 * self.units
        glorot = keras.initializers.GlorotUniform()
        orthogonal = keras.initializers.Orthogonal()
        self.kernel = self.add_weight(
            name="kernel", shape=(2, features, gates),
            initializer=lambda shape, dtype=None: tf.stack(
                [glorot((features, gates), dtype), glorot((features, gates), dtype)]))
        self.recurrent_kernel = self.add_weight(
            name="recurrent_kernel", shape=(2, self.units, gates),
            initializer=lambda shape, dtype=None: tf.stack(
                [orthogonal((self.units, gates), dtype), orthogonal((self.units, gates), dtype)]))
        self.bias = self.add_weight(name="bias", shape=(2, 1, gates), initializer="zeros")

    def call(self, inputs: Any, lengths: Any) -> Any:
        batch, frames, features = tf.shape(inputs)[0], tf.shape(inputs)[1], tf.shape(inputs)[2]
        backward = tf.reverse_sequence(inputs, lengths, seq_axis=1, batch_axis=0)
        both = tf.reshape(tf.stack([inputs, backward]), [2, -1, features])  # [2, B*T, F]
        projected = tf.matmul(both, self.kernel) + self.bias  # one product for every frame
        projected = tf.reshape(projected, [2, batch, frames, 4 * self.units])
        projected = tf.transpose(projected, [2, 0, 1, 3])  # [T, 2, B, 4 units]
        recurrent = tf.convert_to_tensor(self.recurrent_kernel)
        forget_bias = self.forget_bias

        def step(carry: Any, z: Any) -> Any:
            h, c = carry
            gates = z + tf.matmul(h, recurrent)
            i, f, g, o = tf.split(gates, 4, axis=-1)
            c = tf.sigmoid(f + forget_bias) * c + tf.sigmoid(i) * tf.tanh(g)
            return tf.sigmoid(o) * tf.tanh(c), c

        zeros = tf.zeros([2, batch, self.units], dtype=projected.dtype)
        outputs, _ = tf.scan(step, projected, initializer=(zeros, zeros))  # [T, 2, B, units]
        outputs = tf.transpose(outputs, [1, 2, 0, 3])  # [2, B, T, units]
        backward_out = tf.reverse_sequence(outputs[1], lengths, seq_axis=1, batch_axis=0)
        out = tf.concat([outputs[0], backward_out], axis=-1)
        mask = tf.sequence_mask(lengths, frames, dtype=out.dtype)
        return out * mask[:, :, None]


def normal_init(stddev: float) -> keras.initializers.Initializer:
    return keras.initializers.RandomNormal(stddev=stddev)
