"""Streaming exports: a streaming CTC run's SavedModel and TFLite model step through audio
block by block (``stream_step``), giving the whole-utterance logits, with the client loop of
docs/streaming.md, which this test runs as written."""

from __future__ import annotations

import json
import shutil
import wave
from pathlib import Path

import numpy as np
import pytest

from asrkit.serving.export import ExportedModel, export_run
from asrkit.serving.transcribe import load_audio
from asrkit.testing.models import sample_clip
from tests.conftest import run_asrkit, run_doc_snippet
from tests.test_stream_transcribe import streaming_run  # noqa: F401  (the fixture)


@pytest.fixture(scope="module")
def exports(streaming_run: Path, tmp_path_factory: pytest.TempPathFactory  # noqa: F811
            ) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("stream-exports")
    made = {}
    for fmt, chunk in (("savedmodel", None), ("tflite", None), ("tflite-320", 320)):
        made[fmt] = folder / fmt
        meta = export_run(streaming_run, fmt.split("-")[0], made[fmt], chunk_ms=chunk)
        assert meta["stream"]["verified_max_abs_diff"] < 1e-4
        assert meta["stream"]["chunk_ms"] == (chunk or 160)
        assert "stream_step" in meta["signatures"]
    return made


def streamed(export: Path, audio: np.ndarray, pieces: list[int]) -> np.ndarray:
    stream = ExportedModel(export).stream()
    out, start, index = [], 0, 0
    while start < len(audio):
        size = pieces[index % len(pieces)]
        out.append(stream.push(audio[start:start + size]))
        start, index = start + size, index + 1
    out.append(stream.finish())
    return np.concatenate([o for o in out if o.size])


@pytest.mark.parametrize("fmt", ["savedmodel", "tflite", "tflite-320"])
def test_the_stream_step_gives_the_whole_utterance_logits(exports: dict[str, Path],
                                                          fmt: str) -> None:
    clip = load_audio(sample_clip()).astype(np.float32) / 32768
    exported = ExportedModel(exports[fmt])
    chunk = exported.metadata["stream"]["chunk_samples"]
    for audio in (clip, clip[: chunk * 3], clip[: chunk * 3 + 1], clip[:1600], clip[:5]):
        whole = exported.logits(audio)
        got = streamed(exports[fmt], audio, [777, 1, chunk, 5000, 0, 3])
        assert got.shape == whole.shape
        assert np.max(np.abs(got - whole)) < 1e-4
        best = got.argmax(axis=1)
        assert best.tolist() == whole.argmax(axis=1).tolist()


@pytest.mark.parametrize("fmt", ["savedmodel", "tflite"])
def test_the_documented_client_loop_runs_as_written(exports: dict[str, Path], fmt: str,
                                                    tmp_path: Path) -> None:
    shutil.copy(sample_clip(), tmp_path / "talk.wav")
    with wave.open(str(tmp_path / "talk.wav")) as f:
        assert (f.getframerate(), f.getnchannels(), f.getsampwidth()) == (16000, 1, 2)
    result = run_doc_snippet("streaming.md", "stream-client",
                             {"runs/conformer-1/export/tflite": str(exports[fmt])}, (),
                             tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    audio = load_audio(sample_clip()).astype(np.float32) / 32768
    expected = ExportedModel(exports[fmt]).transcribe(audio)
    # print() ends the line and an untrained model's transcript may start with a space, so
    # the text is compared without the whitespace at its ends.
    assert expected.strip() and result.stdout.strip() == expected.strip()


def test_exports_refuse_a_chunk_of_a_run_that_does_not_stream(tiny_run: Path,
                                                             streaming_run: Path,  # noqa: F811
                                                             tmp_path: Path) -> None:
    for run, chunk, message in ((tiny_run, "160", "does not stream"),
                                (streaming_run, "2000", "trained on chunks of")):
        result = run_asrkit("export", str(run), "--chunk-ms", chunk, "--output",
                            str(tmp_path / chunk))
        assert result.returncode != 0
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], result.stderr


def test_transcribe_streams_an_export_as_it_streams_the_run(exports: dict[str, Path],
                                                            streaming_run: Path  # noqa: F811
                                                            ) -> None:
    def finals(model: Path, *args: str) -> list[str]:
        result = run_asrkit("transcribe", "--stream", "--json", "--endpoint-seconds", "30",
                            "--model", str(model), *args, str(sample_clip()))
        assert result.returncode == 0, result.stderr
        lines = [json.loads(line) for line in result.stdout.splitlines()]
        return [line["text"] for line in lines if line["type"] == "final"]

    expected = finals(streaming_run)
    assert expected and finals(exports["tflite"]) == expected
    assert finals(exports["tflite-320"]) == finals(streaming_run, "--chunk-ms", "320")
    refused = run_asrkit("transcribe", "--stream", "--model", str(exports["tflite"]),
                         "--chunk-ms", "320", str(sample_clip()))
    assert refused.returncode != 0 and "fixed when it was exported" in refused.stderr
