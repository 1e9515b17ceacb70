"""Exporting a transducer run: the encoder *and* the greedy search in the graph.

A transducer's model output is not logits but the encoder's frames, which the objective's head
(the prediction and joint networks) turns into labels one emitted label at a time. So that a
user needs nothing of asrkit to transcribe with the export, the export holds that search too::

    pcm [samples] --features, model (make_logits_fn)--> frames [frames', joint_dim]
                  --greedy search (the head's predict_step and joint_step)--> labels, frames

Signatures (one utterance each; ``pcm`` float32 in [-1, 1], or int16 for the ``*_int16``
variants, divided by 32768 in the graph):

``encode``            ``{"frames": float32 [frames', joint_dim]}``: the encoder's output
``transcribe``        ``{"labels": int32 [n]`` (the emitted labels), ``"frames": int32 [n]`` (the
                      output frame each was emitted at, for word times), ``"characters": string
                      [n]`` (their symbols), and ``"text": string []`` (SavedModel only)``}``
``encode_int16``, ``transcribe_int16``   the same for int16 PCM
``serving_default``   (SavedModel) ``transcribe``

The audio-to-frames graph is :func:`asrkit.serving.graph.make_logits_fn`, the one every export
and the checkpoint use, and the search calls the head's own step methods
(:class:`asrkit.decoders.transducer.TransducerNetworks`): nothing of the networks is written
twice. The search (:func:`greedy_tokens`) is
:func:`asrkit.decoders.transducer.greedy_search` for one utterance, as a ``tf.while_loop``; an
export is verified to emit exactly what that function emits on the checkpoint's frames.

SavedModel and TFLite (built-in operations only) are written. ONNX is refused in one line
before anything loads: the ONNX export (:mod:`asrkit.serving.export_onnx`) holds CTC's graph,
logits and CTC's greedy labels, and the transducer's loop has not been converted to ONNX.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from asrkit.config.decoding import decoder_settings
from asrkit.core.errors import AsrkitError
from asrkit.decoders.transducer import (
    TRANSDUCER_OUTPUTS,
    Token,
    TransducerGreedyConfig,
    greedy_search,
)
from asrkit.serving.graph import describe_module, make_logits_fn, pcm_signatures, text_of
from asrkit.types import Objective

if TYPE_CHECKING:
    import keras
    import numpy as np
    import tensorflow as tf

    from asrkit.runs.run import Run

#: The decoder whose search the export holds.
DECODER = "transducer-greedy"
#: The formats a transducer run exports as.
FORMATS = ("savedmodel", "tflite", "sherpa-onnx")
#: Largest difference accepted between the export's encoder frames and the checkpoint's. Tighter
#: than a CTC export's logits: the greedy search's argmax reads them at every step, and it must
#: emit what the checkpoint emits.
VERIFY_TOLERANCE = 1e-4


def exports_as_transducer(objective: Objective) -> bool:
    """Whether ``objective``'s runs export with the transducer's greedy search in the graph:
    those whose outputs the transducer decoders read (their head meets
    :class:`~asrkit.decoders.transducer.TransducerNetworks`)."""
    return objective.outputs == TRANSDUCER_OUTPUTS


def check_format(fmt: str) -> None:
    """One line, before anything loads, for a format a transducer run cannot be exported as."""
    if fmt not in FORMATS:
        raise AsrkitError(f"asrkit export --format {fmt}: transducer runs export as "
                          f"{' or '.join(FORMATS)}")


def max_symbols_of(run: Run) -> int:
    """The most labels the export's search emits at one frame: the run's ``max_symbols`` when its
    decoder is ``transducer-greedy`` (the search the export repeats), else that decoder's
    default."""
    if run.train.decoder == DECODER:
        return int(decoder_settings(DECODER, base=run.config.decoder).max_symbols)
    return TransducerGreedyConfig().max_symbols


def greedy_tokens(head: Any, frames: tf.Tensor, max_symbols: int) -> tuple[tf.Tensor, tf.Tensor]:
    """The greedy search over one utterance's encoder ``frames`` ``[frames', joint_dim]``, in the
    graph: the emitted labels int32 ``[n]`` and the frame each was emitted at int32 ``[n]``,
    what :func:`asrkit.decoders.transducer.greedy_search` gives.

    One loop step is one call of the joint network: its most likely class is a label (emitted,
    and read by the prediction network, the frame read again) or the blank (the next frame); the
    ``max_symbols``-th label of a frame moves on too. Every step's class and frame are written
    to a ``tf.TensorArray`` and the labels are the classes that are not the blank, picked at the
    end. The shape of the loop is what TFLite's converter lowers to built-in operations: arrays
    of a size known when the loop starts (``max_symbols`` steps a frame at most) written at
    every step, and no ``tf.cond``."""
    import tensorflow as tf

    blank = int(head.blank)
    count = tf.shape(frames)[0]
    predicted, state = head.predict_step(tf.fill([1], blank), head.initial_state(1))

    def step(index: tf.Tensor, t: tf.Tensor, symbols: tf.Tensor, predicted: tf.Tensor,
             state: tf.Tensor, classes: tf.TensorArray,
             at: tf.TensorArray) -> tuple[Any, ...]:
        logprobs = head.joint_step(frames[t][tf.newaxis], predicted)  # [1, classes]
        best = tf.argmax(logprobs, axis=-1, output_type=tf.int32)  # [1]
        emits = tf.not_equal(best[0], blank)
        # The prediction network reads every step's class and its output is kept after a
        # label only: under a tf.cond, TFLite's converter cannot lower the LSTM's own loop.
        new_predicted, new_state = head.predict_step(best, state)
        predicted = tf.where(emits, new_predicted, predicted)
        state = tf.where(emits, new_state, state)
        symbols = tf.where(emits, symbols + 1, 0)
        moves = tf.logical_or(tf.logical_not(emits), symbols >= max_symbols)
        return (index + 1, tf.where(moves, t + 1, t), tf.where(moves, 0, symbols), predicted,
                state, classes.write(index, best[0]), at.write(index, t))

    def reading(index: tf.Tensor, t: tf.Tensor, *_: Any) -> tf.Tensor:
        return t < count

    bound = count * max_symbols  # the most steps there can be: max_symbols at every frame
    start = (tf.constant(0), tf.constant(0), tf.constant(0), predicted, state,
             tf.TensorArray(tf.int32, size=bound, element_shape=[]),
             tf.TensorArray(tf.int32, size=bound, element_shape=[]))
    steps, *_, classes, at = tf.while_loop(reading, step, start)
    classes, at = classes.stack()[:steps], at.stack()[:steps]
    emitted = tf.not_equal(classes, blank)
    return tf.boolean_mask(classes, emitted), tf.boolean_mask(at, emitted)


def transducer_module(run: Run, model: keras.Model, head: Any, max_symbols: int,
                      with_text: bool = True) -> tf.Module:
    """A :class:`tf.Module` whose ``tf.function`` methods are a transducer export's signatures
    (see the module docstring), as :func:`asrkit.serving.export.serving_module` is a CTC
    export's: the networks are not attributes (only their variables: Keras 3 would attach its
    own serving function to a tracked model), and ``with_text=False`` is the TFLite variant (no
    string join, no function shared by the signatures).

    Besides the variables that describe every export (``alphabet``, ``word_marker``,
    ``frame_seconds``, ``sample_rate``) it holds ``objective`` (``"transducer"``) and
    ``max_symbols``, so a SavedModel says what it is without its ``asrkit.json``.
    :meth:`checkpoint_tokens` is what the export must reproduce."""
    import numpy as np
    import tensorflow as tf

    labels_of_run = run.labels
    encode_fn = make_logits_fn(run, model)
    if with_text:  # traced once for every signature (see serving_module)
        encode_fn = tf.function(encode_fn,
                                input_signature=[tf.TensorSpec([None], tf.float32, name="pcm")])

    class Serving(tf.Module):
        def __init__(self) -> None:
            super().__init__(name="asrkit_serving")
            describe_module(self, run, model, head, "transducer")
            self.max_symbols = tf.Variable(max_symbols, trainable=False, name="max_symbols")
            self._signatures = pcm_signatures(
                self, "encode", lambda audio: {"frames": encode_fn(audio)}, self._transcribe,
                with_text)

        def _transcribe(self, audio: tf.Tensor) -> dict[str, tf.Tensor]:
            labels, frames = greedy_tokens(head, encode_fn(audio), max_symbols)
            characters = tf.gather(self._symbols, labels)
            out = {"labels": labels, "frames": frames, "characters": characters}
            if with_text:
                out["text"] = text_of(characters, labels_of_run)
            return out

        def signatures(self) -> dict[str, Any]:
            """``encode``, ``transcribe``, their ``*_int16`` and (SavedModel)
            ``serving_default`` (:func:`asrkit.serving.graph.pcm_signatures`)."""
            return dict(self._signatures)

        def checkpoint_tokens(self, frames: np.ndarray) -> list[Token]:
            """The checkpoint's own greedy search (the ``transducer-greedy`` decoder's) on
            encoder ``frames`` ``[frames', joint_dim]``: each label with its frame, what the
            export's ``transcribe`` must emit."""
            return greedy_search(head, np.asarray(frames, np.float32)[None],
                                 np.array([len(frames)]), max_symbols)[0]

    return Serving()


def metadata(max_symbols: int, fmt: str) -> dict[str, Any]:
    """What ``asrkit.json`` says about a transducer export (beside what every export says)."""
    text = ["text"] if fmt == "savedmodel" else []
    signatures = ["encode", "transcribe", "encode_int16", "transcribe_int16"]
    return {
        "objective": "transducer",
        "decoder": DECODER,
        "max_symbols": max_symbols,
        "signatures": signatures + (["serving_default"] if fmt == "savedmodel" else []),
        "outputs": {"encode": ["frames"],
                    "transcribe": ["labels", "frames", "characters", *text]},
    }
