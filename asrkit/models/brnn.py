"""``brnn``: Deep Speech's bidirectional RNN (Hannun et al. 2014), as the Mozilla notebook built it.

For each 10 ms frame, 26 MFCCs with ``context`` frames each side (9: 494 inputs), then::

    h1 = g(W1 x + b1)        n_hidden       dropout
    h2 = g(W2 h1 + b2)       n_hidden       dropout
    h3 = g(W3 h2 + b3)       2 * n_cell     dropout
    h4 = [LSTM_fw(h3); LSTM_bw(h3)]   n_cell each, forget bias 1.0
    h5 = g(W5 h4 + b5)       n_hidden       dropout
    logits = W6 h5 + b6      alphabet + blank

with ``g(z) = min(max(0, z), 20)``. Dense weights and biases start from a normal distribution
(stddev 0.1 by default, per layer overridable). Widths default to the notebook's
(``n_hidden = n_cell = 494``); DeepSpeech's later releases used 2048. The context windows are
stacked inside the model, on the accelerator, so the input pipeline ships plain MFCC frames.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from asrkit import hookimpl
from asrkit.core.settings import setting, validate
from asrkit.features import context_windows
from asrkit.types import AcousticModel, ModelSpec

if TYPE_CHECKING:
    from asrkit.hookspecs import Register


#: The widest layer a setting may ask for.
MAX_UNITS = 8192
#: Initial weights wider than this only overflow.
MAX_STDDEV = 10.0


@dataclass(frozen=True)
class BRNNConfig:
    #: Units of the dense layers and of the LSTM cell: at most 8192 (the LSTM's weights alone
    #: are then 2 GB).
    n_hidden: int = setting(494, min=1, max=MAX_UNITS)
    n_cell: int = setting(494, min=1, max=MAX_UNITS)
    #: Frames of context each side of every frame (each input grows 2 * context + 1 times).
    context: int = setting(9, min=0, max=100)
    dropout: float = setting(0.05, min=0, below=1)
    #: Activations are clipped to [0, relu_clip]; float32 holds nothing much larger.
    relu_clip: float = setting(20.0, above=0, max=1e6)
    forget_bias: float = setting(1.0, min=-100, max=100)
    #: Standard deviation of the dense layers' initial weights and biases.
    init_stddev: float = setting(0.1, above=0, max=MAX_STDDEV)
    #: Per-layer overrides of ``init_stddev`` (layers h1, h2, h3, h5, logits); 0 = use default.
    h1_stddev: float = setting(0.0, min=0, max=MAX_STDDEV)
    h2_stddev: float = setting(0.0, min=0, max=MAX_STDDEV)
    h3_stddev: float = setting(0.0, min=0, max=MAX_STDDEV)
    h5_stddev: float = setting(0.0, min=0, max=MAX_STDDEV)
    logits_stddev: float = setting(0.0, min=0, max=MAX_STDDEV)
    #: The recurrent layer's implementation: ``loop`` (the input projection hoisted out of the
    #: time loop: fastest on a CPU), ``keras`` (Keras' LSTM, cuDNN's fused kernel on a GPU), or
    #: ``auto``: ``keras`` when the towers are GPUs, else ``loop``. Both hold the same weights.
    rnn_impl: str = setting("auto", choices=("auto", "loop", "keras"))

    def __post_init__(self) -> None:
        validate(self)


def build_brnn(config: BRNNConfig, num_features: int, num_classes: int) -> AcousticModel:
    import keras
    import tensorflow as tf

    from asrkit.models.layers import (
        HoistedBiLSTM,
        choose_rnn_impl,
        clipped_relu,
        normal_init,
        tower_devices,
    )

    def dense(units: int, name: str, override: float) -> keras.layers.Dense:
        std = override or config.init_stddev
        return keras.layers.Dense(units, name=name, kernel_initializer=normal_init(std),
                                  bias_initializer=normal_init(std))

    class BRNN(keras.Model):
        def __init__(self) -> None:
            super().__init__(name="brnn")
            self.h1 = dense(config.n_hidden, "h1", config.h1_stddev)
            self.h2 = dense(config.n_hidden, "h2", config.h2_stddev)
            self.h3 = dense(2 * config.n_cell, "h3", config.h3_stddev)
            self.rnn_impl = choose_rnn_impl(config.rnn_impl, tower_devices())
            self.lstm = HoistedBiLSTM(config.n_cell, config.forget_bias, self.rnn_impl,
                                      name="bilstm")
            self.h5 = dense(config.n_hidden, "h5", config.h5_stddev)
            self.logits = dense(num_classes, "logits", config.logits_stddev)
            self.dropout = keras.layers.Dropout(config.dropout)

        def call(self, inputs: tuple[tf.Tensor, tf.Tensor], training: bool = False) -> tf.Tensor:
            features, lengths = inputs
            # Padded frames zeroed: the context windows of an utterance's last frames then see
            # the zeros they see alone, whatever the batch was padded with.
            mask = tf.sequence_mask(lengths, tf.shape(features)[1], features.dtype)
            x = context_windows(features * mask[:, :, None], config.context)
            for layer in (self.h1, self.h2, self.h3):
                x = self.dropout(clipped_relu(layer(x), config.relu_clip), training=training)
            x = self.lstm(x, lengths)
            x = self.dropout(clipped_relu(self.h5(x), config.relu_clip), training=training)
            return self.logits(x)

    model = BRNN()
    model((tf.zeros([1, 1, num_features]), tf.ones([1], tf.int32)))  # create the variables
    return model


class BRNN(ModelSpec):
    name = "brnn"
    description = "Deep Speech's bidirectional RNN over MFCC with context (Hannun et al. 2014)."
    Config = BRNNConfig
    features = "mfcc"
    presets: ClassVar[dict[str, dict[str, str]]] = {
        # The notebook: its sizes, and its whitening of every utterance's inputs (one mean and
        # deviation over all its values), without which a quarter of layer 1's clipped-ReLU
        # units start saturated at N(0, 0.1) (brnn.md).
        "full": {"features.normalize": "utterance"},
        # Learns within minutes on a 2-core CPU (docs/models.md has the measurements).
        "cpu": {"model.n_hidden": "256", "model.n_cell": "256", "model.context": "5",
                "features.normalize": "utterance", "train.batch_size": "8",
                "train.learning_rate": "0.002", "train.warmup_steps": "100",
                "train.eval_every_minutes": "3"},
    }

    def build(self, config: BRNNConfig, num_features: int, num_classes: int) -> AcousticModel:
        return build_brnn(config, num_features, num_classes)


@hookimpl
def register_models(register: Register) -> None:
    register(BRNN())
