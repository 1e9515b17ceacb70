"""``ds2``: a Deep Speech 2-style network (Amodei et al. 2015) on log-mel features.

Two 2-D convolutions over (time, frequency) with batch normalisation and clipped ReLU, the first
striding time by 2 (half the frames: half the recurrent work, and CTC still has a frame per
~20 ms, enough for characters), then bidirectional GRU layers and a dense layer to the alphabet
plus blank. Unlike ``brnn`` it learns its own local context with convolutions instead of stacked
context windows, reads 80 log-mel bins instead of 26 MFCCs, and subsamples time: its
``time_stride`` (2 by default) gives ``output_length``, the CTC lengths.

An utterance's logits do not depend on the padding after it (``asrkit.testing.check_padding``):
the input's padded frames and every convolution's outputs past the utterance's (subsampled)
length are zeroed, the convolutions pad time by half their kernel each side whatever the batch's
length, batch normalisation takes its training statistics over valid frames only, and the GRUs
read each utterance within its length. The weights are those of the earlier ``"same"``-padded
version (same names and shapes), so its checkpoints load; its alignment was this one for some
padded lengths (odd ones at stride 2) and a frame earlier for the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from asrkit import hookimpl
from asrkit.core.settings import setting, validate
from asrkit.models.presets import LOGMEL_FULL
from asrkit.types import AcousticModel, ModelSpec

if TYPE_CHECKING:
    from asrkit.hookspecs import Register


@dataclass(frozen=True)
class DS2Config:
    #: Channels of the two convolutions.
    conv_channels: int = setting(32, min=1, max=1024)
    #: The model's subsampling of time (1-4): the first convolution strides time by 2 (by 3
    #: for 3), the second by what is left. 4 halves the recurrent work of 2 and still leaves a
    #: frame every 40 ms, enough for characters at ordinary speaking rates.
    time_stride: int = setting(2, min=1, max=4)
    #: Bidirectional GRU layers, and the units of each direction (at most 8192).
    rnn_layers: int = setting(2, min=1, max=32)
    rnn_units: int = setting(256, min=1, max=8192)
    dropout: float = setting(0.1, min=0, below=1)
    #: Activations are clipped to [0, relu_clip]; float32 holds nothing much larger.
    relu_clip: float = setting(20.0, above=0, max=1e6)
    #: The GRUs' implementation: ``loop`` (the input projection hoisted out of the time loop:
    #: fastest on a CPU), ``keras`` (Keras' GRU, cuDNN's fused kernel on a GPU), or ``auto``:
    #: ``keras`` when the towers are GPUs, else ``loop``. Both hold the same weights.
    rnn_impl: str = setting("auto", choices=("auto", "loop", "keras"))

    def __post_init__(self) -> None:
        validate(self)


#: Kernels (time, frequency) of the two convolutions; both stride frequency by 2.
CONV1_KERNEL = (11, 41)
CONV2_KERNEL = (11, 21)


def conv_padding(kernel: tuple[int, int], bins: int) -> list[list[int]]:
    """``tf.pad`` paddings of a convolution's input ``[batch, time, bins, channels]``.

    Time: ``kernel // 2`` frames each side, whatever the batch's length, so output frame ``i``
    reads input frames ``stride * i - k//2 .. stride * i + k//2`` and a valid conv gives
    ``ceil(time / stride)`` frames. (Keras' ``"same"`` padding puts its extra zero before or
    after depending on the padded batch's length, so an utterance's logits depended on what it
    was batched with.) Frequency: what ``"same"`` pads for ``bins`` bins at stride 2, which
    is static, so the frequency axis and the weights are those of earlier versions."""
    frames, freq = kernel
    total = max((-(-bins // 2) - 1) * 2 + freq - bins, 0)
    return [[0, 0], [frames // 2, frames // 2], [total // 2, total - total // 2], [0, 0]]


def conv_strides(config: DS2Config) -> tuple[int, int]:
    """The two convolutions' time strides, whose product is ``time_stride``."""
    first = 2 if config.time_stride in (2, 4) else config.time_stride
    return first, config.time_stride // first


