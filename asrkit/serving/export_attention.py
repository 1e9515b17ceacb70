"""Exporting an attention encoder-decoder run: the encoder, the decoder's greedy search, and the
decoder's steps, in the graph.

An attention run's model output is the encoder's frames, which the objective's head
(:mod:`asrkit.objectives.attention`) turns into labels one label at a time. So that a user needs
nothing of asrkit to transcribe with the export, the export holds the greedy search; so that
asrkit's own searches (``attention-beam``) decode the export as they decode the run, it holds
the head's steps too::

    pcm [samples] --features, model (make_logits_fn)--> frames [frames', d_model]
                  --greedy search (the head's initial_state and decode_step)--> labels

Signatures (the first four of one utterance: ``pcm`` float32 in [-1, 1], or int16 for the
``*_int16`` variants, divided by 32768 in the graph):

``encode``            ``{"frames": float32 [frames', d_model]}``: the encoder's output
``transcribe``        ``{"labels": int32 [n]`` (the labels the attention decoder emits),
                      ``"characters": string [n]`` (their symbols), ``"text": string []``\\ ``}``
``encode_int16``, ``transcribe_int16``   the same for int16 PCM
``serving_default``   ``transcribe``
``ctc_log_probs``     ``(frames float32 [n, T, d_model]) -> {"log_probs": [n, T, classes]}``:
                      the CTC output (only when the run has one: ``has_ctc``)
``initial_state``     ``(frames [n, T, d_model], lengths int32 [n]) -> {"state": [n, S]}``
``decode_step``       ``(frames [n, T, d_model], lengths int32 [n], tokens int32 [n, L],
                      state [n, S]) -> {"log_probs": [n, classes], "state": [n, S]}``: the
                      :class:`~asrkit.decoders.attention.AttentionNetworks` calls (``tokens``
                      the whole prefix, the end symbol first; a Transformer's state is ``[n,
                      0]``, LAS's ``[n, 2 * las_units + d_model + T]``); every dimension but
                      ``d_model`` dynamic

The search in ``transcribe`` (:func:`greedy_labels`) is the attention decoder alone, its most
likely label a step (no CTC, no beam), as a ``tf.while_loop``: from the end symbol, the argmax
of ``decode_step`` appended until it is the end symbol or the utterance has
``max(1, floor(MAX_LENGTH_RATIO x frames'))`` labels (:data:`MAX_LENGTH_RATIO`, 1: as many labels
as encoder frames, the ``attention-greedy`` decoder's default limit), what
:func:`reference_greedy` gives on the checkpoint's head, which an export is verified against.

:class:`ExportedAttentionNetworks` reads the step signatures of a loaded export as an
:class:`~asrkit.decoders.attention.AttentionNetworks`, which
:class:`asrkit.serving.transcribe.ExportRecognizer` hands the attention decoders.

SavedModel only: TFLite and ONNX are refused in one line before anything loads (the step
signatures take and give tensors of dynamic rank-2 and rank-3 shapes, and a Transformer's loop
grows its token tensor; neither the ONNX export, which holds CTC's graph, nor a built-ins-only
TFLite model holds that).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from asrkit.core.errors import AsrkitError
from asrkit.decoders.attention import ATTENTION_OUTPUTS
from asrkit.serving.graph import describe_module, make_logits_fn, pcm_signatures, text_of
from asrkit.types import Objective

if TYPE_CHECKING:
    import keras
    import numpy as np
    import tensorflow as tf

    from asrkit.runs.run import Run

#: The formats an attention run exports as.
FORMATS = ("savedmodel",)
#: The most labels the export's greedy search emits, per encoder frame (at least 1): a decoder
#: that never emits the end symbol stops there. 1, the ``attention-greedy`` decoder's default
#: ``max_length_ratio``: a transcript has at most as many labels as the encoder has frames.
MAX_LENGTH_RATIO = 1.0
#: Largest difference accepted between the export's encoder frames and the checkpoint's (as a
#: transducer export's: the search's argmax reads them at every step).
VERIFY_TOLERANCE = 1e-4
#: The signatures of an attention export, the step signatures after the PCM ones.
STEP_SIGNATURES = ("initial_state", "decode_step")


def exports_as_attention(objective: Objective) -> bool:
    """Whether ``objective``'s runs export as attention encoder-decoders: those whose outputs
    the attention decoders read (their head meets
    :class:`~asrkit.decoders.attention.AttentionNetworks`)."""
    return objective.outputs == ATTENTION_OUTPUTS


def check_format(fmt: str) -> None:
    """One line, before anything loads, for a format an attention run cannot be exported as."""
    if fmt not in FORMATS:
        raise AsrkitError(f"asrkit export --format {fmt}: attention runs export as "
                          f"{' or '.join(FORMATS)} (the decoder's steps and its growing search "
                          f"are not converted to {fmt})")


def limit_of(frames: int) -> int:
    """The most labels the greedy search emits for ``frames`` encoder frames."""
    import math

    return max(1, math.floor(MAX_LENGTH_RATIO * frames))


def greedy_labels(head: Any, frames: tf.Tensor) -> tf.Tensor:
    """The attention decoder's greedy search over one utterance's encoder ``frames``
    ``[frames', d_model]``, in the graph: the labels int32 ``[n]`` it emits (the end symbol not
    included).

    A ``tf.while_loop`` over the token prefix ``[1, L]`` (the end symbol first; its length grows
    a step, hence the shape invariants) and the decoder's state ``[1, S]``: each step appends
    the argmax of ``decode_step``'s log-probabilities, until that is the end symbol or
    :func:`limit_of` labels are emitted."""
    import tensorflow as tf

    eos = int(head.eos)
    frames = tf.ensure_shape(frames, [None, head.encoder_width])
    count = tf.shape(frames)[0]
    batch, lengths = frames[tf.newaxis], count[tf.newaxis]
    limit = tf.maximum(1, tf.cast(tf.floor(MAX_LENGTH_RATIO * tf.cast(count, tf.float64)),
                                  tf.int32))

    def going(tokens: tf.Tensor, state: tf.Tensor, ended: tf.Tensor) -> tf.Tensor:
        return tf.logical_and(tf.logical_not(ended), tf.shape(tokens)[1] - 1 < limit)

    def step(tokens: tf.Tensor, state: tf.Tensor,
             ended: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        log_probs, state = head.decode_step(batch, lengths, tokens, state)
        best = tf.argmax(log_probs, axis=-1, output_type=tf.int32)  # [1]
        return tf.concat([tokens, best[:, tf.newaxis]], axis=1), state, tf.equal(best[0], eos)

    start = (tf.fill([1, 1], eos), tf.convert_to_tensor(head.initial_state(batch, lengths),
                                                        tf.float32), tf.constant(False))
    tokens, _, _ = tf.while_loop(
        going, step, start,
        shape_invariants=(tf.TensorShape([1, None]), tf.TensorShape([1, None]),
                          tf.TensorShape([])))
    labels = tokens[0, 1:]
    return tf.boolean_mask(labels, tf.not_equal(labels, eos))


def reference_greedy(networks: Any, frames: np.ndarray) -> list[int]:
    """The same search a step at a time in Python, over the head's (or an export's)
    ``decode_step`` on one utterance's ``frames`` ``[frames', d_model]``: what the export's
    ``transcribe`` must emit."""
    import numpy as np

    frames = np.asarray(frames, np.float32)[np.newaxis]
    lengths = np.array([frames.shape[1]], np.int32)
    eos = int(networks.eos)
    tokens = np.array([[eos]], np.int32)
    state = networks.initial_state(frames, lengths)
    labels: list[int] = []
    while len(labels) < limit_of(frames.shape[1]):
        log_probs, state = networks.decode_step(frames, lengths, tokens, state)
        best = int(np.argmax(np.asarray(log_probs)[0]))
        if best == eos:
            break
        labels.append(best)
        tokens = np.concatenate([tokens, [[best]]], axis=1).astype(np.int32)
    return labels


def attention_module(run: Run, model: keras.Model, head: Any) -> tf.Module:
    """A :class:`tf.Module` whose ``tf.function`` methods are an attention export's signatures
    (see the module docstring), as :func:`asrkit.serving.export.serving_module` is a CTC
    export's: the networks are not attributes, only their variables.

    Besides the variables that describe every export (``alphabet``, ``word_marker``,
    ``frame_seconds``, ``sample_rate``) it holds ``objective`` (``"attention"``),
    ``attention_decoder`` (``transformer`` or ``las``), ``has_ctc``, ``eos``, ``frame_width``
    and ``max_length_ratio``, so a SavedModel says what it is without its ``asrkit.json``.
    :meth:`checkpoint_labels` is what the export must reproduce."""
    import tensorflow as tf

    labels_of_run = run.labels
    width = int(head.encoder_width)
    encode_fn = tf.function(make_logits_fn(run, model),  # traced once for every signature
                            input_signature=[tf.TensorSpec([None], tf.float32, name="pcm")])
    frames_spec = tf.TensorSpec([None, None, width], tf.float32, name="frames")
    lengths_spec = tf.TensorSpec([None], tf.int32, name="lengths")
    tokens_spec = tf.TensorSpec([None, None], tf.int32, name="tokens")
    state_spec = tf.TensorSpec([None, None], tf.float32, name="state")
    has_ctc = bool(head.has_ctc)

    class Serving(tf.Module):
        def __init__(self) -> None:
            super().__init__(name="asrkit_serving")
            describe_module(self, run, model, head, "attention")
            self.attention_decoder = tf.Variable(
                str(getattr(head.config, "decoder", "")), trainable=False,
                name="attention_decoder")
            self.has_ctc = tf.Variable(has_ctc, trainable=False, name="has_ctc")
            self.eos = tf.Variable(int(head.eos), trainable=False, name="eos")
            self.frame_width = tf.Variable(width, trainable=False, name="frame_width")
            self.max_length_ratio = tf.Variable(MAX_LENGTH_RATIO, trainable=False,
                                                dtype=tf.float32, name="max_length_ratio")
            self._signatures = pcm_signatures(
                self, "encode", lambda audio: {"frames": encode_fn(audio)}, self._transcribe)

        def _transcribe(self, audio: tf.Tensor) -> dict[str, tf.Tensor]:
            labels = greedy_labels(head, encode_fn(audio))
            characters = tf.gather(self._symbols, labels)
            return {"labels": labels, "characters": characters,
                    "text": text_of(characters, labels_of_run)}

        @tf.function(input_signature=[frames_spec])
        def ctc_log_probs(self, frames: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"log_probs": head.ctc_log_probs(frames)}

        @tf.function(input_signature=[frames_spec, lengths_spec])
        def initial_state(self, frames: tf.Tensor, lengths: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"state": tf.convert_to_tensor(head.initial_state(frames, lengths),
                                                  tf.float32)}

        @tf.function(input_signature=[frames_spec, lengths_spec, tokens_spec, state_spec])
        def decode_step(self, frames: tf.Tensor, lengths: tf.Tensor, tokens: tf.Tensor,
                        state: tf.Tensor) -> dict[str, tf.Tensor]:
            log_probs, state = head.decode_step(frames, lengths, tokens, state)
            return {"log_probs": log_probs, "state": tf.convert_to_tensor(state, tf.float32)}

        def signatures(self) -> dict[str, Any]:
            functions = dict(self._signatures)
            functions.update(initial_state=self.initial_state, decode_step=self.decode_step)
            if has_ctc:
                functions["ctc_log_probs"] = self.ctc_log_probs
            return functions

        def checkpoint_labels(self, frames: np.ndarray) -> list[int]:
            """The checkpoint head's greedy search on encoder ``frames`` ``[frames',
            d_model]`` (:func:`reference_greedy`): what the export's ``transcribe`` must
            emit."""
            return reference_greedy(head, frames)

    return Serving()


def signature_names(has_ctc: bool) -> list[str]:
    pcm = ["encode", "transcribe", "encode_int16", "transcribe_int16", "serving_default"]
    return pcm + list(STEP_SIGNATURES) + (["ctc_log_probs"] if has_ctc else [])


def metadata(head: Any) -> dict[str, Any]:
    """What ``asrkit.json`` says about an attention export (beside what every export says;
    ``decoder`` stays the run's, the one ``asrkit transcribe`` uses by default)."""
    has_ctc = bool(head.has_ctc)
    outputs = {"encode": ["frames"], "transcribe": ["labels", "characters", "text"],
               "initial_state": ["state"], "decode_step": ["log_probs", "state"]}
    if has_ctc:
        outputs["ctc_log_probs"] = ["log_probs"]
    return {
        "objective": "attention",
        "attention_decoder": str(getattr(head.config, "decoder", "")),
        "has_ctc": has_ctc,
        "eos": int(head.eos),
        "frame_width": int(head.encoder_width),
        "max_length_ratio": MAX_LENGTH_RATIO,
        "signatures": signature_names(has_ctc),
        "outputs": outputs,
    }


class ExportedAttentionNetworks:
    """A loaded attention SavedModel's step signatures as an
    :class:`~asrkit.decoders.attention.AttentionNetworks`: what asrkit's attention decoders
    call, so that they decode an export as they decode its run. Arrays or tensors in (cast to
    the signatures' float32 and int32), float32 tensors out; callable inside a
    ``tf.function``."""

    def __init__(self, loaded: Any, eos: int, has_ctc: bool) -> None:
        self._loaded = loaded
        self.eos = int(eos)
        self.has_ctc = bool(has_ctc)

    def _call(self, name: str, **inputs: Any) -> dict[str, Any]:
        import tensorflow as tf

        types = {"frames": tf.float32, "state": tf.float32, "lengths": tf.int32,
                 "tokens": tf.int32}
        return self._loaded.signatures[name](
            **{key: tf.cast(value, types[key]) for key, value in inputs.items()})

    def ctc_log_probs(self, frames: Any) -> Any:
        if not self.has_ctc:
            raise AsrkitError("this attention export has no CTC output (its run was trained "
                              "with ctc_weight 0)")
        return self._call("ctc_log_probs", frames=frames)["log_probs"]

    def initial_state(self, frames: Any, lengths: Any) -> Any:
        return self._call("initial_state", frames=frames, lengths=lengths)["state"]

    def decode_step(self, frames: Any, lengths: Any, tokens: Any,
                    state: Any) -> tuple[Any, Any]:
        out = self._call("decode_step", frames=frames, lengths=lengths, tokens=tokens,
                         state=state)
        return out["log_probs"], out["state"]
