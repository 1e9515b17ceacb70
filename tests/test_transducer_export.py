"""Exporting a transducer run (``asrkit.serving.export_transducer``): the in-graph greedy search
against the ``transducer-greedy`` decoder's, SavedModel and TFLite exports of a trained tiny
conformer transducer against its checkpoint, transcription with the export as with the run, an
export run without asrkit, and what is refused in one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from asrkit.decoders.transducer import greedy_search
from tests.conftest import SPEECH, run_doc_snippet
from tests.test_transducer import PREDICTORS, head_and_frames

CLIP = SPEECH / "ldc93s1" / "LDC93S1.wav"
#: The encoder frames of an export and of its checkpoint (float32 kernels adding in another
#: order differ by ~1e-6).
TOLERANCE = 1e-4


@pytest.mark.parametrize("config", PREDICTORS, ids=["lstm", "stateless", "lstm2"])
@pytest.mark.parametrize("max_symbols", [1, 3])
def test_the_graphs_search_is_the_greedy_decoders(config, max_symbols):
    import tensorflow as tf

    from asrkit.serving.export_transducer import greedy_tokens

    head, frames = head_and_frames(config, seed=4, frames=12)
    search = tf.function(lambda f: greedy_tokens(head, f, max_symbols),
                         input_signature=[tf.TensorSpec([None, config.joint_dim], tf.float32)])
    capped = False
    for row, length in enumerate([12, 5, 0]):
        labels, at = search(frames[row, :length])
        expected = greedy_search(head, frames[row:row + 1], np.array([length]), max_symbols)[0]
        assert list(zip(labels.numpy().tolist(), at.numpy().tolist(), strict=True)) == expected
        per_frame = np.bincount(np.array([frame for _, frame in expected], int), minlength=1)
        capped |= bool(per_frame.max(initial=0) == max_symbols)
    assert capped, "no frame reached max_symbols: the test would not check the cap"


# -- a trained run ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(datasets, tmp_path_factory) -> Path:
    """A tiny conformer transducer (an LSTM prediction network) trained for one epoch by
    ``asrkit train``, in a process of its own so that the module's tests share it."""
    folder = tmp_path_factory.mktemp("transducer") / "trained"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASRKIT_")}
    env["ASRKIT_HOME"] = str(datasets)
    result = subprocess.run(
        [sys.executable, "-m", "asrkit", "train", "--model", "conformer", "-o", "preset=tiny",
         "-o", "objective=transducer", "--epochs", "1", "--batch-size", "4", "--run-dir",
         str(folder), "--no-progress"], env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return folder


@pytest.fixture(scope="module")
def run(trained, tmp_path_factory) -> Path:
    """The trained run with the joint's blank made less likely (its output bias lowered until a
    label wins the first step at about half of the clip's frames): a model one epoch old may
    emit nothing, and an export that emits nothing would prove little."""
    import tensorflow as tf

    from asrkit.evaluation.restore import restore_networks
    from asrkit.runs.run import load_run
    from asrkit.serving.graph import make_logits_fn
    from asrkit.serving.transcribe import load_audio
    from asrkit.train.checkpoints import Checkpoints, networks

    folder = tmp_path_factory.mktemp("transducer") / "run"
    shutil.copytree(trained, folder, ignore=shutil.ignore_patterns("checkpoints", "export"))
    source = load_run(trained)
    model, head, state = restore_networks(source)
    frames = make_logits_fn(source, model)(load_audio(CLIP).astype(np.float32) / 32768)
    predicted, _ = head.predict_step(tf.fill([1], head.blank), head.initial_state(1))
    logits = head.output_layer(tf.tanh(frames + predicted)).numpy()
    gap = logits[:, head.blank] - np.delete(logits, head.blank, axis=1).max(axis=1)
    bias = head.output_layer.bias
    bias.assign(bias.numpy() - np.eye(head.num_classes)[head.blank] * np.quantile(gap, 0.5))
    Checkpoints(folder / "checkpoints", **networks(model, head)).save(
        "best", int(state.get("global_step", 0)), state)
    return folder


@pytest.fixture(scope="module")
def exports(run, tmp_path_factory) -> dict[str, Path]:
    from asrkit.serving.export import export_run

    folder = tmp_path_factory.mktemp("exports")
    return {fmt: Path(export_run(run, fmt, folder / fmt)["path"])
            for fmt in ("savedmodel", "tflite")}


@pytest.fixture(scope="module")
def checkpoint(run):
    """``reference(audio) -> (frames, tokens)``: the checkpoint's encoder frames (the graph
    ``asrkit transcribe`` runs) and what its ``transducer-greedy`` decoder emits on them."""
    import tensorflow as tf

    from asrkit.evaluation.restore import restore_networks
    from asrkit.runs.run import load_run
    from asrkit.serving.graph import make_logits_fn

    loaded = load_run(run)
    model, head, _ = restore_networks(loaded)
    encode = tf.function(make_logits_fn(loaded, model),
                         input_signature=[tf.TensorSpec([None], tf.float32)])

    def reference(audio: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int]]]:
        frames = encode(audio).numpy()
        return frames, greedy_search(head, frames[None], np.array([len(frames)]), 4)[0]

    reference.networks = (model, head)  # kept alive: the function holds the model weakly
    return reference


