"""``asrkit transcribe --stream``: a streaming run transcribes audio as it comes, from a file,
standard input (raw PCM or WAV) or a microphone, with partial and final results; its final
transcript of a recording heard as one utterance is the whole-recording transcription's."""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest

from asrkit import plugins
from asrkit.config.overrides import DecoderChoice
from asrkit.core.errors import AsrkitError
from asrkit.core.metrics import edit_distance
from asrkit.evaluation.restore import restore_networks
from asrkit.runs.run import load_run
from asrkit.serving.stream import Endpoints, StreamingModel, StreamTranscriber, Update
from asrkit.serving.stream_sources import check_raw_format, stdin_blocks
from asrkit.serving.transcribe import CheckpointRecognizer, load_audio, transcribe_samples
from asrkit.testing.models import sample_clip
from asrkit.train.checkpoints import Checkpoints
from tests.conftest import run_asrkit

#: A tiny streaming Conformer: 160 ms chunks (4 frames of 40 ms), 320 ms of left context.
STREAMING = ["preset=tiny", "model.streaming=true", "model.chunk_frames=4",
             "model.left_frames=8", "model.max_train_chunk=8", "features.normalize=running"]


@pytest.fixture(scope="module")
def streaming_run(tmp_path_factory: pytest.TempPathFactory, tiny_dataset: Path) -> Path:
    """A streaming Conformer trained for two steps, its output layer then biased away from the
    blank so that it "speaks" (random letters): transcripts with words to compare."""
    folder = tmp_path_factory.mktemp("streaming") / "run"
    args = ["train", "--model", "conformer", "--dataset", str(tiny_dataset), "--run-dir",
            str(folder), "--batch-size", "2", "-o", "max_steps=2", "-o", "evaluate_dev=false",
            "--no-progress"]
    for setting in STREAMING:
        args += ["-o", setting]
    result = run_asrkit(*args, timeout=300)
    assert result.returncode == 0, result.stderr
    run = load_run(folder)
    model, _, _state = restore_networks(run, "latest")
    bias = model.get_layer("logits").bias
    bias.assign(bias.numpy() - 50 * np.eye(len(bias.numpy()))[run.labels.blank])
    Checkpoints(folder / "checkpoints", model=model).save("best", 2, {"global_step": 2})
    return folder


def clip() -> np.ndarray:
    return load_audio(sample_clip())


def streamed(run: Path, audio: np.ndarray, piece: int, endpoint: float = 30.0,
             chunk_ms: float | None = None) -> list[Update]:
    model = StreamingModel(run, chunk_ms=chunk_ms)
    transcriber = StreamTranscriber(model, model.run.choose_decoder(DecoderChoice()),
                                    Endpoints(endpoint_seconds=endpoint))
    updates: list[Update] = []
    for start in range(0, len(audio), piece):
        updates += transcriber.push(audio[start:start + piece])
    return updates + transcriber.finish()


def test_the_final_transcript_is_the_whole_recordings(streaming_run: Path) -> None:
    audio = clip()
    whole = transcribe_samples(audio, CheckpointRecognizer(streaming_run),
                               load_run(streaming_run).choose_decoder(DecoderChoice()))
    assert whole.words, "the fixture model must say something"
    for piece in (160, 1601, 16000):
        updates = streamed(streaming_run, audio, piece)
        finals = [u for u in updates if u.kind == "final"]
        assert len(finals) == 1
        assert finals[0].text == whole.text
        for got, want in zip(finals[0].words, whole.words, strict=True):
            assert math.isclose(got.start, want.start, abs_tol=1e-6)
            assert math.isclose(got.end, want.end, abs_tol=1e-6)
        partials = [u for u in updates if u.kind == "partial"]
        assert partials and all(u.heard <= finals[0].heard for u in partials)
        # Partials grow with the audio heard; the last one is the greedy text of it all.
        assert [u.heard for u in partials] == sorted(u.heard for u in partials)


