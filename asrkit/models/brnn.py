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

``streaming=true`` is DeepSpeech 0.x's streaming model (from 0.2 on, what Mozilla shipped for
real-time transcription): the bidirectional LSTM, whose backward half needs the whole
utterance, replaced by a forward-only one (``lstm``), with ``h3`` as wide as its cell
(``n_cell``, not ``2 * n_cell``). Every other layer is per frame, so the only future a frame
reads is its context window's ``context`` frames: the model runs chunk by chunk on a stream
(:class:`asrkit.types.StreamingModel`), ``context`` frames late, carrying the last ``2 *
context`` feature frames and the LSTM's state, and equals its whole-utterance call at any
``chunk_frames``. Its weights are its own: it does not load a bidirectional checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from asrkit import hookimpl
from asrkit.core.settings import setting, validate
from asrkit.features import context_windows
from asrkit.types import AcousticModel, ModelSpec, StreamShape

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
    #: DeepSpeech 0.x's streaming model: a forward-only LSTM (``lstm``, instead of the
    #: bidirectional ``bilstm``) after an ``h3`` of ``n_cell`` units; it runs chunk by chunk on
    #: a stream (``asrkit.types.StreamingModel``), ``context`` frames late.
    streaming: bool = False
    #: A streaming model's frames a step computes (16 = 160 ms): only how often a stream
    #: steps, since the model's outputs do not depend on it. 0: not stepped (the whole
    #: utterance at once).
    chunk_frames: int = setting(16, min=0, max=10000)

    def __post_init__(self) -> None:
        validate(self)


def build_brnn(config: BRNNConfig, num_features: int, num_classes: int) -> AcousticModel:
    import keras
    import tensorflow as tf

    from asrkit.models.dropout import Dropout
    from asrkit.models.layers import (
        HoistedBiLSTM,
        HoistedLSTM,
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
            self.rnn_impl = choose_rnn_impl(config.rnn_impl, tower_devices())
            if config.streaming:  # DeepSpeech 0.x: h3 as wide as the one-way cell it feeds
                self.h3 = dense(config.n_cell, "h3", config.h3_stddev)
                self.lstm = HoistedLSTM(config.n_cell, config.forget_bias, self.rnn_impl,
                                        name="lstm")
            else:
                self.h3 = dense(2 * config.n_cell, "h3", config.h3_stddev)
                self.lstm = HoistedBiLSTM(config.n_cell, config.forget_bias, self.rnn_impl,
                                          name="bilstm")
            self.h5 = dense(config.n_hidden, "h5", config.h5_stddev)
            self.logits = dense(num_classes, "logits", config.logits_stddev)
            self.dropout = Dropout(config.dropout)

        def call(self, inputs: tuple[tf.Tensor, tf.Tensor], training: bool = False) -> tf.Tensor:
            features, lengths = inputs
            # Padded frames zeroed: the context windows of an utterance's last frames then see
            # the zeros they see alone, whatever the batch was padded with.
            mask = tf.sequence_mask(lengths, tf.shape(features)[1], features.dtype)
            x = self._below(context_windows(features * mask[:, :, None], config.context),
                            training)
            return self._above(self.lstm(x, lengths), training)

        def _below(self, x: tf.Tensor, training: bool) -> tf.Tensor:
            """The dense layers under the recurrence, per frame."""
            for layer in (self.h1, self.h2, self.h3):
                x = self.dropout(clipped_relu(layer(x), config.relu_clip), training=training)
            return x

        def _above(self, x: tf.Tensor, training: bool) -> tf.Tensor:
            """The dense layers over the recurrence, per frame: the logits."""
            x = self.dropout(clipped_relu(self.h5(x), config.relu_clip), training=training)
            return self.logits(x)

        def initial_state(self, batch_size: int) -> list[tf.Tensor]:
            """A stream's state before its first frame, all zeros: the last ``2 * context``
            feature frames (the context windows' left padding at first), the frames stepped
            and the valid ones among them, and the LSTM's state."""
            if not config.streaming:
                raise ValueError("only a streaming brnn (model.streaming=true) steps")
            return [tf.zeros([batch_size, 2 * config.context, num_features], tf.float32),
                    tf.zeros([batch_size], tf.int32), tf.zeros([batch_size], tf.int32),
                    *self.lstm.initial_state(batch_size)]

        def step(self, features: tf.Tensor, lengths: tf.Tensor,
                 state: list[tf.Tensor]) -> tuple[tf.Tensor, list[tf.Tensor]]:
            """The outputs ``[B, N, classes]`` of the next ``N`` feature frames ``[B, N, F]``
            of each stream (``lengths`` valid) and the new state
            (:class:`asrkit.types.StreamingModel`). The context windows of a frame need the
            ``context`` frames after it, so the chunk's outputs are those of the frames
            ``context`` earlier, centred in the window of the cached ``2 * context`` frames and
            the chunk; frames before the stream's first or past its last leave the LSTM as it
            was."""
            past, stepped, seen, *carried = state
            context, frames = config.context, tf.shape(features)[1]
            mask = tf.sequence_mask(lengths, frames, features.dtype)
            window = tf.concat([past, features * mask[:, :, None]], axis=1)
            if context:
                x = tf.signal.frame(window, 2 * context + 1, 1, axis=1)  # [B, N, 2C+1, F]
                x = tf.reshape(x, [tf.shape(x)[0], frames, (2 * context + 1) * num_features])
            else:
                x = window
            # The frames centred in the windows, counted from the stream's first: the first
            # ``context`` of a stream and those past its end (its last steps) are not valid.
            seen = seen + lengths
            centres = stepped[:, None] - context + tf.range(frames)[None, :]
            valid = (centres >= 0) & (centres < seen[:, None])
            x, carried = self.lstm(self._below(x, False), state=carried, valid=valid)
            new_state = [window[:, tf.shape(window)[1] - 2 * context:], stepped + frames, seen,
                         *carried]
            return self._above(x, False), new_state

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

    def streaming(self, config: BRNNConfig) -> StreamShape | None:
        """A streaming brnn steps by ``chunk_frames`` frames; its outputs lag by ``context``
        frames, the future that each frame's context window reads. Any chunk size gives the
        same outputs (``trained_chunks`` is None)."""
        if not config.streaming or not config.chunk_frames:
            return None
        return StreamShape(input_frames=config.chunk_frames, delay=config.context)


@hookimpl
def register_models(register: Register) -> None:
    register(BRNN())
