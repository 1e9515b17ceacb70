"""The training input pipeline: a dataset's shards to augmented, length-bucketed batches in
``tf.data``."""
