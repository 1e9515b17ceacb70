"""The one graph from audio to logits, in-graph from raw PCM: what transcription with a run's
checkpoint (:mod:`asrkit.serving.transcribe`) and every export (:mod:`asrkit.serving.export`,
SavedModel and TFLite; :mod:`asrkit.serving.export_onnx`) compute, so that they cannot drift
apart."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from asrkit.core.frames import check_sample_rate
from asrkit.features import context_windows

if TYPE_CHECKING:
    import keras
    import tensorflow as tf

    from asrkit.runs.run import Run


def make_logits_fn(run: Run, model: keras.Model) -> Callable[[tf.Tensor], tf.Tensor]:
    """``fn(audio float32 [samples]) -> logits float32 [frames', classes]``, in-graph.

    The one definition of "audio to logits" that the checkpoint (:mod:`asrkit.serving.transcribe`)
    and every export use, so they cannot drift apart: features as the training pipeline computes
    them (one utterance, per-utterance normalisation, the pipeline's context windows), then the
    model.
    """
    import tensorflow as tf

    extractor, feature_config = run.extractor, run.feature_config
    context = run.pipeline.context
    spec, model_config = run.spec, run.model_config
    check_sample_rate(feature_config, str(run.folder))

    def logits_fn(audio: tf.Tensor) -> tf.Tensor:
        features = tf.cast(extractor.extract(audio, feature_config), tf.float32)
        features = context_windows(features, context)
        frames = tf.shape(features)[0]
        logits = model((features[tf.newaxis], frames[tf.newaxis]), training=False)
        length = spec.output_length(model_config, frames)
        return tf.cast(logits[0], tf.float32)[:length]

    return logits_fn


def greedy_labels(logits: tf.Tensor, blank: int) -> tf.Tensor:
    """The greedy CTC path's labels, in-graph with TFLite built-ins only: the most likely class
    of each frame, repeats merged, blanks dropped (what ``asrkit.decoders.greedy`` does)."""
    import tensorflow as tf

    best = tf.argmax(logits, axis=-1, output_type=tf.int32)
    previous = tf.concat([tf.constant([-1], tf.int32), best[:-1]], axis=0)
    keep = tf.logical_and(tf.not_equal(best, previous), tf.not_equal(best, blank))
    return tf.boolean_mask(best, keep)
