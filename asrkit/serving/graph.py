"""The one graph from audio to logits, in-graph from raw PCM: what transcription with a run's
checkpoint (:mod:`asrkit.serving.transcribe`) and every export (:mod:`asrkit.serving.export`,
SavedModel and TFLite; :mod:`asrkit.serving.export_onnx`; a transducer's,
:mod:`asrkit.serving.export_transducer`) compute, so that they cannot drift apart; and the
in-graph pieces those exports share: greedy CTC labels, the text of the emitted symbols, and the
variables that let a SavedModel be read without its ``asrkit.json``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeGuard

from asrkit.core.frames import SAMPLE_RATE, check_sample_rate, frame_seconds
from asrkit.core.text import Alphabet
from asrkit.features import context_windows

if TYPE_CHECKING:
    import keras
    import tensorflow as tf

    from asrkit.core.labels import Labels
    from asrkit.runs.run import Run

#: What an export's signature computes of one utterance's PCM: its outputs by name.
Fn = Callable[["tf.Tensor"], dict[str, "tf.Tensor"]]
#: int16 PCM to [-1, 1): the scale the training pipeline uses (``asrkit.dataset.shards.parse``);
#: the ``*_int16`` signatures divide by it in the graph.
PCM_SCALE = 32768.0
#: The name scope of the feature front end in an export's graph: a full-integer TFLite export
#: keeps the operations under it in float (:mod:`asrkit.serving.quantize`).
FEATURES_SCOPE = "asrkit_features"


def make_logits_fn(run: Run, model: keras.Model) -> Callable[[tf.Tensor], tf.Tensor]:
    """``fn(audio float32 [samples]) -> logits float32 [frames', classes]``, in-graph.

    The one definition of "audio to logits" that the checkpoint (:mod:`asrkit.serving.transcribe`)
    and every export use, so they cannot drift apart: features as the training pipeline computes
    them (one utterance, per-utterance normalisation, the pipeline's context windows), then the
    model. For a transducer run the model's output is the encoder's frames ``[frames',
    joint_dim]``, which the same function gives.
    """
    import tensorflow as tf

    extractor, feature_config = run.extractor, run.feature_config
    check_sample_rate(feature_config, str(run.folder))
    batch_fn = make_batch_logits_fn(run, model)

    def logits_fn(audio: tf.Tensor) -> tf.Tensor:
        with tf.name_scope(FEATURES_SCOPE):
            features = tf.cast(extractor.extract(audio, feature_config), tf.float32)
        frames = tf.shape(features)[0]
        logits, lengths = batch_fn(features[tf.newaxis], frames[tf.newaxis])
        return logits[0][:lengths[0]]

    return logits_fn


def make_batch_logits_fn(run: Run, model: keras.Model
                         ) -> Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor]]:
    """``fn(features [batch, frames, F], frame_lengths [batch]) -> (logits [batch, frames',
    classes], output_lengths [batch])``: the run's (normalised) features through its context
    windows and model, as training feeds them; the half of :func:`make_logits_fn` after the
    features, which an export that is given features (sherpa-onnx's,
    :mod:`asrkit.serving.export_sherpa`) calls on its own."""
    import tensorflow as tf

    context = run.pipeline.context
    spec, model_config = run.spec, run.model_config

    def batch_fn(features: tf.Tensor, lengths: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        lengths = tf.cast(lengths, tf.int32)
        with tf.name_scope(FEATURES_SCOPE):
            features = context_windows(features, context)
        logits = model((features, lengths), training=False)
        return tf.cast(logits, tf.float32), spec.output_length(model_config, lengths)

    return batch_fn


def greedy_labels(logits: tf.Tensor, blank: int) -> tf.Tensor:
    """The greedy CTC path's labels, in-graph with TFLite built-ins only: the most likely class
    of each frame, repeats merged, blanks dropped (what ``asrkit.decoders.greedy`` does)."""
    import tensorflow as tf

    best = tf.argmax(logits, axis=-1, output_type=tf.int32)
    previous = tf.concat([tf.constant([-1], tf.int32), best[:-1]], axis=0)
    keep = tf.logical_and(tf.not_equal(best, previous), tf.not_equal(best, blank))
    return tf.boolean_mask(best, keep)


def joins_symbols(labels: Labels) -> TypeGuard[Alphabet]:
    """Whether ``labels``' text is its symbols joined as they are (characters): no word marker
    to turn into spaces, no spaces to collapse."""
    return isinstance(labels, Alphabet)


def text_of(characters: tf.Tensor, labels: Labels) -> tf.Tensor:
    """The text of the greedy path's symbols ``characters`` (string ``[n]``), in the graph: for
    characters the symbols joined; for subword pieces the words, as ``labels.decode`` gives them
    (marker -> space, spaces collapsed, the ends stripped)."""
    import re

    import tensorflow as tf

    joined = tf.strings.reduce_join(characters)
    if joins_symbols(labels):
        return joined
    spaced = tf.strings.regex_replace(joined, re.escape(labels.word_marker), " ")
    return tf.strings.strip(tf.strings.regex_replace(spaced, r"\s+", " "))


def describe_module(module: tf.Module, run: Run, model: Any, head: Any = None,
                    objective: str | None = None) -> None:
    """Give an export's ``tf.Module`` what every export holds: the variables of ``model`` and
    of the objective's ``head`` (their values only: a tracked Keras model would bring its own
    serving function), the variables that make it readable without asrkit (``alphabet``, the
    symbols, pieces too; ``word_marker``, ``frame_seconds``, ``sample_rate``, and ``objective``
    when given: ``loaded.alphabet.numpy()`` ...), and ``_symbols``, the constant its
    ``transcribe`` gathers the emitted labels' symbols from."""
    import tensorflow as tf

    module.model_variables = [getattr(v, "value", v) for v in model.variables]
    if head is not None:
        module.head_variables = [getattr(v, "value", v) for v in head.variables]
    if objective is not None:
        module.objective = tf.Variable(objective, trainable=False, name="objective")
    labels = run.labels
    module.alphabet = tf.Variable(list(labels.symbols), trainable=False, name="alphabet")
    module.word_marker = tf.Variable(labels.word_marker, trainable=False, name="word_marker")
    module.frame_seconds = tf.Variable(
        frame_seconds(run.feature_config, run.spec, run.model_config), trainable=False,
        dtype=tf.float32, name="frame_seconds")
    module.sample_rate = tf.Variable(SAMPLE_RATE, trainable=False, name="sample_rate")
    module._symbols = tf.constant(list(labels.symbols))


def pcm_signatures(module: tf.Module, outputs: str, outputs_fn: Fn, transcribe_fn: Fn,
                   with_text: bool = True) -> dict[str, Any]:
    """The signatures every export has, made once for all kinds (CTC's, the transducer's, the
    attention encoder-decoder's): ``OUTPUTS`` (``outputs_fn``'s dict: ``logits``, or
    ``encode``'s frames) and ``transcribe`` (``transcribe_fn``'s) of float32 ``pcm`` in [-1, 1],
    ``OUTPUTS_int16`` and ``transcribe_int16`` of int16 ``pcm`` (divided by
    :data:`PCM_SCALE` in the graph), and with ``with_text`` (a SavedModel, not TFLite)
    ``serving_default``, the float ``transcribe``.

    Each is a ``tf.function`` set on ``module`` under its name (so that the module, the
    checkpoint's graph, can be called as the export is: ``module.transcribe(audio)``); the
    returned dict is what :func:`tf.saved_model.save` takes as ``signatures``."""
    import tensorflow as tf

    float_pcm = [tf.TensorSpec([None], tf.float32, name="pcm")]
    int16_pcm = [tf.TensorSpec([None], tf.int16, name="pcm")]

    def of_float(fn: Fn) -> Fn:
        def from_float(pcm: tf.Tensor) -> dict[str, tf.Tensor]:  # the signature's input: pcm
            return fn(pcm)
        return tf.function(from_float, input_signature=float_pcm)

    def of_int16(fn: Fn) -> Fn:
        def from_int16(pcm: tf.Tensor) -> dict[str, tf.Tensor]:
            return fn(tf.cast(pcm, tf.float32) / PCM_SCALE)
        return tf.function(from_int16, input_signature=int16_pcm)

    functions = {outputs: of_float(outputs_fn), "transcribe": of_float(transcribe_fn),
                 f"{outputs}_int16": of_int16(outputs_fn),
                 "transcribe_int16": of_int16(transcribe_fn)}
    for name, function in functions.items():
        setattr(module, name, function)
    if with_text:
        functions["serving_default"] = functions["transcribe"]
    return functions