def test_another_chunk_size_of_the_trained_range(streaming_run: Path) -> None:
    audio = clip()
    whole = transcribe_samples(audio, CheckpointRecognizer(streaming_run),
                               load_run(streaming_run).choose_decoder(DecoderChoice()))
    eight = streamed(streaming_run, audio, 4000, chunk_ms=320)
    assert eight[-1].kind == "final"
    # Another chunk is another model output: equal to evaluate's at that chunk, not this one.
    assert StreamingModel(streaming_run, chunk_ms=320).chunk_ms == 320
    with pytest.raises(AsrkitError, match="trained on chunks of 40 to 320 ms"):
        StreamingModel(streaming_run, chunk_ms=640)
    with pytest.raises(AsrkitError, match="not a whole number of the model's 40 ms frames"):
        StreamingModel(streaming_run, chunk_ms=100)
    assert whole.text


class Scripted:
    """A stream whose output frames are given: a letter's logits where the script says a
    letter, the blank's elsewhere (the endpoint rules read words and their times, whatever
    model made them)."""

    frame_seconds = 0.04

    def __init__(self, script: str) -> None:
        from asrkit.core.text import Alphabet

        self.labels = Alphabet()
        self.greedy_decoder = plugins.get("decoder", "greedy")
        width = self.labels.num_classes
        ids = [self.labels.blank if c == "_" else self.labels.encode(c)[0] for c in script]
        assert len(ids) == len(script)
        self.frames = np.eye(width, dtype=np.float32)[ids] * 10

    def decoder_inputs(self, outputs: np.ndarray) -> np.ndarray:
        return outputs[np.newaxis]

    def open(self) -> tuple[object, object]:
        frames = self.frames

        class Features:
            def push(self, samples: np.ndarray) -> np.ndarray:
                """A frame every 40 ms of audio."""
                return samples[::640]

            def finish(self) -> np.ndarray:
                return np.zeros(0, np.float32)

        class Encoder:
            position = 0

            def push(self, samples: np.ndarray) -> np.ndarray:
                """One output frame a sample pushed (the script's next)."""
                start, self.position = self.position, self.position + len(samples)
                return frames[start:self.position]

            def finish(self) -> np.ndarray:
                return frames[self.position:]

        return Features(), Encoder()


def scripted(script: str, endpoint: float, longest: float = 20.0,
             piece: int = 3) -> list[Update]:
    model = Scripted(script)
    transcriber = StreamTranscriber(model, model.greedy_decoder,  # type: ignore[arg-type]
                                    Endpoints(endpoint, longest))
    updates: list[Update] = []
    for start in range(0, len(script), piece):
        frames = len(script[start:start + piece])
        updates += transcriber.push(np.zeros(640 * frames, np.float32))
    return updates + transcriber.finish()


def test_an_utterance_ends_after_a_pause_and_silence_is_not_kept() -> None:
    # 40 ms frames: "hi" then 0.6 s of blanks, "you" then 1.2 s, "all" at the end.
    script = "h_i" + "_" * 15 + "y_o_u" + "_" * 30 + "a_l_l"
    updates = scripted(script, endpoint=0.4, piece=1)
    finals = [u for u in updates if u.kind == "final"]
    assert [u.text for u in finals] == ["hi", "you", "all"]
    # Each final is known 0.4 s (10 frames) after its last letter, and begins where the
    # previous one ended or, after a long silence, where the frames kept begin.
    assert math.isclose(finals[0].heard, (3 + 10) * 0.04, abs_tol=0.13)
    assert finals[1].start >= finals[0].end - 1e-9
    assert finals[2].start > finals[1].end  # the silence between was dropped
    partials = [u.text for u in updates if u.kind == "partial"]
    assert partials[:2] == ["h", "hi"]


def test_a_long_utterance_is_cut_in_its_longest_pause() -> None:
    script = "a_b___ _c_d________ _e_f__ _g_h____"
    updates = scripted(script, endpoint=5.0, longest=1.0, piece=1)
    finals = [u.text for u in updates if u.kind == "final"]
    assert finals[0] == "ab cd"  # cut in the 8-frame pause, not the 3-frame one
    assert " ".join(finals) == "ab cd ef gh"


