"""The transducer objective under the training engine's recipes: an embedding's gradient (its
prediction network's, which CTC has not) is clipped by its norm."""

from __future__ import annotations

import numpy as np


def test_an_embeddings_gradient_is_clipped_by_its_norm():
    """An embedding's gradient is ``tf.IndexedSlices`` with a row for each use of a label; the
    norm clipping divides by is that of the rows summed per label (sqrt(10) here, where Keras'
    own global norm of the slices says sqrt(6)): the step on one device clips what towers and
    accumulation clip."""
    import keras
    import tensorflow as tf

    from asrkit.train.gradients import apply_gradients

    table = tf.Variable(tf.zeros([4, 2]))
    optimizer = keras.optimizers.SGD(learning_rate=1.0, global_clipnorm=1.0)
    uses = tf.IndexedSlices(tf.ones([3, 2]), tf.constant([0, 0, 1]), tf.constant([4, 2]))
    apply_gradients(optimizer, [uses], [table], clip_norm=1.0)
    dense = np.array([[2, 2], [1, 1], [0, 0], [0, 0]], np.float32)
    np.testing.assert_allclose(table.numpy(), -dense / np.sqrt(10), rtol=1e-6)