@pytest.fixture(scope="module")
def clip() -> np.ndarray:
    from asrkit.serving.transcribe import load_audio

    return load_audio(CLIP)


def test_exports_emit_what_the_checkpoints_greedy_search_emits(exports, checkpoint, clip):
    from asrkit.serving.export import ExportedModel, verification_audio

    for audio in (verification_audio(), clip.astype(np.float32) / 32768):
        frames, expected = checkpoint(audio)
        for fmt, folder in exports.items():
            exported = ExportedModel(folder)
            assert exported.is_transducer
            got = exported.encode(audio)
            assert got.shape == frames.shape, fmt
            assert np.max(np.abs(got - frames)) < TOLERANCE, fmt
            labels, at = exported.transcribe_tokens(audio)
            assert list(zip(labels.tolist(), at.tolist(), strict=True)) == expected, fmt
            assert exported.transcribe(audio) == exported.labels.decode(labels.tolist()), fmt
    # On the clip: labels emitted, and somewhere more than one at a frame.
    assert len(expected) > 10
    assert len({frame for _, frame in expected}) < len(expected)


def test_the_savedmodel_and_tflite_signatures(exports, checkpoint, clip):
    import tensorflow as tf

    from asrkit.serving.export import tflite_interpreter

    floats = clip.astype(np.float32) / 32768
    frames, expected = checkpoint(floats)
    labels = [label for label, _ in expected]
    loaded = tf.saved_model.load(str(exports["savedmodel"]))
    assert set(loaded.signatures) == {"encode", "transcribe", "encode_int16", "transcribe_int16",
                                      "serving_default"}
    encoded = loaded.signatures["encode_int16"](pcm=tf.constant(clip))["frames"].numpy()
    assert np.max(np.abs(encoded - frames)) < TOLERANCE
    symbols = [s.decode() for s in loaded.alphabet.numpy()]
    for name, pcm in (("transcribe", floats), ("transcribe_int16", clip),
                      ("serving_default", floats)):
        out = loaded.signatures[name](pcm=tf.constant(pcm))
        assert out["labels"].numpy().tolist() == labels, name
        assert out["frames"].numpy().tolist() == [frame for _, frame in expected], name
        assert [c.decode() for c in out["characters"].numpy()] == [symbols[i] for i in labels]
        assert out["text"].numpy().decode() == "".join(symbols[i] for i in labels)
    assert loaded.objective.numpy().decode() == "transducer"
    assert int(loaded.max_symbols.numpy()) == 4

    interpreter = tflite_interpreter(exports["tflite"] / "model.tflite")
    assert set(interpreter.get_signature_list()) == {"encode", "transcribe", "encode_int16",
                                                     "transcribe_int16"}
    out = interpreter.get_signature_runner("transcribe_int16")(pcm=clip)
    assert out["labels"].tolist() == labels and "text" not in out


def test_export_metadata_describes_a_transducer(exports):
    from asrkit.serving.export import ExportedModel

    for fmt, folder in exports.items():
        meta = json.loads((folder / "asrkit.json").read_text())
        assert meta["format"] == fmt and meta["model"] == "conformer"
        assert meta["objective"] == "transducer" and meta["max_symbols"] == 4
        assert meta["decoder"] == "transducer-greedy"
        assert meta["signatures"][:4] == ["encode", "transcribe", "encode_int16",
                                          "transcribe_int16"]
        assert meta["outputs"]["transcribe"][:3] == ["labels", "frames", "characters"]
        assert 0 <= meta["verified_max_abs_diff"] < TOLERANCE
    # A transducer export has no logits; it says so in one line.
    from asrkit.serving.export import ExportError

    with pytest.raises(ExportError, match="is a transducer export: it has no logits"):
        ExportedModel(exports["tflite"]).logits(np.zeros(16000, np.float32))


