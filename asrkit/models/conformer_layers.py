"""The Keras layers of the ``conformer`` model (:mod:`asrkit.models.conformer` describes it).

A module of its own because defining Keras classes imports Keras and TensorFlow (seconds):
:mod:`asrkit.models.conformer` is a plugin that ``asrkit --help`` and ``asrkit plugins``
import, so it imports this module only inside :func:`~asrkit.models.conformer.build_conformer`,
as ``ds2`` and ``brnn`` import :mod:`asrkit.models.layers`.

Checkpoints name every variable by the attributes that hold its layers (``block0``, ``ff1``,
``expand``...) and Keras by the layers' ``name`` arguments: both are part of the checkpoint
format, so runs saved by earlier versions load only while they stay as they are.
"""

from __future__ import annotations

import math
from typing import Any

import keras
import tensorflow as tf

from asrkit.models.conformer_config import (
    SUBSAMPLING_KERNEL,
    SUBSAMPLING_STRIDE,
    ConformerConfig,
    subsampled_length,
)

#: Layer normalisation's epsilon throughout the model.
NORM_EPSILON = 1e-5


def rel_shift(scores: tf.Tensor) -> tf.Tensor:
    """Scores ``[B, H, T, 2T-1]`` against relative positions ``T-1 .. -(T-1)`` rearranged to
    ``[B, H, T, T]``, where ``[i, j]`` is the score for position ``i - j``.

    Transformer-XL's shift: one zero column, a reshape that moves each row one step further
    left than the one above, and a slice; no gather, so it converts to TFLite built-ins."""
    shape = tf.shape(scores)
    batch, heads, frames, positions = shape[0], shape[1], shape[2], shape[3]
    padded = tf.pad(scores, [[0, 0], [0, 0], [0, 0], [1, 0]])
    padded = tf.reshape(padded, [batch, heads, positions + 1, frames])
    shifted = tf.reshape(padded[:, :, 1:], [batch, heads, frames, positions])
    return shifted[:, :, :, :frames]


def relative_positions(frames: int | tf.Tensor, d_model: int) -> tf.Tensor:
    """Sinusoidal encodings ``[2T-1, d_model]`` of the relative positions ``T-1, ..., -(T-1)``
    (float32)."""
    import numpy as np
    half = d_model // 2
    inverse = np.exp(-math.log(10000.0) * np.arange(half) / max(1, half)).astype(np.float32)
    positions = tf.cast(tf.range(frames - 1, -frames, -1), tf.float32)
    angles = positions[:, None] * tf.constant(inverse)[None, :]
    encoding = tf.concat([tf.sin(angles), tf.cos(angles)], axis=-1)
    if d_model % 2:
        encoding = tf.pad(encoding, [[0, 0], [0, 1]])
    return encoding


def swish(x: tf.Tensor) -> tf.Tensor:
    """``x * sigmoid(x)``, written out: a TFLite built-in, where Keras' ``swish`` is not."""
    return x * tf.sigmoid(x)


