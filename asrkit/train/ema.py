"""An exponential moving average (EMA) of the weights, for evaluation and export.

With ``ema_decay = d`` > 0, shadow weights follow the trainable weights after every update::

    shadow <- d_n * shadow + (1 - d_n) * weights,    d_n = min(d, (1 + n) / (10 + n))

starting from the weights the run starts with, ``n`` counting the updates since (1, 2, ...). The
warm-up ``(1 + n) / (10 + n)`` is that of TensorFlow's ``ExponentialMovingAverage`` with
``num_updates``. Without it, the shadow of a run's first thousand steps at ``d = 0.999`` still
held a third of the random initial weights: a dev CER of 97 % at step 1,027, where a run of the
same seed without the average scored 39 % at step 1,098. With it, the average spans about the
last tenth of the updates until ``n`` reaches ``(10 d - 1) / (1 - d)`` (8,991 at 0.999), then
about ``1 / (1 - d)`` of them. Only the raw weights train; the shadow is what dev evaluations
score, what the best checkpoint is chosen by, and what
``asrkit evaluate``, ``transcribe`` and ``export`` load (:func:`load_averaged`). Non-trainable
weights (batch-norm statistics) are moving averages already and are used as they are.

The shadow is saved in every checkpoint (as ``ema``), with ``ema_from_step`` in the loop state
saying that it is there; a run resumed with ``ema_decay`` newly set starts its shadow from the
weights it resumes with.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from asrkit.train.checkpoints import trainable_variables

if TYPE_CHECKING:
    import keras
    import tensorflow as tf


def shadow_of(model: keras.Model, head: keras.Model | None = None) -> tf.Module:
    """A trackable holding one float variable per trainable weight of ``model`` and then of
    the objective's ``head`` (:func:`asrkit.train.checkpoints.trainable_variables`), initialised
    to it (created in the current ``tf.distribute`` scope): the checkpoint's ``ema``."""
    import tensorflow as tf

    holder = tf.Module()
    holder.weights = [tf.Variable(tf.identity(v.value), trainable=False)
                      for v in trainable_variables(model, head)]
    return holder


class WeightAverage:
    """The shadow weights of ``model`` (and of the objective's ``head``) and the operations on
    them."""

    def __init__(self, strategy: tf.distribute.Strategy, model: keras.Model, decay: float,
                 head: keras.Model | None = None) -> None:
        import tensorflow as tf

        self.decay = decay
        self.variables = trainable_variables(model, head)
        with strategy.scope():
            self.trackable = shadow_of(model, head)
        self.shadow = self.trackable.weights

        @tf.function
        def update(rate: tf.Tensor) -> None:
            for shadow, weight in zip(self.shadow, self.variables, strict=True):
                shadow.assign(rate * shadow + (1.0 - rate) * weight.value)

        self._update = update

    def decay_after(self, updates: int) -> float:
        """The decay of the ``updates``-th update since the average started (1 for the
        first): the warm-up's ``(1 + n) / (10 + n)`` until it reaches ``decay``."""
        return min(self.decay, (1.0 + updates) / (10.0 + updates))

    def update(self, updates: int) -> None:
        """The ``updates``-th update of the weights since the average started: move the
        shadow towards them."""
        import tensorflow as tf

        self._update(tf.constant(self.decay_after(updates), tf.float32))

    def reset(self) -> None:
        """Start the average at the current weights."""
        for shadow, weight in zip(self.shadow, self.variables, strict=True):
            shadow.assign(weight.value)

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        """The model holds the shadow weights inside, its own weights again after."""
        raw = [weight.value.read_value() for weight in self.variables]
        for shadow, weight in zip(self.shadow, self.variables, strict=True):
            weight.assign(shadow.read_value())
        try:
            yield
        finally:
            for value, weight in zip(raw, self.variables, strict=True):
                weight.assign(value)


def load_averaged(model: keras.Model, trackable: tf.Module, state: dict[str, Any],
                  head: keras.Model | None = None) -> bool:
    """Put the shadow weights read into ``trackable`` (:func:`shadow_of`) into ``model`` (and
    ``head``) when the checkpoint whose ``state`` this is holds them; whether it did."""
    if int(state.get("ema_from_step", -1)) < 0:
        return False
    for shadow, weight in zip(trackable.weights, trainable_variables(model, head), strict=True):
        weight.assign(shadow.read_value())
    return True
