"""Contract checks for model plugins: what every :class:`~asrkit.types.ModelSpec` must satisfy
to train, evaluate, transcribe and export like asrkit's own models.

A plugin author calls them from their own tests (the fixtures come with asrkit's pytest plugin)::

    from asrkit.testing import check_model

    def test_my_model_keeps_the_contract(tiny_dataset, tmp_path):
        check_model("mymodel", tmp_path / "run", tiny_dataset, ["model.units=16"])

:func:`check_model` runs them all; each is also usable alone:

- :func:`check_output_lengths`: ``output_length`` follows the declared ``time_stride`` and the
  model returns exactly that many logit frames, alone and in a padded batch;
- :func:`check_padding`: an utterance's logits alone equal its logits inside a padded batch
  (the padding filled with noise, so anything that reads it shows), which is what makes a
  batched ``asrkit evaluate`` and a one-file ``asrkit transcribe`` agree;
- :func:`check_precision`: the model builds under bfloat16 mixed precision (what
  ``precision=auto`` picks on CPUs with AMX or AVX512-BF16) with float32 weights, logits close
  to float32's and CTC gradients for every weight;
- :func:`check_training`: ``asrkit train`` runs a few steps with finite, changing losses;
- :func:`check_export`: ``asrkit export`` (SavedModel, TFLite) gives the model's own logits.

Each raises ``AssertionError`` saying what broke; TensorFlow is imported inside them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asrkit import cli, plugins
from asrkit.config.overrides import parse_overrides
from asrkit.config.pipeline import PipelineConfig
from asrkit.config.run import RunConfig, build_run_config
from asrkit.config.train import TrainConfig
from asrkit.core.text import Alphabet
from asrkit.evaluation.restore import load_run_model
from asrkit.features import MFCCConfig
from asrkit.models.brnn import BRNNConfig
from asrkit.runs.run import Run, new_run
from asrkit.serving.export import ExportedModel, export_run
from asrkit.serving.graph import make_logits_fn
from asrkit.serving.transcribe import load_audio
from asrkit.train.checkpoints import Checkpoints
from asrkit.train.precision import policy
from asrkit.types import ModelSpec

if TYPE_CHECKING:
    import keras
    import numpy as np

#: Largest logit difference allowed between an utterance alone and in a padded batch: float32
#: kernels on batches of other shapes add in another order (about 1e-6 of the logits' size).
PADDING_TOLERANCE = 1e-4
#: Largest logit difference allowed between an export and the Keras model (the export
#: command's own verification tolerance).
EXPORT_TOLERANCE = 1e-3
#: Utterance lengths (frames) of the padding check: every remainder modulo strides 2, 3 and 4,
#: odd and even, so that a convolution whose alignment depends on the padded length shows.
PADDING_LENGTHS = (47, 40, 33, 26, 18)
#: Largest logit difference between bfloat16 and float32 products, as a share of the largest
#: float32 logit: bfloat16 keeps 8 significant bits (0.4 % a rounding), and roundings add up
#: over the layers.
PRECISION_TOLERANCE = 0.05
#: Classes of the checks' models: asrkit's default alphabet (28 symbols) plus the blank.
NUM_CLASSES = 29
#: The real clip shipped with asrkit (in the ``sample`` corpus): DeepSpeech's LDC93S1
#: smoke-test utterance, 2.9 s.
SAMPLE_CLIP = "LDC93S1.wav"


def sample_clip(name: str = SAMPLE_CLIP) -> Path:
    """A clip of the ``sample`` corpus shipped inside asrkit (16-bit WAV)."""
    from asrkit_importers.sample import DATA

    return DATA / name


@dataclass
class ContractReport:
    """What :func:`check_model` measured."""

    model: str
    time_stride: int
    padding_max_abs_diff: float
    losses: list[float]
    #: Format -> largest logit difference between the export and the Keras model.
    export_max_abs_diff: dict[str, float] = field(default_factory=dict)
    #: Largest logit difference between bfloat16 and float32 products, relative to the logits.
    bfloat16_relative_diff: float = 0.0


def build_model(spec: ModelSpec, config: Any, num_features: int,
                num_classes: int = NUM_CLASSES, seed: int = 0) -> keras.Model:
    """``spec.build`` with every initialiser seeded (the same weights for the same seed)."""
    import keras

    keras.utils.set_random_seed(seed)
    return spec.build(config, num_features, num_classes)


def _logits(model: keras.Model, features: np.ndarray, lengths: Sequence[int]) -> np.ndarray:
    """The model called as the engine calls it, logits as float32 numpy."""
    import numpy as np
    import tensorflow as tf

    logits = model((tf.constant(features, tf.float32), tf.constant(list(lengths), tf.int32)),
                   training=False)
    return np.asarray(tf.cast(logits, tf.float32))


def check_output_lengths(spec: ModelSpec, config: Any, num_features: int,
                         num_classes: int = NUM_CLASSES, seed: int = 0,
                         model: keras.Model | None = None) -> int:
    """``time_stride`` is a positive int, ``output_length(n) == ceil(n / time_stride)`` for
    Python ints and int32 tensors, and the model gives exactly that many frames of
    ``num_classes`` logits for utterances from one frame long, alone and padded. Returns the
    stride."""
    import numpy as np
    import tensorflow as tf

    stride = spec.time_stride(config)
    assert isinstance(stride, int) and stride >= 1, (
        f"{spec.name}: time_stride must be a positive int, not {stride!r}")
    lengths = sorted({1, 2, stride, stride + 1, 2 * stride + 1, 37})
    expected = [math.ceil(n / stride) for n in lengths]
    as_ints = [int(spec.output_length(config, n)) for n in lengths]
    assert as_ints == expected, (
        f"{spec.name}: output_length of {lengths} frames is {as_ints}; time_stride "
        f"{stride} declares ceil(frames / {stride}) = {expected}")
    as_tensor = spec.output_length(config, tf.constant(lengths, tf.int32)).numpy().tolist()
    assert as_tensor == expected, (
        f"{spec.name}: output_length of an int32 tensor {lengths} gives {as_tensor}, not "
        f"{expected}")
    model = model or build_model(spec, config, num_features, num_classes, seed)
    rng = np.random.default_rng(seed)
    for n, frames in zip(lengths, expected, strict=True):
        try:
            logits = _logits(model, rng.normal(size=(1, n, num_features)), [n])
        except Exception as error:  # e.g. a convolution longer than a short utterance
            raise AssertionError(f"{spec.name}: an utterance of {n} frames fails: "
                                 f"{' '.join(str(error).split())[:300]}") from error
        assert logits.shape == (1, frames, num_classes), (
            f"{spec.name}: {n} frames in give logits of shape {logits.shape}; the contract is "
            f"[1, output_length = {frames}, num_classes = {num_classes}]")
    padded = max(lengths)
    logits = _logits(model, rng.normal(size=(len(lengths), padded, num_features)), lengths)
    assert logits.shape[:2] == (len(lengths), math.ceil(padded / stride)), (
        f"{spec.name}: a batch padded to {padded} frames gives logits of shape {logits.shape}; "
        f"the contract is [batch, output_length({padded}) = {math.ceil(padded / stride)}, ...]")
    return stride


def check_padding(spec: ModelSpec, config: Any, num_features: int,
                  num_classes: int = NUM_CLASSES, seed: int = 0,
                  lengths: Sequence[int] = PADDING_LENGTHS,
                  tolerance: float = PADDING_TOLERANCE,
                  model: keras.Model | None = None) -> float:
    """Each utterance's valid logits (its first ``output_length`` frames) are the same alone and
    inside padded batches, whatever the padding holds: it is filled with noise, and the batch is
    padded twice (to the longest utterance, and a few frames further). Returns the largest
    difference."""
    import numpy as np

    model = model or build_model(spec, config, num_features, num_classes, seed)
    rng = np.random.default_rng(seed)
    utterances = [rng.normal(size=(n, num_features)).astype(np.float32) for n in lengths]
    alone = [_logits(model, u[None], [len(u)])[0] for u in utterances]
    worst = 0.0
    stride = spec.time_stride(config)
    for padded in (max(lengths), max(lengths) + 2 * stride + 1):
        batch = rng.normal(size=(len(lengths), padded, num_features)).astype(np.float32)
        for row, u in enumerate(utterances):
            batch[row, :len(u)] = u
        logits = _logits(model, batch, lengths)
        for row, n in enumerate(lengths):
            frames = int(spec.output_length(config, n))
            diff = float(np.max(np.abs(logits[row, :frames] - alone[row][:frames])))
            worst = max(worst, diff)
            assert diff <= tolerance, (
                f"{spec.name}: an utterance of {n} frames gives other logits in a batch padded "
                f"to {padded} frames than alone (largest difference {diff:.3g}, allowed "
                f"{tolerance:g}; logits up to {np.max(np.abs(alone[row])):.3g}): frames past "
                "an utterance's length reach its logits, so batched evaluation and one-file "
                "transcription disagree. Mask the padded frames (to zero) before every layer "
                "that mixes frames, and pad convolutions so their alignment does not depend on "
                "the batch's length")
    return worst


def check_precision(spec: ModelSpec, config: Any, num_features: int,
                    num_classes: int = NUM_CLASSES, seed: int = 0,
                    precision: str = "mixed_bfloat16",
                    tolerance: float = PRECISION_TOLERANCE) -> float:
    """The model built under Keras' mixed-precision policy ``precision`` (as ``asrkit train``
    builds it for ``-o precision=...``): every variable float32, so checkpoints are the same
    in any precision; its logits (any float dtype) within ``tolerance`` of the float32 model's
    with the same weights, over a padded batch's valid frames; and a CTC loss whose gradient
    reaches every trainable variable, finite. Returns the largest relative difference.

    A layer that makes its own float32 tensors (constants, masks, positional tables) and mixes
    them with its inputs fails here with TensorFlow's dtype error: cast them to the input's
    dtype (``x.dtype``) or to ``self.compute_dtype``."""
    import numpy as np
    import tensorflow as tf

    reference = build_model(spec, config, num_features, num_classes, seed)
    try:
        with policy(precision):
            model = build_model(spec, config, num_features, num_classes, seed)
    except Exception as error:
        raise AssertionError(f"{spec.name}: building under {precision} fails: "
                             f"{' '.join(str(error).split())[:300]}") from error
    wide = [v.path for v in model.weights if v.dtype != "float32"]
    assert not wide, (f"{spec.name}: under {precision} these variables are not float32: "
                      f"{wide[:5]}; keep weights float32 (Keras does, unless a layer sets "
                      "its own dtype)")
    model.set_weights(reference.get_weights())
    rng = np.random.default_rng(seed)
    lengths = [40, 33, 26]
    batch = rng.normal(size=(len(lengths), max(lengths), num_features)).astype(np.float32)
    try:
        mixed = _logits(model, batch, lengths)
    except Exception as error:
        raise AssertionError(f"{spec.name}: a forward pass under {precision} fails: "
                             f"{' '.join(str(error).split())[:300]}") from error
    exact = _logits(reference, batch, lengths)
    scale = max(float(np.max(np.abs(exact))), 1e-6)
    worst = 0.0
    for row, n in enumerate(lengths):
        frames = int(spec.output_length(config, n))
        assert np.all(np.isfinite(mixed[row, :frames])), (
            f"{spec.name}: non-finite logits under {precision}")
        worst = max(worst, float(np.max(np.abs(mixed[row, :frames] - exact[row, :frames]))))
    assert worst <= tolerance * scale, (
        f"{spec.name}: logits under {precision} differ from float32's by {worst:.3g} (logits "
        f"up to {scale:.3g}; allowed {tolerance:.0%} of that): something is computed in "
        "16 bits that needs float32 (a softmax over many frames, a variance, a long sum)")
    labels = tf.constant(rng.integers(0, num_classes - 1, size=(len(lengths), 3)), tf.int32)
    with tf.GradientTape() as tape:
        logits = tf.cast(model((tf.constant(batch), tf.constant(lengths)), training=True),
                         tf.float32)
        loss = tf.reduce_mean(tf.nn.ctc_loss(
            labels, logits, tf.fill([len(lengths)], 3),
            spec.output_length(config, tf.constant(lengths)), logits_time_major=False,
            blank_index=-1))
    gradients = tape.gradient(loss, model.trainable_variables)
    for variable, gradient in zip(model.trainable_variables, gradients, strict=True):
        assert gradient is not None, (
            f"{spec.name}: under {precision} no gradient reaches {variable.path}")
        assert bool(tf.reduce_all(tf.math.is_finite(gradient))), (
            f"{spec.name}: under {precision} the gradient of {variable.path} is not finite")
    return worst / scale


def check_training(model: str, folder: Path, dataset: str | Path, settings: Sequence[str] = (),
                   steps: int = 3, batch_size: int = 4) -> list[float]:
    """``asrkit train`` (the real command and engine) for ``steps`` steps of ``batch_size``
    on ``dataset``, into ``folder``; the per-step losses must be finite and not all equal.
    Returns them."""
    args = ["train", "--model", model, "--dataset", str(dataset), "--run-dir", str(folder),
            "--batch-size", str(batch_size), "-o", f"max_steps={steps}", "-o", "log_every=1",
            "-o", "evaluate_dev=false", "--no-progress"]
    for setting in settings:
        args += ["-o", setting]
    code = cli.run(args)
    assert code == 0, f"asrkit {' '.join(args)} failed with exit status {code} (see its stderr)"
    events = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    losses = [float(e["loss"]) for e in events if e.get("event") == "step"]
    assert len(losses) == steps, f"{model}: {len(losses)} steps logged, not {steps}"
    assert all(math.isfinite(loss) for loss in losses), f"{model}: non-finite losses {losses}"
    assert len(set(losses)) > 1, f"{model}: the loss never changed ({losses[0]}): no learning"
    return losses


def check_export(folder: Path, formats: Sequence[str] = ("savedmodel", "tflite"),
                 audio: np.ndarray | None = None,
                 tolerance: float = EXPORT_TOLERANCE) -> dict[str, float]:
    """Export the run in ``folder`` in each of ``formats`` (as ``asrkit export`` does) and
    compare the export's logits on real speech (``audio``, default :data:`SAMPLE_CLIP`) with
    the Keras model's, called eagerly. Returns the largest difference per format."""
    import numpy as np

    if audio is None:
        audio = load_audio(sample_clip()).astype(np.float32) / 32768
    run, model, _ = load_run_model(folder)
    expected = make_logits_fn(run, model)(audio).numpy()
    differences = {}
    for fmt in formats:
        meta = export_run(folder, fmt, folder / "export" / fmt, force=True)
        exported = ExportedModel(meta["path"]).logits(audio)
        assert exported.shape == expected.shape, (
            f"{run.spec.name}: the {fmt} export gives logits of shape {exported.shape}, the "
            f"model {expected.shape}")
        differences[fmt] = float(np.max(np.abs(exported - expected)))
        assert differences[fmt] <= tolerance, (
            f"{run.spec.name}: the {fmt} export's logits differ from the model's by "
            f"{differences[fmt]:.3g} (allowed {tolerance:g})")
    return differences


