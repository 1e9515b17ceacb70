"""One training step on two CPU "towers" against one step on one device with the doubled batch.

Run as a script (logical devices must be configured before TensorFlow starts). Prints the largest
absolute difference between the updated weights of the two runs, and the initial change.
"""

import json

import keras
import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

from asrkit.models.brnn import BRNN, BRNNConfig  # noqa: E402
from asrkit.train.config import TrainConfig  # noqa: E402
from asrkit.train.engine import make_optimizer, make_train_step  # noqa: E402

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


def train_one_step(devices: list[str]) -> list[np.ndarray]:
    strategy = tf.distribute.MirroredStrategy(devices)
    with strategy.scope():
        model = spec.build(config, 26, 29)
        model.set_weights(initial)
        optimizer = make_optimizer(TrainConfig(learning_rate=0.01))
        optimizer.build(model.trainable_variables)
    step = make_train_step(strategy, model, optimizer, spec, config)
    data = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensors(batch))
    for distributed in data:
        step(distributed)
    return model.get_weights()


towers = train_one_step(["/cpu:0", "/cpu:1"])
single = train_one_step(["/cpu:0"])
print(json.dumps({
    "max_difference": max(float(np.abs(a - b).max()) for a, b in zip(towers, single, strict=True)),
    "max_update": max(float(np.abs(a - b).max()) for a, b in zip(single, initial, strict=True)),
    "replicas": 2,
}))
