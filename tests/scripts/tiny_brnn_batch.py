"""The small brnn and the padded batch of four utterances that the towers and accumulation
scripts train, with the initial weights both start from. Import it only after the logical devices
are configured: building the model starts TensorFlow."""

import keras
import numpy as np

from asrkit.models.brnn import BRNN, BRNNConfig

spec, config = BRNN(), BRNNConfig(n_hidden=48, n_cell=32, context=2, dropout=0.0)
rng = np.random.default_rng(0)
lengths = np.array([60, 45, 52, 38], np.int32)
batch = {
    "features": rng.normal(size=(4, 60, 26)).astype(np.float32)
    * (np.arange(60)[None, :, None] < lengths[:, None, None]),
    "feature_lengths": lengths,
    "labels": rng.integers(0, 28, size=(4, 12)).astype(np.int32),
    "label_lengths": np.array([12, 9, 10, 7], np.int32),
}
keras.utils.set_random_seed(7)
initial = [w.copy() for w in spec.build(config, 26, 29).get_weights()]
