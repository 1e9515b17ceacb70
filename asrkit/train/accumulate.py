"""Gradient accumulation: ``accumulate_steps`` micro-batches make one update.

Each micro-batch adds the gradient of its *summed* loss (the run's objective's), and its
utterance count, to
accumulators; the update divides the sums by the total count of utterances (of every
micro-batch on every replica) and applies them once. That is the gradient of the mean loss over
all those utterances, exactly what one batch K times larger gives, also when the micro-batches
differ in size (buckets, an epoch's last batch). Clipping (``clip_norm``, of the sum over
towers: :mod:`asrkit.train.gradients`), the loss scale's check for non-finite gradients and the
towers' all-reduce all act at the update, on the accumulated gradient, as they would on the
larger batch: a micro-batch with a non-finite
gradient makes the whole update a skipped one.

Under ``tf.distribute`` the accumulators are sync-on-read variables: each replica adds into its
own copy, and the optimiser sums the replicas' shares when it applies them (as it sums the
replicas' gradients of an ordinary step). They are not saved in checkpoints: the engine saves
only between updates.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from asrkit.train.checkpoints import trainable_variables
from asrkit.train.gradients import apply_gradients
from asrkit.train.step import Batch, forward_and_loss

if TYPE_CHECKING:
    import keras
    import tensorflow as tf

    from asrkit.types import ModelSpec, Objective


class AccumulatingStep:
    """Called like :func:`asrkit.train.step.make_train_step`'s step (a batch in, every
    replica's per-utterance losses out); applies the update on every ``steps``-th call, or on
    :meth:`flush`. ``pending`` is the number of micro-batches gathered and not yet applied."""

    def __init__(self, strategy: tf.distribute.Strategy, model: keras.Model,
                 optimizer: keras.optimizers.LossScaleOptimizer, spec: ModelSpec,
                 model_config: Any, steps: int,
                 element_spec: dict[str, tf.TensorSpec] | None = None,
                 clip_norm: float = 0.0, *, objective: Objective | None = None,
                 objective_config: Any = None, head: keras.Model | None = None) -> None:
        import tensorflow as tf

        self.steps, self.pending = steps, 0
        variables = trainable_variables(model, head)
        on_read = {"trainable": False, "synchronization": tf.VariableSynchronization.ON_READ,
                   "aggregation": tf.VariableAggregation.SUM}
        with strategy.scope():
            sums = [tf.Variable(tf.zeros(v.shape, v.dtype), **on_read) for v in variables]
            count = tf.Variable(0.0, **on_read)
        self._variables = (sums, count)  # kept alive for the functions below

        def replica_add(batch: Batch) -> tf.Tensor:
            losses, gradients = forward_and_loss(model, spec, model_config, optimizer, batch,
                                                 tf.reduce_sum, objective=objective,
                                                 objective_config=objective_config, head=head)
            for accumulated, gradient in zip(sums, gradients, strict=True):
                if gradient is not None:
                    accumulated.assign_add(tf.convert_to_tensor(gradient))
            count.assign_add(tf.cast(tf.shape(losses)[0], tf.float32))
            return losses

        def replica_apply() -> None:
            utterances = tf.distribute.get_replica_context().all_reduce("sum", tf.identity(count))
            divisor = tf.maximum(utterances, 1.0)
            gradients = [tf.identity(s) / divisor for s in sums]
            apply_gradients(optimizer, gradients, variables, clip_norm)
            for accumulated in sums:
                accumulated.assign(tf.zeros_like(accumulated))
            count.assign(0.0)

        def add(batch: Batch) -> tf.Tensor:
            return strategy.gather(strategy.run(replica_add, args=(batch,)), axis=0)

        self._add = (tf.function(add, reduce_retracing=True) if element_spec is None
                     else tf.function(add, input_signature=[element_spec]))
        self._apply = tf.function(lambda: strategy.run(replica_apply))

    def __call__(self, batch: Batch) -> tf.Tensor:
        losses = self._add(batch)
        self.pending += 1
        if self.pending >= self.steps:
            self.flush()
        return losses

    def flush(self) -> bool:
        """Apply what is gathered (an epoch's last micro-batches); whether there was any."""
        if not self.pending:
            return False
        self._apply()
        self.pending = 0
        return True
