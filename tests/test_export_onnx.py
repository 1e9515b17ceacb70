"""``asrkit export --format onnx``: brnn and ds2 (tiny, random weights) with their features inside
give the checkpoint's logits and greedy labels under onnxruntime, and the documented
onnxruntime-only snippet runs as written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_doc_snippet
from tests.test_transcribe import LDC, make_tiny_run

pytest.importorskip("tf2onnx")
pytest.importorskip("onnxruntime")

#: float32 kernels that add in another order (onnxruntime's, a DFT as a matrix product instead
#: of an FFT) differ by ~1e-6 here.
TOLERANCE = 1e-4


def make_tiny_ds2(folder: Path, seed: int = 5) -> Path:
    """A run folder of a tiny randomly initialised ds2 (log-mel features, 2-D convolutions,
    bidirectional GRUs, time subsampled by 2). Without per-utterance normalisation: with it
    (ds2's presets), the lowest mel bin, nearly constant (below the log guard), is divided by
    a standard deviation of ~0.006, which magnifies float32 rounding (TensorFlow's FFT against
    a DFT product) to ~1.4e-4 in the logits, still well within the export's 1e-3 check."""
    import keras

    from asrkit.config.pipeline import PipelineConfig
    from asrkit.config.run import RunConfig
    from asrkit.config.train import TrainConfig
    from asrkit.core.text import Alphabet
    from asrkit.features import LogMelConfig
    from asrkit.models.ds2 import DS2Config
    from asrkit.runs.run import Run
    from asrkit.train.checkpoints import Checkpoints

    run = Run(folder, RunConfig(TrainConfig(model="ds2"),
                                DS2Config(conv_channels=4, rnn_layers=1, rnn_units=16),
                                LogMelConfig(num_mel_bins=40), PipelineConfig()), Alphabet())
    run.save()
    keras.utils.set_random_seed(seed)
    model = run.spec.build(run.model_config, 40, run.alphabet.num_classes)
    Checkpoints(folder / "checkpoints", model=model).save("best", 3, {"global_step": 3})
    return folder


@pytest.fixture(scope="module")
def audio():
    """The fixture utterance, 16 kHz int16: real speech."""
    from asrkit.serving.transcribe import load_audio

    return load_audio(LDC / "LDC93S1.wav")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("onnx")
    return {"brnn": make_tiny_run(base / "brnn"), "ds2": make_tiny_ds2(base / "ds2")}


@pytest.fixture(scope="module")
def exports(runs, tmp_path_factory):
    from asrkit.serving.export import export_run

    folder = tmp_path_factory.mktemp("exports")
    return {name: Path(export_run(run, "onnx", folder / name)["path"])
            for name, run in runs.items()}


def checkpoint_logits(run_folder: Path, audio: np.ndarray) -> np.ndarray:
    """The checkpoint's logits as evaluation computes them (a padded batch through
    ``extract_batch``), independently of the export's graph."""
    from asrkit.evaluation.restore import load_run_model

    run, model, _ = load_run_model(run_folder)
    extractor = run.extractor
    floats = audio.astype(np.float32) / 32768
    features, lengths = extractor.extract_batch(floats[None], [len(floats)], run.feature_config)
    logits = model((features, lengths), training=False).numpy()[0]
    return logits[: int(run.spec.output_length(run.model_config, lengths)[0])]


@pytest.mark.parametrize("name", ["brnn", "ds2"])
def test_onnx_gives_the_checkpoints_logits_and_greedy_labels(name, runs, exports, audio):
    import onnxruntime

    expected = checkpoint_logits(runs[name], audio)
    session = onnxruntime.InferenceSession(str(exports[name] / "model.onnx"),
                                           providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["pcm"]
    assert {o.name for o in session.get_outputs()} == {"logits", "labels"}
    floats = audio.astype(np.float32) / 32768
    for pcm in (floats, floats[:7000], floats[:401]):  # frame counts of every remainder
        logits, labels = session.run(["logits", "labels"], {"pcm": pcm})
        want = checkpoint_logits(runs[name], (pcm * 32768).astype(np.int16))
        assert logits.shape == want.shape
        assert np.max(np.abs(logits - want)) < TOLERANCE
        best = want.argmax(-1)
        path = [c for i, c in enumerate(best) if (i == 0 or c != best[i - 1]) and c != 28]
        assert labels.tolist() == path
    assert logits.shape[1] == 29 and expected.shape[0] > 0
    meta = json.loads((exports[name] / "asrkit.json").read_text())
    assert meta["format"] == "onnx" and meta["model"] == name and meta["file"] == "model.onnx"
    assert meta["inputs"] == ["pcm"] and meta["outputs"] == ["logits", "labels"]
    assert meta["verified_max_abs_diff"] < TOLERANCE


def test_transcribe_reads_an_onnx_export(runs, exports, audio):
    from asrkit.serving.transcribe import load_recognizer

    floats = audio.astype(np.float32) / 32768
    from_run = load_recognizer(runs["brnn"]).logits(floats)
    for path in (exports["brnn"], exports["brnn"] / "model.onnx"):
        recognizer = load_recognizer(path)
        assert "onnx" in recognizer.name
        assert np.max(np.abs(recognizer.logits(floats) - from_run)) < TOLERANCE


def test_export_command_onnx(runs, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "asrkit", "export", str(runs["brnn"]), "--format", "onnx",
         "--output", str(tmp_path / "onnx")], capture_output=True, text=True, timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith(f"exported brnn (step 7) as onnx to {tmp_path / 'onnx'}")
    assert sorted(p.name for p in (tmp_path / "onnx").iterdir()) == [
        ".asrkit-output", "alphabet.txt", "asrkit.json", "model.onnx"]


def test_documented_onnx_snippet_runs_with_onnxruntime_alone(exports, runs, audio, tmp_path):
    """docs/transcribe.md's onnxruntime snippet, as written, in a process where importing
    asrkit and TensorFlow fails."""
    import soundfile

    wav = tmp_path / "talk16k.wav"
    soundfile.write(wav, audio, 16000, subtype="PCM_16")
    result = run_doc_snippet("transcribe.md", "onnx-snippet",
                             {"runs/brnn-1/export/onnx": str(exports["brnn"]),
                              "talk16k.wav": str(wav)},
                             ("asrkit", "tensorflow", "keras", "tf2onnx"), tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    logits = checkpoint_logits(runs["brnn"], audio)
    best = logits.argmax(-1)
    alphabet = " abcdefghijklmnopqrstuvwxyz'"
    want = "".join(alphabet[c] for i, c in enumerate(best)
                   if (i == 0 or c != best[i - 1]) and c != 28)
    assert len(want.split()) > 2
    assert result.stdout.splitlines() == [want, want]