def wav_bytes(pcm: bytes, rate: int = 16000, channels: int = 1) -> bytes:
    """16-bit PCM as the bytes of a WAV file."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(channels)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(pcm)
    return buffer.getvalue()


def test_stdin_raw_pcm_and_wav(streaming_run: Path) -> None:
    audio = clip()
    raw = audio.astype("<i2").tobytes()
    blocks = list(stdin_blocks(io.BytesIO(raw + b"\x01")))  # an odd last byte is dropped
    assert np.array_equal(np.concatenate(blocks), audio)
    assert np.array_equal(np.concatenate(list(stdin_blocks(io.BytesIO(wav_bytes(raw))))),
                          audio)
    with pytest.raises(AsrkitError, match="44100 Hz, 2 channel"):
        list(stdin_blocks(io.BytesIO(wav_bytes(raw, rate=44100, channels=2))))
    with pytest.raises(AsrkitError, match="must be 16-bit signed"):
        check_raw_format(8000, 1)


def test_the_command_streams_standard_input_as_json_lines(streaming_run: Path) -> None:
    audio = clip()
    process = subprocess.run(
        [sys.executable, "-m", "asrkit", "transcribe", "--stream", "--json", "--model",
         str(streaming_run), "--endpoint-seconds", "30", "-"],
        input=audio.astype("<i2").tobytes(), capture_output=True, timeout=300, check=False)
    assert process.returncode == 0, process.stderr.decode()
    lines = [json.loads(line) for line in process.stdout.decode().splitlines()]
    assert {line["type"] for line in lines} == {"partial", "final"}
    finals = [line for line in lines if line["type"] == "final"]
    whole = transcribe_samples(audio, CheckpointRecognizer(streaming_run),
                               load_run(streaming_run).choose_decoder(DecoderChoice()))
    assert [f["text"] for f in finals] == [whole.text]


def test_a_pipe_that_closes_early_keeps_what_was_heard(streaming_run: Path) -> None:
    """The writer dies after half the clip: the command still ends with the final transcript of
    the half it heard, status 0."""
    half = clip()[: len(clip()) // 2]
    process = subprocess.run(
        [sys.executable, "-m", "asrkit", "transcribe", "--stream", "--model",
         str(streaming_run), "-"], input=half.astype("<i2").tobytes(), capture_output=True,
        timeout=300, check=False)
    assert process.returncode == 0, process.stderr.decode()
    expected = [u.text for u in streamed(streaming_run, half, 1600, endpoint=0.8)
                if u.kind == "final"]
    assert process.stdout.decode().splitlines() == expected


def test_bad_requests_are_one_line(streaming_run: Path, tiny_run: Path,
                                   tmp_path: Path) -> None:
    clip_path = str(sample_clip())
    cases = [
        (["--stream", "--model", str(tiny_run), clip_path], "does not stream"),
        (["--stream", "--model", str(streaming_run), "--chunk-ms", "2000", clip_path],
         "trained on chunks of"),
        (["--stream", "--model", str(streaming_run), clip_path, clip_path], "one source"),
        (["--chunk-ms", "160", "--model", str(streaming_run), clip_path], "go with --stream"),
        (["--stream", "--realtime", "--model", str(streaming_run), "-"], "paces a file"),
    ]
    for args, message in cases:
        result = run_asrkit("transcribe", *args)
        assert result.returncode != 0
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], result.stderr
    missing = run_asrkit("transcribe", "--stream", "--microphone", "--model",
                         str(streaming_run))
    assert missing.returncode != 0 and len(missing.stderr.strip().splitlines()) == 1


def test_a_ten_minute_stream_takes_the_memory_of_a_short_one(streaming_run: Path,
                                                               tmp_path: Path) -> None:
    """Ten minutes streamed from a file hold no more than three seconds do: holding the audio
    (19 MB of WAV, 38 MB as floats), its features or its output frames would show."""
    from tests.test_transcribe_memory import peak_rss_mib, sox

    long_file = tmp_path / "long.wav"
    sox(sample_clip(), long_file, "repeat", "204")  # 205 x 2.92 s = 10 minutes
    common = ["--stream", "--json", "--model", str(streaming_run)]
    short = peak_rss_mib(["transcribe", *common, str(sample_clip())], tmp_path / "short.log")
    long = peak_rss_mib(["transcribe", *common, str(long_file)], tmp_path / "long.log")
    finals = [json.loads(line) for line in (tmp_path / "long.log").read_text().splitlines()
              if line.startswith("{") and '"final"' in line]
    assert finals[-1]["end"] > 590
    print(f"peak RSS: {long:.0f} MiB for 10 minutes, {short:.0f} MiB for 3 seconds")
    assert long - short < 25, f"{long:.0f} MiB for 10 minutes, {short:.0f} MiB for 3 seconds"


@pytest.mark.parametrize(("objective", "greedy"), [("transducer", "transducer-greedy"),
                                                   ("attention", "attention-greedy")])
def test_every_objective_streams_as_it_transcribes(tmp_path: Path, tiny_dataset: Path,
                                                   objective: str, greedy: str) -> None:
    """Streaming is the encoder's: a transducer or attention run streams too, its partial
    results its greedy decoder's and its final transcript the whole recording's (its run's
    decoder on the same encoder frames)."""
    folder = tmp_path / "run"
    args = ["train", "--model", "conformer", "--dataset", str(tiny_dataset), "--run-dir",
            str(folder), "--batch-size", "2", "-o", "max_steps=2", "-o", "evaluate_dev=false",
            "-o", f"objective={objective}", "--no-progress"]
    for setting in STREAMING:
        args += ["-o", setting]
    result = run_asrkit(*args, timeout=300)
    assert result.returncode == 0, result.stderr
    audio = clip()
    run = load_run(folder)
    recognizer = CheckpointRecognizer(folder, "latest")
    whole = transcribe_samples(audio, recognizer, run.choose_decoder(DecoderChoice()))
    model = StreamingModel(folder, "latest")
    assert model.greedy_decoder.name == greedy
    features, encoder = model.open()
    frames = np.concatenate([encoder.push(features.push(audio[:20000])),
                             encoder.push(features.push(audio[20000:])),
                             encoder.push(features.finish()), encoder.finish()])
    np.testing.assert_allclose(frames, recognizer.logits(audio), atol=1e-4)
    transcriber = StreamTranscriber(model, run.choose_decoder(DecoderChoice()), Endpoints(30))
    updates = [*transcriber.push(audio[:20000]), *transcriber.push(audio[20000:]),
               *transcriber.finish()]
    finals = [u.text for u in updates if u.kind == "final"]
    assert len(finals) == (1 if whole.text else 0)
    # Two steps of training leave near-ties between letters everywhere, and the chunked encoder's
    # frames differ from the whole one's in the last float bits (checked above): a tie may flip
    # a letter or two of some 200, no more.
    if finals:
        assert edit_distance(whole.text, finals[0]) <= 0.02 * len(whole.text), finals[0]


def test_a_terminal_sees_the_partial_line_rewritten_and_finals_kept(streaming_run: Path) -> None:
    """On a terminal, partial results rewrite the last line (carriage return, erase line) and
    each final one ends a line; piped, only finals are written (the test above)."""
    import os
    import pty

    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "asrkit", "transcribe", "--stream", "--model",
         str(streaming_run), "--endpoint-seconds", "30", str(sample_clip())],
        stdout=follower, stderr=subprocess.PIPE)
    os.close(follower)
    output = b""
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:  # the terminal closed with the process
            break
        if not data:
            break
        output += data
    assert process.wait(timeout=300) == 0, process.stderr.read().decode()
    os.close(leader)
    text = output.decode()
    rewrites = text.count("\r\x1b[K")
    assert rewrites >= 2, text
    final = text.rsplit("\r\x1b[K", 1)[1].strip()
    expected = [u.text for u in streamed(streaming_run, clip(), 1600) if u.kind == "final"]
    assert [final] == expected
