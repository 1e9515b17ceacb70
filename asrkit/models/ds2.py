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
from typing import Any, ClassVar

from asrkit import hookimpl
from asrkit.train.config import setting, validate
from asrkit.types import ModelSpec


@dataclass(frozen=True)
class DS2Config:
    conv_channels: int = setting(32, min=1)
    #: The model's subsampling of time (1-4): the first convolution strides time by 2 (by 3
    #: for 3), the second by what is left. 4 halves the recurrent work of 2 and still leaves a
    #: frame every 40 ms, enough for characters at ordinary speaking rates.
    time_stride: int = setting(2, min=1, max=4)
    rnn_layers: int = setting(2, min=1)
    rnn_units: int = setting(256, min=1)
    dropout: float = setting(0.1, min=0, below=1)
    relu_clip: float = setting(20.0, above=0)
    #: The GRUs' implementation: ``loop`` (the input projection hoisted out of the time loop:
    #: fastest on a CPU), ``keras`` (Keras' GRU, cuDNN's fused kernel on a GPU), or ``auto``:
    #: ``keras`` when the towers are GPUs, else ``loop``. Both hold the same weights.
    rnn_impl: str = setting("auto", choices=("auto", "loop", "keras"))

    def __post_init__(self) -> None:
        validate(self)


def conv_strides(config: DS2Config) -> tuple[int, int]:
    """The two convolutions' time strides, whose product is ``time_stride``."""
    first = 2 if config.time_stride in (2, 4) else config.time_stride
    return first, config.time_stride // first


class DS2(ModelSpec):
    name = "ds2"
    description = "Deep Speech 2-style convolutions + bidirectional GRUs over log-mel features."
    Config = DS2Config
    features = "logmel"
    presets: ClassVar[dict[str, dict[str, str]]] = {
        # Deep Speech 2's spectrogram normalisation (each log-mel bin to zero mean and unit
        # variance over the utterance), and the augmentation long GPU runs profit from: Kaldi's
        # speed perturbation and SpecAugment's LibriSpeech "LD" masks.
        "full": {"features.normalize": "feature", "pipeline.speed_factors": "0.9,1.0,1.1",
                 "pipeline.freq_masks": "2", "pipeline.freq_mask_width": "27",
                 "pipeline.time_masks": "2", "pipeline.time_mask_width": "100"},
        # Learns within minutes on a 2-core CPU (docs/models.md has the measurements): time
        # subsampled by 4 and 40 mel bins cut the recurrent and convolution work 2.6x and 1.7x.
        "cpu": {"model.time_stride": "4", "features.num_mel_bins": "40",
                "features.normalize": "feature", "train.learning_rate": "0.003",
                "train.warmup_steps": "100", "train.eval_every_minutes": "3"},
    }

    def output_length(self, config: DS2Config, length: Any) -> Any:
        for stride in conv_strides(config):  # "same" padding: each convolution rounds up
            length = (length + stride - 1) // stride
        return length

    def build(self, config: DS2Config, num_features: int, num_classes: int) -> Any:
        import keras
        import tensorflow as tf

        from asrkit.models.layers import (
            HoistedBiGRU,
            choose_rnn_impl,
            clipped_relu,
            tower_devices,
        )

        spec = self
        first, second = conv_strides(config)

        class DeepSpeech2(keras.Model):
            def __init__(self) -> None:
                super().__init__(name="ds2")
                c = config.conv_channels
                self.conv1 = keras.layers.Conv2D(c, (11, 41), (first, 2),
                                                 padding="same", use_bias=False, name="conv1")
                self.conv2 = keras.layers.Conv2D(c, (11, 21), (second, 2), padding="same",
                                                 use_bias=False, name="conv2")
                self.bn1 = keras.layers.BatchNormalization(name="bn1")
                self.bn2 = keras.layers.BatchNormalization(name="bn2")
                self.rnn_impl = choose_rnn_impl(config.rnn_impl, tower_devices())
                self.rnns = [HoistedBiGRU(config.rnn_units, impl=self.rnn_impl, name=f"bigru{i}")
                             for i in range(config.rnn_layers)]
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
                for rnn in self.rnns:
                    x = self.dropout(rnn(x, out_lengths), training=training)
                return self.logits(x)

        model = DeepSpeech2()
        model((tf.zeros([1, 8, num_features]), tf.constant([8])))
        return model


@hookimpl
def register_models(register: Any) -> None:
    register(DS2())
