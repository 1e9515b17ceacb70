"""Exporting a trained run as a self-contained model: SavedModel, TFLite or ONNX (the last in
:mod:`asrkit.serving.export_onnx`), features inside; or, for sherpa-onnx, which computes
Kaldi fbank features itself, an ONNX model of features to log-probabilities with its
``tokens.txt`` (:mod:`asrkit.serving.export_sherpa`).

A served model should take what a microphone or a WAV file gives, not asrkit's features, so an
export holds the whole path from raw 16 kHz mono PCM to logits and to greedy text::

    pcm [samples] --features (tf.signal)--> [frames, F] --model--> logits [frames', classes]
                                                               \\--greedy CTC--> text

Signatures (each takes one utterance; ``pcm`` is float32 in [-1, 1], or int16 for the
``*_int16`` variants, which divide by 32768 in the graph):

``logits``            ``{"logits": float32 [frames', classes]}`` (the blank is the last class)
``transcribe``        ``{"text": string []}`` (SavedModel only), ``"labels": int32 [n]`` (the
                      label indices of the greedy path, repeats merged, blanks dropped) and
                      ``"characters": string [n]`` (those labels' symbols: characters, or
                      subword pieces for a model trained on a tokenizer's pieces)
``logits_int16``, ``transcribe_int16``   the same for int16 PCM
``serving_default``   (SavedModel) ``transcribe``, what TensorFlow Serving calls by default

Greedy decoding is written with argmax, comparisons and gathers instead of
``tf.nn.ctc_greedy_decoder``: those are TFLite built-in operations, so the TFLite model runs
under a stock interpreter without the Flex delegate (the pip ``tf.lite.Interpreter`` has none).
Only joining the characters into one string has no built-in, so the TFLite ``transcribe`` returns
``characters`` and ``labels`` and leaves the join to the caller; the SavedModel adds ``text``.
For characters ``text`` is the symbols joined; for subword pieces it is words, as
:meth:`asrkit.core.labels.Labels.decode` reads pieces: joined, the word marker (``"▁"``) made a
space, spaces collapsed and stripped (:func:`text_of`).

A transducer run's export (:mod:`asrkit.serving.export_transducer`) has ``encode`` instead of
``logits`` (the encoder's frames) and its own greedy search in ``transcribe``, which gives each
label's frame too. An attention encoder-decoder run's export
(:mod:`asrkit.serving.export_attention`, SavedModel only) has ``encode``, its decoder's greedy
search in ``transcribe``, and the decoder's steps, which asrkit's attention decoders call
(:meth:`ExportedModel.attention_networks`). :func:`load_networks` says which kind a run exports
as, and refuses what cannot be exported before any weights load.

An export is a folder: the SavedModel (``saved_model.pb``, ``variables/``) or ``model.tflite``,
plus ``asrkit.json`` (``labels``: symbols, word marker and blank, read back with
:func:`asrkit.core.text.labels_from_json`; ``alphabet``, the same symbols, for older readers; sample
rate, seconds per output frame, the run and checkpoint it came from, signatures) and, for
character labels, ``alphabet.txt``, so that :mod:`asrkit.serving.transcribe` and programs without
asrkit can both use it. A SavedModel also holds its symbols and word marker as variables
(``alphabet``, ``word_marker``), so it is readable without ``asrkit.json``. It is written to a
temporary folder and renamed into place, so a crash never leaves half an export, and it is
verified before the rename: the exported model and the checkpoint must give the same logits on
the same audio (a transducer's: the same encoder frames, and exactly the labels of the
checkpoint's ``transducer-greedy`` decoder). ``force`` replaces only an export
asrkit made (:mod:`asrkit.importing.outputs`): never the current folder, the run, or a user's
folder. Replacing one never leaves the user without an export, whatever stops it: the old
export is renamed aside, the new one renamed into place, and the old one deleted only once
both renames are on disk (:func:`put_in_place`); the next export finishes what a crash left
(:func:`recover_replacement`).

A TFLite export may be quantised (``quantization``: int8 or float16 weights, or int8 weights and
activations calibrated on the run's training split; :mod:`asrkit.serving.quantize`). Its
outputs then differ from the checkpoint's by design, so :func:`verify_quantized` records the
difference and how far its greedy transcripts are from the float graph's, and refuses only a
broken model.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asrkit import __version__
from asrkit.core.errors import AsrkitError
from asrkit.core.files import download_folder, sync_to_disk, upload_folder
from asrkit.core.frames import SAMPLE_RATE, frame_seconds
from asrkit.core.metrics import corpus_score
from asrkit.core.storage import Location, StoragePath, location
from asrkit.core.text import labels_from_json
from asrkit.evaluation.restore import restore_model, restore_networks
from asrkit.importing import outputs
from asrkit.runs.chunks import chunk_ms_of, with_chunk
from asrkit.runs.run import Run, load_run
from asrkit.serving import (
    export_attention,
    export_sherpa,
    export_sherpa_transducer,
    export_stream,
    export_transducer,
    quantize,
)
from asrkit.serving.export_onnx import OnnxModel, metadata, write_onnx
from asrkit.serving.graph import (
    describe_module,
    greedy_labels,
    joins_symbols,
    make_logits_fn,
    pcm_signatures,
    text_of,
)

if TYPE_CHECKING:
    import keras
    import numpy as np
    import tensorflow as tf

    from asrkit.core.labels import Labels

FORMATS = ("savedmodel", "tflite", "onnx", export_sherpa.FORMAT)
#: The export's description, beside the model.
METADATA_FILE = "asrkit.json"
TFLITE_FILE = "model.tflite"
#: Largest logit difference accepted between an export and its checkpoint. float32 kernels
#: that add in another order (TFLite, XNNPACK) differ by about 1e-6 of the logits' size.
VERIFY_TOLERANCE = 1e-3
#: Seconds of the synthetic signal an export is verified on (long enough for a few hundred
#: frames, short enough to cost well under a second).
VERIFY_SECONDS = 1.5
#: Utterances of the run's dev split (when its dataset is here) that a quantised export is also
#: verified on: real speech, whose greedy transcripts are worth comparing.
VERIFY_UTTERANCES = 8


class ExportError(AsrkitError):
    """An export that cannot be written, read or verified."""


# -- a run's model ------------------------------------------------------------------------------


def serving_module(run: Run, model: keras.Model, with_text: bool = True) -> tf.Module:
    """A :class:`tf.Module` whose ``tf.function`` methods are the export's signatures.

    The Keras model is deliberately not an attribute: Keras 3 attaches its own serving function
    to a tracked model, which tf.saved_model.save would trace with the wrong input types. Only
    its variables are tracked, and the functions close over the model. ``with_text=False`` is the
    TFLite variant: no string join (TFLite has no built-in for it) and no shared function.
    """
    import tensorflow as tf

    classes = run.labels  # (``labels`` below are a greedy path's)
    blank = classes.blank
    logits_fn = make_logits_fn(run, model)
    if with_text:
        # Traced once and called by every signature: tracing the model costs about a second,
        # and the SavedModel then holds one copy of it instead of four. (The TFLite converter
        # cannot lower the LSTM's loop inside a function shared by several signatures, so for
        # TFLite each signature traces its own copy.)
        logits_fn = tf.function(logits_fn,
                                input_signature=[tf.TensorSpec([None], tf.float32, name="pcm")])

    class Serving(tf.Module):
        def __init__(self) -> None:
            super().__init__(name="asrkit_serving")
            describe_module(self, run, model)  # readable without asrkit: loaded.alphabet ...
            self._signatures = pcm_signatures(
                self, "logits", lambda audio: {"logits": logits_fn(audio)}, self._transcribe,
                with_text)
            self.stream_geometry = None
            if export_stream.streams(run, None):
                step, self.stream_geometry = export_stream.stream_step(run, model)
                self._signatures[export_stream.STREAM_SIGNATURE] = step

        def _transcribe(self, audio: tf.Tensor) -> dict[str, tf.Tensor]:
            labels = greedy_labels(logits_fn(audio), blank)
            characters = tf.gather(self._symbols, labels)
            out = {"labels": labels, "characters": characters}
            if with_text:
                out["text"] = text_of(characters, classes)
            return out

        def signatures(self) -> dict[str, Any]:
            """``logits``, ``transcribe``, their ``*_int16`` and (SavedModel)
            ``serving_default`` (:func:`asrkit.serving.graph.pcm_signatures`)."""
            return dict(self._signatures)

    return Serving()


# -- writing ------------------------------------------------------------------------------------


def default_output(run_folder: Location, fmt: str) -> Location:
    return run_folder / "export" / fmt


def export_run(folder: str | Location, fmt: str = "savedmodel",
               output: str | Location | None = None,
               checkpoint: str = "best", force: bool = False,
               quantization: str = "none", chunk_ms: float | None = None) -> dict[str, Any]:
    """Export a run's checkpoint as ``fmt`` into the folder ``output`` (default
    ``RUN/export/FORMAT``), verify it against the checkpoint, and return its metadata (also
    written to ``asrkit.json`` in the folder, with the verification's largest difference).

    A run whose outputs are CTC logits exports with CTC's greedy decoding in the graph; a
    transducer run with the transducer's greedy search
    (:mod:`asrkit.serving.export_transducer`); an attention encoder-decoder run with its
    decoder's greedy search and steps (:mod:`asrkit.serving.export_attention`).
    ``quantization`` (TFLite only) is one of :data:`asrkit.serving.quantize.MODES`; a quantised
    export is verified by :func:`verify_quantized` instead of to the float tolerance.

    A streaming CTC run also exports its ``stream_step`` at ``chunk_ms`` (default: its own
    chunk; :mod:`asrkit.serving.export_stream`), verified against the whole-utterance
    logits."""
    if fmt not in FORMATS:
        raise ExportError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    quantize.check_mode(fmt, quantization)

    target = location(output) if output is not None else default_output(location(folder), fmt)
    if not isinstance(target, StoragePath):
        outputs.check_not_current(target, "write an export over")
        recover_replacement(target)  # what a crash left of an earlier replacement
    _check_target(target, location(folder), force)  # before the model is loaded: fail fast
    run, model, head, state = load_networks(folder, fmt, checkpoint, chunk_ms)
    if chunk_ms is not None and (fmt in ("onnx", export_sherpa.FORMAT) or quantization != "none"
                                 or not export_stream.streams(run, head)):
        raise ExportError("--chunk-ms sets a streaming export's step: only a streaming CTC "
                          "run's SavedModel or float TFLite export has one (transcribe "
                          "--stream with the run folder streams the others)")
    quantize.check_mode(fmt, quantization, transducer=head is not None)  # before any writing
    calibration = quantize.representative_audio(run) if quantization == "full" else None
    if isinstance(target, StoragePath):  # made here, then uploaded
        staging = Path(tempfile.mkdtemp(prefix="asrkit-export-"))
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        if head is None:
            module = serving_module(run, model, with_text=True)
        elif export_attention.exports_as_attention(run.objective):
            module = export_attention.attention_module(run, model, head)
        else:
            module = export_transducer.transducer_module(
                run, model, head, export_transducer.max_symbols_of(run))
        if fmt == "savedmodel":
            _save(module, staging)
        elif fmt == "tflite":
            _write_tflite(run, model, staging, head, quantization, calibration)
        elif fmt == export_sherpa.FORMAT and head is not None:
            export_sherpa_transducer.write(run, model, head, staging)
        elif fmt == export_sherpa.FORMAT:
            export_sherpa.write(run, model, staging)
        else:
            write_onnx(run, model, staging)
        meta = _metadata(run, fmt, checkpoint, state, head)
        geometry = getattr(module, "stream_geometry", None)
        if geometry is not None and fmt in ("savedmodel", "tflite"):
            meta["stream"] = {**geometry.to_json(), "chunk_ms": chunk_ms_of(run)}
            meta["signatures"].append(export_stream.STREAM_SIGNATURE)
        if fmt == "tflite":
            meta.update(quantize.metadata(
                quantization, (staging / TFLITE_FILE).read_bytes(),
                None if calibration is None else len(calibration), run.train.train_split))
        if joins_symbols(run.labels):
            run.labels.save(staging / "alphabet.txt")
        (staging / METADATA_FILE).write_text(json.dumps(meta, indent=2) + "\n")
        audios = [verification_audio(), verification_audio(0.7)]
        if fmt == export_sherpa.FORMAT and head is not None:
            meta["verified_max_abs_diff"] = export_sherpa_transducer.verify(
                staging, run, model, head, audios)
        elif fmt == export_sherpa.FORMAT:
            meta["verified_max_abs_diff"] = export_sherpa.verify(staging, run, model, audios)
        elif quantization == "none":
            meta["verified_max_abs_diff"] = verify_export(staging, module)
            if "stream" in meta:
                meta["stream"]["verified_max_abs_diff"] = verify_stream(staging, module)
        else:
            meta.update(verify_quantized(staging, module, run))
        (staging / METADATA_FILE).write_text(json.dumps(meta, indent=2) + "\n")
        outputs.mark(staging, outputs.EXPORT)
        _check_target(target, location(folder), force)  # again: it may have changed since
        if isinstance(target, StoragePath):
            upload_export(staging, target)
        else:
            put_in_place(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    meta["path"] = str(target)
    return meta


def load_networks(folder: str | Location, fmt: str, checkpoint: str = "best",
                  chunk_ms: float | None = None
                  ) -> tuple[Run, keras.Model, keras.Model | None, dict[str, Any]]:
    """The run in ``folder``, its model and the checkpoint's state, and the objective's head
    that the export's search calls, a transducer's or an attention encoder-decoder's (``None``
    for a run whose outputs are CTC logits, whose export reads the model alone). What ``fmt``
    cannot hold, and an objective whose outputs no kind of export reads, is refused in one line
    before any weights load."""
    run = with_chunk(load_run(folder), chunk_ms)
    if fmt == export_sherpa.FORMAT:
        export_sherpa.check_run(run)
    if export_attention.exports_as_attention(run.objective):
        export_attention.check_format(fmt)
    elif export_transducer.exports_as_transducer(run.objective):
        export_transducer.check_format(fmt)
    else:
        model, state = restore_model(run, checkpoint)  # refuses other objectives' runs
        return run, model, None, state
    return (run, *restore_networks(run, checkpoint))


def aside_path(target: Path) -> Path:
    """Where the export at ``target`` waits while its replacement is renamed into place: a
    hidden sibling, on the same filesystem (so renames, not copies), whose name no staging
    folder can have (``mkdtemp`` uses no ``-``)."""
    return target.with_name(f".{target.name}.old-export")


def put_in_place(staging: Path, target: Path) -> None:
    """Rename the finished export ``staging`` to ``target``, replacing the export there (which
    :func:`_check_target` allowed) so that a whole export is on disk at every moment: the new
    export's files are synced, the old export is renamed aside, the new one renamed into place,
    both renames synced (the parent folder), and only then the old one deleted. A failure of
    the second rename puts the old export back; after a crash, :func:`recover_replacement`
    does."""
    _sync_tree(staging)
    aside = aside_path(target)
    replacing = _occupied(target)
    if replacing:
        os.replace(target, aside)
    try:
        os.replace(staging, target)
    except BaseException:
        if replacing:
            with contextlib.suppress(OSError):  # if even this fails, the next export does it
                os.replace(aside, target)
        raise
    sync_to_disk(target.parent)
    if replacing:
        _remove_aside(aside)


def recover_replacement(target: Path) -> None:
    """Finish a replacement of the export at ``target`` that a crash or a power cut stopped:
    if the new export got into place, delete the old one left aside; if not, put the old one
    back (it is the last whole export). Nothing to do when no export was left aside."""
    aside = aside_path(target)
    if aside.is_symlink() or not aside.is_dir():
        return
    if _occupied(target):
        _remove_aside(aside)
    else:
        os.replace(aside, target)
        sync_to_disk(target.parent)


def _remove_aside(aside: Path) -> None:
    """Delete an export set aside, unless it holds files asrkit does not write (then it is not
    one of asrkit's, whatever its name says)."""
    others = outputs.foreign(aside, outputs.EXPORT)
    if others:
        raise ExportError(f"{aside} holds files asrkit did not write ({', '.join(others)}); "
                          "move it away, then export again")
    shutil.rmtree(aside)


def _sync_tree(folder: Path) -> None:
    """Put every file and folder under ``folder`` on disk, so that once it is renamed into place
    (and the export it replaces deleted) a power cut cannot leave it with empty files."""
    for root, _, files in os.walk(folder):
        for name in files:
            sync_to_disk(Path(root) / name)
        sync_to_disk(Path(root))


def _occupied(target: Path) -> bool:
    return target.is_symlink() or target.is_file() or (target.is_dir() and any(target.iterdir()))


def upload_export(staging: Path, target: StoragePath) -> None:
    """Put the finished export ``staging`` at the URL ``target``: the export there (which
    :func:`_check_target` allowed to be replaced) is deleted, then the new one uploaded with
    ``asrkit.json`` last, so that a killed upload is not taken for an export
    (:func:`is_export` asks for it at a URL)."""
    target.rmtree()
    upload_folder(staging, target, last=METADATA_FILE)


def _check_target(target: Location, run_folder: Location, force: bool) -> None:
    """Refuse an ``--output`` that an export must not be renamed onto: the current folder (or
    one above it), the run or a folder holding it, and an occupied folder unless ``force`` and
    it is an export asrkit made."""
    if isinstance(target, StoragePath):
        if str(run_folder).startswith(str(target) + "/") or target == run_folder:
            raise ExportError(f"{target} holds the run ({run_folder}); refusing to write an "
                              "export over it: choose another --output")
        if outputs.holds_ours(target, outputs.EXPORT) and not force:
            raise ExportError(f"{target} already exists; pass --force to replace it")
        return
    assert isinstance(run_folder, Path)
    outputs.check_not_current(target, "write an export over")
    real, run = target.resolve(), run_folder.resolve()
    if real == run or real in run.parents:
        raise ExportError(f"{target} holds the run ({run_folder}); refusing to write an export "
                          "over it: choose another --output")
    if _occupied(target):
        if not force:
            raise ExportError(f"{target} already exists; pass --force to replace it")
        outputs.check_replaceable(target, outputs.EXPORT, [(run_folder, "the run")])


def _save(module: tf.Module, folder: Path) -> None:
    import tensorflow as tf

    tf.saved_model.save(module, str(folder), signatures=module.signatures())


def _write_tflite(run: Run, model: keras.Model, folder: Path, head: Any = None,
                  quantization: str = "none", calibration: list[np.ndarray] | None = None
                  ) -> None:
    """Convert through a SavedModel of the string-join-free signatures, built-ins only (a
    transducer's, with its search, when ``head`` is given), quantised as ``quantization`` says
    (:mod:`asrkit.serving.quantize`; ``full`` calibrates on the PCM ``calibration``)."""
    import tensorflow as tf

    if head is None:
        lite = serving_module(run, model, with_text=False)
    else:
        lite = export_transducer.transducer_module(
            run, model, head, export_transducer.max_symbols_of(run), with_text=False)
    with tempfile.TemporaryDirectory(prefix="asrkit-tflite-") as scratch:
        _save(lite, Path(scratch))
        converter = tf.lite.TFLiteConverter.from_saved_model(
            scratch, signature_keys=sorted(lite.signatures()))
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        quantize.configure(converter, quantization)
        try:
            if quantization == "full":
                flatbuffer = quantize.convert_full(converter, sorted(lite.signatures()),
                                                   calibration or [])
            else:
                flatbuffer = converter.convert()
            if quantization == "int8":
                flatbuffer = quantize.float_front_end(flatbuffer)
        except Exception as error:  # the converter raises its own ConverterError subclasses
            raise ExportError(
                f"{run.spec.name} cannot be converted to TFLite with built-in operations only: "
                + " ".join(str(error).split())[:300]
            ) from None
    (folder / TFLITE_FILE).write_bytes(flatbuffer)


def _metadata(run: Run, fmt: str, checkpoint: str, state: dict[str, Any],
              head: Any = None) -> dict[str, Any]:
    """``asrkit.json``: what the export is and holds. ``objective`` says which graph: ``ctc``
    (logits and CTC's greedy decoding; exports older than the entry are these),
    ``transducer`` (encoder frames and the transducer's greedy search, with its
    ``max_symbols``) or ``attention`` (encoder frames, the attention decoder's greedy search
    and its steps: :func:`asrkit.serving.export_attention.metadata`)."""
    signatures = ["logits", "transcribe", "logits_int16", "transcribe_int16"]
    meta = {
        "format": fmt,
        "objective": "ctc",
        "asrkit_version": __version__,
        "model": run.spec.name,
        "features": run.extractor.name,
        "run": str(run.folder),
        "checkpoint": checkpoint,
        "global_step": state.get("global_step"),
        "decoder": run.train.decoder,
        "sample_rate": SAMPLE_RATE,
        "frame_seconds": frame_seconds(run.feature_config, run.spec, run.model_config),
        "labels": run.labels.to_json(),
        "alphabet": list(run.labels.symbols),  # the symbols, for readers older than "labels"
        "blank": run.labels.blank,
        "file": TFLITE_FILE if fmt == "tflite" else "saved_model.pb",
        "signatures": signatures + (["serving_default"] if fmt == "savedmodel" else []),
        "outputs": {"logits": ["logits"],
                    "transcribe": ["labels", "characters"] + (["text"] if fmt == "savedmodel"
                                                              else [])},
    }
    if fmt == "onnx":
        meta.update(metadata())
    transducer = export_transducer.exports_as_transducer(run.objective)
    if fmt == export_sherpa.FORMAT:  # sherpa-onnx searches itself: no graph of asrkit's
        meta.update(export_sherpa_transducer.metadata(run) if transducer
                    else export_sherpa.metadata(run))
    elif transducer:
        meta.update(export_transducer.metadata(export_transducer.max_symbols_of(run), fmt))
    if export_attention.exports_as_attention(run.objective) and head is not None:
        meta.update(export_attention.metadata(head))
    return meta


def verification_audio(seconds: float = VERIFY_SECONDS) -> np.ndarray:
    """A fixed, speech-like test signal: a gliding two-tone chirp with noise and a pause."""
    import numpy as np

    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    rng = np.random.default_rng(0)
    tone = 0.3 * np.sin(2 * np.pi * (200 + 400 * t) * t) + 0.1 * np.sin(2 * np.pi * 1800 * t)
    audio = tone * (np.sin(2 * np.pi * 3 * t) > -0.5) + 0.01 * rng.standard_normal(len(t))
    return audio.astype(np.float32)


def verify_export(folder: Path, module: tf.Module) -> float:
    """The largest logit difference between the export in ``folder`` and ``module`` (the
    checkpoint's graph) on :func:`verification_audio`; an error if it exceeds the tolerance.

    A transducer export's encoder frames are compared instead (to
    :data:`asrkit.serving.export_transducer.VERIFY_TOLERANCE`), and its ``transcribe`` must
    emit exactly the labels, at the same frames, that the checkpoint's greedy search
    (``module.checkpoint_tokens``, the ``transducer-greedy`` decoder's) emits on the checkpoint's
    frames: the in-graph loop is checked against the decoder it repeats. So is an attention
    export's ``transcribe``, against the checkpoint head's greedy search
    (``module.checkpoint_labels``)."""
    import numpy as np

    audio = verification_audio()
    exported = ExportedModel(folder)
    what, expected, got = _outputs(exported, module, audio)
    tolerance = (export_transducer.VERIFY_TOLERANCE if exported.is_transducer
                 else export_attention.VERIFY_TOLERANCE if exported.is_attention
                 else VERIFY_TOLERANCE)
    difference = float(np.max(np.abs(got - expected))) if expected.size else 0.0
    if not math.isfinite(difference) or difference > tolerance:
        raise ExportError(f"the export's {what} differ from the checkpoint's by "
                          f"{difference:.3g} (more than {tolerance})")
    if exported.is_transducer:
        labels, frames = exported.transcribe_tokens(audio)
        emitted = list(zip(labels.tolist(), frames.tolist(), strict=True))
        if emitted != module.checkpoint_tokens(expected):
            raise ExportError("the export's greedy search emits other labels than the "
                              "checkpoint's transducer-greedy decoder on the same audio")
    if exported.is_attention and (exported.transcribe_labels(audio).tolist()
                                  != module.checkpoint_labels(expected)):
        raise ExportError("the export's greedy search emits other labels than the "
                          "checkpoint's attention decoder on the same audio")
    return difference


def _outputs(exported: ExportedModel, module: tf.Module, audio: np.ndarray
             ) -> tuple[str, np.ndarray, np.ndarray]:
    """What is compared on ``audio``: its name (``logits``, or a transducer's ``encoder
    frames``), the checkpoint graph's and the export's; an error if their shapes differ."""
    if exported.is_transducer or exported.is_attention:
        what = "encoder frames"
        expected, got = module.encode(audio)["frames"].numpy(), exported.encode(audio)
    else:
        what = "logits"
        expected, got = module.logits(audio)["logits"].numpy(), exported.logits(audio)
    if got.shape != expected.shape:
        raise ExportError(f"the export gives {what} of shape {got.shape}, the checkpoint "
                          f"{expected.shape}")
    return what, expected, got


def verify_stream(folder: Path, module: tf.Module) -> float:
    """The largest difference between the exported ``stream_step`` streamed over the
    verification audio in irregular pieces and the module's whole-utterance logits."""
    import numpy as np
    import tensorflow as tf

    exported = ExportedModel(folder)
    audio = verification_audio()
    stream = exported.stream()
    pieces, start = [], 0
    for size in (1000, 7, 16000, 333, 10_000_000):
        pieces.append(stream.push(audio[start:start + size]))
        start += size
    pieces.append(stream.finish())
    streamed = np.concatenate([p for p in pieces if p.size])
    whole = module.signatures()["logits"](tf.constant(audio, tf.float32))["logits"].numpy()
    if streamed.shape != whole.shape:
        raise ExportError(f"the exported stream gives {streamed.shape} logits, the whole "
                          f"utterance {whole.shape}")
    diff = float(np.max(np.abs(streamed - whole)))
    if diff > VERIFY_TOLERANCE:
        raise ExportError(f"the exported stream differs from the whole utterance by {diff:.3g}")
    return diff


def verify_quantized(folder: Path, module: tf.Module, run: Run) -> dict[str, Any]:
    """A quantised export checked against the checkpoint's float graph ``module``.

    Its outputs cannot equal the float ones to :data:`VERIFY_TOLERANCE` (that is the point of
    quantising), so what is recorded is what a user can judge it by: the largest output
    difference (``verified_max_abs_diff``) and the character error rate of its greedy
    transcripts against the float graph's (``verified_transcript_cer``), on
    :func:`verification_audio` and up to :data:`VERIFY_UTTERANCES` utterances of the run's dev
    split when its dataset is here (``verified_on`` says which). Only a gross failure is
    refused: outputs of another shape, or not finite (NaN, infinity)."""
    import numpy as np

    inputs = [verification_audio()]
    try:
        speech = quantize.utterances(run, run.train.dev_split, VERIFY_UTTERANCES)
    except AsrkitError:  # no dataset here: the synthetic signal alone
        speech = []
    inputs += speech
    exported = ExportedModel(folder)
    difference, floats, quantised = 0.0, [], []
    for audio in inputs:
        what, expected, got = _outputs(exported, module, audio)
        if not np.all(np.isfinite(got)):
            raise ExportError(f"the quantised export's {what} are not finite (NaN or infinity) "
                              "on the verification audio")
        if expected.size:
            difference = max(difference, float(np.max(np.abs(got - expected))))
        text = module.transcribe(audio)["text"].numpy()
        floats.append(text.decode() if isinstance(text, bytes) else str(text))
        quantised.append(exported.transcribe(audio))
    on = ["synthetic signal"] + ([f"{len(speech)} utterances of {run.train.dev_split}"]
                                 if speech else [])
    return {"verified_max_abs_diff": difference,
            "verified_transcript_cer": corpus_score(floats, quantised).cer,
            "verified_on": on}


# -- reading ------------------------------------------------------------------------------------


def is_export(path: str | Location) -> bool:
    """Whether ``path`` is an asrkit export folder (or a ``.tflite`` or ``.onnx`` file); at a
    URL, a folder whose upload finished (its ``asrkit.json``, uploaded last)."""
    path = location(path)
    if isinstance(path, StoragePath):
        return (path / METADATA_FILE).exists()
    if path.is_file():
        return path.suffix in (".tflite", ".onnx")
    return any((path / name).exists() for name in ("saved_model.pb", TFLITE_FILE, "model.onnx"))


def tflite_interpreter(path: str | Path, num_threads: int | None = None,
                       float32_kernels: bool = False) -> Any:
    """A TFLite interpreter for ``path``: LiteRT's (``ai_edge_litert``) when installed, else
    TensorFlow's own ``tf.lite.Interpreter``, whose deprecation warning is silenced (it still
    ships with TensorFlow and runs the same flatbuffer).

    ``float32_kernels`` leaves out the default XNNPACK delegate, which runs a model with float16
    weights in float16 arithmetic on a CPU that has it (AVX512-FP16, ARMv8.2): the feature front
    end's power spectrum exceeds float16's range (65504) there and the logits become NaN. The
    built-in kernels compute in float32 from the float16 weights, as ``--quantize float16``
    promises."""
    threads = num_threads or os.cpu_count() or 1
    try:
        from ai_edge_litert.interpreter import (  # type: ignore[import-not-found]
            Interpreter,
            OpResolverType,
        )
    except ImportError:
        import tensorflow as tf

        resolver = tf.lite.experimental.OpResolverType
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return tf.lite.Interpreter(
                model_path=str(path), num_threads=threads,
                experimental_op_resolver_type=(resolver.BUILTIN_WITHOUT_DEFAULT_DELEGATES
                                               if float32_kernels else resolver.AUTO))
    return Interpreter(model_path=str(path), num_threads=threads,
                       experimental_op_resolver_type=(
                           OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES if float32_kernels
                           else OpResolverType.AUTO))


class ExportedModel:
    """An export read back: ``logits(audio)`` and ``transcribe(audio)`` on float32 audio in
    [-1, 1] at 16 kHz, whichever the format; ``metadata`` is its ``asrkit.json`` and ``labels``
    what its classes mean (from ``labels`` in it, or the ``alphabet`` of older exports).

    A transducer export (:attr:`is_transducer`) has no logits: ``encode(audio)`` gives its
    encoder frames, ``transcribe(audio)`` its text and ``transcribe_tokens(audio)`` the labels
    of its in-graph greedy search with the frame of each. Nor has an attention export
    (:attr:`is_attention`): ``encode(audio)`` gives its encoder frames,
    ``transcribe_labels(audio)`` the labels of its in-graph greedy search, and
    :meth:`attention_networks` its decoder's steps, which asrkit's attention decoders call."""

    def __init__(self, path: str | Location) -> None:
        path = location(path)
        if isinstance(path, StoragePath):  # read from a local copy: TFLite and ONNX need one
            if not is_export(path):
                raise ExportError(f"{path} is not an exported model (no {METADATA_FILE})")
            path = download_folder(path)
        folder = path.parent if path.is_file() else path
        if not is_export(path):
            raise ExportError(f"{path} is not an exported model (no saved_model.pb or "
                              f"{TFLITE_FILE})")
        meta_file = folder / METADATA_FILE
        self.metadata: dict[str, Any] = (json.loads(meta_file.read_text())
                                         if meta_file.exists() else {})
        if self.metadata.get("format") == export_sherpa.FORMAT:
            raise ExportError(f"{folder} is a sherpa-onnx export: its model takes Kaldi fbank "
                              "features, which sherpa-onnx computes (docs/sherpa-onnx.md); "
                              "transcribe with the run folder or an onnx export instead")
        self.path = path
        onnx_file = path if path.is_file() else folder / "model.onnx"
        if onnx_file.suffix == ".onnx" and onnx_file.is_file():
            self.format = "onnx"
            self._onnx = OnnxModel(onnx_file, self._labels(folder))
        elif path.is_file() or not (folder / "saved_model.pb").exists():
            model_file = path if path.is_file() else folder / TFLITE_FILE
            self.format = "tflite"
            self._interpreter = tflite_interpreter(
                model_file, float32_kernels=self.metadata.get("quantize") == "float16")
            self._runners: dict[str, Any] = {}
        else:
            import tensorflow as tf

            self.format = "savedmodel"
            self._loaded = tf.saved_model.load(str(folder))
            if not self.metadata:  # a SavedModel carries its own labels and frame step
                symbols = [s.decode() for s in self._loaded.alphabet.numpy()]
                marker = getattr(self._loaded, "word_marker", None)  # older exports: none
                self.metadata = {
                    "alphabet": symbols,
                    "frame_seconds": float(self._loaded.frame_seconds.numpy()),
                    "sample_rate": int(self._loaded.sample_rate.numpy()),
                }
                if marker is not None:
                    self.metadata["labels"] = {"symbols": symbols, "blank": len(symbols),
                                               "word_marker": marker.numpy().decode()}
                objective = getattr(self._loaded, "objective", None)  # transducer, attention
                if objective is not None:
                    self.metadata["objective"] = objective.numpy().decode()
                if self.is_transducer:
                    self.metadata["max_symbols"] = int(self._loaded.max_symbols.numpy())
                if self.is_attention:
                    self.metadata.update(
                        has_ctc=bool(self._loaded.has_ctc.numpy()),
                        eos=int(self._loaded.eos.numpy()),
                        attention_decoder=self._loaded.attention_decoder.numpy().decode(),
                        max_length_ratio=float(self._loaded.max_length_ratio.numpy()))
        self.labels: Labels = self._labels(folder)

    @property
    def is_transducer(self) -> bool:
        """Whether the export holds a transducer's encoder and greedy search (``objective`` in
        ``asrkit.json``; exports without it are CTC's)."""
        return self.metadata.get("objective", "ctc") == "transducer"

    @property
    def is_attention(self) -> bool:
        """Whether the export holds an attention encoder-decoder's encoder, greedy search and
        decoder steps (``objective`` ``attention``)."""
        return self.metadata.get("objective", "ctc") == "attention"

    def _require(self, objectives: tuple[str, ...], method: str) -> None:
        objective = self.metadata.get("objective", "ctc")
        if objective not in objectives:
            what = {"transducer": "a transducer export: it has no logits (encode gives its "
                                  "encoder frames, transcribe its labels)",
                    "attention": "an attention export: it has no logits (encode gives its "
                                 "encoder frames, transcribe its labels, no label frames)",
                    }.get(objective, "a CTC export: it has logits, no encoder frames or "
                                     "label frames")
            raise ExportError(f"{self.path} is {what}; {method}() cannot read it")

    def _labels(self, folder: Path) -> Labels:
        if "alphabet" not in self.metadata and "labels" not in self.metadata:
            raise ExportError(f"{folder} has no {METADATA_FILE}; it says what the labels mean")
        return labels_from_json(self.metadata.get("labels", self.metadata))

    def _run(self, signature: str, audio: np.ndarray) -> dict[str, Any]:
        import numpy as np

        audio = np.ascontiguousarray(audio, dtype=np.float32)
        if self.format == "onnx":
            return self._onnx.run(signature, audio)
        if self.format == "tflite":
            runner = self._runners.get(signature)
            if runner is None:
                runner = self._runners[signature] = self._interpreter.get_signature_runner(
                    signature)
            return dict(runner(pcm=audio))
        outputs = self._loaded.signatures[signature](pcm=audio)
        return {key: value.numpy() for key, value in outputs.items()}

    @property
    def stream_geometry(self) -> dict[str, Any]:
        """A streaming export's ``stream`` metadata; a one-line error for another export (ONNX
        exports never hold a step)."""
        geometry = self.metadata.get("stream")
        if geometry is None:
            raise AsrkitError(f"{self.path} holds no streaming step: export a streaming CTC run "
                              "(-o model.streaming=true) as SavedModel or TFLite, or transcribe "
                              "--stream with the run folder")
        return geometry

    def stream(self) -> export_stream.ExportStream:
        """A new stream through a streaming export's ``stream_step``
        (:class:`asrkit.serving.export_stream.ExportStream`)."""
        geometry = self.stream_geometry
        name = export_stream.STREAM_SIGNATURE
        if self.format == "tflite":
            runner = self._runners.get(name)
            if runner is None:
                runner = self._runners[name] = self._interpreter.get_signature_runner(name)
        else:
            signature = self._loaded.signatures[name]

            def runner(**inputs: Any) -> dict[str, Any]:
                return {k: v.numpy() for k, v in signature(**inputs).items()}
        stride = round(geometry["chunk_frames"] / geometry["output_frames"])
        return export_stream.ExportStream(runner, geometry, lambda n: -(-n // stride))

    def logits(self, audio: np.ndarray) -> np.ndarray:
        """A CTC export's logits ``[frames', classes]`` (the blank last)."""
        self._require(("ctc",), "logits")
        return self._run("logits", audio)["logits"]

    def encode(self, audio: np.ndarray) -> np.ndarray:
        """A transducer export's encoder frames ``[frames', joint_dim]``, or an attention
        export's ``[frames', d_model]``."""
        self._require(("transducer", "attention"), "encode")
        return self._run("encode", audio)["frames"]

    def transcribe_tokens(self, audio: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A transducer export's in-graph greedy search: the labels it emits (int32 ``[n]``)
        and the output frame each was emitted at (int32 ``[n]``), which word times read."""
        import numpy as np

        self._require(("transducer",), "transcribe_tokens")
        out = self._run("transcribe", audio)
        return (np.asarray(out["labels"], np.int32).reshape(-1),
                np.asarray(out["frames"], np.int32).reshape(-1))

    def transcribe(self, audio: np.ndarray) -> str:
        """The export's own in-graph greedy transcription (TFLite has no string join: its
        greedy labels are read here as :meth:`asrkit.core.labels.Labels.decode` reads them)."""
        out = self._run("transcribe", audio)
        if "text" in out:
            text = out["text"]
            return text.decode() if isinstance(text, bytes) else str(text)
        return self.labels.decode(int(label) for label in out["labels"])

    def transcribe_labels(self, audio: np.ndarray) -> np.ndarray:
        """An attention export's in-graph greedy search: the labels it emits (int32 ``[n]``)."""
        import numpy as np

        self._require(("attention",), "transcribe_labels")
        return np.asarray(self._run("transcribe", audio)["labels"], np.int32).reshape(-1)

    def attention_networks(self) -> export_attention.ExportedAttentionNetworks:
        """An attention SavedModel's decoder steps as an
        :class:`~asrkit.decoders.attention.AttentionNetworks` that asrkit's attention
        decoders call (:class:`~asrkit.serving.export_attention.ExportedAttentionNetworks`)."""
        self._require(("attention",), "attention_networks")
        return export_attention.ExportedAttentionNetworks(
            self._loaded, int(self.metadata.get("eos", self.labels.blank)),
            bool(self.metadata.get("has_ctc", False)))