def frame_mask(lengths: tf.Tensor, frames: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    """``[B, T, 1]``: 1 on an utterance's frames, 0 on padding."""
    return tf.sequence_mask(lengths, frames, dtype=dtype)[:, :, None]


class Layer(keras.layers.Layer):
    """A layer whose sublayers build themselves in its first (eager) call. Without a ``build``
    of its own, Keras would first trace ``call`` symbolically to build it, at every level of
    nesting: several times slower than the call itself."""

    def build(self, input_shape: Any) -> None:
        pass


class Subsampling(Layer):
    """Two 3x3 convolutions striding time and frequency by 2, ReLU, then Dense to d_model.

    Padding is explicit (one zero frame each side), so output frame ``i`` always reads input
    frames ``2i-1 .. 2i+1`` whatever the padded batch's length; outputs past each utterance's
    length are zeroed before the next convolution reads them."""

    def __init__(self, config: ConformerConfig, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        c, k, s = config.subsampling_channels, SUBSAMPLING_KERNEL, SUBSAMPLING_STRIDE
        self.conv1 = keras.layers.Conv2D(c, k, s, padding="valid", name="conv1")
        self.conv2 = keras.layers.Conv2D(c, k, s, padding="valid", name="conv2")
        self.project = keras.layers.Dense(config.d_model, name="project")
        self.dropout = keras.layers.Dropout(config.dropout)

    def call(self, features: tf.Tensor, lengths: tf.Tensor, training: bool = False) -> tf.Tensor:
        pad = SUBSAMPLING_KERNEL // 2
        x = features * frame_mask(lengths, tf.shape(features)[1], features.dtype)
        x = x[:, :, :, None]
        for conv in (self.conv1, self.conv2):
            x = tf.nn.relu(conv(tf.pad(x, [[0, 0], [pad, pad], [pad, pad], [0, 0]])))
            lengths = subsampled_length(lengths)
            x = x * frame_mask(lengths, tf.shape(x)[1], x.dtype)[:, :, :, None]
        shape = tf.shape(x)
        x = tf.reshape(x, [shape[0], shape[1], x.shape[2] * x.shape[3]])
        return self.dropout(self.project(x), training=training)


class FeedForward(Layer):
    """Layer norm, Dense ``ff_multiplier * d_model`` with swish, Dense ``d_model``."""

    def __init__(self, config: ConformerConfig, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.norm = keras.layers.LayerNormalization(epsilon=NORM_EPSILON, name="norm")
        self.expand = keras.layers.Dense(config.ff_multiplier * config.d_model, name="expand")
        self.contract = keras.layers.Dense(config.d_model, name="contract")
        self.dropout = keras.layers.Dropout(config.dropout)

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        x = self.dropout(swish(self.expand(self.norm(x))), training=training)
        return self.dropout(self.contract(x), training=training)


class RelativeSelfAttention(Layer):
    """Multi-head self-attention with Transformer-XL relative positions; padded keys get no
    weight."""

    def __init__(self, config: ConformerConfig, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        d_model = config.d_model
        self.d_model, self.heads = d_model, config.num_heads
        self.head_dim = d_model // config.num_heads
        self.norm = keras.layers.LayerNormalization(epsilon=NORM_EPSILON, name="norm")
        self.query = keras.layers.Dense(d_model, name="query")
        self.key = keras.layers.Dense(d_model, name="key")
        self.value = keras.layers.Dense(d_model, name="value")
        self.position = keras.layers.Dense(d_model, use_bias=False, name="position")
        self.output_dense = keras.layers.Dense(d_model, name="output")
        self.attention_dropout = keras.layers.Dropout(config.attention_dropout)
        self.dropout = keras.layers.Dropout(config.dropout)

    def build(self, input_shape: Any) -> None:
        init = keras.initializers.GlorotUniform()
        # Transformer-XL's u (content bias) and v (position bias), one per head.
        self.content_bias = self.add_weight(name="content_bias",
                                            shape=(self.heads, self.head_dim), initializer=init)
        self.position_bias = self.add_weight(name="position_bias",
                                             shape=(self.heads, self.head_dim), initializer=init)

    def _heads(self, x: tf.Tensor, batch: tf.Tensor) -> tf.Tensor:
        """``[B, T, d]`` -> ``[B, H, T, d/H]``."""
        return tf.transpose(tf.reshape(x, [batch, -1, self.heads, self.head_dim]), [0, 2, 1, 3])

    def call(self, x: tf.Tensor, valid: tf.Tensor, training: bool = False) -> tf.Tensor:
        heads, head_dim = self.heads, self.head_dim
        batch, frames = tf.shape(x)[0], tf.shape(x)[1]
        x = self.norm(x)
        q = self._heads(self.query(x), batch)
        k = self._heads(self.key(x), batch)
        v = self._heads(self.value(x), batch)
        encoding = tf.cast(relative_positions(frames, self.d_model), x.dtype)
        p = tf.transpose(tf.reshape(self.position(encoding), [-1, heads, head_dim]),
                         [1, 2, 0])[None]  # [1, H, d/H, 2T-1]
        u = tf.cast(self.content_bias, x.dtype)[None, :, None, :]
        w = tf.cast(self.position_bias, x.dtype)[None, :, None, :]
        content = tf.matmul(q + u, k, transpose_b=True)  # [B, H, T, T]
        position = rel_shift(tf.matmul(q + w, p))  # [B, H, T, T]
        scores = tf.cast(content + position, tf.float32) / math.sqrt(head_dim)
        scores = tf.where(valid[:, None, None, :], scores, -1e9)
        weights = tf.cast(tf.nn.softmax(scores, axis=-1), x.dtype)
        weights = self.attention_dropout(weights, training=training)
        out = tf.reshape(tf.transpose(tf.matmul(weights, v), [0, 2, 1, 3]),
                         [batch, frames, self.d_model])
        return self.dropout(self.output_dense(out), training=training)


class Convolution(Layer):
    """Pointwise conv + GLU, depthwise conv over time, layer norm, swish, pointwise conv.
    Padded frames are zeroed before the depthwise convolution reads them."""

    def __init__(self, config: ConformerConfig, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        d_model = config.d_model
        self.norm = keras.layers.LayerNormalization(epsilon=NORM_EPSILON, name="norm")
        self.pointwise1 = keras.layers.Dense(2 * d_model, name="pointwise1")
        self.depthwise = keras.layers.DepthwiseConv1D(config.conv_kernel, padding="same",
                                                      name="depthwise")
        self.conv_norm = keras.layers.LayerNormalization(epsilon=NORM_EPSILON, name="conv_norm")
        self.pointwise2 = keras.layers.Dense(d_model, name="pointwise2")
        self.dropout = keras.layers.Dropout(config.dropout)

    def call(self, x: tf.Tensor, valid: tf.Tensor, training: bool = False) -> tf.Tensor:
        values, gates = tf.split(self.pointwise1(self.norm(x)), 2, axis=-1)
        x = values * tf.sigmoid(gates) * tf.cast(valid, x.dtype)[:, :, None]
        x = swish(self.conv_norm(self.depthwise(x)))
        return self.dropout(self.pointwise2(x), training=training)


class ConformerBlock(Layer):
    """Half feed-forward, self-attention, convolution, half feed-forward, each a residual;
    then layer norm."""

    def __init__(self, config: ConformerConfig, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ff1 = FeedForward(config, name="ff1")
        self.attention = RelativeSelfAttention(config, name="attention")
        self.conv = Convolution(config, name="conv")
        self.ff2 = FeedForward(config, name="ff2")
        self.norm = keras.layers.LayerNormalization(epsilon=NORM_EPSILON, name="norm")

    def call(self, x: tf.Tensor, valid: tf.Tensor, training: bool = False) -> tf.Tensor:
        x = x + 0.5 * self.ff1(x, training=training)
        x = x + self.attention(x, valid, training=training)
        x = x + self.conv(x, valid, training=training)
        x = x + 0.5 * self.ff2(x, training=training)
        return self.norm(x)


class Conformer(keras.Model):
    """The Keras model: subsampling, ``num_blocks`` Conformer blocks, logits. Block ``i`` is
    ``block<i>`` whatever the count, so a grown model's smaller self loads into it."""

    def __init__(self, config: ConformerConfig, num_classes: int) -> None:
        super().__init__(name="conformer")
        self.subsampling = Subsampling(config, name="subsampling")
        self.blocks = [ConformerBlock(config, name=f"block{i}")
                       for i in range(config.num_blocks)]
        for i, block in enumerate(self.blocks):  # attributes, so checkpoints track them
            setattr(self, f"block{i}", block)
        self.logits = keras.layers.Dense(num_classes, name="logits")

    def build(self, input_shape: Any) -> None:
        pass  # as Layer.build

    def call(self, inputs: tuple[tf.Tensor, tf.Tensor], training: bool = False) -> tf.Tensor:
        features, lengths = inputs
        x = self.subsampling(features, lengths, training=training)
        out_lengths = subsampled_length(subsampled_length(lengths))
        valid = tf.sequence_mask(out_lengths, tf.shape(x)[1])
        for block in self.blocks:
            x = block(x, valid, training=training)
        return self.logits(x)
