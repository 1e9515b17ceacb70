"""One accumulated update of micro-batches against one step on the whole batch, on one device
and on two CPU "towers", with gradient clipping on.

    python accumulate.py [OBJECTIVE]     # ctc (the default) or transducer: tiny_brnn_batch.py

Run as a script (logical devices must be configured before TensorFlow starts). Prints, for each
case, the largest absolute difference between the weights (the model's and the objective's
head's) after the accumulated update and after the one big step, and the size of the update
itself.
"""

import json
import sys

import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

from comparison import largest_difference, linear_optimizer  # noqa: E402
from tiny_brnn_batch import OBJECTIVES, batch, config, networks, spec, weights  # noqa: E402

from asrkit.train.accumulate import AccumulatingStep  # noqa: E402
from asrkit.train.checkpoints import trainable_variables  # noqa: E402
from asrkit.train.step import make_train_step  # noqa: E402

LEARNING_RATE, CLIP_NORM = 1.0, 0.5  # a norm the gradient exceeds
NAME = sys.argv[1] if len(sys.argv) > 1 else "ctc"
objective, settings = OBJECTIVES[NAME]


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
        model, head = networks(NAME)
        optimizer = linear_optimizer(LEARNING_RATE, CLIP_NORM)
        optimizer.build(trainable_variables(model, head))
    bound = {"objective": objective, "objective_config": settings, "head": head}
    if micro_batches is None:
        step = make_train_step(strategy, model, optimizer, spec, config, clip_norm=CLIP_NORM,
                               **bound)
        parts = [batch]
    else:
        step = AccumulatingStep(strategy, model, optimizer, spec, config, len(micro_batches),
                                clip_norm=CLIP_NORM, **bound)
        parts = micro_batches
    for data in parts:
        for distributed in strategy.experimental_distribute_dataset(
                tf.data.Dataset.from_tensors(data)):
            step(distributed)
    assert int(optimizer.iterations.numpy()) == 1, "one update, not one a micro-batch"
    return weights(model, head)


whole = weights_after(["/cpu:0"], None)
initial = weights(*networks(NAME))
cases = {
    "one_device_2x2": weights_after(["/cpu:0"], [part(0, 2), part(2, 4)]),
    "one_device_3_and_1": weights_after(["/cpu:0"], [part(0, 3), part(3, 4)]),
    "two_towers_2x2": weights_after(["/cpu:0", "/cpu:1"], [part(0, 2), part(2, 4)]),
    # Not accumulation: the towers clip the sum of their gradients, not each its own share.
    "two_towers_whole": weights_after(["/cpu:0", "/cpu:1"], None),
}
print(json.dumps({
    "max_update": largest_difference(whole, initial),
    **{name: largest_difference(found, whole) for name, found in cases.items()},
}))
