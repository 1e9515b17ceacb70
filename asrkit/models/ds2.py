"""``ds2``: a Deep Speech 2-style network (Amodei et al. 2015) on log-mel features.

Two 2-D convolutions over (time, frequency) with batch normalisation and clipped ReLU, the first
striding time by 2 (half the frames: half the recurrent work, and CTC still has a frame per
~20 ms, enough for characters), then bidirectional GRU layers and a dense layer to the alphabet
plus blank. Unlike ``brnn`` it learns its own local context with convolutions instead of stacked
context windows, reads 80 log-mel bins instead of 26 MFCCs, and subsamples time, so its
``output_length`` is not the identity: the engine uses it for the CTC lengths.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from asrkit import hookimpl
from asrkit.train.config import setting
from asrkit.types import ModelSpec


@dataclass(frozen=True)
class DS2Config:
    conv_channels: int = setting(32, min=1)
    #: Time stride of the first convolution (the model's subsampling factor).
    time_stride: int = setting(2, min=1)
    rnn_layers: int = setting(2, min=1)
    rnn_units: int = setting(256, min=1)
    dropout: float = setting(0.1, min=0, below=1)
    relu_clip: float = setting(20.0, above=0)


class DS2(ModelSpec):
    name = "ds2"
    description = "Deep Speech 2-style convolutions + bidirectional GRUs over log-mel features."
    Config = DS2Config
    features = "logmel"

    def output_length(self, config: DS2Config, length: Any) -> Any:
        stride = config.time_stride
        return (length + stride - 1) // stride

    def build(self, config: DS2Config, num_features: int, num_classes: int) -> Any:
        import keras
        import tensorflow as tf

        from asrkit.models.layers import clipped_relu

        spec = self

        class DeepSpeech2(keras.Model):
            def __init__(self) -> None:
                super().__init__(name="ds2")
                c = config.conv_channels
                self.conv1 = keras.layers.Conv2D(c, (11, 41), (config.time_stride, 2),
                                                 padding="same", use_bias=False, name="conv1")
                self.conv2 = keras.layers.Conv2D(c, (11, 21), (1, 2), padding="same",
                                                 use_bias=False, name="conv2")
                self.bn1 = keras.layers.BatchNormalization(name="bn1")
                self.bn2 = keras.layers.BatchNormalization(name="bn2")
                self.rnns = [
                    keras.layers.Bidirectional(
                        keras.layers.GRU(config.rnn_units, return_sequences=True), name=f"bigru{i}"
                    )
                    for i in range(config.rnn_layers)
                ]
                for i, rnn in enumerate(self.rnns):  # attributes, so checkpoints track them
                    setattr(self, f"rnn{i}", rnn)
                self.dropout = keras.layers.Dropout(config.dropout)
                self.logits = keras.layers.Dense(num_classes, name="logits")

            def call(self, inputs: Any, training: bool = False) -> Any:
                features, lengths = inputs
                x = features[:, :, :, None]
                x = clipped_relu(self.bn1(self.conv1(x), training=training), config.relu_clip)
                x = clipped_relu(self.bn2(self.conv2(x), training=training), config.relu_clip)
                shape = tf.shape(x)
                x = tf.reshape(x, [shape[0], shape[1], x.shape[2] * x.shape[3]])
                out_lengths = spec.output_length(config, lengths)
                mask = tf.sequence_mask(out_lengths, shape[1])
                for rnn in self.rnns:
                    x = self.dropout(rnn(x, mask=mask, training=training), training=training)
                return self.logits(x)

        model = DeepSpeech2()
        model((tf.zeros([1, 8, num_features]), tf.constant([8])))
        return model


@hookimpl
def register_models(register: Any) -> None:
    register(DS2())
