"""One training step on two CPU "towers" against one step on one device with the doubled batch.

Run as a script (logical devices must be configured before TensorFlow starts). Prints the largest
absolute difference between the updated weights of the two runs, and the initial change.
"""

import json

import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

from comparison import largest_difference, linear_optimizer  # noqa: E402
from tiny_brnn_batch import batch, config, initial, spec  # noqa: E402

from asrkit.train.step import make_train_step  # noqa: E402


def train_one_step(devices: list[str]) -> list[np.ndarray]:
    strategy = tf.distribute.MirroredStrategy(devices)
    with strategy.scope():
        model = spec.build(config, 26, 29)
        model.set_weights(initial)
        optimizer = linear_optimizer(learning_rate=0.01)
        optimizer.build(model.trainable_variables)
    step = make_train_step(strategy, model, optimizer, spec, config)
    data = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensors(batch))
    for distributed in data:
        step(distributed)
    return model.get_weights()


towers = train_one_step(["/cpu:0", "/cpu:1"])
single = train_one_step(["/cpu:0"])
print(json.dumps({
    "max_difference": largest_difference(towers, single),
    "max_update": largest_difference(single, initial),
    "replicas": 2,
}))
