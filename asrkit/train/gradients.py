"""Applying a step's gradients so that clipping sees the gradient of the whole global batch.

Keras' optimiser clips (``global_clipnorm``) inside each replica, before it sums the replicas'
gradients: with towers, each tower's share would be clipped on its own, and G devices would no
longer behave like one batch G times larger. :func:`apply_gradients` therefore sums the shares
itself first (an all-reduce), clips that sum (unscaled from the loss scale, as the optimiser
would), and hands each replica ``1/G`` of the clipped sum: the optimiser's own sum of those is
the clipped gradient, and its own clipping, now of a smaller norm than the bound, changes
nothing. On one replica, or without clipping, the optimiser clips as it is.

Gradients reach the optimiser dense. An embedding's gradient (a transducer's prediction
network) comes as ``tf.IndexedSlices``, a row for each use of a label; Keras' global norm
squares those rows before adding up the rows of a label used twice, which is not the norm of the
gradient, so one device's step would clip a character embedding by too small a norm while
towers and gradient accumulation (which sum, so densify) clip by the right one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import keras
    import tensorflow as tf


def apply_gradients(optimizer: keras.optimizers.Optimizer, gradients: list[tf.Tensor | None],
                    variables: list[keras.Variable],
                    clip_norm: float) -> None:
    """Apply per-replica ``gradients`` (of the loss scaled by the optimiser's loss scale) to
    ``variables`` in a replica context, clipping their sum over replicas to ``clip_norm``."""
    import tensorflow as tf

    gradients = [None if g is None else tf.convert_to_tensor(g) for g in gradients]
    context = tf.distribute.get_replica_context()
    replicas = context.num_replicas_in_sync if context is not None else 1
    if clip_norm and replicas > 1:
        present = [i for i, g in enumerate(gradients) if g is not None]
        summed = context.all_reduce("sum", [gradients[i] for i in present])
        scale = tf.cast(getattr(optimizer, "dynamic_scale", 1.0), tf.float32)
        clipped, _ = tf.clip_by_global_norm([g / scale for g in summed], clip_norm)
        gradients = list(gradients)
        for i, g in zip(present, clipped, strict=True):
            gradients[i] = g * (scale / replicas)
    optimizer.apply_gradients(zip(gradients, variables, strict=True))
