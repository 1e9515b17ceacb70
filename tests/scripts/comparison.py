"""What the scripts that compare two ways of computing one update share: the optimiser and the
measure of the difference.

The comparisons (towers against one device, accumulated micro-batches against one batch, two
workers against one) ask whether two runs applied the same gradient. Adam answers that badly: its
first step moves each weight by about ``lr * g / (|g| + eps)``, which magnifies a rounding
difference in a near-zero gradient up to ``lr / (4 eps)`` times (with eps 1e-8, a 1e-9 difference
in a sum becomes a 0.25 * lr difference in a weight), and rounding depends on the CPU's vector
width. Adam is also blind to a gradient's scale, so a tower that summed where it should average
would pass. Plain descent moves each weight by ``lr * g``: the update differs exactly as much as
the gradients do, and a wrong scale shows.
"""

import keras
import numpy as np


def linear_optimizer(learning_rate: float, clip_norm: float = 0.0):
    """SGD, wrapped as the engine wraps Adam (a loss-scale optimiser at scale 1), so that the
    engine's :func:`asrkit.train.gradients.apply_gradients` treats it as it treats the real one."""
    inner = keras.optimizers.SGD(learning_rate=learning_rate, global_clipnorm=clip_norm or None)
    return keras.optimizers.LossScaleOptimizer(inner, initial_scale=1.0)


def largest_difference(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    """The largest absolute difference between two models' weights, taken pairwise."""
    return max(float(np.abs(x - y).max()) for x, y in zip(a, b, strict=True))