class DS2(ModelSpec):
    name = "ds2"
    description = "Deep Speech 2-style convolutions + bidirectional GRUs over log-mel features."
    Config = DS2Config
    features = "logmel"
    #: Pretraining by growth adds bidirectional GRU layers (``bigru<i>``).
    growable = "rnn_layers"
    presets: ClassVar[dict[str, dict[str, str]]] = {
        # Deep Speech 2's spectrogram normalisation and the augmentation of long GPU runs.
        "full": dict(LOGMEL_FULL),
        # Learns within minutes on a 2-core CPU (docs/models.md has the measurements): time
        # subsampled by 4 and 40 mel bins cut the recurrent and convolution work 2.6x and 1.7x.
        # The rate decays over the run's time budget (or epochs): at a constant 0.003 the dev
        # CER stalled near 20 % from the 12th minute; decaying, it kept falling (CHANGELOG.md).
        "cpu": {"model.time_stride": "4", "features.num_mel_bins": "40",
                "features.normalize": "feature", "train.learning_rate": "0.003",
                "train.warmup_steps": "100", "train.lr_schedule": "cosine",
                "train.eval_every_minutes": "3"},
    }

    def time_stride(self, config: DS2Config) -> int:
        return config.time_stride

    def build(self, config: DS2Config, num_features: int, num_classes: int) -> AcousticModel:
        import keras
        import tensorflow as tf

        from asrkit.models.layers import (
            HoistedBiGRU,
            choose_rnn_impl,
            clipped_relu,
            tower_devices,
        )

        strides = conv_strides(config)

        class DeepSpeech2(keras.Model):
            def __init__(self) -> None:
                super().__init__(name="ds2")
                c = config.conv_channels
                self.conv1 = keras.layers.Conv2D(c, CONV1_KERNEL, (strides[0], 2),
                                                 padding="valid", use_bias=False, name="conv1")
                self.conv2 = keras.layers.Conv2D(c, CONV2_KERNEL, (strides[1], 2),
                                                 padding="valid", use_bias=False, name="conv2")
                self.bn1 = keras.layers.BatchNormalization(name="bn1")
                self.bn2 = keras.layers.BatchNormalization(name="bn2")
                self.rnn_impl = choose_rnn_impl(config.rnn_impl, tower_devices())
                self.rnns = [HoistedBiGRU(config.rnn_units, impl=self.rnn_impl, name=f"bigru{i}")
                             for i in range(config.rnn_layers)]
                for i, rnn in enumerate(self.rnns):  # attributes, so checkpoints track them
                    setattr(self, f"rnn{i}", rnn)
                self.dropout = keras.layers.Dropout(config.dropout)
                self.logits = keras.layers.Dense(num_classes, name="logits")

            def call(self, inputs: tuple[tf.Tensor, tf.Tensor],
                     training: bool = False) -> tf.Tensor:
                features, lengths = inputs
                # expand_dims, not [..., None]: TFLite's built-in StridedSlice has no new axes.
                mask = tf.sequence_mask(lengths, tf.shape(features)[1], features.dtype)
                x = tf.expand_dims(features * tf.expand_dims(mask, -1), -1)
                convs = ((self.conv1, self.bn1, CONV1_KERNEL), (self.conv2, self.bn2, CONV2_KERNEL))
                for (conv, norm, kernel), stride in zip(convs, strides, strict=True):
                    x = conv(tf.pad(x, conv_padding(kernel, int(x.shape[2]))))
                    lengths = (lengths + stride - 1) // stride
                    valid = tf.sequence_mask(lengths, tf.shape(x)[1])
                    # Batch statistics of the valid frames only; padding zeroed after.
                    valid = tf.broadcast_to(tf.expand_dims(valid, -1), tf.shape(x)[:3])
                    x = clipped_relu(norm(x, training=training, mask=valid), config.relu_clip)
                    x = x * tf.expand_dims(tf.cast(valid, x.dtype), -1)
                shape = tf.shape(x)
                x = tf.reshape(x, [shape[0], shape[1], x.shape[2] * x.shape[3]])
                for rnn in self.rnns:
                    x = self.dropout(rnn(x, lengths), training=training)
                return self.logits(x)

        model = DeepSpeech2()
        model((tf.zeros([1, 8, num_features]), tf.constant([8])))
        return model


@hookimpl
def register_models(register: Register) -> None:
    register(DS2())
