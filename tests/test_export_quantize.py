"""``asrkit export --format tflite --quantize int8|float16|full``: smaller files that still
transcribe, say what they are, and are refused where they cannot be made."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from asrkit.testing.models import make_tiny_run
from tests.test_transcribe import LDC

MODES = ("int8", "float16", "full")


@pytest.fixture(scope="module")
def run_with_data(tmp_path_factory, tiny_dataset):
    """The tiny brnn run, its dataset the imported ``sample`` corpus (``full`` calibrates on
    its training split, the verification reads its dev split)."""
    folder = make_tiny_run(tmp_path_factory.mktemp("quantize") / "run")
    config = json.loads((folder / "config.json").read_text())
    config["train"]["dataset"] = str(tiny_dataset)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder


@pytest.fixture(scope="module")
def exports(run_with_data, tmp_path_factory):
    from asrkit.serving.export import export_run

    folder = tmp_path_factory.mktemp("quantized")
    return {mode: Path(export_run(run_with_data, "tflite", folder / mode,
                                  quantization=mode)["path"])
            for mode in ("none", *MODES)}


def _meta(folder: Path) -> dict:
    return json.loads((folder / "asrkit.json").read_text())


def _model_constant_bytes(folder: Path) -> int:
    """The bytes of the constants that the network reads (not the feature front end)."""
    from asrkit.serving.quantize import operation_counts

    counts = operation_counts((folder / "model.tflite").read_bytes())
    assert counts["front_end_constant_bytes"] > 0
    return counts["constant_bytes"] - counts["front_end_constant_bytes"]


def test_each_mode_is_smaller_than_float(exports):
    size = {mode: (folder / "model.tflite").stat().st_size for mode, folder in exports.items()}
    weights = {mode: _model_constant_bytes(folder) for mode, folder in exports.items()}
    for mode in MODES:
        assert size[mode] < size["none"], mode
    # The file also holds the graph (four signatures' operations), which quantising leaves
    # alone, and the front end's constants, kept float32 by int8 and full; the network's
    # constants are what shrink: to about half, and about a quarter.
    assert 0.45 < weights["float16"] / weights["none"] < 0.6
    assert 0.2 < weights["int8"] / weights["none"] < 0.33
    assert 0.2 < weights["full"] / weights["none"] < 0.33


def test_metadata_says_the_mode_and_how_it_was_verified(exports):
    assert _meta(exports["none"])["quantize"] == "none"
    assert "verified_transcript_cer" not in _meta(exports["none"])
    for mode in MODES:
        meta = _meta(exports[mode])
        assert meta["quantize"] == mode and meta["format"] == "tflite"
        assert meta["verified_on"][0] == "synthetic signal"
        assert meta["verified_on"][1].endswith("utterances of dev")
        assert 0 <= meta["verified_transcript_cer"] <= 1.5
        assert 0 < meta["verified_max_abs_diff"] < 5  # not equal to float, not garbage
        quantization = meta["quantization"]
        assert quantization["inputs_outputs"].startswith("float32")
    full = _meta(exports["full"])["quantization"]
    assert full["representative_split"] == "train" and full["representative_seed"] == 0
    assert 0 < full["representative_utterances"] <= 100
    assert full["int8_ops"] > 0 and "LOG" in full["float32_arithmetic"]  # front end: float
    int8 = _meta(exports["int8"])["quantization"]
    assert int8["int8_ops"] == 0 and int8["int8_weight_ops"] > 0  # int8 weights, float inputs
    assert int8["kept_float"] == ["feature front end"] and "LOG" in int8["float32_arithmetic"]
    assert _meta(exports["float16"])["quantization"]["weights"] == "float16"


def test_quantized_exports_transcribe(exports, cli):
    from asrkit.serving.export import ExportedModel, verification_audio

    audio = verification_audio()
    reference = ExportedModel(exports["none"]).logits(audio)
    for mode in MODES:
        exported = ExportedModel(exports[mode])
        logits = exported.logits(audio)
        assert logits.shape == reference.shape and np.all(np.isfinite(logits))
        assert 0 < np.max(np.abs(logits - reference)) < 5, mode
        result = cli(["transcribe", LDC / "LDC93S1_44k_stereo.wav", "--model", exports[mode],
                      "--json"])
        assert result.exit_code == 0, result.stderr[-2000:]
        assert json.loads(result.stdout)["text"].strip(), mode


def test_the_export_command_quantizes(cli, run_with_data, tmp_path):
    target = tmp_path / "int8"
    result = cli(["export", run_with_data, "--format", "tflite", "--quantize", "int8",
                  "--output", target])
    assert result.exit_code == 0, result.stderr[-2000:]
    assert result.stdout.startswith(
        f"exported brnn (step 7) as tflite (int8) to {target}; logits within ")
    assert "greedy transcripts" in result.stdout and _meta(target)["quantize"] == "int8"


def test_full_warns_what_stayed_float(cli, run_with_data, tmp_path):
    result = cli(["export", run_with_data, "--format", "tflite", "--quantize", "full",
                  "--output", tmp_path / "full"])
    assert result.exit_code == 0, result.stderr[-2000:]
    warning = result.stderr.strip().splitlines()[-1]
    assert warning.startswith("asrkit: warning: --quantize full kept ")
    assert "LOG" in warning and "RFFT2D" in warning  # the front end
    assert result.stdout.startswith(f"exported brnn (step 7) as tflite (full) to {tmp_path}")


@pytest.mark.parametrize(("args", "error"), [
    (["--quantize", "int8"], "--quantize int8 needs --format tflite (a savedmodel export is "
                             "float32)"),
    (["--format", "onnx", "--quantize", "float16"],
     "--quantize float16 needs --format tflite (a onnx export is float32)"),
])
def test_quantizing_another_format_is_refused_in_one_line(cli, run_with_data, tmp_path, args,
                                                          error):
    result = cli(["export", run_with_data, "--output", tmp_path / "x", *args])
    assert result.exit_code == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == f"asrkit: error: {error}"
    assert not (tmp_path / "x").exists()


def test_full_without_the_training_data_is_refused_in_one_line(cli, tmp_path, asrkit_home):
    run = make_tiny_run(tmp_path / "run")  # its dataset, "sample", is not in the empty home
    result = cli(["export", run, "--format", "tflite", "--quantize", "full"])
    assert result.exit_code == 1 and "Traceback" not in result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("asrkit: error: --quantize full calibrates on the run's training "
                           "split: no imported dataset 'sample'")
    assert not (run / "export").exists()


def test_the_command_offers_the_modes_quantize_knows():
    from asrkit.commands.export import QUANTIZE_MODES
    from asrkit.serving.quantize import MODES as KNOWN

    assert QUANTIZE_MODES == KNOWN
