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

from typing import TYPE_CHECKING, ClassVar

from asrkit import hookimpl
from asrkit.models.conformer_config import SUBSAMPLING_STRIDE, ConformerConfig
from asrkit.models.presets import LOGMEL_FULL
from asrkit.types import AcousticModel, ModelSpec, StreamShape

if TYPE_CHECKING:

    from asrkit.hookspecs import Register


def build_conformer(config: ConformerConfig, num_features: int,
                    num_classes: int) -> AcousticModel:
    """The Keras model for ``config``, its variables created. Its layers are in
    :mod:`asrkit.models.conformer_layers`, imported here: they import Keras and TensorFlow,
    which this plugin module must not at import (``asrkit --help`` imports it)."""
    import tensorflow as tf

    from asrkit.models.conformer_layers import Conformer as ConformerModel

    model = ConformerModel(config, num_classes, num_features)
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
        # SpecAugment (the paper trains with SpecAugment too).
        "full": dict(LOGMEL_FULL),
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

    def build(self, config: ConformerConfig, num_features: int,
              num_classes: int) -> AcousticModel:
        return build_conformer(config, num_features, num_classes)

    def streaming(self, config: ConformerConfig) -> StreamShape | None:
        """A streaming Conformer steps by its chunk: 4 feature frames an encoder frame, nothing
        read past the chunk (no delay)."""
        if not config.streaming or not config.chunk_frames:
            return None
        return StreamShape(input_frames=self.time_stride(config) * config.chunk_frames)

    def trained_chunks(self, config: ConformerConfig) -> tuple[int, int] | None:
        return config.trained_chunks()


@hookimpl
def register_models(register: Register) -> None:
    register(Conformer())
