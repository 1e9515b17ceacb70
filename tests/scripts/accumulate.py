"""One accumulated update of micro-batches against one step on the whole batch, on one device
and on two CPU "towers", with gradient clipping on.

Run as a script (logical devices must be configured before TensorFlow starts). Prints, for each
case, the largest absolute difference between the weights after the accumulated update and after
the one big step, and the size of the update itself.
"""

import json

import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

from comparison import largest_difference, linear_optimizer  # noqa: E402
from tiny_brnn_batch import batch, config, initial, spec  # noqa: E402

from asrkit.train.accumulate import AccumulatingStep  # noqa: E402
from asrkit.train.step import make_train_step  # noqa: E402

LEARNING_RATE, CLIP_NORM = 1.0, 0.5  # a norm the gradient exceeds


def part(start: int, stop: int) -> dict:
    return {key: value[start:stop] for key, value in batch.items()}


STRATEGIES: dict = {}


def weights_after(devices: list[str], micro_batches: list[dict] | None) -> list[np.ndarray]:
    """One update: of the whole batch (None), or accumulated over ``micro_batches``."""
    # One strategy per device set: a second one over the same devices would clash with the
    # first one's collective operations.
    if tuple(devices) not in STRATEGIES:
        STRATEGIES[tuple(devices)] = tf.distribute.MirroredStrategy(devices)
    strategy = STRATEGIES[tuple(devices)]
    with strategy.scope():
        model = spec.build(config, 26, 29)
        model.set_weights(initial)
        optimizer = linear_optimizer(LEARNING_RATE, CLIP_NORM)
        optimizer.build(model.trainable_variables)
    if micro_batches is None:
        step = make_train_step(strategy, model, optimizer, spec, config, clip_norm=CLIP_NORM)
        parts = [batch]
    else:
        step = AccumulatingStep(strategy, model, optimizer, spec, config, len(micro_batches),
                                clip_norm=CLIP_NORM)
        parts = micro_batches
    for data in parts:
        for distributed in strategy.experimental_distribute_dataset(
                tf.data.Dataset.from_tensors(data)):
            step(distributed)
    assert int(optimizer.iterations.numpy()) == 1, "one update, not one a micro-batch"
    return model.get_weights()


whole = weights_after(["/cpu:0"], None)
cases = {
    "one_device_2x2": weights_after(["/cpu:0"], [part(0, 2), part(2, 4)]),
    "one_device_3_and_1": weights_after(["/cpu:0"], [part(0, 3), part(3, 4)]),
    "two_towers_2x2": weights_after(["/cpu:0", "/cpu:1"], [part(0, 2), part(2, 4)]),
    # Not accumulation: the towers clip the sum of their gradients, not each its own share.
    "two_towers_whole": weights_after(["/cpu:0", "/cpu:1"], None),
}
print(json.dumps({
    "max_update": largest_difference(whole, initial),
    **{name: largest_difference(weights, whole) for name, weights in cases.items()},
}))
