"""sherpa-onnx export: a CTC run as the ``model.onnx`` and ``tokens.txt`` that k2-fsa's
sherpa-onnx loads for offline recognition (C++, Python, Android, iOS ...), as it loads icefall's
Zipformer CTC models (``OfflineRecognizer.from_zipformer_ctc``, ``--zipformer-ctc-model``). A
transducer run exports as icefall's transducers do (:mod:`asrkit.serving.export_sherpa_transducer`,
with the features, the check of what exports and the tokens' symbols of this module).

Why that loader: sherpa-onnx computes the features itself and feeds them to the model, and
its Zipformer CTC loader is the one that computes plain Kaldi fbank with sherpa-onnx's default
options (kaldi-native-fbank: dither 0, ``snip_edges=false``, DC offset removed, pre-emphasis
0.97, povey window, 25 ms windows every 10 ms, a 512-point FFT, mel bins from 20 Hz to
7600 Hz, samples in [-1, 1]), gives the model the features' lengths, and takes the output
lengths from the model: asrkit's ``logmel`` with ``kaldi=true`` computes exactly that
(:func:`asrkit.features.kaldi_fbank`), and the model's own output length (a ds2's or a
conformer's time stride) stays the model's. NeMo's CTC loader, the other with lengths, forces
librosa-style Hann-window features and divides lengths by a fixed subsampling factor.

The graph (converted by :func:`asrkit.serving.export_onnx.convert`, as ``--format onnx``):

``x``              input, float32 ``[N, T, num_mel_bins]``: fbank frames, padded (sherpa-onnx
                   pads a batch with log(1e-10))
``x_lens``         input, int64 ``[N]``: each utterance's frames
``log_probs``      output, float32 ``[N, T', classes]``: log-softmax of the logits (the blank,
                   ``<blk>`` in tokens.txt, is the last class, as in asrkit)
``log_probs_len``  output, int64 ``[N]``: the model's output frames of each utterance

Inside: padding zeroed, the run's per-utterance normalisation (over each utterance's own
frames, so batching changes nothing), its context windows, the model
(:func:`asrkit.serving.graph.make_batch_logits_fn`). The metadata sherpa-onnx reads:
``model_type`` (``zipformer2_ctc``), ``vocab_size``; also ``subsampling_factor``, the
features' settings and asrkit's version, for people.

``tokens.txt``: ``symbol id`` a line, the blank as ``<blk>`` (sherpa-onnx's greedy search
reads its id there), the space of a character alphabet as ``▁`` (which sherpa-onnx makes a
space again; a line cannot hold a space). sherpa-onnx joins the symbols and drops one leading
space; asrkit's text of the same labels differs from it at most in spaces at the ends or
repeated.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asrkit import __version__
from asrkit.core.errors import AsrkitError
from asrkit.core.frames import SAMPLE_RATE
from asrkit.features import LogMelConfig, normalize
from asrkit.serving.export_onnx import ONNX_FILE, OPSET, convert, session
from asrkit.serving.export_transducer import exports_as_transducer
from asrkit.serving.graph import make_batch_logits_fn, make_logits_fn

if TYPE_CHECKING:
    import keras
    import numpy as np
    import tensorflow as tf

    from asrkit.core.labels import Labels
    from asrkit.runs.run import Run

FORMAT = "sherpa-onnx"
TOKENS_FILE = "tokens.txt"
INPUTS = ("x", "x_lens")
OUTPUTS = ("log_probs", "log_probs_len")
#: The ``model_type`` metadata value sherpa-onnx's CTC loader recognises as the Zipformer CTC.
MODEL_TYPE = "zipformer2_ctc"
BLANK = "<blk>"
#: What sherpa-onnx turns into a space when it starts a token (U+2581).
SPACE = "\u2581"
#: The ``logmel`` settings whose values must be sherpa-onnx's feature extractor's defaults (its
#: ``FeatureExtractorConfig``): what ``-o features.KEY=VALUE`` trains for it. ``num_mel_bins``
#: and ``normalize`` may be anything (the first is sherpa-onnx's ``feature_dim``; the second
#: happens in the graph).
SHERPA_FEATURES: dict[str, Any] = {
    "kaldi": True, "sample_rate": SAMPLE_RATE, "window_ms": 25.0, "step_ms": 10.0,
    "fft_length": 512, "preemphasis": 0.97, "low_hz": 20.0, "high_hz": 7600.0,
    "pcm_scale": 1.0,
}
#: Largest difference accepted between the export's log-probabilities and the checkpoint's on
#: the same features (float32 kernels that add in another order).
VERIFY_TOLERANCE = 1e-3


class SherpaExportError(AsrkitError):
    """A run sherpa-onnx cannot load as exported, or an export that does not verify."""


# -- what can be exported -----------------------------------------------------------------------


def settings_to_train(run: Run) -> list[str]:
    """The ``-o`` options a run would need for sherpa-onnx to compute its features (none when
    it can): ``features=logmel`` and the settings of :data:`SHERPA_FEATURES` it lacks."""
    if run.extractor.name != "logmel":
        defaults = LogMelConfig()
        return ["features=logmel"] + [f"features.{key}={_option(value)}"
                                      for key, value in SHERPA_FEATURES.items()
                                      if getattr(defaults, key) != value]
    return [f"features.{key}={_option(value)}" for key, value in SHERPA_FEATURES.items()
            if getattr(run.feature_config, key) != value]


def _option(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return f"{value:g}" if isinstance(value, float) else str(value)


def check_run(run: Run) -> None:
    """One line, before any weights load, for a run sherpa-onnx cannot load as exported: not a
    CTC run or a transducer with a stateless prediction network (an LSTM's state and attention
    decoders have no sherpa-onnx layout asrkit writes), features sherpa-onnx does not compute
    (it names the ``-o`` settings to train with), or labels a ``tokens.txt`` cannot hold."""
    if exports_as_transducer(run.objective):
        predictor = getattr(run.objective_config, "predictor", "lstm")
        if predictor != "stateless":
            raise SherpaExportError(
                f"{run.folder}'s transducer has an {predictor} prediction network; "
                "sherpa-onnx's transducer layout reads a stateless one (the last labels "
                "alone): train with -o objective.predictor=stateless (docs/sherpa-onnx.md), "
                "or export as savedmodel or tflite")
    elif not run.objective.ctc_outputs:
        raise SherpaExportError(
            f"{run.folder} was trained with the {run.train.objective} objective; --format "
            "sherpa-onnx exports CTC and transducer runs only (export it as savedmodel)")
    missing = settings_to_train(run)
    if missing:
        raise SherpaExportError(
            f"sherpa-onnx computes Kaldi fbank features itself, not this run's "
            f"{run.extractor.name} features; train for it with "
            + " ".join(f"-o {option}" for option in missing) + " (docs/sherpa-onnx.md)")
    written_symbols(run.labels)


def written_symbols(labels: Labels) -> list[str]:
    """Each label's symbol as ``tokens.txt`` writes it (see the module docstring); one line for
    labels it cannot hold."""
    written = []
    for index, symbol in enumerate(labels.symbols):
        token = SPACE + symbol[1:] if symbol.startswith(" ") else symbol
        if not token or any(c.isspace() for c in token) or (
                labels.word_marker != SPACE and symbol.startswith(SPACE)):
            raise SherpaExportError(f"label {index} ({symbol!r}) cannot be written to "
                                    "tokens.txt (whitespace inside, or sherpa-onnx's space "
                                    f"marker {SPACE!r} in a character alphabet)")
        written.append(token)
    return written


def _tokens(labels: Labels) -> list[str]:
    """A CTC export's ``tokens.txt`` lines: each label at its own id, the blank last."""
    lines = [f"{symbol} {index}" for index, symbol in enumerate(written_symbols(labels))]
    return [*lines, f"{BLANK} {labels.blank}"]


