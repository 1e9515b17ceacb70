"""``asrkit export``: SavedModel and TFLite give the checkpoint's logits and greedy text on the
same audio, run without asrkit, and are written whole or not at all."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT
from tests.test_transcribe import LDC, make_tiny_run

#: float32 kernels that add in another order (TFLite's, XNNPACK's) differ by ~1e-6 here.
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    return make_tiny_run(tmp_path_factory.mktemp("tiny") / "run")


@pytest.fixture(scope="module")
def exports(tiny_run, tmp_path_factory):
    from asrkit.serving.export import export_run

    folder = tmp_path_factory.mktemp("exports")
    return {fmt: Path(export_run(tiny_run, fmt, folder / fmt)["path"])
            for fmt in ("savedmodel", "tflite")}


@pytest.fixture(scope="module")
def audio():
    """The fixture utterance at 8 kHz, as 16 kHz int16 (sox resamples it): real speech."""
    from asrkit.serving.transcribe import load_audio

    return load_audio(LDC / "LDC93S1_8k_mono.wav")


@pytest.fixture(scope="module")
def reference(tiny_run, audio):
    """Logits and greedy text from the checkpoint, computed as evaluation computes them (a
    padded batch through ``extract_batch``), independently of the export's own graph."""
    from asrkit.decoders.greedy import GreedyDecoder
    from asrkit.runs.run import load_run
    from asrkit.train.checkpoints import Checkpoints

    run = load_run(tiny_run)
    extractor = run.extractor
    model = run.spec.build(run.model_config, extractor.num_features(run.feature_config),
                           run.alphabet.num_classes)
    assert Checkpoints(run.folder / "checkpoints", model=model).restore("best") is not None
    floats = audio.astype(np.float32) / 32768
    features, lengths = extractor.extract_batch(floats[None], [len(floats)], run.feature_config)
    logits = model((features, lengths), training=False).numpy()
    text = GreedyDecoder().decode(logits, lengths.numpy(), run.alphabet)[0]
    assert len(text.split()) > 2  # a transcript worth comparing
    return logits[0], text


def test_savedmodel_gives_the_checkpoints_logits_and_text(exports, audio, reference):
    import tensorflow as tf

    logits, text = reference
    loaded = tf.saved_model.load(str(exports["savedmodel"]))
    assert {"logits", "transcribe", "logits_int16", "transcribe_int16",
            "serving_default"} <= set(loaded.signatures)
    floats = tf.constant(audio.astype(np.float32) / 32768)
    got = loaded.signatures["logits"](pcm=floats)["logits"].numpy()
    assert got.shape == logits.shape
    assert np.max(np.abs(got - logits)) < TOLERANCE
    from_int16 = loaded.signatures["logits_int16"](pcm=tf.constant(audio))["logits"].numpy()
    assert np.max(np.abs(from_int16 - logits)) < TOLERANCE
    for name, pcm in (("transcribe", floats), ("transcribe_int16", tf.constant(audio)),
                      ("serving_default", floats)):
        out = loaded.signatures[name](pcm=pcm)
        assert out["text"].numpy().decode() == text, name
    assert "".join(c.decode() for c in out["characters"].numpy()) == text
    assert [s.decode() for s in loaded.alphabet.numpy()][:3] == [" ", "a", "b"]
    assert float(loaded.frame_seconds.numpy()) == pytest.approx(0.01)


def test_tflite_runs_under_the_interpreter_with_the_checkpoints_output(exports, audio, reference):
    import tensorflow as tf

    logits, text = reference
    with warnings.catch_warnings():  # tf.lite.Interpreter's notice that LiteRT replaces it
        warnings.simplefilter("ignore")
        interpreter = tf.lite.Interpreter(model_path=str(exports["tflite"] / "model.tflite"))
    assert set(interpreter.get_signature_list()) == {"logits", "transcribe", "logits_int16",
                                                     "transcribe_int16"}
    floats = audio.astype(np.float32) / 32768
    got = interpreter.get_signature_runner("logits")(pcm=floats)["logits"]
    assert got.shape == logits.shape
    assert np.max(np.abs(got - logits)) < TOLERANCE
    from_int16 = interpreter.get_signature_runner("logits_int16")(pcm=audio)["logits"]
    assert np.max(np.abs(from_int16 - logits)) < TOLERANCE
    for name, pcm in (("transcribe", floats), ("transcribe_int16", audio)):
        out = interpreter.get_signature_runner(name)(pcm=pcm)
        assert "".join(c.decode() for c in out["characters"]) == text, name
        assert "".join(" abcdefghijklmnopqrstuvwxyz'"[i] for i in out["labels"]) == text


