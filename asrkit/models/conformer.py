"""``conformer``: Conformer-CTC (Gulati et al. 2020, "Conformer: Convolution-augmented Transformer
for Speech Recognition") on log-mel features.

::

    log-mel [T, 80] -> Conv2D 3x3 /2, ReLU -> Conv2D 3x3 /2, ReLU -> Dense d_model   [T/4, d]
    N x Conformer block:
        x = x + 1/2 FeedForward(x)          LayerNorm, Dense ff*d swish, Dense d
        x = x + SelfAttention(x)            LayerNorm, relative-position multi-head attention
        x = x + Convolution(x)              LayerNorm, pointwise 2d + GLU, depthwise k,
                                            LayerNorm, swish, pointwise d
        x = x + 1/2 FeedForward(x)
        x = LayerNorm(x)
    logits = Dense(alphabet + blank)

The paper's decoder is an LSTM; here the encoder is trained with CTC alone (Conformer-CTC), like
asrkit's other models. Time is subsampled 4 times (40 ms per output frame), as in the paper.

Choices, and why:

- **Relative positions as in Transformer-XL** (Dai et al. 2019), as the paper does: the score of
  query ``i`` and key ``j`` is ``(q_i + u) k_j + (q_i + v) W_pos P(i - j)`` with sinusoidal
  ``P`` and learned biases ``u``, ``v`` per head. It depends on ``i - j`` only, so an utterance
  scores the same alone or padded, and it is defined for any length (no table to outgrow).
- **Every padded frame is kept out of every valid one's computation**, so an utterance's logits
  do not depend on what it was batched with (a test checks it): the subsampling convolutions pad
  explicitly (Keras' ``"same"`` padding with stride 2 puts its extra zero before or after
  depending on the padded batch's length) and their outputs are masked; attention masks padded
  keys; the convolution module zeroes padded frames before its depthwise convolution.
- **Layer norm in the convolution module** where the paper has batch norm: batch statistics in
  training would include the padded frames (changing with the batch's longest utterance) and
  would differ from the moving statistics used at inference; layer norm is per frame and the
  same in training and inference (a common substitute in Conformer implementations).
- **Swish written as ``x * sigmoid(x)``**, GLU as a split and a sigmoid, positions with
  ``sin``/``cos``: all TFLite built-in operations, so ``asrkit export --format tflite`` works.

The defaults are Conformer-S's shape (d_model 144, 16 blocks, 4 heads, kernel 31: 8.7 M
parameters with CTC instead of the paper's 10.3 M with an LSTM decoder; the paper's kernel is 32,
an odd one keeps the convolution centred). The ``cpu`` preset is a 1.8 M-parameter version
that learns small datasets within minutes on a 2-core CPU; ``tiny`` is for tests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from asrkit import hookimpl
from asrkit.errors import AsrkitError
from asrkit.settings import setting, validate
from asrkit.types import ModelSpec


@dataclass(frozen=True)
class ConformerConfig:
    d_model: int = setting(144, min=1)
    num_heads: int = setting(4, min=1)
    num_blocks: int = setting(16, min=1)
    #: Width of the feed-forward modules' hidden layer, in multiples of ``d_model``.
    ff_multiplier: int = setting(4, min=1)
    #: Kernel size of the depthwise convolution (odd: centred on the frame).
    conv_kernel: int = setting(31, min=1)
    #: Channels of the two subsampling convolutions (Conformer-S: d_model).
    subsampling_channels: int = setting(144, min=1)
    #: Dropout after every module (before the residual sum) and after the subsampling.
    dropout: float = setting(0.1, min=0, below=1)
    #: Dropout on the attention probabilities.
    attention_dropout: float = setting(0.1, min=0, below=1)

    def __post_init__(self) -> None:
        validate(self)
        if self.d_model % self.num_heads:
            raise AsrkitError(f"d_model ({self.d_model}) must be a multiple of num_heads "
                              f"({self.num_heads})")
        if self.conv_kernel % 2 == 0:
            raise AsrkitError(f"conv_kernel must be odd, not {self.conv_kernel}")


#: Time stride of each of the two subsampling convolutions.
SUBSAMPLING_STRIDE = 2
#: Kernel of the subsampling convolutions (time and frequency).
SUBSAMPLING_KERNEL = 3


def subsampled_length(length: Any) -> Any:
    """Frames out of one stride-2 subsampling convolution: ``ceil(length / 2)`` (python ints or
    tensors)."""
    return (length + SUBSAMPLING_STRIDE - 1) // SUBSAMPLING_STRIDE


def rel_shift(scores: Any) -> Any:
    """Scores ``[B, H, T, 2T-1]`` against relative positions ``T-1 .. -(T-1)`` rearranged to
    ``[B, H, T, T]``, where ``[i, j]`` is the score for position ``i - j``.

    Transformer-XL's shift: one zero column, a reshape that moves each row one step further
    left than the one above, and a slice; no gather, so it converts to TFLite built-ins."""
    import tensorflow as tf

    shape = tf.shape(scores)
    batch, heads, frames, positions = shape[0], shape[1], shape[2], shape[3]
    padded = tf.pad(scores, [[0, 0], [0, 0], [0, 0], [1, 0]])
    padded = tf.reshape(padded, [batch, heads, positions + 1, frames])
    shifted = tf.reshape(padded[:, :, 1:], [batch, heads, frames, positions])
    return shifted[:, :, :, :frames]


def relative_positions(frames: Any, d_model: int) -> Any:
    """Sinusoidal encodings ``[2T-1, d_model]`` of the relative positions ``T-1, ..., -(T-1)``
    (float32)."""
    import numpy as np
    import tensorflow as tf

    half = d_model // 2
    inverse = np.exp(-math.log(10000.0) * np.arange(half) / max(1, half)).astype(np.float32)
    positions = tf.cast(tf.range(frames - 1, -frames, -1), tf.float32)
    angles = positions[:, None] * tf.constant(inverse)[None, :]
    encoding = tf.concat([tf.sin(angles), tf.cos(angles)], axis=-1)
    if d_model % 2:
        encoding = tf.pad(encoding, [[0, 0], [0, 1]])
    return encoding


def build_conformer(config: ConformerConfig, num_features: int, num_classes: int) -> Any:
    import keras
    import tensorflow as tf

    d_model, heads = config.d_model, config.num_heads
    head_dim = d_model // heads

    def swish(x: Any) -> Any:
        return x * tf.sigmoid(x)

    def frame_mask(lengths: Any, frames: Any, dtype: Any) -> Any:
        """``[B, T, 1]``: 1 on an utterance's frames, 0 on padding."""
        return tf.sequence_mask(lengths, frames, dtype=dtype)[:, :, None]

    class Layer(keras.layers.Layer):
        """A layer whose sublayers build themselves in its first (eager) call. Without a
        ``build`` of its own, Keras would first trace ``call`` symbolically to build it, at every
        level of nesting: several times slower than the call itself."""

        def build(self, input_shape: Any) -> None:
            pass

    class Subsampling(Layer):
        """Two 3x3 convolutions striding time and frequency by 2, ReLU, then Dense to d_model.

        Padding is explicit (one zero frame each side), so output frame ``i`` always reads input
        frames ``2i-1 .. 2i+1`` whatever the padded batch's length; outputs past each
        utterance's length are zeroed before the next convolution reads them."""

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            c, k, s = config.subsampling_channels, SUBSAMPLING_KERNEL, SUBSAMPLING_STRIDE
            self.conv1 = keras.layers.Conv2D(c, k, s, padding="valid", name="conv1")
            self.conv2 = keras.layers.Conv2D(c, k, s, padding="valid", name="conv2")
            self.project = keras.layers.Dense(d_model, name="project")
            self.dropout = keras.layers.Dropout(config.dropout)

        def call(self, features: Any, lengths: Any, training: bool = False) -> Any:
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
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.norm = keras.layers.LayerNormalization(epsilon=1e-5, name="norm")
            self.expand = keras.layers.Dense(config.ff_multiplier * d_model, name="expand")
            self.contract = keras.layers.Dense(d_model, name="contract")
            self.dropout = keras.layers.Dropout(config.dropout)

        def call(self, x: Any, training: bool = False) -> Any:
            x = self.dropout(swish(self.expand(self.norm(x))), training=training)
            return self.dropout(self.contract(x), training=training)

    class RelativeSelfAttention(Layer):
        """Multi-head self-attention with Transformer-XL relative positions; padded keys get no
        weight."""

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.norm = keras.layers.LayerNormalization(epsilon=1e-5, name="norm")
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
            self.content_bias = self.add_weight(name="content_bias", shape=(heads, head_dim),
                                                initializer=init)
            self.position_bias = self.add_weight(name="position_bias", shape=(heads, head_dim),
                                                 initializer=init)

        def _heads(self, x: Any, batch: Any) -> Any:
            """``[B, T, d]`` -> ``[B, H, T, d/H]``."""
            return tf.transpose(tf.reshape(x, [batch, -1, heads, head_dim]), [0, 2, 1, 3])

        def call(self, x: Any, valid: Any, training: bool = False) -> Any:
            batch, frames = tf.shape(x)[0], tf.shape(x)[1]
            x = self.norm(x)
            q = self._heads(self.query(x), batch)
            k = self._heads(self.key(x), batch)
            v = self._heads(self.value(x), batch)
            encoding = tf.cast(relative_positions(frames, d_model), x.dtype)
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
                             [batch, frames, d_model])
            return self.dropout(self.output_dense(out), training=training)

    class Convolution(Layer):
        """Pointwise conv + GLU, depthwise conv over time, layer norm, swish, pointwise conv.
        Padded frames are zeroed before the depthwise convolution reads them."""

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.norm = keras.layers.LayerNormalization(epsilon=1e-5, name="norm")
            self.pointwise1 = keras.layers.Dense(2 * d_model, name="pointwise1")
            self.depthwise = keras.layers.DepthwiseConv1D(config.conv_kernel, padding="same",
                                                          name="depthwise")
            self.conv_norm = keras.layers.LayerNormalization(epsilon=1e-5, name="conv_norm")
            self.pointwise2 = keras.layers.Dense(d_model, name="pointwise2")
            self.dropout = keras.layers.Dropout(config.dropout)

        def call(self, x: Any, valid: Any, training: bool = False) -> Any:
            values, gates = tf.split(self.pointwise1(self.norm(x)), 2, axis=-1)
            x = values * tf.sigmoid(gates) * tf.cast(valid, x.dtype)[:, :, None]
            x = swish(self.conv_norm(self.depthwise(x)))
            return self.dropout(self.pointwise2(x), training=training)

    class ConformerBlock(Layer):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.ff1 = FeedForward(name="ff1")
            self.attention = RelativeSelfAttention(name="attention")
            self.conv = Convolution(name="conv")
            self.ff2 = FeedForward(name="ff2")
            self.norm = keras.layers.LayerNormalization(epsilon=1e-5, name="norm")

        def call(self, x: Any, valid: Any, training: bool = False) -> Any:
            x = x + 0.5 * self.ff1(x, training=training)
            x = x + self.attention(x, valid, training=training)
            x = x + self.conv(x, valid, training=training)
            x = x + 0.5 * self.ff2(x, training=training)
            return self.norm(x)

    class Conformer(keras.Model):
        def __init__(self) -> None:
            super().__init__(name="conformer")
            self.subsampling = Subsampling(name="subsampling")
            self.blocks = [ConformerBlock(name=f"block{i}") for i in range(config.num_blocks)]
            for i, block in enumerate(self.blocks):  # attributes, so checkpoints track them
                setattr(self, f"block{i}", block)
            self.logits = keras.layers.Dense(num_classes, name="logits")

        def build(self, input_shape: Any) -> None:
            pass  # as Layer.build

        def call(self, inputs: Any, training: bool = False) -> Any:
            features, lengths = inputs
            x = self.subsampling(features, lengths, training=training)
            out_lengths = subsampled_length(subsampled_length(lengths))
            valid = tf.sequence_mask(out_lengths, tf.shape(x)[1])
            for block in self.blocks:
                x = block(x, valid, training=training)
            return self.logits(x)

    model = Conformer()
    model((tf.zeros([1, 8, num_features]), tf.constant([8])))  # create the variables
    return model


