"""Post-training quantisation of a TFLite export: smaller files, for ``asrkit export --format
tflite --quantize MODE``.

Modes (:data:`MODES`):

``none``     float32 throughout (the default; verified to match the checkpoint within 1e-3).
``int8``     dynamic-range quantisation: the model's weights stored as int8 (a quarter of
             float32's bytes), activations float; the kernels that can (fully connected,
             convolutions) quantise their inputs on the fly. The feature front end stays
             float32 (see below). No data needed.
``float16``  weights stored as float16 (half the bytes), computed in float32.
``full``     integer quantisation calibrated on a representative dataset: up to
             :data:`REPRESENTATIVE_UTTERANCES` utterances of the run's training split, drawn with
             a fixed seed, fed as the export reads audio (raw PCM, to both the float and the int16
             signatures), so the activation ranges are those of the features as the model reads
             them. Weights *and* activations of the model's operations are int8; the inputs and
             outputs stay float32 (PCM in, logits out): the export reads audio and gives logits
             and labels like every other one, so callers do not change.

What ``full`` does not quantise, on purpose or because TFLite cannot:

- the feature front end (framing, FFT, mel filterbank, log, normalisation; the operations under
  :data:`asrkit.serving.graph.FEATURES_SCOPE`) stays float32: the power spectrum spans many
  orders of magnitude, which an 8-bit linear scale cannot hold before the log;
- ``REVERSE_SEQUENCE`` (a bidirectional RNN's backward pass) stays float32: the converter
  quantises it, but the TFLite interpreter has no int8 kernel for it;
- operations without an int8 kernel fall back to float32 (the converter inserts
  quantise/dequantise around them) instead of failing.

So ``full`` is integer quantisation with float fallback, not an integer-only model (which an
integer accelerator would need): the export's ``asrkit.json`` counts the int8 and float32
operations under ``quantization`` (:func:`operation_counts`) so that nobody has to guess.
Dynamic-range ``int8`` keeps the front end float32 too (:func:`float_front_end`): its kernels
would quantise the power spectrum to 8 bits on the fly.

A transducer run's export takes ``int8`` and ``float16`` (the same converter settings); ``full``
is refused in one line: calibrating the in-graph greedy search's loop has not been done.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any

from asrkit.core.errors import AsrkitError
from asrkit.core.frames import SAMPLE_RATE
from asrkit.dataset.audio import read_wav
from asrkit.dataset.folders import resolve_dataset
from asrkit.dataset.manifest import read_csv
from asrkit.serving.graph import FEATURES_SCOPE, PCM_SCALE

if TYPE_CHECKING:
    import numpy as np
    import tensorflow as tf

    from asrkit.runs.run import Run

MODES = ("none", "int8", "float16", "full")
#: How many training utterances calibrate a ``full`` export (fewer when the split is smaller).
REPRESENTATIVE_UTTERANCES = 100
#: The seed of the draw, so that the same run gives the same export.
REPRESENTATIVE_SEED = 0
#: Longer utterances are cut to this many seconds: calibration needs ranges, not whole talks.
MAX_SECONDS = 15.0
#: Operations that ``full`` keeps in float32 although the converter would quantise them: the
#: interpreter has no int8 kernel for them, and the model would fail when it is first run.
FLOAT_OPS = ("REVERSE_SEQUENCE",)
#: What each mode stores, for ``asrkit.json``.
DESCRIPTIONS = {
    "int8": {"weights": "int8 (the feature front end's float32)",
             "activations": "float32 (quantised on the fly by the kernels that can)",
             "inputs_outputs": "float32"},
    "float16": {"weights": "float16", "activations": "float32", "inputs_outputs": "float32"},
    "full": {"weights": "int8 (the feature front end's float32)",
             "activations": "int8, with float32 fallback (feature front end, operations "
                            "without int8 kernels)",
             "inputs_outputs": "float32 (int16 PCM for the *_int16 signatures)"},
}


class QuantizeError(AsrkitError):
    """A quantised export that cannot be made."""


def check_mode(fmt: str, mode: str, transducer: bool = False) -> None:
    """One line, before any work, for a mode that does not exist or that ``fmt`` (or a
    transducer run) cannot take."""
    if mode not in MODES:
        raise QuantizeError(f"unknown --quantize {mode!r}; choose one of {', '.join(MODES)}")
    if mode != "none" and fmt != "tflite":
        raise QuantizeError(f"--quantize {mode} needs --format tflite (a {fmt} export is "
                            "float32)")
    if mode == "full" and transducer:
        raise QuantizeError("--quantize full is not supported for transducer runs (their "
                            "in-graph greedy search is not calibrated); use int8 or float16")


def utterances(run: Run, split: str, count: int, seed: int = REPRESENTATIVE_SEED,
               max_seconds: float = MAX_SECONDS) -> list[np.ndarray]:
    """Up to ``count`` utterances of ``split`` of the run's dataset, drawn with ``seed``, as
    float32 PCM in [-1, 1] (what the export's float signatures read), each cut to
    ``max_seconds``. A one-line error when the dataset or the split is not there."""
    import numpy as np

    dataset = resolve_dataset(run.train.dataset)
    listing = dataset / f"{split}.csv"
    if not listing.exists():
        raise QuantizeError(f"{dataset} has no {split} split ({listing.name})")
    rows = list(read_csv(listing))
    if not rows:
        raise QuantizeError(f"{listing} lists no utterances")
    picked = np.random.default_rng(seed).permutation(len(rows))[:count]
    limit = int(max_seconds * SAMPLE_RATE)
    audio = []
    for index in sorted(picked):
        path = dataset / rows[index].wav_filename
        try:
            samples = read_wav(path)
        except (OSError, EOFError) as error:  # a file gone or cut short since the import
            raise QuantizeError(f"cannot read {path} ({error.__class__.__name__}: {error}); "
                                "import the dataset again with --force") from None
        audio.append(samples[:limit].astype(np.float32) / PCM_SCALE)
    return audio


def representative_audio(run: Run, count: int = REPRESENTATIVE_UTTERANCES) -> list[np.ndarray]:
    """The utterances that calibrate a ``full`` export: from the run's training split."""
    try:
        return utterances(run, run.train.train_split, count)
    except AsrkitError as error:
        raise QuantizeError(f"--quantize full calibrates on the run's training split: "
                            f"{error}") from None


def configure(converter: tf.lite.TFLiteConverter, mode: str) -> None:
    """Set ``converter`` up for ``int8`` or ``float16`` (``full`` is :func:`convert_full`)."""
    import tensorflow as tf

    if mode == "none":
        return
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if mode == "float16":
        converter.target_spec.supported_types = [tf.float16]


def convert_full(converter: tf.lite.TFLiteConverter, signatures: list[str],
                 audio: list[np.ndarray]) -> bytes:
    """A ``full`` export's flatbuffer: calibrate on ``audio`` through every signature, then
    quantise everything but the feature front end and :data:`FLOAT_OPS`, inputs and outputs
    float.

    This is the selective quantisation that TensorFlow's ``QuantizationDebugger`` performs
    (calibrate only, then quantise with operations and nodes left out), without its debugging
    model: the converter alone can exclude neither the front end nor an operation type."""
    import numpy as np
    import tensorflow as tf
    from tensorflow.lite.python import convert

    def samples() -> Any:
        for pcm in audio:
            as_int16 = np.clip(np.round(pcm * PCM_SCALE), -32768, 32767).astype(np.int16)
            for signature in signatures:
                yield signature, {"pcm": as_int16 if signature.endswith("_int16") else pcm}

    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = samples
    converter.experimental_mlir_quantizer = True
    converter._experimental_calibrate_only = True  # (private, as the debugger sets it)
    calibrated = converter.convert()
    return bytes(convert.mlir_quantize(
        calibrated, fully_quantize=False, denylisted_ops=list(FLOAT_OPS),
        denylisted_nodes=front_end_nodes(calibrated)))


def float_front_end(flatbuffer: bytes) -> bytes:
    """``flatbuffer`` (dynamic-range ``int8``) with the feature front end's int8 weights made
    float32 again (dequantised: the mel filterbank, at 127 levels a filter).

    A dynamic-range kernel quantises its *input* to int8 on the fly, one scale a frame; the
    mel filterbank's input is a power spectrum spanning more orders of magnitude than 8 bits
    hold, so most of its bins become 0 and the log-mel features of quiet bands collapse to the
    log's floor (``ds2`` lost 6.6 points of CER so). The converter quantises every large
    constant and cannot leave one out, so it is done here, on the converted model: the front
    end's operations (:func:`front_end_nodes`) get float32 weights and run float32 kernels."""
    import numpy as np
    from tensorflow.lite.python import schema_py_generated as schema
    from tensorflow.lite.tools import flatbuffer_utils

    model, front = _model(flatbuffer), set(front_end_nodes(flatbuffer))
    done: set[int] = set()
    for graph in model.subgraphs:
        for op in graph.operators:
            if not {graph.tensors[i].name.decode() for i in op.outputs if i >= 0} & front:
                continue
            for tensor in (graph.tensors[i] for i in op.inputs if i >= 0):
                buffer = model.buffers[tensor.buffer]
                if tensor.type != schema.TensorType.INT8 or buffer.data is None:
                    continue
                if tensor.buffer not in done:
                    buffer.data = np.frombuffer(_dequantized(tensor, buffer.data).tobytes(),
                                                np.uint8)
                    done.add(tensor.buffer)
                tensor.type, tensor.quantization = schema.TensorType.FLOAT32, None
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


def _dequantized(tensor: Any, data: Any) -> np.ndarray:
    """The float32 values of an int8 constant: ``(q - zero point) * scale``, per channel along
    its quantised dimension when it has one scale a channel."""
    import numpy as np

    values = np.frombuffer(bytes(data), np.int8).astype(np.float32).reshape(tensor.shape)
    scale = np.asarray(tensor.quantization.scale, np.float32)
    zero = np.asarray(tensor.quantization.zeroPoint, np.float32)
    if scale.size > 1:
        shape = [1] * values.ndim
        shape[tensor.quantization.quantizedDimension] = scale.size
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    return ((values - zero) * scale).astype("<f4")


def _model(flatbuffer: bytes) -> Any:
    from tensorflow.lite.tools import flatbuffer_utils

    return flatbuffer_utils.read_model_from_bytearray(bytearray(flatbuffer))


def front_end_nodes(flatbuffer: bytes) -> list[str]:
    """The names of the operations of the feature front end in ``flatbuffer``: those whose
    output is named under :data:`FEATURES_SCOPE` (a fused operation's name joins its parts with
    ``;``)."""
    model, scope = _model(flatbuffer), f"{FEATURES_SCOPE}/"
    names = {tensor.name.decode()
             for graph in model.subgraphs for op in graph.operators
             for tensor in (graph.tensors[i] for i in op.outputs if i >= 0)}
    return sorted(n for n in names if any(part.startswith(scope) for part in n.split(";")))


def operation_counts(flatbuffer: bytes) -> dict[str, Any]:
    """What a TFLite model computes in and stores: the number of its operations (over every
    subgraph) whose first input is int8 and float32, of those reading int8 constants (weights),
    the float32 operation types that do arithmetic (not shape bookkeeping), and the bytes of its
    constants (weights and tables), all and those the feature front end reads (its mel
    filterbank, window...)."""
    from tensorflow.lite.python import schema_py_generated as schema

    operators = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    model, front = _model(flatbuffer), set(front_end_nodes(flatbuffer))
    counts: collections.Counter[str] = collections.Counter()
    float_kinds: collections.Counter[str] = collections.Counter()
    front_buffers: set[int] = set()
    for graph in model.subgraphs:
        for op in graph.operators:
            inputs = [graph.tensors[i] for i in op.inputs if i >= 0]
            if not inputs:
                continue
            constants = [t for t in inputs if model.buffers[t.buffer].data is not None]
            if {graph.tensors[i].name.decode() for i in op.outputs if i >= 0} & front:
                front_buffers.update(t.buffer for t in constants)
            code = model.operatorCodes[op.opcodeIndex]
            name = operators.get(max(code.builtinCode, code.deprecatedBuiltinCode), "?")
            counts["int8_weight_ops"] += any(t.type == schema.TensorType.INT8 for t in constants)
            if inputs[0].type == schema.TensorType.INT8:
                counts["int8_ops"] += 1
            elif inputs[0].type == schema.TensorType.FLOAT32:
                counts["float32_ops"] += 1
                if name not in SHAPE_OPS:
                    float_kinds[name] += 1

    def size(index: int) -> int:
        data = model.buffers[index].data
        return 0 if data is None else len(data)

    return {"int8_ops": counts["int8_ops"], "float32_ops": counts["float32_ops"],
            "int8_weight_ops": counts["int8_weight_ops"],
            "float32_arithmetic": dict(sorted(float_kinds.items())),
            "constant_bytes": sum(size(i) for i in range(len(model.buffers))),
            "front_end_constant_bytes": sum(size(i) for i in front_buffers)}


#: Operations that move or reshape values without arithmetic, left out of the float32 list.
SHAPE_OPS = frozenset({"RESHAPE", "SHAPE", "STRIDED_SLICE", "SLICE", "GATHER", "CONCATENATION",
                       "EXPAND_DIMS", "TRANSPOSE", "PAD", "PACK", "SQUEEZE", "QUANTIZE",
                       "SPLIT", "SPLIT_V", "REVERSE_SEQUENCE", "WHILE", "CAST"})


def metadata(mode: str, flatbuffer: bytes, utterances_used: int | None = None,
             split: str | None = None) -> dict[str, Any]:
    """What ``asrkit.json`` says about a quantised export (``quantize`` alone for ``none``)."""
    if mode == "none":
        return {"quantize": mode}
    described: dict[str, Any] = {**DESCRIPTIONS[mode], **operation_counts(flatbuffer)}
    if mode == "int8":
        described["kept_float"] = ["feature front end"]
    if mode == "full":
        described.update({"representative_split": split,
                          "representative_utterances": utterances_used,
                          "representative_seed": REPRESENTATIVE_SEED,
                          "representative_max_seconds": MAX_SECONDS,
                          "kept_float": ["feature front end", *FLOAT_OPS]})
    return {"quantize": mode, "quantization": described}