def test_export_metadata_describes_the_model(exports, tiny_run):
    for fmt, folder in exports.items():
        meta = json.loads((folder / "asrkit.json").read_text())
        assert meta["format"] == fmt and meta["model"] == "brnn" and meta["features"] == "mfcc"
        assert meta["objective"] == "ctc" and "max_symbols" not in meta
        assert meta["global_step"] == 7 and meta["blank"] == 28 and len(meta["alphabet"]) == 28
        assert meta["sample_rate"] == 16000 and meta["frame_seconds"] == pytest.approx(0.01)
        assert meta["verified_max_abs_diff"] < TOLERANCE
        assert (folder / "alphabet.txt").read_text() == (tiny_run / "alphabet.txt").read_text()
    assert not list(exports["savedmodel"].parent.glob(".*"))  # no staging folders left


def test_a_run_and_its_exports_transcribe_alike(cli, tiny_run, exports):
    outputs = []
    lite = exports["tflite"]
    for model in (tiny_run, exports["savedmodel"], lite, lite / "model.tflite"):
        result = cli(["transcribe", LDC / "LDC93S1_44k_stereo.wav", "--model", model, "--json"])
        assert result.exit_code == 0, result.stderr[-2000:]
        outputs.append(json.loads(result.stdout))
    texts = {o["text"] for o in outputs}
    assert len(texts) == 1 and texts != {""}
    for other in outputs[1:]:
        for a, b in zip(outputs[0]["words"], other["words"], strict=True):
            assert (a["start"], a["end"]) == (b["start"], b["end"])
            assert a["confidence"] == pytest.approx(b["confidence"], abs=1e-3)


def test_export_command(cli, tiny_run, tmp_path):
    target = tmp_path / "exported"
    result = cli(["export", tiny_run, "--output", target])
    assert result.exit_code == 0, result.stderr[-2000:]
    assert result.stdout.startswith(f"exported brnn (step 7) as savedmodel to {target}")
    assert (target / "saved_model.pb").exists()
    again = cli(["export", tiny_run, "--output", target])
    assert again.exit_code == 1
    assert again.stderr.strip().splitlines()[-1] == (
        f"asrkit: error: {target} already exists; pass --force to replace it")

    untrained = tmp_path / "untrained"
    make_tiny_run(untrained)
    for pointer in (untrained / "checkpoints").glob("*.json"):
        pointer.unlink()
    result = cli(["export", untrained, "--format", "tflite"])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"asrkit: error: {untrained} has no checkpoint yet; train it first")
    assert not (untrained / "export").exists()


def doc_snippets() -> dict[str, str]:
    text = (ROOT / "docs" / "transcribe.md").read_text()
    return dict(re.findall(r"<!-- snippet: (\w+) -->\n```python\n(.*?)```", text, re.S))


def test_documented_snippets_run_without_asrkit(exports, audio, reference, tmp_path):
    """The docs' plain TensorFlow and TFLite snippets, as written, in a process where importing
    asrkit fails: an export needs nothing of asrkit."""
    import soundfile

    snippets = doc_snippets()
    assert set(snippets) == {"savedmodel", "tflite"}
    wav = tmp_path / "talk16k.wav"
    soundfile.write(wav, audio, 16000, subtype="PCM_16")
    paths = {"runs/brnn-1/export/savedmodel": str(exports["savedmodel"]),
             "runs/brnn-1/export/tflite": str(exports["tflite"]), "talk16k.wav": str(wav)}
    program = ["import sys", "class Block:",
               "    def find_spec(self, name, path=None, target=None):",
               "        if name.split('.')[0] == 'asrkit':",
               "            raise ImportError('asrkit is blocked in this test')",
               "sys.meta_path.insert(0, Block())"]
    for name, code in snippets.items():
        for old, new in paths.items():
            code = code.replace(old, new)
        program.append(f"print('--- {name}')")
        program.append(code)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASRKIT_")}
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    result = subprocess.run([sys.executable, "-c", "\n".join(program)], capture_output=True,
                            text=True, env=env, cwd=tmp_path, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    printed = result.stdout.split("--- ")
    text = reference[1]
    assert printed[1].splitlines()[1:3] == [text, text]  # savedmodel: text, then from logits
    assert printed[2].splitlines()[1] == text  # tflite
