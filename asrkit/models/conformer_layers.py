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
)
from asrkit.models.dropout import Dropout

#: Layer normalisation's epsilon throughout the model.
NORM_EPSILON = 1e-5
#: Feature frames before a chunk that a stream's step reads (:meth:`Conformer.step`): the
#: subsampling's look-back, 3 frames, rounded up to its stride of 4.
STREAM_CONTEXT = SUBSAMPLING_STRIDE * SUBSAMPLING_STRIDE
#: The share of training batches that dynamic chunk training runs at full context (WeNet's).
DYNAMIC_FULL_CONTEXT = 0.5
#: A block's stream cache: the attention's keys and values, the convolution's inputs.
BlockCache = tuple[tf.Tensor, tf.Tensor, tf.Tensor]


def rel_shift(scores: tf.Tensor, keys: int | tf.Tensor | None = None) -> tf.Tensor:
    """Scores ``[B, H, Q, K+Q-1]`` of ``Q`` queries against relative positions ``K-1 .. -(Q-1)``
    rearranged to ``[B, H, Q, K]``, where ``[i, j]`` is the score for position ``K - Q + i - j``:
    the queries are the last ``Q`` of the ``K`` keys (``K = Q``, the default: the whole
    utterance; ``K > Q``: a chunk after its cached left context).

    Transformer-XL's shift: one zero column, a reshape that moves each row one step further
    left than the one above, and a slice; no gather, so it converts to TFLite built-ins.

    The slices are ``tf.slice``, not indexing: indexing is a strided slice, whose gradient
    (``StridedSliceGrad``) took 18 ms for the scores of 16 utterances of 4 s on the 2-core
    CPU, where ``tf.slice``'s (a pad) takes 2 ms, forward pass included; with four blocks
    that was a tenth of the ``conformer``'s training step
    (``benchmarks/bench_conformer_step.py`` measures both)."""
    shape = tf.shape(scores)
    batch, heads, frames, positions = shape[0], shape[1], shape[2], shape[3]
    padded = tf.pad(scores, [[0, 0], [0, 0], [0, 0], [1, 0]])
    # Row by row, [1 + positions] values a query; dropping the first `frames` of them all
    # (one padded row of the [positions + 1, frames] view) shifts each row one further left.
    flat = tf.reshape(padded, [batch, heads, (positions + 1) * frames])
    flat = tf.slice(flat, [0, 0, frames], [-1, -1, positions * frames])
    shifted = tf.reshape(flat, [batch, heads, frames, positions])
    return tf.slice(shifted, [0, 0, 0, 0], [-1, -1, -1, frames if keys is None else keys])


def relative_positions(frames: int | tf.Tensor, d_model: int,
                       keys: int | tf.Tensor | None = None) -> tf.Tensor:
    """Sinusoidal encodings ``[K+T-1, d_model]`` of the relative positions ``K-1, ..., -(T-1)``
    of ``T`` queries and ``K`` keys (float32; ``K = T`` by default)."""
    import numpy as np
    keys = frames if keys is None else keys
    half = d_model // 2
    inverse = np.exp(-math.log(10000.0) * np.arange(half) / max(1, half)).astype(np.float32)
    positions = tf.cast(tf.range(keys - 1, -frames, -1), tf.float32)
    angles = positions[:, None] * tf.constant(inverse)[None, :]
    encoding = tf.concat([tf.sin(angles), tf.cos(angles)], axis=-1)
    if d_model % 2:
        encoding = tf.pad(encoding, [[0, 0], [0, 1]])
    return encoding


def swish(x: tf.Tensor) -> tf.Tensor:
    """``x * sigmoid(x)``, written out: a TFLite built-in, where Keras' ``swish`` is not."""
    return x * tf.sigmoid(x)


