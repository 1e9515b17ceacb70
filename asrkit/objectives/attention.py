"""``attention``: an attention encoder-decoder, trained jointly on CTC and attention losses.

The encoder (any model: ``brnn``, ``ds2``, ``conformer``, a plugin's) is built with ``d_model``
outputs a frame; those frames are what the objective's head (:func:`build_head`) reads:

- an **autoregressive decoder** over the frames, predicting each label from the labels before
  it and the frames it attends to: a **Transformer** decoder (``decoder=transformer``: the
  pre-LayerNorm one of ESPnet's conformer recipes, masked self-attention over the labels so
  far, cross-attention over the encoder frames, a feed-forward layer) or **LAS**
  (``decoder=las``: Chan et al. 2016's listen-attend-spell, an LSTM with Chorowski et al.
  2015's location-aware attention, as Lingvo's LAS);
- with ``ctc_weight`` > 0 (0.3 by default, ESPnet's), a linear **CTC output** on the same
  frames. The loss is ``ctc_weight * ctc + (1 - ctc_weight) * attention`` (Kim et al. 2017's
  joint CTC/attention training): CTC's monotonic alignment makes the attention learn to align
  much sooner, and the decoders may rescore with it. ``ctc_weight=1`` trains CTC alone (the
  attention decoder exists, and gets no gradient); 0 has no CTC layer at all.

Labels are asrkit's (classes ``0 .. N-1``); class ``N``, the last (CTC's blank), is also the
attention decoder's start and end symbol (:attr:`AttentionNetworks.eos`): the decoder reads it
first and is trained to emit it after the last label. One class for both keeps the output
layers ``labels.num_classes`` wide, as every asrkit objective's, and the blank is never a label
of the attention decoder otherwise.

The attention loss is teacher-forced: the decoder reads the start symbol and the labels, and
each of the ``U+1`` targets (the labels, then the end symbol) is scored by label-smoothed
cross-entropy, summed over the utterance: ``(1 - eps)`` on the target and ``eps`` spread evenly
over all classes (``label_smoothing``). An utterance needs one output frame to attend to; the
CTC term is dropped where CTC cannot align it (too few frames), as the transducer's auxiliary
CTC loss is, except with ``ctc_weight=1``, where CTC is the whole loss and decides which
utterances can be trained.

The decoders of its runs (:mod:`asrkit.decoders.attention`: ``attention-greedy`` and
``attention-beam``, the default) read :class:`~asrkit.decoders.attention.AttentionOutputs` and
call the head through :class:`~asrkit.decoders.attention.AttentionNetworks`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from asrkit import hookimpl
from asrkit.core.ctc import ctc_losses
from asrkit.core.ctc import frames_needed as ctc_frames_needed
from asrkit.core.settings import setting
from asrkit.decoders.attention import ATTENTION_OUTPUTS, AttentionOutputs
from asrkit.types import Objective

if TYPE_CHECKING:
    import numpy as np
    import tensorflow as tf

    from asrkit.core.labels import Labels
    from asrkit.hookspecs import Register

#: Added to the attention energies of padded frames before the softmax (float32): their
#: weights underflow to exactly 0, so padding never changes a result.
MASKED_ENERGY = -1e9


@dataclass(frozen=True)
class AttentionConfig:
    #: The attention decoder: ``transformer`` (self- and cross-attention blocks) or ``las``
    #: (an LSTM with location-aware attention).
    decoder: str = setting("transformer", choices=("transformer", "las"))
    #: The width of the encoder's output frames (the encoder is built with it) and of the
    #: Transformer decoder.
    d_model: int = setting(256, min=1, max=8192)
    #: Attention heads of the Transformer decoder's self- and cross-attention.
    heads: int = setting(4, min=1, max=64)
    #: Blocks of the Transformer decoder.
    layers: int = setting(6, min=1, max=32)
    #: The inner width of the Transformer decoder's feed-forward layers.
    ff_dim: int = setting(2048, min=1, max=65536)
    #: Dropout in the decoder while training (embeddings, sublayers, attention weights).
    dropout: float = setting(0.1, min=0, below=1)
    #: Label smoothing of the attention loss: this much of each target's probability is spread
    #: evenly over all classes.
    label_smoothing: float = setting(0.1, min=0, below=1)
    #: The weight of the CTC loss on the encoder's frames; the attention loss has the rest.
    #: 0: no CTC layer; 1: CTC alone trains (the attention decoder gets no gradient).
    ctc_weight: float = setting(0.3, min=0, max=1)
    #: The LSTM units of the LAS decoder (its label embeddings are as wide).
    las_units: int = setting(320, min=1, max=8192)
    #: The width of the LAS decoder's attention energies.
    attention_dim: int = setting(320, min=1, max=8192)
    #: Filters of the LAS attention's location features (a convolution over the previous
    #: attention weights).
    location_filters: int = setting(10, min=1, max=1024)
    #: The width, in frames, of that convolution (odd keeps it centred).
    location_kernel: int = setting(31, min=1, max=1023)


def _positions(steps: tf.Tensor, width: int) -> tf.Tensor:
    """Sinusoidal position encodings ``[steps, width]`` (Vaswani et al. 2017): sine on even
    dimensions, cosine on odd ones, the wavelengths a geometric series to 10000 * 2 pi."""
    import tensorflow as tf

    positions = tf.cast(tf.range(steps), tf.float32)[:, None]
    dims = tf.range(width)
    rates = tf.pow(10000.0, -tf.cast(2 * (dims // 2), tf.float32) / float(width))
    angles = positions * rates[None, :]
    return tf.where(tf.equal(dims % 2, 0)[None, :], tf.sin(angles), tf.cos(angles))


def build_head(config: AttentionConfig, encoder_width: int, num_classes: int) -> Any:
    """The head, a ``keras.Model`` with its variables created, that the loss calls
    (``teacher_forced``) and the decoders read as an
    :class:`asrkit.decoders.attention.AttentionNetworks`. (The classes are defined here, on
    first use, because keras is imported only when a model is built.)"""
    import keras
    import tensorflow as tf

    from asrkit.models.dropout import Dropout

    class Block(keras.layers.Layer):
        """One pre-LayerNorm Transformer decoder block: masked self-attention over the labels,
        cross-attention over the encoder frames, a feed-forward layer, each a residual."""

        def __init__(self, name: str) -> None:
            super().__init__(name=name)
            key_dim = max(1, config.d_model // config.heads)
            self.self_norm = keras.layers.LayerNormalization(epsilon=1e-5, name="self_norm")
            self.self_attention = keras.layers.MultiHeadAttention(
                config.heads, key_dim, dropout=config.dropout, name="self_attention")
            self.cross_norm = keras.layers.LayerNormalization(epsilon=1e-5, name="cross_norm")
            self.cross_attention = keras.layers.MultiHeadAttention(
                config.heads, key_dim, dropout=config.dropout, name="cross_attention")
            self.ff_norm = keras.layers.LayerNormalization(epsilon=1e-5, name="ff_norm")
            self.ff_in = keras.layers.Dense(config.ff_dim, activation="relu", name="ff_in")
            self.ff_out = keras.layers.Dense(config.d_model, name="ff_out")
            self.dropout = Dropout(config.dropout)

        def call(self, x: tf.Tensor, memory: tf.Tensor, memory_mask: tf.Tensor,
                 training: bool = False) -> tf.Tensor:
            y = self.self_norm(x)
            with warnings.catch_warnings():
                # The first decoding step attends to one label, which Keras warns of.
                warnings.filterwarnings("ignore", "You are using a softmax over axis",
                                        UserWarning)
                y = self.self_attention(y, y, use_causal_mask=True, training=training)
            x = x + self.dropout(y, training=training)
            y = self.cross_norm(x)
            y = self.cross_attention(y, memory, attention_mask=memory_mask, training=training)
            x = x + self.dropout(y, training=training)
            y = self.ff_out(self.ff_in(self.ff_norm(x)))
            return x + self.dropout(y, training=training)

    class Head(keras.Model):
        """The attention decoder (and CTC output) of an attention encoder-decoder.

        What the loss and the decoders call (every tensor float32 at the boundaries, whatever
        the precision policy the layers compute in):

        - :meth:`teacher_forced`: the decoder over whole token sequences (the start symbol,
          then the labels), for the loss: ``[batch, U+1]`` -> logits ``[batch, U+1, classes]``
          (position ``i`` predicts the token after the first ``i+1``);
        - :meth:`ctc_log_probs` (with ``has_ctc``), :meth:`initial_state` and
          :meth:`decode_step`: the :class:`~asrkit.decoders.attention.AttentionNetworks`
          protocol, one label at a time. The Transformer's state is empty (``[n, 0]``: it
          reads the whole prefix at each step); LAS's packs the LSTM's ``h`` and ``c``, the
          last context vector and the last attention weights (as many as frames) in one
          ``[n, 2 * las_units + width + frames]`` tensor.
        """

        def __init__(self) -> None:
            super().__init__(name="attention_head")
            self.config = config
            self.num_classes = num_classes
            self.eos = num_classes - 1
            self.has_ctc = bool(config.ctc_weight)
            self.encoder_width = encoder_width
            if self.has_ctc:
                self.ctc_output = keras.layers.Dense(num_classes, name="ctc_output")
            self.dropout = Dropout(config.dropout)
            self.output_layer = keras.layers.Dense(num_classes, name="output")
            if config.decoder == "transformer":
                self.embedding = keras.layers.Embedding(num_classes, config.d_model,
                                                        name="embedding")
                if encoder_width != config.d_model:
                    self.memory_projection = keras.layers.Dense(config.d_model,
                                                                name="memory_projection")
                for index in range(config.layers):
                    setattr(self, f"block{index}", Block(f"block{index}"))
                self.final_norm = keras.layers.LayerNormalization(epsilon=1e-5,
                                                                  name="final_norm")
            else:
                units = config.las_units
                self.embedding = keras.layers.Embedding(num_classes, units, name="embedding")
                self.cell = keras.layers.LSTMCell(units, name="lstm")
                self.query = keras.layers.Dense(config.attention_dim, use_bias=False,
                                                name="query")
                self.keys = keras.layers.Dense(config.attention_dim, name="keys")
                self.location_conv = keras.layers.Conv1D(
                    config.location_filters, config.location_kernel, padding="same",
                    use_bias=False, name="location_conv")
                self.location = keras.layers.Dense(config.attention_dim, use_bias=False,
                                                   name="location")
                self.energy = keras.layers.Dense(1, use_bias=False, name="energy")

        # -- shared -------------------------------------------------------------------------

        def ctc_log_probs(self, frames: Any) -> tf.Tensor:
            frames = tf.cast(frames, tf.float32)
            return tf.nn.log_softmax(tf.cast(self.ctc_output(frames), tf.float32))

        def ctc_logits(self, frames: tf.Tensor) -> tf.Tensor:
            """The CTC output layer's logits ``[batch, frames, classes]``, for the loss."""
            return tf.cast(self.ctc_output(tf.cast(frames, tf.float32)), tf.float32)

        def teacher_forced(self, frames: Any, lengths: Any, tokens: Any,
                           training: bool = False) -> tf.Tensor:
            """Logits ``[batch, L, classes]`` of the next token after each prefix of
            ``tokens`` ``[batch, L]`` (the start symbol first), attending to the first
            ``lengths`` of ``frames``."""
            frames = tf.cast(frames, tf.float32)
            lengths = tf.cast(lengths, tf.int32)
            tokens = tf.cast(tokens, tf.int32)
            if config.decoder == "transformer":
                return self._transformer(frames, lengths, tokens, training)
            return self._las(frames, lengths, tokens, training)

        def call(self, inputs: tuple[Any, Any, Any], training: bool = False) -> tf.Tensor:
            frames, lengths, tokens = inputs
            return self.teacher_forced(frames, lengths, tokens, training)

        def initial_state(self, frames: Any, lengths: Any) -> tf.Tensor:
            frames = tf.cast(frames, tf.float32)
            count = tf.shape(frames)[0]
            if config.decoder == "transformer":
                return tf.zeros([count, 0], tf.float32)
            units = config.las_units
            mask = tf.sequence_mask(tf.cast(lengths, tf.int32), tf.shape(frames)[1],
                                    tf.float32)
            # Chorowski et al.'s first location features read evenly spread weights.
            weights = mask / tf.maximum(tf.reduce_sum(mask, 1, keepdims=True), 1.0)
            return tf.concat([tf.zeros([count, 2 * units + frames.shape[-1]], tf.float32),
                              weights], axis=1)

        def decode_step(self, frames: Any, lengths: Any, tokens: Any,
                        state: Any) -> tuple[tf.Tensor, tf.Tensor]:
            frames = tf.cast(frames, tf.float32)
            lengths = tf.cast(lengths, tf.int32)
            tokens = tf.cast(tokens, tf.int32)
            if config.decoder == "transformer":
                logits = self._transformer(frames, lengths, tokens, False)[:, -1]
                return tf.nn.log_softmax(logits), tf.convert_to_tensor(state, tf.float32)
            state = tf.cast(state, tf.float32)
            units, width = config.las_units, frames.shape[-1]
            keys = self._keys(frames)
            mask = tf.sequence_mask(lengths, tf.shape(frames)[1])
            h, c, context, weights = self._las_step(
                frames, keys, mask, self.embedding(tokens[:, -1]),
                (state[:, :units], state[:, units:2 * units],
                 state[:, 2 * units:2 * units + width], state[:, 2 * units + width:]))
            logits = self._las_output(tf.concat([h, context], -1), False)
            return (tf.nn.log_softmax(logits),
                    tf.concat([h, c, context, weights], axis=1))

        # -- the Transformer decoder --------------------------------------------------------

        def _transformer(self, frames: tf.Tensor, lengths: tf.Tensor, tokens: tf.Tensor,
                         training: bool) -> tf.Tensor:
            if encoder_width != config.d_model:
                frames = self.memory_projection(frames)
            x = self.embedding(tokens)
            positions = _positions(tf.shape(tokens)[1], config.d_model)
            x = x * tf.cast(math.sqrt(config.d_model), x.dtype) + tf.cast(positions, x.dtype)
            x = self.dropout(x, training=training)
            # Each label attends to the unpadded frames only: [batch, L, frames].
            memory_mask = tf.logical_and(
                tf.sequence_mask(lengths, tf.shape(frames)[1])[:, None, :],
                tf.ones([1, tf.shape(tokens)[1], 1], tf.bool))
            for index in range(config.layers):
                x = getattr(self, f"block{index}")(x, frames, memory_mask, training=training)
            return tf.cast(self.output_layer(self.final_norm(x)), tf.float32)

        # -- the LAS decoder ----------------------------------------------------------------

        def _keys(self, frames: tf.Tensor) -> tf.Tensor:
            """The frames' part of the attention energies, ``V h_j + b``, once an utterance."""
            return tf.cast(self.keys(frames), tf.float32)

        def _las_step(self, frames: tf.Tensor, keys: tf.Tensor, mask: tf.Tensor,
                      embedded: tf.Tensor, state: tuple[tf.Tensor, ...]
                      ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
            """One step: the LSTM reads the token's embedding and the last context, then
            attends with its new output (``s_i``) and the last weights' location features:
            ``e_j = v^T tanh(W s_i + V h_j + U f_j + b)``, a softmax over the unpadded frames.
            Returns the new ``h``, ``c``, context and weights, float32."""
            h, c, context, weights = state
            dtype = self.cell.compute_dtype
            inputs = tf.concat([tf.cast(embedded, tf.float32), context], -1)
            output, (h, c) = self.cell(tf.cast(inputs, dtype),
                                       [tf.cast(h, dtype), tf.cast(c, dtype)])
            h, c = tf.cast(h, tf.float32), tf.cast(c, tf.float32)
            location = self.location_conv(weights[:, :, None])  # [n, frames, filters]
            energies = tf.cast(self.energy(tf.tanh(
                tf.cast(self.query(output), tf.float32)[:, None, :] + keys
                + tf.cast(self.location(location), tf.float32))), tf.float32)[:, :, 0]
            weights = tf.nn.softmax(tf.where(mask, energies, MASKED_ENERGY), axis=-1)
            context = tf.reduce_sum(weights[:, :, None] * frames, axis=1)
            return h, c, context, weights

        def _las_output(self, hidden: tf.Tensor, training: bool) -> tf.Tensor:
            hidden = self.dropout(hidden, training=training)
            return tf.cast(self.output_layer(hidden), tf.float32)

        def _las(self, frames: tf.Tensor, lengths: tf.Tensor, tokens: tf.Tensor,
                 training: bool) -> tf.Tensor:
            units, width = config.las_units, frames.shape[-1]
            keys = self._keys(frames)
            mask = tf.sequence_mask(lengths, tf.shape(frames)[1])
            embedded = self.dropout(self.embedding(tokens), training=training)
            state = self.initial_state(frames, lengths)
            start = (state[:, :units], state[:, units:2 * units],
                     state[:, 2 * units:2 * units + width], state[:, 2 * units + width:])

            def step(carried: tuple[tf.Tensor, ...], token: tf.Tensor) -> tuple[tf.Tensor, ...]:
                return self._las_step(frames, keys, mask, token, carried)

            # Time-major over the tokens; dropout stays outside the loop (one draw a batch).
            h, _, context, _ = tf.scan(step, tf.transpose(tf.cast(embedded, tf.float32),
                                                          [1, 0, 2]), initializer=start)
            hidden = tf.transpose(tf.concat([h, context], -1), [1, 0, 2])
            return self._las_output(hidden, training)

    head = Head()
    # Two frames: Keras warns of a softmax over one.
    frames = tf.zeros([1, 2, encoder_width])
    lengths = tf.fill([1], 2)
    start = tf.fill([1, 1], head.eos)
    # Built under the head's name, as its call would: its weights' paths say whose they are.
    with keras.name_scope(head.name):
        if head.has_ctc:
            head.ctc_output.build((None, None, encoder_width))
        head.decode_step(frames, lengths, start, head.initial_state(frames, lengths))
    head((frames, lengths, start))
    return head


class AttentionObjective(Objective):
    name = "attention"
    description = ("Attention encoder-decoder (Transformer or LAS decoder) trained jointly with "
                   "CTC on the encoder's frames.")
    Config = AttentionConfig
    outputs = ATTENTION_OUTPUTS
    default_decoder = "attention-beam"
    greedy_decoder = "attention-greedy"
    #: The decoder's sizes where each model preset applies: ``full`` is ESPnet's small
    #: conformer recipes' Transformer decoder (256 wide, 4 heads, 6 blocks, 2048 inner);
    #: ``cpu`` matches the conformer's cpu width (128) with 2 blocks, to learn in minutes on
    #: two cores, and scores its dev evaluations with the decoder's greedy search: on two
    #: cores the joint beam search decodes the benchmark's 100 dev utterances in about 46 s,
    #: the greedy one in 10 s, and a 30-minute run evaluates 16 times; ``tiny`` is for tests.
    presets: ClassVar[dict[str, dict[str, str]]] = {
        "full": {"objective.d_model": "256", "objective.heads": "4", "objective.layers": "6",
                 "objective.ff_dim": "2048"},
        "cpu": {"objective.d_model": "128", "objective.heads": "4", "objective.layers": "2",
                "objective.ff_dim": "512", "objective.las_units": "128",
                "objective.attention_dim": "128", "train.dev_decoder": "attention-greedy"},
        "tiny": {"objective.d_model": "16", "objective.heads": "2", "objective.layers": "1",
                 "objective.ff_dim": "32", "objective.las_units": "16",
                 "objective.attention_dim": "16", "objective.location_filters": "4",
                 "objective.location_kernel": "3"},
    }

    def encoder_width(self, config: AttentionConfig, labels: Labels) -> int:
        return config.d_model

    def build(self, config: AttentionConfig, encoder_width: int, labels: Labels) -> Any:
        return build_head(config, encoder_width, labels.num_classes)

    def attention_losses(self, config: AttentionConfig, head: Any, encoder_out: tf.Tensor,
                         out_lengths: tf.Tensor, label_ids: tf.Tensor,
                         label_lengths: tf.Tensor, training: bool = False) -> tf.Tensor:
        """The teacher-forced attention loss ``[batch]`` alone: the label-smoothed
        cross-entropy of the labels and the end symbol, summed over each utterance."""
        import tensorflow as tf

        label_ids = tf.cast(label_ids, tf.int32)
        label_lengths = tf.cast(label_lengths, tf.int32)
        eos = head.eos
        count = tf.shape(label_ids)[0]
        # Targets: the labels, then the end symbol (and it again as padding, not scored).
        padded = tf.pad(label_ids, [[0, 0], [0, 1]])
        positions = tf.range(tf.shape(padded)[1])[None, :]
        targets = tf.where(positions < label_lengths[:, None], padded, eos)
        scored = positions <= label_lengths[:, None]
        # Inputs: the start symbol, then the targets but the last.
        tokens = tf.concat([tf.fill([count, 1], eos), targets[:, :-1]], axis=1)
        logits = head.teacher_forced(encoder_out, out_lengths, tokens, training=training)
        log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32))
        nll = -tf.gather(log_probs, targets, batch_dims=2)
        smoothing = config.label_smoothing
        if smoothing:
            nll = (1.0 - smoothing) * nll - smoothing * tf.reduce_mean(log_probs, axis=-1)
        return tf.reduce_sum(tf.where(scored, nll, 0.0), axis=1)

    def losses(self, config: AttentionConfig, head: Any, encoder_out: tf.Tensor,
               out_lengths: tf.Tensor, label_ids: tf.Tensor, label_lengths: tf.Tensor,
               training: bool = False) -> tuple[tf.Tensor, tf.Tensor]:
        import tensorflow as tf

        out_lengths = tf.cast(out_lengths, tf.int32)
        label_ids = tf.cast(label_ids, tf.int32)
        label_lengths = tf.cast(label_lengths, tf.int32)
        frames = tf.cast(encoder_out, tf.float32)
        weight = config.ctc_weight
        # Computed even at ctc_weight=1 (then weighted 0): the head's every variable keeps a
        # gradient, zero, which optimisers and the engine's gradient checks expect.
        attention = self.attention_losses(config, head, frames, out_lengths, label_ids,
                                          label_lengths, training)
        feasible = out_lengths >= 1
        losses = (1.0 - weight) * attention
        if weight:
            ctc, aligned = ctc_losses(label_ids, label_lengths, head.ctc_logits(frames),
                                      out_lengths)
            losses += weight * tf.where(aligned, ctc, 0.0)
            if weight == 1:
                feasible = aligned
        return tf.where(feasible, losses, 0.0), feasible

    def frames_needed(self, config: AttentionConfig, label_ids: Sequence[int]) -> int:
        if config.ctc_weight == 1:
            return ctc_frames_needed(label_ids)
        return 1

    def decoder_inputs(self, config: AttentionConfig, head: Any,
                       encoder_out: np.ndarray) -> AttentionOutputs:
        return AttentionOutputs(encoder_out, head)


@hookimpl
def register_objectives(register: Register) -> None:
    register(AttentionObjective())