class Conformer(ModelSpec):
    name = "conformer"
    description = "Conformer-CTC: convolution-augmented Transformer, log-mel (Gulati et al. 2020)."
    Config = ConformerConfig
    features = "logmel"
    #: Pretraining by growth adds Conformer blocks (``block<i>``, before the output layer).
    growable = "num_blocks"
    #: ``full``: the defaults (Conformer-S's shape, 8.7 M parameters, for a GPU); ``cpu``
    #: (1.8 M) learns small datasets within minutes on a 2-core CPU; ``tiny`` is for tests.
    presets: ClassVar[dict[str, dict[str, str]]] = {
        # As ds2's: each log-mel bin normalised over the utterance, speed perturbation and
        # SpecAugment's LibriSpeech "LD" masks (the paper trains with SpecAugment too).
        "full": {"features.normalize": "feature", "pipeline.speed_factors": "0.9,1.0,1.1",
                 "pipeline.freq_masks": "2", "pipeline.freq_mask_width": "27",
                 "pipeline.time_masks": "2", "pipeline.time_mask_width": "100"},
        "cpu": {
            "model.d_model": "128",
            "model.num_blocks": "4",
            "model.num_heads": "4",
            "model.conv_kernel": "15",
            "model.subsampling_channels": "64",
            "train.learning_rate": "0.001",
            "train.warmup_steps": "200",
            "train.clip_norm": "5",
            "train.lr_schedule": "cosine",
            "features.normalize": "feature",
            "train.eval_every_minutes": "3",
        },
        "tiny": {
            "model.d_model": "16",
            "model.num_blocks": "1",
            "model.num_heads": "2",
            "model.ff_multiplier": "2",
            "model.conv_kernel": "3",
            "model.subsampling_channels": "4",
        },
    }

    def time_stride(self, config: ConformerConfig) -> int:
        return SUBSAMPLING_STRIDE * SUBSAMPLING_STRIDE

    def build(self, config: ConformerConfig, num_features: int, num_classes: int) -> Any:
        return build_conformer(config, num_features, num_classes)


@hookimpl
def register_models(register: Any) -> None:
    register(Conformer())
