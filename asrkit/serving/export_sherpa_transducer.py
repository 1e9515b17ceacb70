"""sherpa-onnx export of a transducer run: ``encoder.onnx``, ``decoder.onnx``, ``joiner.onnx``
and ``tokens.txt``, the layout of icefall's offline transducers, which sherpa-onnx loads with
``OfflineRecognizer.from_transducer`` (``--encoder``, ``--decoder``, ``--joiner`` on its command
line) and decodes with its greedy or modified beam search.

Why only runs with the stateless prediction network (``-o objective.predictor=stateless``):
sherpa-onnx's icefall transducer loader calls the decoder on the last ``context_size`` labels
of a hypothesis alone and keeps no state, as k2's pruned transducers are built; an LSTM's
state has no place in that layout. (Its NeMo loader keeps LSTM states, but computes
librosa-style features asrkit does not, and reads NeMo's layout.) An LSTM run is refused in one
line before any weights load (:func:`asrkit.serving.export_sherpa.check_run`).

The features are the CTC export's (:mod:`asrkit.serving.export_sherpa`: Kaldi fbank, which
sherpa-onnx computes itself). The three graphs, converted by
:func:`asrkit.serving.export_onnx.convert`:

``encoder``  ``x`` float32 ``[N, T, num_mel_bins]`` and ``x_lens`` int64 ``[N]`` ->
             ``encoder_out`` ``[N, T', joint_dim]`` (the encoder's frames: its output layer is
             the joint network's projection of them) and ``encoder_out_lens`` int64 ``[N]``;
             metadata ``model_type`` (``zipformer2``, the value that selects sherpa-onnx's
             icefall transducer loader), ``vocab_size``, ``context_size``
``decoder``  ``y`` int64 ``[N, context_size]`` -> ``decoder_out`` ``[N, joint_dim]``: the
             prediction network's output projected into the joint network; metadata
             ``vocab_size``, ``context_size`` (which sherpa-onnx reads)
``joiner``   ``encoder_out`` and ``decoder_out``, each ``[N, joint_dim]`` -> ``logit``
             ``[N, vocab_size]``: the joint network's log-probabilities

Token ids: sherpa-onnx's transducer searches take id 0 for the blank (icefall's); asrkit's blank
is its last class. The export numbers the blank 0 and every label one higher (``tokens.txt``
is written so), the decoder maps the ids back and the joiner puts the blank's column first.
sherpa-onnx starts a hypothesis with the context ``[-1, ..., -1, 0]``: the decoder reads -1 as
the blank too, so the first context is the one asrkit's prediction network starts from (all
blanks).

sherpa-onnx's greedy search emits at most one label a frame (the models it ships are trained
for that); asrkit's ``transducer-greedy`` with ``-o decoder.max_symbols=1`` is the same search.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from asrkit.serving.export_onnx import OPSET, convert, session
from asrkit.serving.export_sherpa import (
    BLANK,
    TOKENS_FILE,
    SherpaExportError,
    check_run,
    model_metadata,
    raw_features,
    run_batch,
    sherpa_function,
    written_symbols,
)
from asrkit.serving.graph import make_logits_fn

if TYPE_CHECKING:
    import keras
    import numpy as np
    import tensorflow as tf

    from asrkit.core.labels import Labels
    from asrkit.runs.run import Run

ENCODER, DECODER, JOINER = "encoder.onnx", "decoder.onnx", "joiner.onnx"
ENCODER_INPUTS = ("x", "x_lens")
ENCODER_OUTPUTS = ("encoder_out", "encoder_out_lens")
DECODER_INPUTS, DECODER_OUTPUTS = ("y",), ("decoder_out",)
JOINER_INPUTS, JOINER_OUTPUTS = ("encoder_out", "decoder_out"), ("logit",)
#: The encoder's ``model_type``: what selects sherpa-onnx's icefall transducer loader when no
#: model type is given (its ``from_transducer`` says ``transducer`` itself).
MODEL_TYPE = "zipformer2"
#: Largest difference accepted between the export's outputs and the checkpoint's networks'.
VERIFY_TOLERANCE = 1e-3


def tokens(labels: Labels) -> list[str]:
    """``tokens.txt``'s lines: the blank first as id 0, then each label one id higher."""
    return [f"{BLANK} 0", *(f"{symbol} {index + 1}"
                            for index, symbol in enumerate(written_symbols(labels)))]


# -- the graphs ---------------------------------------------------------------------------------


def decoder_function(head: keras.Model, context_size: int
                     ) -> tf.types.experimental.PolymorphicFunction:
    """``fn(y) -> {"decoder_out"}``: the prediction network on each row's last labels (in the
    export's ids), through the head's own step (:meth:`predict_step`): its state is the labels
    before the last, which it reads with the last one."""
    import tensorflow as tf

    blank = int(head.blank)

    @tf.function(input_signature=[tf.TensorSpec([None, context_size], tf.int64,
                                                name=DECODER_INPUTS[0])])
    def decode(y: tf.Tensor) -> dict[str, tf.Tensor]:
        ids = tf.cast(y, tf.int32) - 1  # the export's id k is asrkit's label k - 1
        ids = tf.where(ids < 0, blank, ids)  # 0 (the blank) and -1 (before the start)
        before = tf.concat([tf.fill([tf.shape(ids)[0], 1], blank), ids[:, :-1]], axis=1)
        predicted, _ = head.predict_step(ids[:, -1], tf.cast(before, tf.float32))
        return {DECODER_OUTPUTS[0]: tf.cast(predicted, tf.float32)}

    return decode


