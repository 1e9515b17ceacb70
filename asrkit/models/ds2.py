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

``streaming=true`` builds the model Deep Speech 2 deployed (its section 3.7 and the deployment
section): a bidirectional layer needs the whole utterance before its first output, so the
served model's recurrent layers were forward-only, and what they lose of the future was given
back by a *lookahead* (row) convolution after the last of them, each output reading the
``lookahead`` frames after it. Here: forward-only GRUs (``gru<i>``), both convolutions causal
(their time padding all before the frame: output ``i`` reads input frames up to ``stride *
i``, none after), and :class:`~asrkit.models.layers.LookaheadConv` of ``lookahead`` frames
(``lookahead``; 0 for none) before the logits. The model then runs chunk by chunk on a stream
(:class:`asrkit.types.StreamingModel`): each step reads ``chunk_frames * time_stride`` feature
frames and carries each convolution's last ``kernel - 1`` input frames, each GRU's state and
the lookahead convolution's pending frames; its outputs lag ``lookahead`` frames, and equal the
whole-utterance call's, which is what training sees (a forward recurrence does not depend on
the chunk, so any ``chunk_frames`` decodes the same). Batch normalisation uses its moving
statistics in a stream, as at any inference. The streaming model's weights are its own
(forward-only GRUs): it does not load a bidirectional checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from asrkit import hookimpl
from asrkit.core.settings import setting, validate
from asrkit.models.presets import LOGMEL_FULL
from asrkit.types import AcousticModel, ModelSpec, StreamShape

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
    #: Deep Speech 2's deployable model: forward-only GRUs (``gru<i>``, instead of the
    #: bidirectional ``bigru<i>``), causal convolutions (all their time padding before the
    #: frame) and a lookahead convolution of ``lookahead`` frames after the last GRU: it runs
    #: chunk by chunk on a stream (``asrkit.types.StreamingModel``).
    streaming: bool = False
    #: A streaming model's future context, in output frames (``time_stride`` feature frames
    #: each), of the lookahead convolution after its last GRU; the stream's outputs lag that
    #: much behind its input. 4 = 80 ms at the default stride of 2 (160 ms at the cpu preset's
    #: 4): about a phone, so the model hears the end of a character before it commits to it,
    #: at a fraction of Deep Speech 2's ~200 ms. 0: none (a purely causal model). Ignored
    #: without ``streaming``.
    lookahead: int = setting(4, min=0, max=100)
    #: A streaming model's output frames a step computes (16 = 320 ms at stride 2): only how
    #: often a stream steps, since the model's outputs do not depend on it. 0: not stepped
    #: (the whole utterance at once).
    chunk_frames: int = setting(16, min=0, max=1000)

    def __post_init__(self) -> None:
        validate(self)


#: Kernels (time, frequency) of the two convolutions; both stride frequency by 2.
CONV1_KERNEL = (11, 41)
CONV2_KERNEL = (11, 21)