# -- writing ------------------------------------------------------------------------------------


def sherpa_function(run: Run, model: keras.Model, outputs: tuple[str, str] = OUTPUTS,
                    log_softmax: bool = True) -> tf.types.experimental.PolymorphicFunction:
    """``fn(x, x_lens) -> {"log_probs", "log_probs_len"}``: what ``model.onnx`` computes from
    the features sherpa-onnx gives it; with ``log_softmax`` false, the model's outputs as they
    are (a transducer's encoder frames), under the names ``outputs``."""
    import tensorflow as tf

    batch_fn = make_batch_logits_fn(run, model)
    mode = getattr(run.feature_config, "normalize", "none")
    width = run.extractor.num_features(run.feature_config)

    @tf.function(input_signature=[tf.TensorSpec([None, None, width], tf.float32, name=INPUTS[0]),
                                  tf.TensorSpec([None], tf.int64, name=INPUTS[1])])
    def recognise(x: tf.Tensor, x_lens: tf.Tensor) -> dict[str, tf.Tensor]:
        lengths = tf.cast(x_lens, tf.int32)
        mask = tf.sequence_mask(lengths, tf.shape(x)[1], dtype=tf.float32)[:, :, tf.newaxis]
        features = normalize(x * mask, mode, lengths)
        logits, out_lengths = batch_fn(features, lengths)
        return {outputs[0]: tf.nn.log_softmax(logits, axis=-1) if log_softmax else logits,
                outputs[1]: tf.cast(out_lengths, tf.int64)}

    return recognise