def joiner_function(head: keras.Model, joint_dim: int
                    ) -> tf.types.experimental.PolymorphicFunction:
    """``fn(encoder_out, decoder_out) -> {"logit"}``: the joint network's log-probabilities, the
    blank's column first."""
    import tensorflow as tf

    blank = int(head.blank)
    spec = [tf.TensorSpec([None, joint_dim], tf.float32, name=name) for name in JOINER_INPUTS]

    @tf.function(input_signature=spec)
    def join(encoder_out: tf.Tensor, decoder_out: tf.Tensor) -> dict[str, tf.Tensor]:
        log_probs = head.joint_step(encoder_out, decoder_out)
        return {JOINER_OUTPUTS[0]: tf.concat([log_probs[:, blank:blank + 1],
                                              log_probs[:, :blank]], axis=1)}

    return join


def write(run: Run, model: keras.Model, head: keras.Model, folder: Path) -> None:
    """The three ONNX files (with sherpa-onnx's metadata) and ``tokens.txt`` in ``folder``."""
    check_run(run)
    config = run.objective_config
    name = run.spec.name
    context = {"context_size": str(config.context_size)}
    convert(sherpa_function(run, model, ENCODER_OUTPUTS, log_softmax=False), folder / ENCODER,
            name, {**model_metadata(run, MODEL_TYPE, "transducer"), **context})
    convert(decoder_function(head, config.context_size), folder / DECODER, name,
            {"vocab_size": str(run.labels.num_classes), **context})
    convert(joiner_function(head, config.joint_dim), folder / JOINER, name)
    (folder / TOKENS_FILE).write_text("\n".join(tokens(run.labels)) + "\n", encoding="utf-8")


def metadata(run: Run) -> dict[str, Any]:
    """What ``asrkit.json`` says about a transducer's sherpa-onnx export."""
    return {"objective": "transducer", "files": [ENCODER, DECODER, JOINER], "file": ENCODER,
            "tokens": TOKENS_FILE, "opset": OPSET, "signatures": [],
            "inputs": list(ENCODER_INPUTS), "outputs": list(ENCODER_OUTPUTS),
            "model_type": "transducer", "context_size": run.objective_config.context_size,
            "feature_dim": run.extractor.num_features(run.feature_config),
            "subsampling_factor": run.spec.time_stride(run.model_config), "max_symbols": 1}


# -- reading it back ------------------------------------------------------------------------------


def verify(folder: Path, run: Run, model: keras.Model, head: keras.Model,
           audios: list[np.ndarray]) -> float:
    """The largest difference between the export and the checkpoint's networks: the encoder's
    frames (``audios`` batched, their features as sherpa-onnx computes them), and the decoder's
    and joiner's outputs along the head's own greedy path over each utterance (one label a
    frame, as sherpa-onnx searches); an error beyond :data:`VERIFY_TOLERANCE` or for other
    output lengths."""
    import numpy as np
    import tensorflow as tf

    frames_fn = make_logits_fn(run, model)
    got = run_batch(folder / ENCODER, [raw_features(run, audio) for audio in audios],
                    ENCODER_INPUTS, ENCODER_OUTPUTS)
    decoder, joiner = session(folder / DECODER), session(folder / JOINER)
    context_size, blank = run.objective_config.context_size, int(head.blank)
    difference = 0.0
    for audio, exported in zip(audios, got, strict=True):
        expected = frames_fn(tf.constant(audio, tf.float32)).numpy()
        if exported.shape != expected.shape:
            raise SherpaExportError(f"the sherpa-onnx export's encoder gives frames of shape "
                                    f"{exported.shape}, the checkpoint {expected.shape}")
        difference = max(difference, float(np.max(np.abs(exported - expected))))
        context = [-1] * (context_size - 1) + [0]  # the export's ids, as sherpa-onnx starts
        predicted, state = head.predict_step(tf.fill([1], blank), head.initial_state(1))
        for frame in expected[:, None, :]:
            decoder_out = decoder.run(None, {DECODER_INPUTS[0]: np.array(
                [context[-context_size:]], np.int64)})[0]
            logit = joiner.run(None, {JOINER_INPUTS[0]: frame, JOINER_INPUTS[1]: decoder_out})[0]
            log_probs = head.joint_step(tf.constant(frame), predicted).numpy()
            want = np.concatenate([log_probs[:, blank:], log_probs[:, :blank]], axis=1)
            difference = max(difference, float(np.max(np.abs(decoder_out - predicted.numpy()))),
                             float(np.max(np.abs(logit - want))))
            best = int(np.argmax(log_probs[0]))
            if best != blank:
                context.append(best + 1)
                predicted, state = head.predict_step(tf.fill([1], best), state)
    if not np.isfinite(difference) or difference > VERIFY_TOLERANCE:
        raise SherpaExportError(f"the sherpa-onnx export's outputs differ from the checkpoint's "
                                f"by {difference:.3g} (more than {VERIFY_TOLERANCE})")
    return difference
