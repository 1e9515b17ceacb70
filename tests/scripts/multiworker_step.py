"""A few training steps of one worker of a two-worker cluster, or of the single-worker reference.

    python multiworker_step.py WORKERS INDEX OUT.npz     # one worker (WORKERS: host:port,host:port)
    python multiworker_step.py - - OUT.npz               # reference: one process, whole batches

Every step's global batch is the same in both cases: worker i takes rows 2i and 2i+1 of each
four-utterance global batch, the reference takes all four. Writes the final weights and the
largest change of a weight.
"""

import sys

import numpy as np

workers, index, out = sys.argv[1:4]
if workers != "-":
    from asrkit.train.strategy import set_cluster

    set_cluster(workers, int(index))

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
from comparison import largest_difference, linear_optimizer  # noqa: E402

from asrkit.models.brnn import BRNN, BRNNConfig  # noqa: E402
from asrkit.train.step import make_train_step  # noqa: E402
from asrkit.train.strategy import make_strategy  # noqa: E402

STEPS, GLOBAL, FRAMES = 3, 4, 40
strategy = make_strategy(timeout_seconds=60)
rng = np.random.default_rng(0)
batches = []
for _ in range(STEPS):
    lengths = rng.integers(25, FRAMES + 1, size=GLOBAL).astype(np.int32)
    batches.append({
        "features": (rng.normal(size=(GLOBAL, FRAMES, 26))
                     * (np.arange(FRAMES)[None, :, None] < lengths[:, None, None])
                     ).astype(np.float32),
        "feature_lengths": lengths,
        "labels": rng.integers(0, 28, size=(GLOBAL, 8)).astype(np.int32),
        "label_lengths": rng.integers(4, 9, size=GLOBAL).astype(np.int32),
    })

spec, config = BRNN(), BRNNConfig(n_hidden=32, n_cell=24, context=2, dropout=0.0)
keras.utils.set_random_seed(3)
initial = spec.build(config, 26, 29).get_weights()
with strategy.scope():
    model = spec.build(config, 26, 29)
    model.set_weights(initial)
    optimizer = linear_optimizer(learning_rate=0.01)
    optimizer.build(model.trainable_variables)


def dataset_fn(context):
    share = GLOBAL // context.num_input_pipelines
    rows = slice(context.input_pipeline_id * share, (context.input_pipeline_id + 1) * share)
    parts = {k: np.stack([b[k][rows] for b in batches]) for k in batches[0]}
    return tf.data.Dataset.from_tensor_slices(parts)


step = make_train_step(strategy, model, optimizer, spec, config)
for batch in strategy.distribute_datasets_from_function(dataset_fn):
    step(batch)
final = model.get_weights()
np.savez(out, *final, replicas=strategy.num_replicas_in_sync,
         max_update=largest_difference(final, initial))