#: The tiny run's brnn: narrow and with little context, built in a second.
TINY_BRNN = {"n_hidden": 32, "n_cell": 32, "context": 2}


def make_tiny_run(folder: Path, seed: int = 3) -> Path:
    """A run folder as ``asrkit train`` leaves it (config, alphabet, a ``best`` checkpoint) of a
    tiny randomly initialised brnn: what export and transcription read, built in a second."""
    import keras
    import numpy as np

    config = RunConfig(TrainConfig(model="brnn"), BRNNConfig(**TINY_BRNN), MFCCConfig(),
                       PipelineConfig())
    run = Run(folder, config, Alphabet())
    run.save()
    keras.utils.set_random_seed(seed)
    model = run.spec.build(run.model_config, 26, run.encoder_width())
    # Random weights favour one or two classes everywhere. Raise the space's bias until it wins
    # a third of the frames of a real utterance, so that the model "speaks" in words.
    audio = load_audio(sample_clip()).astype(np.float32) / 32768
    logits = make_logits_fn(run, model)(audio).numpy()
    margin = np.max(logits[:, 1:], axis=1) - logits[:, 0]
    bias = model.get_layer("logits").bias
    bias.assign(bias.numpy() + np.eye(29)[0] * np.quantile(margin, 1 / 3))
    Checkpoints(folder / "checkpoints", model=model).save("best", 7, {"global_step": 7})
    return folder


