"""One update of the weights: the optimiser, and the compiled distributed step.

Every replica (a GPU, or the CPU) runs the model on its own batch and computes the run's
training objective's loss (:class:`asrkit.types.Objective`; CTC by default) averaged over the
*global* batch; the gradients are summed across replicas and applied once, so
G devices behave like one batch G times larger (the notebook's towers); clipping acts on that
sum (:mod:`asrkit.train.gradients`). Gradient accumulation (:mod:`asrkit.train.accumulate`)
runs the same forward pass and loss, :func:`forward_and_loss`, so that both paths compute
exactly the same numbers.

The optimiser is Adam wrapped in Keras' ``LossScaleOptimizer``: with mixed precision it scales
the loss as usual; in float32 its scale starts at 1, and either way it applies a step only when
every gradient is finite, so a batch with a non-finite loss changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from asrkit.objectives.ctc import CTCObjective
from asrkit.train.checkpoints import trainable_variables
from asrkit.train.gradients import apply_gradients

if TYPE_CHECKING:
    import keras
    import tensorflow as tf

    from asrkit.config.train import TrainConfig
    from asrkit.types import ModelSpec, Objective

#: A batch as the step reads it: features, their lengths, labels, their lengths, ids...
Batch = dict[str, "tf.Tensor"]


def make_optimizer(config: TrainConfig,
                   loss_scale: bool = False) -> keras.optimizers.LossScaleOptimizer:
    """Adam with the run's settings; ``loss_scale`` for float16 products (mixed_float16)."""
    import keras

    inner = keras.optimizers.Adam(
        learning_rate=config.learning_rate, beta_1=config.beta1, beta_2=config.beta2,
        epsilon=config.epsilon, global_clipnorm=config.clip_norm or None,
    )
    scale = 2.0 ** 15 if loss_scale else 1.0
    return keras.optimizers.LossScaleOptimizer(inner, initial_scale=scale)


def forward_and_loss(
    model: keras.Model, spec: ModelSpec, model_config: Any,
    optimizer: keras.optimizers.LossScaleOptimizer, batch: Batch,
    reduce: Callable[[tf.Tensor], tf.Tensor], *, objective: Objective | None = None,
    objective_config: Any = None, head: keras.Model | None = None,
) -> tuple[tf.Tensor, list[tf.Tensor | None]]:
    """One replica's forward pass and the ``objective``'s loss on ``batch`` (CTC when none is
    given): the per-utterance losses, and the gradients of ``reduce`` of them (scaled by the
    optimiser's loss scale) for the trainable variables of the model and then of the
    objective's ``head`` (:func:`asrkit.train.checkpoints.trainable_variables`), in their order.

    An utterance the objective cannot align (for CTC, fewer output frames than its labels and
    repeats: :mod:`asrkit.core.ctc`) is left out of the loss and reported as infinite, so the
    loop names it. Its output frames are the model's ``output_length`` of the extractor's frame
    count, which the extractor contract makes :func:`asrkit.core.frames.output_frames` of its
    samples: the count the run's warning before the first step
    (:func:`asrkit.train.report.too_short`) and the import use.
    """
    import tensorflow as tf

    if objective is None:
        objective = CTCObjective()
    if objective_config is None:
        objective_config = objective.Config()
    features, lengths = batch["features"], batch["feature_lengths"]
    with tf.GradientTape() as tape:
        encoder_out = tf.cast(model((features, lengths), training=True), tf.float32)
        out_lengths = spec.output_length(model_config, lengths)
        losses, feasible = objective.losses(objective_config, head, encoder_out, out_lengths,
                                            batch["labels"], batch["label_lengths"],
                                            training=True)
        losses = tf.where(feasible, tf.cast(losses, tf.float32), 0.0)
        scaled = optimizer.scale_loss(reduce(losses))
    gradients = tape.gradient(scaled, trainable_variables(model, head))
    return tf.where(feasible, losses, float("inf")), gradients


def make_train_step(strategy: tf.distribute.Strategy, model: keras.Model,
                    optimizer: keras.optimizers.LossScaleOptimizer, spec: ModelSpec,
                    model_config: Any, element_spec: dict[str, tf.TensorSpec] | None = None,
                    clip_norm: float = 0.0, *, objective: Objective | None = None,
                    objective_config: Any = None,
                    head: keras.Model | None = None) -> Callable[[Batch], tf.Tensor]:
    """A compiled distributed step: a batch in, the per-utterance losses of all replicas out
    (infinite for an utterance the objective cannot align: :func:`forward_and_loss`)."""
    import tensorflow as tf

    variables = trainable_variables(model, head)

    def replica_step(batch: Batch) -> tf.Tensor:
        losses, gradients = forward_and_loss(model, spec, model_config, optimizer, batch,
                                             tf.nn.compute_average_loss, objective=objective,
                                             objective_config=objective_config, head=head)
        apply_gradients(optimizer, gradients, variables, clip_norm)
        return losses

    def step(batch: Batch) -> tf.Tensor:
        per_utterance = strategy.run(replica_step, args=(batch,))
        return strategy.gather(per_utterance, axis=0)

    if element_spec is None:
        return tf.function(step, reduce_retracing=True)
    return tf.function(step, input_signature=[element_spec])
