"""``transducer``: the RNN transducer (RNN-T, Graves 2012), trained on the exact RNN-T loss.

The encoder (any model: ``brnn``, ``ds2``, ``conformer``, a plugin's) is built with
``joint_dim`` outputs a frame: its output layer is the joint network's projection of the
acoustic frames. The objective's head (:func:`build_head`) holds the rest:

- the **prediction network**, a language model over the labels emitted so far: an LSTM
  (``predictor=lstm``, the usual one, cuDNN-eligible on a GPU) or the *stateless* one of
  pruned RNN-T (``predictor=stateless``: the embeddings of the last ``context_size`` labels,
  mixed by one dense layer; Ghodsi et al. 2020, k2's pruned RNN-T), which decodes faster and
  often loses nothing;
- the **joint network**: ``output(tanh(encoder_frame + projection(prediction)))``, the
  logits of the labels and the blank (the last class, as asrkit's labels count it) at every
  cell of the (frame, labels emitted) lattice;
- with ``ctc_weight`` > 0 (0.3 by default), a linear CTC output on the encoder's frames whose
  CTC loss, so weighted, is added to the transducer's while training: the encoder learns to
  align much sooner (a transducer alone starts slowly), as ESPnet's and icefall's transducers
  train. Decoding never reads it.

The loss is :mod:`asrkit.core.rnnt`'s, exact, in float32 whatever the precision, and computed a
chunk of ``frames_per_chunk`` frames at a time
(:func:`~asrkit.core.rnnt.gathered_logprobs_in_chunks`) so that the joint's ``batch x frames x
labels x classes`` logits are never all held: peak memory stays that of one chunk. Characters
or subword pieces alike: the labels are the run's.

An utterance needs one output frame to be aligned (a transducer emits several labels a frame);
one without frames is named and left out, as CTC's too-short ones are.

The decoders of its runs (:mod:`asrkit.decoders.transducer`) read :class:`TransducerOutputs`:
``transducer-greedy`` and ``transducer-beam``, the default (on the open-vocabulary benchmark's
2-hour ``conformer`` it scored 1.2 CER points below the greedy search on the training voices and
1.7 on another synthesiser's; docs/benchmarks.md). The presets score the dev evaluations during
training greedily (``train.dev_decoder``), which leaves the run more of its minutes for steps.
An export holds the greedy search (:mod:`asrkit.serving.export_transducer`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from asrkit import hookimpl
from asrkit.core.ctc import ctc_losses
from asrkit.core.rnnt import (
    clamped_labels,
    gathered_logprobs,
    gathered_logprobs_in_chunks,
    rnnt_loss_from_gathered,
)
from asrkit.core.settings import setting
from asrkit.decoders.transducer import (
    TRANSDUCER_OUTPUTS,
    TransducerBeamDecoder,
    TransducerGreedyDecoder,
    TransducerOutputs,
)
from asrkit.types import Objective

if TYPE_CHECKING:
    import numpy as np
    import tensorflow as tf

    from asrkit.core.labels import Labels
    from asrkit.hookspecs import Register


@dataclass(frozen=True)
class TransducerConfig:
    #: The prediction network: ``lstm`` (an LSTM over the labels emitted so far) or
    #: ``stateless`` (the embeddings of the last ``context_size`` labels).
    predictor: str = setting("lstm", choices=("lstm", "stateless"))
    #: The width of the prediction network (its embeddings and LSTM units).
    pred_dim: int = setting(320, min=1, max=8192)
    #: LSTM layers of the prediction network (``predictor=lstm``).
    pred_layers: int = setting(1, min=1, max=8)
    #: How many of the last labels the stateless prediction network reads.
    context_size: int = setting(2, min=1, max=16)
    #: The width of the joint network; the encoder is built with this many outputs a frame.
    joint_dim: int = setting(320, min=1, max=8192)
    #: Dropout on the prediction network's output while training.
    dropout: float = setting(0.1, min=0, below=1)
    #: The weight of an auxiliary CTC loss on the encoder's frames (through a linear layer of
    #: the head), added to the transducer's: it speeds up the encoder's early learning, as in
    #: ESPnet's and icefall's transducers. 0: none (and no such layer).
    ctc_weight: float = setting(0.3, min=0, max=10)
    #: Frames of the joint computed at a time by the loss (its memory: one chunk's
    #: ``batch x frames x labels x classes``); 0 computes the whole joint at once.
    frames_per_chunk: int = setting(16, min=0, max=100_000)


def build_head(config: TransducerConfig, encoder_width: int, num_classes: int) -> Any:
    """The head, a ``keras.Model`` with its variables created, that the decoders read as a
    :class:`asrkit.decoders.transducer.TransducerNetworks`. (The class is defined here, on
    first use, because keras is imported only when a model is built.)"""
    import keras
    import tensorflow as tf

    from asrkit.models.dropout import Dropout

    class Head(keras.Model):
        """The prediction and joint networks of a transducer.

        What the loss and the decoders call (every tensor float32 at the boundaries):

        - :meth:`predict_labels`: the prediction network over whole label sequences, for the
          loss: ``[batch, U]`` -> ``[batch, U+1, joint_dim]`` (position 0 reads the blank, the
          start of every sequence);
        - :meth:`joint`: ``[batch, frames, joint_dim]`` and ``[batch, U+1, joint_dim]`` ->
          logits ``[batch, frames, U+1, classes]``;
        - :meth:`initial_state`, :meth:`predict_step` and :meth:`joint_step`: one label at a
          time, for the decoders, with the prediction network's state as one float32 tensor
          ``[n, state_size]`` (an LSTM's ``h`` and ``c`` of every layer, or the last labels).
        """

        def __init__(self) -> None:
            super().__init__(name="transducer_head")
            self.config = config
            self.num_classes = num_classes
            self.blank = num_classes - 1
            self.embedding = keras.layers.Embedding(num_classes, config.pred_dim,
                                                    name="embedding")
            if config.predictor == "lstm":
                for index in range(config.pred_layers):
                    # Default activations: cuDNN's kernel on a GPU.
                    setattr(self, f"lstm{index}", keras.layers.LSTM(
                        config.pred_dim, return_sequences=True, return_state=True,
                        name=f"lstm{index}"))
                self.state_size = 2 * config.pred_layers * config.pred_dim
            else:
                self.context = keras.layers.Dense(config.pred_dim, activation="relu",
                                                  name="context")
                self.state_size = config.context_size
            if config.ctc_weight:
                self.ctc_output = keras.layers.Dense(num_classes, name="ctc_output")
            self.dropout = Dropout(config.dropout)
            self.prediction = keras.layers.Dense(config.joint_dim, name="prediction")
            self.output_layer = keras.layers.Dense(num_classes, name="output")

        # -- the prediction network ---------------------------------------------------------

        def _lstm_layers(self) -> list[Any]:
            return [getattr(self, f"lstm{i}") for i in range(config.pred_layers)]

        def _contexts(self, tokens: tf.Tensor) -> tf.Tensor:
            """``[batch, U+1]`` tokens (the blank first) -> each position's last
            ``context_size`` tokens, the blank before the start: ``[batch, U+1, context]``."""
            size = config.context_size
            padded = tf.pad(tokens, [[0, 0], [size - 1, 0]], constant_values=self.blank)
            steps = tf.shape(tokens)[1]
            return tf.stack([padded[:, i:i + steps] for i in range(size)], axis=-1)

        def _stateless(self, contexts: tf.Tensor, training: bool) -> tf.Tensor:
            embedded = self.embedding(contexts)  # [..., context, pred_dim]
            shape = tf.shape(embedded)
            flat = tf.reshape(embedded, tf.concat(
                [shape[:-2], [config.context_size * config.pred_dim]], 0))
            return self.context(flat, training=training)

        def predict_labels(self, labels: tf.Tensor, training: bool = False) -> tf.Tensor:
            labels = tf.cast(labels, tf.int32)
            starts = tf.fill([tf.shape(labels)[0], 1], self.blank)
            tokens = tf.concat([starts, labels], axis=1)
            if config.predictor == "lstm":
                hidden = self.embedding(tokens)
                for layer in self._lstm_layers():
                    hidden = layer(hidden, training=training)[0]
            else:
                hidden = self._stateless(self._contexts(tokens), training)
            hidden = self.dropout(hidden, training=training)
            return tf.cast(self.prediction(hidden), tf.float32)

        def initial_state(self, count: int) -> tf.Tensor:
            if config.predictor == "lstm":
                return tf.zeros([count, self.state_size], tf.float32)
            return tf.fill([count, self.state_size], float(self.blank))

        def predict_step(self, tokens: tf.Tensor,
                         state: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            """The prediction network's output after reading ``tokens`` ``[n]``, and its new
            state."""
            tokens = tf.cast(tokens, tf.int32)
            if config.predictor == "lstm":
                hidden = self.embedding(tokens[:, None])
                states = []
                width = config.pred_dim
                for index, layer in enumerate(self._lstm_layers()):
                    h = state[:, 2 * index * width:(2 * index + 1) * width]
                    c = state[:, (2 * index + 1) * width:(2 * index + 2) * width]
                    dtype = layer.compute_dtype
                    hidden, h, c = layer(hidden, initial_state=[tf.cast(h, dtype),
                                                                tf.cast(c, dtype)])
                    states += [tf.cast(h, tf.float32), tf.cast(c, tf.float32)]
                new_state = tf.concat(states, axis=1)
                hidden = hidden[:, 0]
            else:
                context = tf.concat([tf.cast(state[:, 1:], tf.int32), tokens[:, None]], 1)
                hidden = self._stateless(context, False)
                new_state = tf.cast(context, tf.float32)
            return tf.cast(self.prediction(hidden), tf.float32), new_state

        # -- the joint network --------------------------------------------------------------

        def joint(self, frames: tf.Tensor, predicted: tf.Tensor) -> tf.Tensor:
            hidden = tf.tanh(tf.cast(frames, tf.float32)[:, :, None, :]
                             + tf.cast(predicted, tf.float32)[:, None, :, :])
            return self.output_layer(hidden)

        def joint_step(self, frames: tf.Tensor, predicted: tf.Tensor) -> tf.Tensor:
            """Log-probabilities ``[n, classes]`` of one frame ``[n, joint_dim]`` each, after
            the prediction network's ``predicted`` ``[n, joint_dim]``."""
            hidden = tf.tanh(tf.cast(frames, tf.float32) + tf.cast(predicted, tf.float32))
            return tf.nn.log_softmax(tf.cast(self.output_layer(hidden), tf.float32))

        def call(self, inputs: tuple[tf.Tensor, tf.Tensor],
                 training: bool = False) -> tf.Tensor:
            frames, labels = inputs
            return self.joint(frames, self.predict_labels(labels, training))

    head = Head()
    if config.ctc_weight:
        head.ctc_output.build((None, None, encoder_width))
    head((tf.zeros([1, 1, encoder_width]), tf.zeros([1, 1], tf.int32)))
    head.predict_step(tf.fill([1], head.blank), head.initial_state(1))
    return head


class TransducerObjective(Objective):
    name = "transducer"
    description = ("RNN transducer (RNN-T): prediction and joint networks on the encoder, "
                   "the exact RNN-T loss; streams.")
    Config = TransducerConfig
    outputs = TRANSDUCER_OUTPUTS
    default_decoder = TransducerBeamDecoder.name
    greedy_decoder = TransducerGreedyDecoder.name
    #: The prediction and joint networks' sizes where each model preset applies: ``full`` is
    #: the Conformer-Transducer small configuration's (320 units, one LSTM layer). ``cpu``
    #: also moves each utterance's formants by a ratio of 0.9-1.1 with its pitch kept (the same
    #: voice through another vocal tract): a 30-minute ``conformer`` transducer on the
    #: open-vocabulary benchmark scored 3.2 CER points better on voices it never heard than
    #: without (greedily; 3.6 with a word LM) and no worse on its training voices, ahead of
    #: pitch shifts and VTLP on every test set (docs/benchmarks.md). Every preset scores the dev
    #: evaluations during training with the greedy search (the module's docstring says why).
    presets: ClassVar[dict[str, dict[str, str]]] = {
        name: {**sizes, "train.dev_decoder": TransducerGreedyDecoder.name}
        for name, sizes in {
            "full": {"objective.pred_dim": "320", "objective.joint_dim": "320"},
            "cpu": {"objective.pred_dim": "128", "objective.joint_dim": "128",
                    "pipeline.formant_ratio": "0.9,1.1"},
            "tiny": {"objective.pred_dim": "16", "objective.joint_dim": "16",
                     "objective.frames_per_chunk": "8"},
        }.items()
    }

    def encoder_width(self, config: TransducerConfig, labels: Labels) -> int:
        return config.joint_dim

    def build(self, config: TransducerConfig, encoder_width: int, labels: Labels) -> Any:
        return build_head(config, encoder_width, labels.num_classes)

    def losses(self, config: TransducerConfig, head: Any, encoder_out: tf.Tensor,
               out_lengths: tf.Tensor, label_ids: tf.Tensor, label_lengths: tf.Tensor,
               training: bool = False) -> tuple[tf.Tensor, tf.Tensor]:
        import tensorflow as tf

        label_lengths = tf.cast(label_lengths, tf.int32)
        label_ids = tf.cast(label_ids, tf.int32)
        # The padding made the blank: any class gathers, and padding gets no gradient.
        labels = clamped_labels(label_ids, label_lengths, head.blank)
        predicted = head.predict_labels(labels, training=training)
        frames = tf.cast(encoder_out, tf.float32)
        if config.frames_per_chunk:
            blank_lp, label_lp = gathered_logprobs_in_chunks(
                head.joint, frames, predicted, labels, config.frames_per_chunk, blank=-1)
        else:
            blank_lp, label_lp = gathered_logprobs(head.joint(frames, predicted), labels,
                                                   blank=-1)
        losses, feasible = rnnt_loss_from_gathered(blank_lp, label_lp, out_lengths,
                                                   label_lengths)
        if config.ctc_weight:
            # The auxiliary loss where CTC can align the utterance (it needs more frames).
            ctc, aligned = ctc_losses(label_ids, label_lengths,
                                      tf.cast(head.ctc_output(frames), tf.float32), out_lengths)
            losses += config.ctc_weight * tf.where(aligned, ctc, 0.0)
        return losses, feasible

    def frames_needed(self, config: TransducerConfig, label_ids: Sequence[int]) -> int:
        return 1

    def decoder_inputs(self, config: TransducerConfig, head: Any,
                       encoder_out: np.ndarray) -> TransducerOutputs:
        return TransducerOutputs(encoder_out, head)


@hookimpl
def register_objectives(register: Register) -> None:
    register(TransducerObjective())
