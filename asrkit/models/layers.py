"""Layers the bundled models share.

The recurrent layers here have two implementations over one set of weights:

- ``loop`` exists for speed on a CPU: Keras 3's LSTM there multiplies the input by its weights
  one time step at a time on small matrices. Deep Speech's recurrent layer reads a whole
  utterance at once, so the input projection of every frame is one large matrix multiply done
  *before* the recurrence, and the loop multiplies only the recurrent weights
  (``benchmarks/bench_train.py`` measures it against Keras' own layers).
- ``keras`` runs each direction through Keras' own ``LSTM``/``GRU`` in the configuration that
  cuDNN accepts (tanh and sigmoid, no recurrent dropout, not unrolled, with biases,
  ``reset_after`` for the GRU; right-padded masks): on a GPU that is cuDNN's fused kernel.

``auto`` (:func:`choose_rnn_impl`) takes ``keras`` when the model is built on towers that are
all GPUs (training) and ``loop`` otherwise. Both read the same variables, so a checkpoint moves
between them unchanged (``benchmarks/bench_rnn_paths.py`` measures the two).

The forward-only layers (:class:`HoistedGRU`, :class:`HoistedLSTM`: the streaming models') have
both implementations too, and, called with a ``state``, carry it from one chunk of a stream to
the next (:class:`HoistedForward`; always the loop: a stream is stepped at inference, where
``auto`` gives the loop anyway, and the loop's state is explicit). :class:`LookaheadConv` is
Deep Speech 2's row convolution, the few frames of future context a forward-only model is
allowed.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import keras
import tensorflow as tf

#: The recurrent implementations a model's ``rnn_impl`` setting chooses from.
RNN_IMPLS = ("auto", "loop", "keras")


def choose_rnn_impl(setting: str, devices: Sequence[str]) -> str:
    """``loop`` or ``keras`` for ``setting`` (one of :data:`RNN_IMPLS`) when the model runs on
    ``devices`` (TensorFlow device names of the towers): ``auto`` is ``keras`` (cuDNN) when
    there are towers and all are GPUs, else ``loop``."""
    if setting not in RNN_IMPLS:
        raise ValueError(f"rnn_impl {setting!r} is not one of {', '.join(RNN_IMPLS)}")
    if setting != "auto":
        return setting
    gpus = [d for d in devices if ":GPU:" in d.upper() or d.upper().startswith("GPU")]
    return "keras" if devices and len(gpus) == len(devices) else "loop"


def tower_devices() -> list[str]:
    """The towers of the distribution strategy in scope (``asrkit train`` builds its model in
    it); none without one. Evaluation, transcription and export build without a strategy, so
    ``auto`` gives them the loop: a graph traced with cuDNN's op runs only on a GPU, and an
    exported model must run anywhere."""
    if tf.distribute.has_strategy():
        return list(tf.distribute.get_strategy().extended.worker_devices)
    return []


def clipped_relu(x: tf.Tensor, clip: float = 20.0) -> tf.Tensor:
    """Deep Speech's activation: ``min(max(0, x), clip)``."""
    return tf.minimum(tf.nn.relu(x), clip)


