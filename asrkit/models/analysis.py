"""Model analysis: what a network holds (parameters per variable and per layer, bytes) and what
it costs to run (FLOPs per second of audio).

FLOPs are counted per layer from the shapes the layer really sees: the model is traced once
(nothing is computed) on a fixed input of 1 s and once of 10 s of audio, each layer's output
shape is recorded, and the cost per second is the difference divided by 9 s, so that the
constant cost of the first frames (padding, a convolution's rounding) drops out. Counted are the
products with weights, where almost all the work is, with **a multiply-add as 2 FLOPs**:

``Dense``
    ``2 * in * out`` per output position (frame).
``Conv1D``/``Conv2D``/``Conv3D``
    ``2 * kernel size`` (``kh * kw * in * out``) per output position (frame x frequency bin).
recurrent layers (``HoistedBiLSTM``, ``HoistedBiGRU``, their forward-only ``HoistedLSTM``,
``HoistedGRU``, Keras ``LSTM``/``GRU``/``SimpleRNN``)
    ``2 * (size of kernel + size of recurrent kernel)`` per frame: the input product and the
    recurrent product of every gate. The hoisted layers' kernels are ``(2, in, gates)`` and
    ``(2, units, gates)``, both directions at once (``(1, ...)`` forward only), so the same
    formula covers them.
``LookaheadConv``
    ``2 * (frames + 1)`` per output value: one multiply-add per frame of the kernel.

Not counted: biases, activations, gate arithmetic, normalisation and the feature extractor
(together a few per cent at most); layers with weights that the counter does not know are
listed as not counted, never guessed.

TensorFlow is imported inside the functions: :mod:`asrkit.evaluation.describe` imports this module
from a command that must start fast.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from asrkit.core.files import write_atomic
from asrkit.core.frames import SAMPLE_RATE
from asrkit.core.storage import Location, location

#: The two input lengths (seconds of audio) the model is traced on; their difference over the
#: seconds between them is the cost of one more second.
SHORT_SECONDS, LONG_SECONDS = 1, 10
#: Files written into a run folder.
ANALYSIS_TXT, ANALYSIS_JSON = "model_analysis.txt", "model_analysis.json"
#: FLOPs a multiply-add counts as.
FLOPS_PER_MAC = 2
#: Layer classes counted as recurrent (besides any Keras ``RNN``), by class name.
RECURRENT = ("HoistedBiLSTM", "HoistedBiGRU", "HoistedLSTM", "HoistedGRU")


@dataclass
class LayerCost:
    """One layer: its parameters and FLOPs per second of audio (0 where not counted)."""

    name: str
    kind: str
    parameters: int
    flops_per_second: float = 0.0
    counted: bool = True


@dataclass
class ModelAnalysis:
    model: str
    parameters: int
    trainable_parameters: int
    bytes: int
    #: One entry per variable: path, shape, dtype, parameters.
    variables: list[dict[str, Any]]
    layers: list[LayerCost]
    frames_per_second: float
    flops_per_second: float
    #: FLOPs of the whole input of SHORT_SECONDS and of LONG_SECONDS.
    flops_short: float
    flops_long: float
    #: Layers holding weights whose cost is not counted (an unknown kind).
    not_counted: list[str] = field(default_factory=list)
    convention: str = "a multiply-add is 2 FLOPs; products with weights only"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["seconds"] = [SHORT_SECONDS, LONG_SECONDS]
        return data

    def text(self) -> str:
        """The summary and layer table, then every variable."""
        width = max([len(v["path"]) for v in self.variables] + [8])
        lines = [summary_text(self.to_json()), "",
                 f"{'variable':<{width}}  {'shape':<18} {'dtype':<9} {'parameters':>12}"]
        for variable in self.variables:
            shape = "x".join(str(d) for d in variable["shape"]) or "scalar"
            lines.append(f"{variable['path']:<{width}}  {shape:<18} {variable['dtype']:<9} "
                         f"{variable['parameters']:>12,}")
        return "\n".join(lines) + "\n"


def summary_text(analysis: dict[str, Any]) -> str:
    """Totals and the table of layers, from a saved ``model_analysis.json``."""
    a = analysis
    lines = [
        f"model {a['model']}: {a['parameters']:,} parameters ({human(a['parameters'])}; "
        f"{a['trainable_parameters']:,} trainable), {human_bytes(a['bytes'])}",
        f"FLOPs per second of audio: {human(a['flops_per_second'])} "
        f"({a['flops_per_second']:,.0f}; {a['frames_per_second']:g} input frames a second; "
        f"{a['convention']})",
        "",
    ]
    width = max([len(layer["name"]) for layer in a["layers"]] + [5])
    lines.append(f"{'layer':<{width}}  {'kind':<20} {'parameters':>12} {'FLOPs/s':>10} "
                 f"{'share':>6}")
    total = a["flops_per_second"] or 1.0
    for layer in a["layers"]:
        flops = human(layer["flops_per_second"]) if layer["counted"] else "?"
        share = f"{layer['flops_per_second'] / total:.1%}" if layer["counted"] else ""
        lines.append(f"{layer['name']:<{width}}  {layer['kind']:<20} {layer['parameters']:>12,} "
                     f"{flops:>10} {share:>6}")
    if a["not_counted"]:
        lines.append(f"FLOPs not counted (unknown kind): {', '.join(a['not_counted'])}")
    return "\n".join(lines)


def human(value: float) -> str:
    """``7.34 M``, ``1.47 G``: three significant figures with an SI prefix."""
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}"
    return f"{value:.3g}"


def human_bytes(value: int) -> str:
    for factor, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if value >= factor:
            return f"{value / factor:.1f} {unit}"
    return f"{value} bytes"


def _size(variable: Any) -> int:
    return math.prod(int(d) for d in variable.shape)


def _dtype(variable: Any) -> str:
    dtype = variable.dtype
    return getattr(dtype, "name", None) or str(dtype)


def _itemsize(variable: Any) -> int:
    import numpy as np

    return np.dtype(_dtype(variable)).itemsize


def _layer_macs(layer: Any, inputs: Any, outputs: Any) -> int | None:
    """Multiply-adds of one call of ``layer`` from input shape ``inputs`` to output shape
    ``outputs``; None for a kind not known. Layers without a kernel cost nothing here."""
    import keras

    if any(d is None for d in [*outputs, *(inputs or [])]):
        return None  # a shape the trace could not know: not counted rather than guessed
    dims = [int(d) for d in outputs]
    if isinstance(layer, keras.layers.RNN) or type(layer).__name__ in RECURRENT:
        owner = getattr(layer, "cell", layer)
        kernel = getattr(owner, "kernel", None)
        recurrent = getattr(owner, "recurrent_kernel", None)
        if kernel is None or recurrent is None or inputs is None:
            return None
        frames = int(inputs[0]) * int(inputs[1])  # every input frame, whatever is returned
        return frames * (_size(kernel) + _size(recurrent))
    kernel = getattr(layer, "kernel", None)
    if kernel is None:
        return None if _own_weights(layer) and not _holds_no_products(layer) else 0
    if isinstance(layer, keras.layers.Dense) or type(layer).__name__ == "LookaheadConv":
        return math.prod(dims[:-1]) * _size(kernel)
    if isinstance(layer, (keras.layers.Conv1D, keras.layers.Conv2D, keras.layers.Conv3D)):
        if getattr(layer, "data_format", "channels_last") == "channels_first":
            positions = dims[0] * math.prod(dims[2:])
        else:
            positions = math.prod(dims[:-1])
        return positions * _size(kernel)
    return None


def _holds_no_products(layer: Any) -> bool:
    """Layers whose weights enter no product (scales, shifts, statistics)."""
    import keras

    return isinstance(layer, (keras.layers.BatchNormalization, keras.layers.LayerNormalization,
                              keras.layers.Embedding))


def _own_weights(layer: Any) -> list[Any]:
    """The weights a layer holds itself, not through layers inside it (a Keras RNN's are its
    cell's, which is not listed apart)."""
    import keras

    if isinstance(layer, keras.layers.RNN):
        return list(layer.weights)
    inner = {id(w) for sub in layer._flatten_layers(include_self=False) for w in sub.weights}
    return [w for w in layer.weights if id(w) not in inner]


def _layers(model: Any) -> list[Any]:
    """Every layer below the model, the cells of Keras RNNs excepted (their RNN counts them)."""
    import keras

    layers = list(model._flatten_layers(include_self=False, recursive=True))
    cells = {id(layer.cell) for layer in layers if isinstance(layer, keras.layers.RNN)}
    return [layer for layer in layers if id(layer) not in cells]


def _trace_macs(model: Any, num_features: int, frames: int,
                layers: list[Any]) -> dict[int, int | None]:
    """Multiply-adds of each layer (by ``id``) for one utterance of ``frames`` frames, from the
    output shapes seen while tracing the model (the graph is built, not run)."""
    import tensorflow as tf

    macs: dict[int, int | None] = {id(layer): 0 for layer in layers}

    def recording(layer: Any, call: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            out = call(*args, **kwargs)
            inputs = tf.nest.flatten(args[0])[0].shape if args else None
            count = _layer_macs(layer, inputs, tf.nest.flatten(out)[0].shape)
            previous = macs[id(layer)]
            macs[id(layer)] = None if count is None or previous is None else previous + count
            return out

        return wrapped

    for layer in layers:  # an instance attribute shadows the class's call while tracing
        layer.call = recording(layer, layer.call)
    try:
        trace = tf.function(lambda features, lengths: model((features, lengths), training=False),
                            autograph=False)
        trace.get_concrete_function(tf.TensorSpec([1, frames, num_features], tf.float32),
                                    tf.TensorSpec([1], tf.int32))
    finally:
        for layer in layers:
            del layer.call
    return macs


def _frames(seconds: int, extractor: Any, feature_config: Any) -> int:
    """Feature frames of ``seconds`` of audio, as the extractor frames it."""
    samples = seconds * getattr(feature_config, "sample_rate", SAMPLE_RATE)
    if hasattr(extractor, "num_frames"):
        return int(extractor.num_frames(samples, feature_config))
    return max(1, round(seconds * 1000 / getattr(feature_config, "step_ms", 10.0)))


def analyze_model(model: Any, spec: Any, model_config: Any, feature_config: Any,
                  extractor: Any) -> ModelAnalysis:
    """Parameters, bytes and FLOPs per second of audio of a built model (its weights may be
    anything: only shapes matter)."""
    weights = list(model.weights)
    variables = [{"path": getattr(w, "path", w.name), "shape": [int(d) for d in w.shape],
                  "dtype": _dtype(w), "parameters": _size(w)} for w in weights]
    trainable = {id(w) for w in model.trainable_weights}
    num_features = extractor.num_features(feature_config)
    layers = _layers(model)
    short_frames = _frames(SHORT_SECONDS, extractor, feature_config)
    long_frames = _frames(LONG_SECONDS, extractor, feature_config)
    short = _trace_macs(model, num_features, short_frames, layers)
    long = _trace_macs(model, num_features, long_frames, layers)
    seconds = LONG_SECONDS - SHORT_SECONDS
    costs, not_counted = [], []
    for layer in layers:
        own = sum(_size(w) for w in _own_weights(layer))
        first, second = short[id(layer)], long[id(layer)]
        if not own and not first:
            continue  # dropout, activations, wrappers whose parts are listed themselves
        path = getattr(layer, "path", None) or layer.name  # Keras 3: "model/outer/inner"
        name = path.removeprefix(f"{model.name}/")
        if first is None or second is None:
            not_counted.append(name)
            costs.append(LayerCost(name, type(layer).__name__, own, 0.0, counted=False))
        else:
            flops = (second - first) * FLOPS_PER_MAC / seconds
            costs.append(LayerCost(name, type(layer).__name__, own, flops))
    flops_short = sum(m or 0 for m in short.values()) * FLOPS_PER_MAC
    flops_long = sum(m or 0 for m in long.values()) * FLOPS_PER_MAC
    return ModelAnalysis(
        model=getattr(spec, "name", type(model).__name__),
        parameters=sum(v["parameters"] for v in variables),
        trainable_parameters=sum(_size(w) for w in weights if id(w) in trainable),
        bytes=sum(_size(w) * _itemsize(w) for w in weights),
        variables=variables,
        layers=costs,
        frames_per_second=(long_frames - short_frames) / seconds,
        flops_per_second=(flops_long - flops_short) / seconds,
        flops_short=flops_short,
        flops_long=flops_long,
        not_counted=not_counted,
    )


def write_model_analysis(run_folder: str | Location, model: Any, spec: Any, model_config: Any,
                         feature_config: Any, extractor: Any) -> None:
    """Write ``model_analysis.txt`` (for people) and ``model_analysis.json`` into a run folder."""
    analysis = analyze_model(model, spec, model_config, feature_config, extractor)
    folder = location(run_folder)
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / ANALYSIS_JSON, json.dumps(analysis.to_json(), indent=2) + "\n")
    write_atomic(folder / ANALYSIS_TXT, analysis.text())


def run_model_analysis(run: Any) -> dict[str, Any]:
    """A run's model analysis: the saved one, else computed (and saved) from a freshly built
    model of the run's configuration (weights do not change the counts)."""
    path = location(run.folder) / ANALYSIS_JSON
    if not path.exists():
        extractor = run.extractor
        model = run.spec.build(run.model_config, extractor.num_features(run.feature_config),
                               run.encoder_width())
        write_model_analysis(run.folder, model, run.spec, run.model_config,
                             run.feature_config, extractor)
    return json.loads(path.read_text(encoding="utf-8"))