def write(run: Run, model: keras.Model, folder: Path) -> None:
    """``folder/model.onnx`` (with sherpa-onnx's metadata) and ``folder/tokens.txt``."""
    check_run(run)
    convert(sherpa_function(run, model), folder / ONNX_FILE, run.spec.name, model_metadata(run))
    (folder / TOKENS_FILE).write_text("\n".join(_tokens(run.labels)) + "\n", encoding="utf-8")


def model_metadata(run: Run, model_type: str = MODEL_TYPE, kind: str = "CTC") -> dict[str, str]:
    """The ONNX model's metadata: what sherpa-onnx reads (``model_type``, ``vocab_size``) and
    what says where it came from (a ``kind`` run's)."""
    config = run.feature_config
    return {
        "model_type": model_type,
        "vocab_size": str(run.labels.num_classes),
        "subsampling_factor": str(run.spec.time_stride(run.model_config)),
        "feature_dim": str(run.extractor.num_features(config)),
        "normalize": str(getattr(config, "normalize", "none")),
        "model_author": f"asrkit {__version__}",
        "comment": f"asrkit {run.spec.name} {kind} run, Kaldi fbank input "
                   + json.dumps(dataclasses.asdict(config), sort_keys=True),
    }


def metadata(run: Run) -> dict[str, Any]:
    """What ``asrkit.json`` says about a sherpa-onnx export (beside what every export says)."""
    return {"file": ONNX_FILE, "tokens": TOKENS_FILE, "opset": OPSET, "signatures": [],
            "inputs": list(INPUTS), "outputs": list(OUTPUTS), "model_type": MODEL_TYPE,
            "feature_dim": run.extractor.num_features(run.feature_config),
            "subsampling_factor": run.spec.time_stride(run.model_config)}


# -- checking -----------------------------------------------------------------------------------


def raw_features(run: Run, audio: np.ndarray) -> np.ndarray:
    """The run's features of float32 ``audio`` before normalisation: what sherpa-onnx feeds
    the model (:func:`asrkit.features.kaldi_fbank`)."""
    import numpy as np

    config = dataclasses.replace(run.feature_config, normalize="none")
    return np.asarray(run.extractor.extract(audio, config), np.float32)


def padded(features: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """A batch of utterances' features padded as sherpa-onnx pads them (``log(1e-10)``), and
    their lengths: the inputs ``x`` and ``x_lens``."""
    import numpy as np

    longest = max(len(f) for f in features)
    x = np.full([len(features), longest, features[0].shape[1]], np.log(1e-10), np.float32)
    for row, f in enumerate(features):
        x[row, : len(f)] = f
    return x, np.array([len(f) for f in features], np.int64)


def run_batch(path: Path, features: list[np.ndarray], inputs: tuple[str, str] = INPUTS,
              outputs: tuple[str, str] = OUTPUTS) -> list[np.ndarray]:
    """The ONNX model ``path``'s outputs for a batch of utterances' features (padded as
    sherpa-onnx pads them, fed as ``inputs``), each cut to its length (``outputs``: the frames,
    then their lengths): a CTC export's log-probabilities, a transducer's encoder frames."""
    x, lens = padded(features)
    out, out_lens = session(path).run(list(outputs), {inputs[0]: x, inputs[1]: lens})
    return [out[row, : out_lens[row]] for row in range(len(features))]


def verify(folder: Path, run: Run, model: keras.Model, audios: list[np.ndarray]) -> float:
    """The largest difference between the export's log-probabilities (``audios`` batched, with
    their features as :func:`raw_features` computes them) and the checkpoint's whole-utterance
    graph's; an error beyond :data:`VERIFY_TOLERANCE` or for other output lengths."""
    import numpy as np
    import tensorflow as tf

    logits_fn = make_logits_fn(run, model)
    got = run_batch(folder / ONNX_FILE, [raw_features(run, audio) for audio in audios])
    difference = 0.0
    for audio, exported in zip(audios, got, strict=True):
        expected = tf.nn.log_softmax(logits_fn(tf.constant(audio, tf.float32))).numpy()
        if exported.shape != expected.shape:
            raise SherpaExportError(f"the sherpa-onnx export gives log-probabilities of shape "
                                    f"{exported.shape}, the checkpoint {expected.shape}")
        difference = max(difference, float(np.max(np.abs(exported - expected))))
    if not np.isfinite(difference) or difference > VERIFY_TOLERANCE:
        raise SherpaExportError(f"the sherpa-onnx export's log-probabilities differ from the "
                                f"checkpoint's by {difference:.3g} (more than "
                                f"{VERIFY_TOLERANCE})")
    return difference