def conv_padding(kernel: tuple[int, int], bins: int,
                 causal: bool = False) -> list[list[int]]:
    """``tf.pad`` paddings of a convolution's input ``[batch, time, bins, channels]``.

    Time: ``kernel // 2`` frames each side, whatever the batch's length, so output frame ``i``
    reads input frames ``stride * i - k//2 .. stride * i + k//2`` and a valid conv gives
    ``ceil(time / stride)`` frames. (Keras' ``"same"`` padding puts its extra zero before or
    after depending on the padded batch's length, so an utterance's logits depended on what it
    was batched with.) Frequency: what ``"same"`` pads for ``bins`` bins at stride 2, which
    is static, so the frequency axis and the weights are those of earlier versions.

    ``causal`` (the streaming model): time padded by ``kernel - 1`` frames before and none
    after, so output frame ``i`` reads input frames ``stride * i - (k-1) .. stride * i``, none
    from the future; still ``ceil(time / stride)`` frames."""
    frames, freq = kernel
    total = max((-(-bins // 2) - 1) * 2 + freq - bins, 0)
    time = [frames - 1, 0] if causal else [frames // 2, frames // 2]
    return [[0, 0], time, [total // 2, total - total // 2], [0, 0]]


def conv_strides(config: DS2Config) -> tuple[int, int]:
    """The two convolutions' time strides, whose product is ``time_stride``."""
    first = 2 if config.time_stride in (2, 4) else config.time_stride
    return first, config.time_stride // first


class DS2(ModelSpec):
    name = "ds2"
    description = "Deep Speech 2-style convolutions + bidirectional GRUs over log-mel features."
    Config = DS2Config
    features = "logmel"
    #: Pretraining by growth adds GRU layers (``bigru<i>``; ``gru<i>`` streaming).
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

    def streaming(self, config: DS2Config) -> StreamShape | None:
        """A streaming ds2 steps by ``chunk_frames`` output frames; its outputs lag by the
        lookahead convolution's frames. Any chunk size gives the same outputs (``trained_chunks``
        is None): the recurrence and the causal convolutions carry their state across chunks."""
        if not config.streaming or not config.chunk_frames:
            return None
        return StreamShape(input_frames=config.chunk_frames * config.time_stride,
                           delay=config.lookahead)

    def build(self, config: DS2Config, num_features: int, num_classes: int) -> AcousticModel:
        return build_ds2(config, num_features, num_classes)


def build_ds2(config: DS2Config, num_features: int, num_classes: int) -> AcousticModel:
    import keras
    import tensorflow as tf

    from asrkit.models.dropout import Dropout
    from asrkit.models.layers import (
        HoistedBiGRU,
        HoistedGRU,
        LookaheadConv,
        choose_rnn_impl,
        clipped_relu,
        tower_devices,
    )

    strides = conv_strides(config)
    kernels = (CONV1_KERNEL, CONV2_KERNEL)
    streaming = config.streaming

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
            if streaming:
                self.rnns = [HoistedGRU(config.rnn_units, impl=self.rnn_impl, name=f"gru{i}")
                             for i in range(config.rnn_layers)]
            else:
                self.rnns = [HoistedBiGRU(config.rnn_units, impl=self.rnn_impl,
                                          name=f"bigru{i}") for i in range(config.rnn_layers)]
            for i, rnn in enumerate(self.rnns):  # attributes, so checkpoints track them
                setattr(self, f"rnn{i}", rnn)
            self.dropout = Dropout(config.dropout)
            if streaming and config.lookahead:
                self.lookahead = LookaheadConv(config.lookahead, name="lookahead")
            self.logits = keras.layers.Dense(num_classes, name="logits")
            # Frequency bins of each convolution's input (each halves them), for the stream's
            # caches.
            self.conv_bins = (num_features, -(-num_features // 2))

        def _convolve(self, x: tf.Tensor, lengths: tf.Tensor, index: int,
                      training: bool) -> tuple[tf.Tensor, tf.Tensor]:
            """Convolution ``index`` (with its normalisation and activation) of ``x``, already
            padded in time; outputs past the subsampled ``lengths`` zeroed."""
            conv, norm = ((self.conv1, self.bn1), (self.conv2, self.bn2))[index]
            pad = conv_padding(kernels[index], int(x.shape[2]))
            x = conv(tf.pad(x, [[0, 0], [0, 0], pad[2], [0, 0]]))
            stride = strides[index]
            lengths = (lengths + stride - 1) // stride
            valid = tf.sequence_mask(lengths, tf.shape(x)[1])
            # Batch statistics of the valid frames only; padding zeroed after.
            valid = tf.broadcast_to(tf.expand_dims(valid, -1), tf.shape(x)[:3])
            x = clipped_relu(norm(x, training=training, mask=valid), config.relu_clip)
            return x * tf.expand_dims(tf.cast(valid, x.dtype), -1), lengths

        def _masked_input(self, features: tf.Tensor, lengths: tf.Tensor) -> tf.Tensor:
            # expand_dims, not [..., None]: TFLite's built-in StridedSlice has no new axes.
            mask = tf.sequence_mask(lengths, tf.shape(features)[1], features.dtype)
            return tf.expand_dims(features * tf.expand_dims(mask, -1), -1)

        @staticmethod
        def _flatten(x: tf.Tensor) -> tf.Tensor:
            shape = tf.shape(x)
            return tf.reshape(x, [shape[0], shape[1], x.shape[2] * x.shape[3]])

        def call(self, inputs: tuple[tf.Tensor, tf.Tensor],
                 training: bool = False) -> tf.Tensor:
            features, lengths = inputs
            x = self._masked_input(features, lengths)
            for index, kernel in enumerate(kernels):
                time = conv_padding(kernel, int(x.shape[2]), causal=streaming)[1]
                x, lengths = self._convolve(tf.pad(x, [[0, 0], time, [0, 0], [0, 0]]),
                                            lengths, index, training)
            x = self._flatten(x)
            for rnn in self.rnns:
                x = self.dropout(rnn(x, lengths), training=training)
            if streaming and config.lookahead:
                x = self.lookahead(x)
            return self.logits(x)

        def initial_state(self, batch_size: int) -> list[tf.Tensor]:
            """A stream's state before its first frame, all zeros: each convolution's last
            ``kernel - 1`` input frames (its causal padding), each GRU's state, and the
            lookahead convolution's last ``lookahead`` input frames."""
            if not streaming:
                raise ValueError("only a streaming ds2 (model.streaming=true) steps")
            channels = (1, config.conv_channels)
            state = [tf.zeros([batch_size, kernel[0] - 1, bins, c], tf.float32)
                     for kernel, bins, c in zip(kernels, self.conv_bins, channels, strict=True)]
            for rnn in self.rnns:
                state += rnn.initial_state(batch_size)
            if config.lookahead:
                state += self.lookahead.initial_state(batch_size)
            return state

        def step(self, features: tf.Tensor, lengths: tf.Tensor,
                 state: list[tf.Tensor]) -> tuple[tf.Tensor, list[tf.Tensor]]:
            """The outputs ``[B, C, classes]`` of the next ``C * time_stride`` feature frames
            ``[B, C * time_stride, F]`` of each stream (``lengths`` valid), ``lookahead``
            frames late, and the new state (:class:`asrkit.types.StreamingModel`). A chunk
            starts on a multiple of the stride, so each convolution's cache of its last input
            frames keeps the whole-utterance call's stride phase."""
            state = list(state)
            new_state = []
            x = self._masked_input(features, lengths)
            for index, kernel in enumerate(kernels):
                window = tf.concat([tf.cast(state.pop(0), x.dtype), x], axis=1)
                new_state.append(tf.cast(window[:, -(kernel[0] - 1):],
                                         tf.float32))
                x, lengths = self._convolve(window, lengths, index, training=False)
            x = self._flatten(x)
            valid = tf.sequence_mask(lengths, tf.shape(x)[1])
            for rnn in self.rnns:
                carried = [state.pop(0) for _ in range(rnn.STATES)]
                x, carried = rnn(x, state=carried, valid=valid)
                new_state += carried
            if config.lookahead:
                x, pending = self.lookahead(x, state=state)
                new_state += pending
            return self.logits(x), new_state

    model = DeepSpeech2()
    model((tf.zeros([1, 8, num_features]), tf.constant([8])))
    return model


@hookimpl
def register_models(register: Register) -> None:
    register(DS2())
