"""ONNX export: the same audio-to-logits graph as the SavedModel and TFLite exports, features
inside, converted with tf2onnx and run with onnxruntime.

The graph is :func:`asrkit.serving.graph.make_logits_fn` (features, context windows, the model)
plus the
greedy path of :func:`asrkit.serving.graph.greedy_labels`, as one ONNX model ``model.onnx``:

``pcm``      input, float32 ``[samples]``: one utterance of 16 kHz mono audio in [-1, 1]
``logits``   output, float32 ``[frames', classes]`` (the blank is the last class)
``labels``   output, int32 ``[n]``: the greedy path's label indices (repeats merged, blanks
             dropped); ``asrkit.json`` describes the labels (``labels``: symbols, word marker),
             so ``"".join(alphabet[i] ...)`` is the text of characters, and for subword pieces
             the same with the marker made a space, spaces collapsed and stripped
             (:func:`asrkit.core.text.labels_from_json` and its ``decode`` do both)

tf2onnx (1.17) converts the whole graph, features included, once three of its op converters are
given a hand (``custom_op_handlers``, its documented extension point):

- ``RFFT``: tf2onnx writes the real FFT as a matrix product with a DFT matrix whose result holds
  the real and imaginary parts along a new first axis, but refuses unless the only consumer is
  ``ComplexAbs``. The feature extractors take ``real**2 + imag**2`` (``tf.math.real``/``imag``,
  which tf2onnx cannot convert at all), so here the RFFT converter is run as if its consumers
  were ``ComplexAbs``, and ``Real``/``Imag`` become a ``Gather`` of part 0 or 1 of that axis.
- ``FloorDiv`` and ``FloorMod`` on integers: tf2onnx writes them as ONNX ``Div``, which truncates
  towards zero; frame counting (``1 + ceil((n - window) / step)``, computed with a floor division
  of a negative number) then loses a frame. Here they floor, as TensorFlow does.

The export is checked as the others are: onnxruntime's logits on the verification signal must
equal the checkpoint's (they agree to about 1e-6 in float32).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asrkit.core.errors import AsrkitError
from asrkit.core.text import labels_from_json
from asrkit.serving.graph import greedy_labels, make_logits_fn

if TYPE_CHECKING:
    import keras
    import numpy as np
    import tensorflow as tf
    from tf2onnx.graph import Graph, Node

    from asrkit.core.labels import Labels
    from asrkit.runs.run import Run

ONNX_FILE = "model.onnx"
#: ONNX opset 17: supported by onnxruntime releases from 1.14 on and by tf2onnx's converters for
#: every operation the bundled models and feature extractors use.
OPSET = 17
INPUT = "pcm"
OUTPUTS = ("logits", "labels")


class OnnxExportError(AsrkitError):
    """A model that tf2onnx cannot convert, or an ONNX file onnxruntime cannot run."""


def metadata() -> dict[str, Any]:
    """What ``asrkit.json`` says about an ONNX export (beside what every export says)."""
    return {"file": ONNX_FILE, "opset": OPSET, "signatures": [], "inputs": [INPUT],
            "outputs": list(OUTPUTS)}


def onnx_function(run: Run, model: keras.Model) -> tf.types.experimental.PolymorphicFunction:
    """``fn(pcm float32 [samples]) -> {"logits", "labels"}``: what ``model.onnx`` computes."""
    import tensorflow as tf

    logits_fn = make_logits_fn(run, model)
    blank = run.labels.blank

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name=INPUT)])
    def recognise(pcm: tf.Tensor) -> dict[str, tf.Tensor]:
        logits = logits_fn(pcm)
        return {"logits": logits, "labels": greedy_labels(logits, blank)}

    return recognise


def write_onnx(run: Run, model: keras.Model, folder: Path) -> None:
    """Convert ``model`` (with the run's features) to ``folder/model.onnx``."""
    convert(onnx_function(run, model), folder / ONNX_FILE, run.spec.name)


def convert(function: tf.types.experimental.PolymorphicFunction, path: Path, name: str,
            metadata: Mapping[str, str] | None = None) -> None:
    """Convert the ``tf.function`` ``function`` (with its input signature) to the ONNX file
    ``path`` with tf2onnx and this module's op handlers, its ``metadata`` in the model's
    properties (what sherpa-onnx reads); an :class:`OnnxExportError` naming the operations
    tf2onnx could not convert when onnxruntime cannot load the result (tf2onnx logs a failed
    operation and carries on). ``name`` (the model's) is for the message. Every ONNX export
    converts through here: this one and sherpa-onnx's (:mod:`asrkit.serving.export_sherpa`)."""
    import tensorflow as tf

    try:
        import onnxruntime  # noqa: F401  (needed to verify the export)
        import tf2onnx
    except ImportError as error:
        raise OnnxExportError(f"the ONNX export needs tf2onnx and onnxruntime ({error}): "
                              "pip install tf2onnx onnxruntime") from None
    with _tf2onnx_errors() as errors:
        proto, _ = tf2onnx.convert.from_function(
            function, input_signature=function.input_signature, opset=OPSET,
            custom_op_handlers=_handlers())
    for key, value in (metadata or {}).items():
        proto.metadata_props.add(key=key, value=value)
    path.write_bytes(proto.SerializeToString())
    try:
        session(path)
    except Exception as error:  # onnxruntime raises its own exception types
        path.unlink(missing_ok=True)
        reasons = errors or [" ".join(str(error).split())]
        raise OnnxExportError(
            f"{name} cannot be converted to ONNX with tf2onnx {tf2onnx.__version__} "
            f"(TensorFlow {tf.__version__}): " + "; ".join(reasons)[:300]
        ) from None


def session(path: str | Path) -> Any:
    """An onnxruntime CPU session of the ONNX file ``path``, logging errors only."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # errors only
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


@contextlib.contextmanager
def _tf2onnx_errors() -> Iterator[list[str]]:
    """tf2onnx's log quieted (it reports every rewrite); its errors collected for the message."""
    errors: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            errors.append(record.getMessage().splitlines()[0])

    logger = logging.getLogger("tf2onnx")
    handler = Collect(logging.ERROR)
    level, propagate = logger.level, logger.propagate
    logger.setLevel(logging.ERROR)
    logger.propagate = False
    logger.addHandler(handler)
    try:
        yield errors
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


# -- tf2onnx op handlers (see the module docstring) ---------------------------------------------


def _handlers() -> dict[str, tuple[Callable[..., None], list[Any]]]:
    # tf2onnx's old handler API: (function, args), where a first arg renames the op; none here.
    return {"RFFT": (_rfft, []), "Real": (_real, []), "Imag": (_imag, []),
            "FloorDiv": (_floor_div, []), "FloorMod": (_floor_mod, [])}


def _rfft(ctx: Graph, node: Node, name: str, args: list[Any]) -> None:
    """tf2onnx's own RFFT converter, shown ``ComplexAbs`` consumers so that it converts."""
    from onnx import TensorProto
    from tf2onnx.onnx_opset.signal import RFFTOp

    if ctx.get_dtype(node.input[0]) == TensorProto.FLOAT:
        # In float64, as an FFT's rounding error is far below a DFT product's in float32.
        wide = ctx.make_node("Cast", [node.input[0]], attr={"to": TensorProto.DOUBLE})
        ctx.set_dtype(wide.output[0], TensorProto.DOUBLE)
        ctx.copy_shape(node.input[0], wide.output[0])
        ctx.replace_input(node, node.input[0], wide.output[0], 0)
    consumers = ctx.find_output_consumers(node.output[0])
    kinds = [consumer.type for consumer in consumers]
    for consumer in consumers:
        consumer.type = "ComplexAbs"
    try:
        RFFTOp.version_13(ctx, node)
    finally:
        for consumer, kind in zip(consumers, kinds, strict=True):
            consumer.type = kind


def _real(ctx: Graph, node: Node, name: str, args: list[Any]) -> None:
    _complex_part(ctx, node, 0)


def _imag(ctx: Graph, node: Node, name: str, args: list[Any]) -> None:
    _complex_part(ctx, node, 1)


def _complex_part(ctx: Graph, node: Node, part: int) -> None:
    """``Real``/``Imag`` of a converted RFFT: part 0 or 1 of its first axis."""
    import numpy as np
    from onnx import TensorProto
    from tf2onnx import utils

    index = ctx.make_const(utils.make_name(f"{node.name}_part"), np.array(part, np.int64))
    node.type = "Gather"
    ctx.replace_inputs(node, [node.input[0], index.output[0]])
    node.set_attr("axis", 0)
    if ctx.get_dtype(node.input[0]) == TensorProto.DOUBLE:  # the RFFT's, back to float32
        narrow = ctx.insert_new_node_on_output("Cast", node.output[0], to=TensorProto.FLOAT,
                                               name=utils.make_name(f"{node.name}_float"))
        ctx.set_dtype(narrow.output[0], TensorProto.FLOAT)
        ctx.copy_shape(node.output[0], narrow.output[0])
        ctx.set_dtype(node.output[0], TensorProto.DOUBLE)


def _is_float(ctx: Graph, tensor: str) -> bool:
    from onnx import TensorProto

    return ctx.get_dtype(tensor) in (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE)


def _floor_div(ctx: Graph, node: Node, name: str, args: list[Any]) -> None:
    """``floor(x / y)``: ``Floor(Div)`` for floats, ``(x - x mod y) / y`` for integers (ONNX's
    ``Mod`` with ``fmod=0`` takes the divisor's sign, as a floor division's remainder does)."""
    from tf2onnx import utils

    x, y = node.input
    node.type = "Div"
    if _is_float(ctx, x):
        floor = ctx.insert_new_node_on_output("Floor", node.output[0],
                                              name=utils.make_name(f"{node.name}_floor"))
        ctx.copy_dtype(node.output[0], floor.output[0])
        ctx.copy_shape(node.output[0], floor.output[0])
        return
    remainder = ctx.make_node("Mod", [x, y], attr={"fmod": 0})
    exact = ctx.make_node("Sub", [x, remainder.output[0]])
    ctx.replace_inputs(node, [exact.output[0], y])


def _floor_mod(ctx: Graph, node: Node, name: str, args: list[Any]) -> None:
    """``x - floor(x / y) * y``: ONNX ``Mod`` (``fmod=1`` for floats, whose ``fmod=0`` is for
    integers only, then corrected to the divisor's sign)."""
    if not _is_float(ctx, node.input[0]):
        node.type = "Mod"
        node.set_attr("fmod", 0)
        return
    x, y = node.input
    node.type = "Sub"
    quotient = ctx.make_node("Floor", [ctx.make_node("Div", [x, y]).output[0]])
    product = ctx.make_node("Mul", [quotient.output[0], y])
    ctx.replace_inputs(node, [x, product.output[0]])


# -- reading ------------------------------------------------------------------------------------


class OnnxModel:
    """``model.onnx`` in onnxruntime: ``run(signature, audio)`` for
    :class:`asrkit.serving.export.ExportedModel` (``logits``, or ``transcribe``'s labels, characters
    and text). ``labels`` says what the classes mean (a list of symbols: characters)."""

    def __init__(self, path: str | Path, labels: Labels | list[str] | None = None) -> None:
        self.session = session(path)
        if isinstance(labels, list):
            labels = labels_from_json({"alphabet": labels})
        self.labels = labels
        self.alphabet = list(labels.symbols) if labels is not None else []

    def outputs(self, audio: np.ndarray) -> dict[str, np.ndarray]:
        import numpy as np

        audio = np.ascontiguousarray(audio, dtype=np.float32)
        names = [output.name for output in self.session.get_outputs()]
        return dict(zip(names, self.session.run(names, {INPUT: audio}), strict=True))

    def run(self, signature: str, audio: np.ndarray) -> dict[str, Any]:
        import numpy as np

        out = self.outputs(audio)
        if signature.startswith("logits"):
            return {"logits": out["logits"]}
        labels = out["labels"]
        found: dict[str, Any] = {"labels": labels,
                                 "characters": np.array([self.alphabet[i] for i in labels],
                                                        dtype=object)}
        if self.labels is not None:
            found["text"] = self.labels.decode(int(label) for label in labels)
        return found