def test_a_savedmodel_says_it_is_a_transducer_without_its_metadata(exports, tmp_path, clip):
    from asrkit.serving.export import ExportedModel

    bare = tmp_path / "bare"
    shutil.copytree(exports["savedmodel"], bare)
    (bare / "asrkit.json").unlink()
    audio = clip.astype(np.float32) / 32768
    read = ExportedModel(bare)
    assert read.is_transducer and read.metadata["max_symbols"] == 4
    with_meta = ExportedModel(exports["savedmodel"]).transcribe_tokens(audio)
    for got, expected in zip(read.transcribe_tokens(audio), with_meta, strict=True):
        assert got.tolist() == expected.tolist()


def test_transcribing_with_the_export_is_transcribing_with_the_runs_greedy_search(cli, run,
                                                                                exports):
    """An export holds the greedy search: it transcribes as the run does with
    ``transducer-greedy`` (the run's own decoder is the beam search)."""
    outputs = []
    for model, decoder in ((run, ["--decoder", "transducer-greedy"]),
                           (exports["savedmodel"], []), (exports["tflite"], [])):
        result = cli(["transcribe", CLIP, "--model", model, "--json", *decoder])
        assert result.exit_code == 0, result.stderr[-2000:]
        outputs.append(json.loads(result.stdout))
    assert outputs[0]["text"] and outputs[0]["words"]
    for other in outputs[1:]:
        assert other["decoder"] == "transducer-greedy"
        assert {k: v for k, v in other.items() if k != "model"} == {
            k: v for k, v in outputs[0].items() if k != "model"}


def test_what_a_transducer_export_refuses_in_one_line(cli, run, exports, tmp_path):
    export = exports["savedmodel"]
    for args, message in (
            (["export", run, "--format", "onnx", "--output", tmp_path / "onnx"],
             "asrkit export --format onnx: transducer runs export as savedmodel or tflite"),
            (["transcribe", CLIP, "--model", export, "--decoder", "transducer-beam"],
             f"{export} is a transducer export, decoded by its own greedy search "
             "(transducer-greedy), not by the transducer-beam decoder"),
            (["transcribe", CLIP, "--model", export, "--decoder", "greedy"],
             "not by the greedy decoder"),
            (["transcribe", CLIP, "--model", export, "-o", "decoder.max_symbols=2"],
             "searches with max_symbols=4, fixed when it was exported")):
        refused = cli(args)
        assert refused.exit_code != 0, args
        last = refused.stderr.strip().splitlines()[-1]
        assert last.startswith("asrkit: error: ") and message in last, refused.stderr
        assert "Traceback" not in refused.stderr
    assert not (tmp_path / "onnx").exists()
    assert not list(tmp_path.glob(".onnx*"))  # refused before anything was written


def test_a_transducer_exports_quantized(cli, run, exports, clip, tmp_path):
    """``--quantize int8`` and ``float16`` take the converter's settings alone and run the
    search on the quantised encoder and networks; ``full`` is refused in one line."""
    from asrkit.serving.export import ExportedModel, export_run

    audio = clip.astype(np.float32) / 32768
    size = (exports["tflite"] / "model.tflite").stat().st_size
    for mode in ("int8", "float16"):
        meta = export_run(run, "tflite", tmp_path / mode, quantization=mode)
        assert meta["quantize"] == mode and meta["objective"] == "transducer"
        assert 0 < meta["verified_max_abs_diff"] < 1 and 0 <= meta["verified_transcript_cer"] < 1
        assert (tmp_path / mode / "model.tflite").stat().st_size < size
        labels, _ = ExportedModel(tmp_path / mode).transcribe_tokens(audio)
        assert len(labels) > 10, mode
    refused = cli(["export", run, "--format", "tflite", "--quantize", "full", "--output",
                   tmp_path / "full"])
    assert refused.exit_code == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines()[-1] == (
        "asrkit: error: --quantize full is not supported for transducer runs (their in-graph "
        "greedy search is not calibrated); use int8 or float16")
    assert not (tmp_path / "full").exists()


def test_the_documented_snippet_runs_without_asrkit(exports, checkpoint, clip, tmp_path):
    """docs/transducers.md's plain TensorFlow snippet, as written, in a process where
    importing asrkit fails: a transducer export needs nothing of asrkit either."""
    import soundfile

    wav = tmp_path / "talk16k.wav"
    soundfile.write(wav, clip, 16000, subtype="PCM_16")
    result = run_doc_snippet("transducers.md", "snippet: transducer",
                             {"runs/rnnt/export/savedmodel": str(exports["savedmodel"]),
                              "talk16k.wav": str(wav)}, ("asrkit",), tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    _, expected = checkpoint(clip.astype(np.float32) / 32768)
    from asrkit.serving.export import ExportedModel

    exported = ExportedModel(exports["savedmodel"])
    lines = result.stdout.splitlines()
    assert lines[0] == exported.labels.decode(label for label, _ in expected)
    assert len(lines) == 1 + len(expected)  # a line a label: its symbol and its time