def chunk_mask(valid: tf.Tensor, chunk: tf.Tensor, left: tf.Tensor) -> tf.Tensor:
    """``[B, T, T]``: whether query frame ``i`` attends to key frame ``j``: ``j`` is a frame of
    the utterance (``valid`` ``[B, T]``), not past the end of ``i``'s chunk of ``chunk``
    frames, and at most ``left`` frames before that chunk's start (WeNet's chunk mask, with a
    left context in frames). What a stream computes chunk by chunk with ``left`` frames cached,
    so the two are equal."""
    index = tf.range(tf.shape(valid)[1])
    start = (index // chunk) * chunk
    keys = index[None, :]
    allowed = (keys < start[:, None] + chunk) & (keys >= start[:, None] - left)
    return allowed[None] & valid[:, None, :]


class Layer(keras.layers.Layer):
    """A layer whose sublayers build themselves in its first (eager) call. Without a ``build``
    of its own, Keras would first trace ``call`` symbolically to build it, at every level of
    nesting: several times slower than the call itself."""

    def build(self, input_shape: Any) -> None:
        pass


class Subsampling(Layer):
    """Two 3x3 convolutions striding time and frequency by 2, ReLU, then Dense to d_model.

    Padding is explicit (one zero frame each side), so output frame ``i`` always reads input
    frames ``2i-1 .. 2i+1`` whatever the padded batch's length; an output frame whose centre
    input frame is not valid (past an utterance's length; before a stream's first chunk) is
    zeroed before the next convolution reads it. Output frame ``j`` reads input frames ``4j-3
    .. 4j+3``, so the outputs of input frames ``4a .. 4b-1`` need nothing after them: a
    stream's chunk needs only its 4 frames before it (:meth:`Conformer.step`)."""

    def __init__(self, config: ConformerConfig, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        c, k, s = config.subsampling_channels, SUBSAMPLING_KERNEL, SUBSAMPLING_STRIDE
        self.conv1 = keras.layers.Conv2D(c, k, s, padding="valid", name="conv1")
        self.conv2 = keras.layers.Conv2D(c, k, s, padding="valid", name="conv2")
        self.project = keras.layers.Dense(config.d_model, name="project")
        self.dropout = Dropout(config.dropout)

    def call(self, features: tf.Tensor, valid: tf.Tensor,
             training: bool = False) -> tuple[tf.Tensor, tf.Tensor]:
        """``(frames [B, T/4, d_model], valid [B, T/4])`` of ``features`` ``[B, T, F]`` whose
        frames ``valid`` (bool ``[B, T]``) holds."""
        pad = SUBSAMPLING_KERNEL // 2
        x = features * tf.cast(valid, features.dtype)[:, :, None]
        x = x[:, :, :, None]
        for conv in (self.conv1, self.conv2):
            x = tf.nn.relu(conv(tf.pad(x, [[0, 0], [pad, pad], [pad, pad], [0, 0]])))
            valid = valid[:, ::SUBSAMPLING_STRIDE]  # each output's centre frame
            x = x * tf.cast(valid, x.dtype)[:, :, None, None]
        shape = tf.shape(x)
        x = tf.reshape(x, [shape[0], shape[1], x.shape[2] * x.shape[3]])
        return self.dropout(self.project(x), training=training), valid


class FeedForward(Layer):
    """Layer norm, Dense ``ff_multiplier * d_model`` with swish, Dense ``d_model``."""

    def __init__(self, config: ConformerConfig, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.norm = keras.layers.LayerNormalization(epsilon=NORM_EPSILON, name="norm")
        self.expand = keras.layers.Dense(config.ff_multiplier * config.d_model, name="expand")
        self.contract = keras.layers.Dense(config.d_model, name="contract")
        self.dropout = Dropout(config.dropout)

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        x = self.dropout(swish(self.expand(self.norm(x))), training=training)
        return self.dropout(self.contract(x), training=training)


class RelativeSelfAttention(Layer):
    """Multi-head self-attention with Transformer-XL relative positions; a mask says which keys
    each query attends to (padded keys never). In a stream, the keys and values of the frames
    before the chunk come from a cache: positions are relative, so cached keys need no
    renumbering."""

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
        self.attention_dropout = Dropout(config.attention_dropout)
        self.dropout = Dropout(config.dropout)

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

    def call(self, x: tf.Tensor, mask: tf.Tensor, training: bool = False,
             cache: tuple[tf.Tensor, tf.Tensor] | None = None,
             ) -> tuple[tf.Tensor, tuple[tf.Tensor, tf.Tensor]]:
        """``(output [B, T, d], (keys, values))`` of ``x`` ``[B, T, d]``: ``mask`` (bool ``[B,
        T or 1, K]``) says which of the ``K`` keys each query attends to; ``cache``, the keys
        and values ``[B, K-T, d]`` of the frames before ``x``; returned are all ``K``."""
        heads, head_dim = self.heads, self.head_dim
        batch, frames = tf.shape(x)[0], tf.shape(x)[1]
        x = self.norm(x)
        keys, values = self.key(x), self.value(x)
        if cache is not None:
            keys = tf.concat([cache[0], keys], axis=1)
            values = tf.concat([cache[1], values], axis=1)
        key_frames = tf.shape(keys)[1]
        q = self._heads(self.query(x), batch)
        k = self._heads(keys, batch)
        v = self._heads(values, batch)
        encoding = tf.cast(relative_positions(frames, self.d_model, key_frames), x.dtype)
        p = tf.transpose(tf.reshape(self.position(encoding), [-1, heads, head_dim]),
                         [1, 2, 0])[None]  # [1, H, d/H, 2T-1]
        u = tf.cast(self.content_bias, x.dtype)[None, :, None, :]
        w = tf.cast(self.position_bias, x.dtype)[None, :, None, :]
        content = tf.matmul(q + u, k, transpose_b=True)  # [B, H, T, T]
        position = rel_shift(tf.matmul(q + w, p), key_frames)  # [B, H, T, K]
        scores = tf.cast(content + position, tf.float32) / math.sqrt(head_dim)
        scores = tf.where(mask[:, None], scores, -1e9)
        weights = tf.cast(tf.nn.softmax(scores, axis=-1), x.dtype)
        weights = self.attention_dropout(weights, training=training)
        out = tf.reshape(tf.transpose(tf.matmul(weights, v), [0, 2, 1, 3]),
                         [batch, frames, self.d_model])
        return self.dropout(self.output_dense(out), training=training), (keys, values)


class Convolution(Layer):
    """Pointwise conv + GLU, depthwise conv over time, layer norm, swish, pointwise conv.
    Padded frames are zeroed before the depthwise convolution reads them.

    The depthwise convolution is centred, or causal in a streaming model (its ``kernel - 1``
    frames of padding all before the frame, none after); in a stream those frames come from a
    cache of the previous chunk's last frames."""

    def __init__(self, config: ConformerConfig, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        d_model = config.d_model
        self.kernel, self.causal = config.conv_kernel, config.streaming
        self.norm = keras.layers.LayerNormalization(epsilon=NORM_EPSILON, name="norm")
        self.pointwise1 = keras.layers.Dense(2 * d_model, name="pointwise1")
        # Padded explicitly in call: the same weights and numbers as "same" when centred.
        self.depthwise = keras.layers.DepthwiseConv1D(config.conv_kernel, padding="valid",
                                                      name="depthwise")
        self.conv_norm = keras.layers.LayerNormalization(epsilon=NORM_EPSILON, name="conv_norm")
        self.pointwise2 = keras.layers.Dense(d_model, name="pointwise2")
        self.dropout = Dropout(config.dropout)

    def call(self, x: tf.Tensor, valid: tf.Tensor, training: bool = False,
             cache: tf.Tensor | None = None) -> tuple[tf.Tensor, tf.Tensor]:
        """``(output [B, T, d], cache)`` of ``x``: ``cache`` ``[B, kernel-1, d]`` holds the
        depthwise convolution's inputs before ``x`` (a causal stream's); returned are the last
        ``kernel - 1`` of them and ``x``'s, the next chunk's cache."""
        values, gates = tf.split(self.pointwise1(self.norm(x)), 2, axis=-1)
        x = values * tf.sigmoid(gates) * tf.cast(valid, x.dtype)[:, :, None]
        context = self.kernel - 1
        if cache is not None:
            padded = tf.concat([cache, x], axis=1)
        else:
            before = context if self.causal else context // 2
            padded = tf.pad(x, [[0, 0], [before, context - before], [0, 0]])
        cached = padded[:, tf.shape(padded)[1] - context:]
        x = swish(self.conv_norm(self.depthwise(padded)))
        return self.dropout(self.pointwise2(x), training=training), cached


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

    def call(self, x: tf.Tensor, mask: tf.Tensor, valid: tf.Tensor, training: bool = False,
             cache: BlockCache | None = None) -> tuple[tf.Tensor, BlockCache]:
        """``(output, cache)``: ``mask`` is the attention's (:meth:`RelativeSelfAttention.call`),
        ``valid`` (bool ``[B, T]``) the frames of the utterance; ``cache`` the attention's keys
        and values and the convolution's inputs before ``x`` (a stream's), returned extended
        by ``x``'s."""
        x = x + 0.5 * self.ff1(x, training=training)
        attended, (keys, values) = self.attention(x, mask, training=training,
                                                  cache=None if cache is None else cache[:2])
        x = x + attended
        convolved, conv_cache = self.conv(x, valid, training=training,
                                          cache=None if cache is None else cache[2])
        x = x + convolved
        x = x + 0.5 * self.ff2(x, training=training)
        return self.norm(x), (keys, values, conv_cache)


class Conformer(keras.Model):
    """The Keras model: subsampling, ``num_blocks`` Conformer blocks, logits. Block ``i`` is
    ``block<i>`` whatever the count, so a grown model's smaller self loads into it.

    A streaming one (``config.streaming``) also steps through a stream chunk by chunk
    (:class:`asrkit.types.StreamingModel`): :meth:`initial_state`, :meth:`step`."""

    def __init__(self, config: ConformerConfig, num_classes: int,
                 num_features: int | None = None) -> None:
        super().__init__(name="conformer")
        self.config, self.num_features = config, num_features
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
        x, valid = self.subsampling(features, tf.sequence_mask(lengths, tf.shape(features)[1]),
                                    training=training)
        mask = self._attention_mask(valid, training)
        for block in self.blocks:
            x, _ = block(x, mask, valid, training=training)
        return self.logits(x)

    def _attention_mask(self, valid: tf.Tensor, training: bool) -> tf.Tensor:
        """Which keys each frame attends to: every frame of its utterance, or, streaming, its
        chunk's (:func:`chunk_mask`), with a chunk drawn afresh for each training batch when
        ``max_train_chunk`` says so (dynamic chunk training)."""
        config = self.config
        if not config.streaming:
            return valid[:, None, :]
        frames = tf.shape(valid)[1]
        if training and config.max_train_chunk:
            whole = tf.random.uniform([]) < DYNAMIC_FULL_CONTEXT
            drawn = tf.random.uniform([], 1, config.max_train_chunk + 1, dtype=tf.int32)
            chunk = tf.where(whole, frames, drawn)
            left = tf.where(whole, frames, config.left_frames)
        elif config.chunk_frames:
            chunk, left = tf.constant(config.chunk_frames), tf.constant(config.left_frames)
        else:
            return valid[:, None, :]
        return chunk_mask(valid, tf.maximum(chunk, 1), left)

    # -- streaming ---------------------------------------------------------------------------

    def initial_state(self, batch_size: int) -> list[tf.Tensor]:
        """A stream's state before its first chunk: the last :data:`STREAM_CONTEXT` feature
        frames, the encoder frames seen, and each block's cached keys, values and
        convolution inputs (stacked over blocks), all zero."""
        config, dtype = self.config, self.compute_dtype
        if self.num_features is None:
            raise ValueError("a Conformer streams once built with num_features")
        blocks, width = config.num_blocks, config.d_model
        return [
            tf.zeros([batch_size, STREAM_CONTEXT, self.num_features], tf.float32),
            tf.zeros([batch_size], tf.int32),
            tf.zeros([blocks, batch_size, config.left_frames, width], dtype),
            tf.zeros([blocks, batch_size, config.left_frames, width], dtype),
            tf.zeros([blocks, batch_size, config.conv_kernel - 1, width], dtype),
        ]

    def step(self, features: tf.Tensor, lengths: tf.Tensor,
             state: list[tf.Tensor]) -> tuple[tf.Tensor, list[tf.Tensor]]:
        """The outputs ``[B, C, classes]`` of the next ``4C`` feature frames ``[B, 4C, F]`` of
        each stream (``lengths`` valid) and the new state (:class:`asrkit.types.StreamingModel`).

        The chunk's encoder frames are computed from it and its 4 feature frames before
        (:class:`Subsampling` needs no more), the first of the outputs, which belongs to the
        previous chunk, dropped; each block attends over its cached ``left_frames`` keys and
        the chunk's, as :func:`chunk_mask` lets the whole-utterance call."""
        past, seen, keys, values, convs = state
        left = self.config.left_frames
        window = tf.concat([past, tf.cast(features, past.dtype)], axis=1)
        had_past = tf.tile((seen > 0)[:, None], [1, STREAM_CONTEXT])
        valid_in = tf.concat([had_past, tf.sequence_mask(lengths, tf.shape(features)[1])], 1)
        x, valid = self.subsampling(window, valid_in)
        x, valid = x[:, 1:], valid[:, 1:]
        cached = tf.range(left)[None, :] >= left - tf.minimum(seen, left)[:, None]
        mask = tf.concat([cached, valid], axis=1)[:, None, :]
        new_keys, new_values, new_convs = [], [], []
        for index, block in enumerate(self.blocks):
            x, (k, v, conv) = block(x, mask, valid,
                                    cache=(keys[index], values[index], convs[index]))
            new_keys.append(k[:, -left:])
            new_values.append(v[:, -left:])
            new_convs.append(conv)
        state = [window[:, -STREAM_CONTEXT:], seen + tf.shape(x)[1], tf.stack(new_keys),
                 tf.stack(new_values), tf.stack(new_convs)]
        return self.logits(x), state