def check_model(model: str | ModelSpec, folder: str | Path, dataset: str | Path,
                settings: Sequence[str] = (), *, steps: int = 3, batch_size: int = 4,
                formats: Sequence[str] = ("savedmodel", "tflite"), seed: int = 0) -> ContractReport:
    """Every check, on the registered model ``model`` (a name, or the spec a plugin registered)
    configured as ``asrkit train --model NAME -o SETTING...`` would configure it (``settings``
    in ``-o`` form: ``model.units=16``, ``preset=tiny``, ``features.num_mel_bins=20``): the
    cheap ones first, then a few training steps on ``dataset`` (a name or a folder, e.g. the
    ``tiny_dataset`` fixture) into ``folder``, then an export in each of ``formats``
    (``formats=("savedmodel",)`` for a model TFLite's built-in operations cannot run)."""
    name = model if isinstance(model, str) else model.name
    spec = plugins.get("model", name)
    assert isinstance(model, str) or type(spec) is type(model), (
        f"the model registered as {name!r} is {type(spec).__qualname__}, not "
        f"{type(model).__qualname__}: install the plugin (or use the make_plugins fixture)")
    folder = Path(folder)
    config, _ = build_run_config({"model": name, "dataset": str(dataset)},
                                 parse_overrides(settings))
    run = new_run(config, folder)
    num_features = run.extractor.num_features(run.feature_config)
    num_classes = run.labels.num_classes
    keras_model = build_model(spec, run.model_config, num_features, num_classes, seed)
    stride = check_output_lengths(spec, run.model_config, num_features, num_classes, seed,
                                  model=keras_model)
    padding = check_padding(spec, run.model_config, num_features, num_classes, seed,
                            model=keras_model)
    precision = check_precision(spec, run.model_config, num_features, num_classes, seed)
    losses = check_training(name, folder, dataset, settings, steps, batch_size)
    exports = check_export(folder, formats)
    return ContractReport(name, stride, padding, losses, exports, precision)