class HoistedBiRNN(keras.layers.Layer):
    """What the bidirectional recurrent layers share: per-direction weights ``kernel``
    ``[2, features, gates * units]`` and ``recurrent_kernel`` ``[2, units, gates * units]`` in
    Keras' layout, each direction drawn independently; the input projection of every frame in
    one product before the time loop, which then multiplies only the recurrent weights.

    The backward direction reads each utterance from its own last frame
    (``tf.reverse_sequence``), so padding never reaches its state. Outputs are the two directions
    concatenated, ``[batch, time, 2 units]``, zero past each utterance's length. The two
    directions run as two independent loops, which TensorFlow runs side by side (one loop over
    both directions, as one batched product a step, measured 10 % slower on CPU).

    ``impl="keras"`` runs each direction through Keras' cuDNN-eligible layer instead of the
    loop, on the same variables (the module's docstring says when each is used).
    """

    #: Gates per unit, and bias rows (input only, or input and recurrent).
    GATES: int
    BIASES: int
    #: State tensors of one direction (the GRU's h; the LSTM's h and c).
    STATES: int
    #: Directions (the forward-only layers have one), the weights' first axis.
    DIRECTIONS = 2

    def __init__(self, units: int, impl: str = "loop", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if impl not in ("loop", "keras"):
            raise ValueError(f"impl {impl!r} is not 'loop' or 'keras'")
        self.units = units
        self.impl = impl
        # Held outside Keras' and TensorFlow's tracking: they own no weights, so checkpoints
        # and the model's analysis see the same layer on both paths.
        self._keras = _Untracked([self._keras_layer() for _ in range(self.DIRECTIONS)]
                                 if impl == "keras" else [])

    def build(self, input_shape: Any) -> None:
        features, gates = int(input_shape[-1]), self.GATES * self.units
        directions = self.DIRECTIONS
        self.kernel = self.add_weight(
            name="kernel", shape=(directions, features, gates),
            initializer=per_direction(keras.initializers.GlorotUniform, (features, gates),
                                      directions))
        self.recurrent_kernel = self.add_weight(
            name="recurrent_kernel", shape=(directions, self.units, gates),
            initializer=per_direction(keras.initializers.Orthogonal, (self.units, gates),
                                      directions))
        self.bias = self.add_weight(name="bias", shape=(directions, self.BIASES, gates),
                                    initializer="zeros")

    def call(self, inputs: tf.Tensor, lengths: tf.Tensor) -> tf.Tensor:
        frames = tf.shape(inputs)[1]
        run = self._keras_direction if self.impl == "keras" else self._direction
        backward = tf.reverse_sequence(inputs, lengths, seq_axis=1, batch_axis=0)
        out = tf.concat([
            run(inputs, 0, lengths),
            tf.reverse_sequence(run(backward, 1, lengths), lengths, seq_axis=1, batch_axis=0),
        ], axis=-1)
        mask = tf.sequence_mask(lengths, frames, dtype=out.dtype)
        return out * mask[:, :, None]

    def _keras_direction(self, inputs: tf.Tensor, index: int, lengths: tf.Tensor) -> tf.Tensor:
        """One direction's outputs through Keras' layer: a right-padded mask (what cuDNN
        accepts; an empty utterance counts one frame, since cuDNN refuses a fully masked one,
        and its outputs are zeroed by :meth:`call` anyway)."""
        layer = self._keras[index]
        layer.cell.bound = self._bound_weights(index)
        mask = tf.sequence_mask(tf.maximum(lengths, 1), tf.shape(inputs)[1])
        return layer(inputs, mask=mask)

    def _bound_weights(self, index: int) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """Direction ``index``'s kernel, recurrent kernel and bias in Keras' layout."""
        raise NotImplementedError

    def _keras_layer(self) -> keras.layers.RNN:
        """A Keras ``LSTM``/``GRU`` for one direction, whose cell reads :meth:`_bound_weights`."""
        raise NotImplementedError

    def _direction(self, inputs: tf.Tensor, index: int,
                   lengths: tf.Tensor | None = None) -> tf.Tensor:
        """One direction's outputs ``[batch, time, units]``."""
        outputs = self._scan(self._project(inputs, index), index,
                             self._zero_state(tf.shape(inputs)[0]))[0]
        return tf.cast(tf.transpose(outputs, [1, 0, 2]), inputs.dtype)

    def _project(self, inputs: tf.Tensor, index: int) -> tf.Tensor:
        """Direction ``index``'s input projection of every frame, time-major, float32."""
        batch, frames, features = tf.shape(inputs)[0], tf.shape(inputs)[1], tf.shape(inputs)[2]
        projected = tf.matmul(tf.reshape(inputs, [-1, features]), self.kernel[index])
        projected = tf.reshape(projected + self.bias[index][0],
                               [batch, frames, self.GATES * self.units])
        # The state is carried in float32 whatever the precision: under mixed precision only the
        # products are 16-bit; an LSTM's cell state summed in bfloat16 over hundreds of frames
        # would lose what it holds.
        return tf.transpose(tf.cast(projected, tf.float32), [1, 0, 2])

    def _zero_state(self, batch: tf.Tensor) -> tuple[tf.Tensor, ...]:
        return tuple(tf.zeros([batch, self.units], tf.float32) for _ in range(self.STATES))

    def _scan(self, projected: tf.Tensor, index: int, state: tuple[tf.Tensor, ...],
              valid: tf.Tensor | None = None) -> tuple[tf.Tensor, ...]:
        """The recurrence over time-major projected inputs from ``state``: the state after each
        frame, ``[time, batch, units]`` each, the output first. Where ``valid`` (``[time,
        batch]``) is False, the state passes through unchanged."""
        cell = self._cell(index)
        if valid is None:
            states = tf.scan(cell, projected, initializer=state)
        else:
            def masked(carry: tuple[tf.Tensor, ...],
                       elems: tuple[tf.Tensor, tf.Tensor]) -> tuple[tf.Tensor, ...]:
                z, keep = elems
                new = cell(carry, z)
                return tuple(tf.where(keep[:, None], n, o) for n, o in zip(new, carry,
                                                                          strict=True))

            states = tf.scan(masked, (projected, valid), initializer=state)
        return states

    @staticmethod
    def _product(state: tf.Tensor, weights: tf.Tensor) -> tf.Tensor:
        """``state @ weights`` in the weights' (compute) dtype, as float32."""
        return tf.cast(tf.matmul(tf.cast(state, weights.dtype), weights), tf.float32)

    def _cell(self, index: int) -> Callable[[tuple[tf.Tensor, ...], tf.Tensor],
                                            tuple[tf.Tensor, ...]]:
        """Direction ``index``'s step: the state (float32, the output first) and a frame's
        projected input to the next state."""
        raise NotImplementedError


class HoistedBiLSTM(HoistedBiRNN):
    """A bidirectional LSTM (:class:`HoistedBiRNN`). Gates are ordered i, f, g, o as in Keras;
    ``forget_bias`` is added to the forget gate (the notebook's
    ``BasicLSTMCell(forget_bias=1.0)``)."""

    GATES, BIASES, STATES = 4, 1, 2

    def __init__(self, units: int, forget_bias: float = 1.0, impl: str = "loop",
                 **kwargs: Any) -> None:
        self.forget_bias = forget_bias
        super().__init__(units, impl, **kwargs)

    def _keras_layer(self) -> keras.layers.RNN:
        layer = keras.layers.LSTM(self.units, return_sequences=True)
        layer.cell = _bind(keras.layers.LSTMCell)(self.units)
        return layer

    def _bound_weights(self, index: int) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        units = self.units
        forget = tf.concat([tf.zeros([units]), tf.fill([units], float(self.forget_bias)),
                            tf.zeros([2 * units])], axis=0)  # the constant in Keras' one bias
        bias = self.bias[index][0]
        return self.kernel[index], self.recurrent_kernel[index], bias + tf.cast(forget, bias.dtype)

    def _cell(self, index: int) -> Callable[[tuple[tf.Tensor, ...], tf.Tensor],
                                            tuple[tf.Tensor, ...]]:
        recurrent, forget_bias = self.recurrent_kernel[index], self.forget_bias

        def step(carry: tuple[tf.Tensor, ...], z: tf.Tensor) -> tuple[tf.Tensor, ...]:
            h, c = carry
            gates = z + self._product(h, recurrent)
            i, f, g, o = tf.split(gates, 4, axis=-1)
            c = tf.sigmoid(f + forget_bias) * c + tf.sigmoid(i) * tf.tanh(g)
            return tf.sigmoid(o) * tf.tanh(c), c

        return step


class HoistedBiGRU(HoistedBiRNN):
    """A bidirectional GRU (:class:`HoistedBiRNN`). Gates are ordered z, r, h and the reset
    gate is applied after the recurrent product (``reset_after``), with input and recurrent
    biases, all as in Keras' ``GRU`` (a test compares the two)."""

    GATES, BIASES, STATES = 3, 2, 1

    def _keras_layer(self) -> keras.layers.RNN:
        layer = keras.layers.GRU(self.units, return_sequences=True)  # reset_after=True
        layer.cell = _bind(keras.layers.GRUCell)(self.units)
        return layer

    def _bound_weights(self, index: int) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        return self.kernel[index], self.recurrent_kernel[index], self.bias[index]

    def _cell(self, index: int) -> Callable[[tuple[tf.Tensor, ...], tf.Tensor],
                                            tuple[tf.Tensor, ...]]:
        recurrent, recurrent_bias = self.recurrent_kernel[index], self.bias[index][1]
        units = self.units

        recurrent_bias = tf.cast(recurrent_bias, tf.float32)

        def step(carry: tuple[tf.Tensor, ...], x: tf.Tensor) -> tuple[tf.Tensor, ...]:
            (h,) = carry
            inner = self._product(h, recurrent) + recurrent_bias
            z = tf.sigmoid(x[:, :units] + inner[:, :units])
            r = tf.sigmoid(x[:, units:2 * units] + inner[:, units:2 * units])
            candidate = tf.tanh(x[:, 2 * units:] + r * inner[:, 2 * units:])
            return (z * h + (1 - z) * candidate,)

        return step


class HoistedForward(HoistedBiRNN):
    """A forward-only recurrent layer (:class:`HoistedBiRNN` with one direction: weights
    ``[1, ...]``), the recurrence of a streaming model. Outputs ``[batch, time, units]``, zero
    past each utterance's length; on the ``keras`` path, Keras' cuDNN-eligible layer.

    Called with ``state`` (a list of float32 ``[batch, units]`` tensors, from
    :meth:`initial_state` or the previous call) and ``valid`` (``[batch, time]`` bools) instead
    of ``lengths``, it continues a stream: returns the outputs (zero where not valid) and the
    state after the chunk, which frames not valid leave unchanged. That path is always the loop
    (on the same weights); a chunk's outputs then equal the whole utterance's."""

    DIRECTIONS = 1

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Keras would cast the float32 state to a mixed precision's 16 bits; the inputs are
        # cast in call.
        self._convert_input_args = False

    def call(self, inputs: tf.Tensor, lengths: tf.Tensor | None = None,
             state: list[tf.Tensor] | None = None,
             valid: tf.Tensor | None = None) -> Any:
        inputs = tf.cast(inputs, self.compute_dtype)
        if state is not None:
            return self._continue(inputs, state, valid)
        run = self._keras_direction if self.impl == "keras" else self._direction
        out = run(inputs, 0, lengths)
        mask = tf.sequence_mask(lengths, tf.shape(inputs)[1], dtype=out.dtype)
        return out * mask[:, :, None]

    def initial_state(self, batch_size: int) -> list[tf.Tensor]:
        """A stream's state before its first frame: zeros."""
        return list(self._zero_state(batch_size))

    def _continue(self, inputs: tf.Tensor, state: list[tf.Tensor],
                  valid: tf.Tensor) -> tuple[tf.Tensor, list[tf.Tensor]]:
        state = tuple(tf.cast(s, tf.float32) for s in state)
        states = self._scan(self._project(inputs, 0), 0, state, tf.transpose(valid))
        outputs = tf.cast(tf.transpose(states[0], [1, 0, 2]), inputs.dtype)
        return outputs * tf.cast(valid, outputs.dtype)[:, :, None], [s[-1] for s in states]


class HoistedGRU(HoistedForward, HoistedBiGRU):
    """A forward-only GRU (:class:`HoistedForward`; the cell of :class:`HoistedBiGRU`)."""


class HoistedLSTM(HoistedForward, HoistedBiLSTM):
    """A forward-only LSTM (:class:`HoistedForward`; the cell of :class:`HoistedBiLSTM`)."""


class LookaheadConv(keras.layers.Layer):
    """Deep Speech 2's lookahead ("row") convolution (Amodei et al. 2015, section 3.7): each
    feature of frame ``t`` is a weighted sum of the same feature over frames ``t .. t +
    frames``, ``y[t] = sum_j w[j] * x[t + j]``, with weights ``kernel`` ``[frames + 1,
    width]`` (no bias). Placed over a forward-only recurrence, it gives every output
    ``frames`` frames of future context at the cost of a ``frames``-frame delay, where a
    bidirectional layer would need the whole utterance.

    The inputs must be zero past each utterance's length (what the recurrent layers give): the
    sum reads them as the utterance's right padding. The kernel starts as the identity (weight
    1 on the frame itself, 0 on the future), so training starts from the plain forward model.

    Called with ``state`` (the last ``frames`` input frames of the stream, float32
    ``[batch, frames, width]``), it convolves those and the chunk: the outputs are those of the
    chunk's frames moved ``frames`` back (the first ``frames`` of a stream are not frames of
    the utterance), and the state is the last ``frames`` frames."""

    def __init__(self, frames: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if frames < 1:
            raise ValueError(f"a lookahead convolution needs frames >= 1, not {frames}")
        self.frames = frames
        self._convert_input_args = False  # the state stays float32; the inputs cast in call

    def build(self, input_shape: Any) -> None:
        self.width = int(input_shape[-1])
        frames = self.frames

        def identity(shape: Any, dtype: Any = None) -> tf.Tensor:
            return tf.one_hot(tf.zeros([shape[1]], tf.int32), shape[0], axis=0,
                              dtype=dtype or tf.float32)

        self.kernel = self.add_weight(name="kernel", shape=(frames + 1, self.width),
                                      initializer=identity)

    def call(self, inputs: tf.Tensor, state: list[tf.Tensor] | None = None) -> Any:
        inputs = tf.cast(inputs, self.compute_dtype)
        if state is None:
            return self._convolve(tf.pad(inputs, [[0, 0], [0, self.frames], [0, 0]]))
        window = tf.concat([tf.cast(state[0], inputs.dtype), inputs], axis=1)
        return self._convolve(window), [tf.cast(window[:, -self.frames:], tf.float32)]

    def initial_state(self, batch_size: int) -> list[tf.Tensor]:
        return [tf.zeros([batch_size, self.frames, self.width], tf.float32)]

    def _convolve(self, window: tf.Tensor) -> tf.Tensor:
        """The valid convolution of ``window`` ``[batch, time + frames, width]``: ``time``
        frames."""
        frames = tf.shape(window)[1] - self.frames
        kernel = tf.cast(self.kernel, window.dtype)
        out = window[:, :frames] * kernel[0]
        for j in range(1, self.frames + 1):
            out = out + window[:, j:j + frames] * kernel[j]
        return out


class _Untracked:
    """A sequence that neither Keras nor TensorFlow tracks (they follow lists and tuples)."""

    def __init__(self, items: list[keras.layers.RNN]) -> None:
        self.items = items

    def __getitem__(self, index: int) -> keras.layers.RNN:
        return self.items[index]


def _bind(cell_class: type) -> type:
    """``cell_class`` (Keras' ``LSTMCell`` or ``GRUCell``) with no weights of its own: its
    ``kernel``, ``recurrent_kernel`` and ``bias`` are the tensors its owner sets in ``bound``
    before each call, so Keras' layer (its cuDNN kernel included) runs on the owner's
    variables."""

    class Bound(cell_class):  # type: ignore[misc, valid-type]
        bound: tuple[tf.Tensor, tf.Tensor, tf.Tensor]

        def build(self, input_shape: Any) -> None:
            self.built = True

        kernel = property(lambda self: self.bound[0])
        recurrent_kernel = property(lambda self: self.bound[1])
        bias = property(lambda self: self.bound[2])

    Bound.__name__ = f"Bound{cell_class.__name__}"
    return Bound


def per_direction(initializer: type[keras.initializers.Initializer],
                  shape: tuple[int, int], directions: int = 2) -> Callable[..., tf.Tensor]:
    """An initializer of ``[directions, *shape]`` that draws each direction independently: a
    Keras 3 initializer without a seed returns the same values on every call, so one instance
    used twice would start both directions identical."""

    def initialize(_shape: Any, dtype: Any = None) -> tf.Tensor:
        return tf.stack([initializer(seed=random.randrange(2**31))(shape, dtype)
                         for _ in range(directions)])

    return initialize


def normal_init(stddev: float) -> keras.initializers.Initializer:
    return keras.initializers.RandomNormal(stddev=stddev)
