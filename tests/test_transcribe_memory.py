"""``asrkit transcribe`` holds one window of a recording, not the recording: files are streamed
through sox, windows are cut as the audio arrives, and the window length is bounded.

The tone model and recordings are test_transcribe.py's; the real model is the tiny random brnn
of :func:`asrkit.testing.models.make_tiny_run`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import wave
from pathlib import Path

import numpy as np
import pytest

from asrkit.commands.transcribe import transcribe_command
from asrkit.dataset import audio
from asrkit.serving import audio_stream
from asrkit.serving.audio_stream import AudioStream, measure_audio
from asrkit.serving.transcribe import (
    MAX_CHUNK_SECONDS,
    MAX_OVERLAP_SECONDS,
    Options,
    SampleBuffer,
    WindowSizeError,
    check_window_seconds,
    load_audio,
    transcribe_file,
    transcribe_files,
    transcribe_samples,
)
from asrkit.testing.models import make_tiny_run
from tests.conftest import FAULTS, ROOT, SPEECH
from tests.test_transcribe import RATE, ToneRecognizer, greedy, long_recording

LDC = SPEECH / "ldc93s1"
STEREO = LDC / "LDC93S1_44k_stereo.wav"  # 2.9 s at 44.1 kHz, two channels: sox resamples it


def write_wav(path: Path, audio: np.ndarray) -> Path:
    """Float audio in [-1, 1] as a 16 kHz mono 16-bit WAV."""
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(np.round(audio * 32767).astype("<i2").tobytes())
    return path


def sox(*args: str | Path) -> None:
    subprocess.run(["sox", *map(str, args)], check=True, capture_output=True)


@pytest.fixture(scope="module")
def tones(tmp_path_factory):
    """Two minutes of tone speech, as 16 kHz mono (read in-process) and 44.1 kHz stereo FLAC
    (read through sox)."""
    folder = tmp_path_factory.mktemp("tones")
    audio, _words, _starts = long_recording(220, seed=4)
    native = write_wav(folder / "tones.wav", audio)
    stereo = folder / "tones.flac"
    sox(native, "-r", "44100", "-c", "2", stereo)
    return native, stereo


# -- the same transcript, one window at a time --------------------------------------------------


@pytest.mark.parametrize("which", [0, 1])
def test_a_streamed_file_transcribes_exactly_as_its_decoded_samples(tones, which):
    path = tones[which]
    whole = transcribe_samples(load_audio(path), ToneRecognizer(), greedy(), 4.0, 1.0,
                               path=str(path))
    streamed = transcribe_file(path, ToneRecognizer(), greedy(), 4.0, 1.0)
    assert streamed.windows > 20
    assert streamed.to_json() == whole.to_json()


def test_streams_give_the_samples_of_the_whole_file_decoder(tmp_path):
    """Every decoder (in-process, sox, libsndfile then sox for Opus) gives decode's samples,
    whatever the block size."""
    decoders = {}
    for path in sorted(LDC.glob("LDC93S1*.*")):
        if path.suffix == ".txt":
            continue
        measured = measure_audio(path, keep=0)
        decoders[path.name] = measured.decoder
        with AudioStream(path, measured.decoder, block_seconds=0.37) as blocks:
            streamed = np.concatenate(list(blocks))
        whole = load_audio(path)
        assert measured.samples == len(whole) and measured.kept is None, path.name
        assert np.array_equal(streamed, whole), path.name
    assert set(decoders.values()) == {"native", "sox", "libsndfile"}


def test_a_file_that_changes_between_the_readings_is_a_one_line_error():
    blocks = iter([np.zeros(100, np.int16)])
    with pytest.raises(Exception, match="the file changed while it was being transcribed"):
        SampleBuffer(blocks, total=200).fill(150)
    longer = SampleBuffer(iter([np.zeros(300, np.int16)]), total=200)
    longer.fill(200)
    with pytest.raises(Exception, match="the file changed"):
        longer.finish()


# -- the bound on --chunk-seconds ---------------------------------------------------------------


def test_window_lengths_are_bounded():
    check_window_seconds(MAX_CHUNK_SECONDS, MAX_OVERLAP_SECONDS)
    for chunk, overlap in ((MAX_CHUNK_SECONDS + 1, 2.0), (20.0, MAX_OVERLAP_SECONDS + 1),
                           (0.0, 2.0), (20.0, -1.0)):
        with pytest.raises(WindowSizeError) as error:
            check_window_seconds(chunk, overlap)
        assert "\n" not in str(error.value)
    with pytest.raises(WindowSizeError, match="--chunk-seconds 3600 is outside 0 < S <= 300"):
        transcribe_samples(np.zeros(RATE, np.float32), ToneRecognizer(), greedy(), 3600.0, 2.0)
    helps = {param.name: param.help or "" for param in transcribe_command.params}
    assert f"(at most {MAX_CHUNK_SECONDS:g})" in helps["chunk_seconds"]
    assert f"(at most {MAX_OVERLAP_SECONDS:g})" in helps["overlap_seconds"]


def test_the_cli_refuses_a_long_chunk_before_any_work(tmp_path):
    """The model path is no model and the file no file: the bound is checked first."""
    from tests.conftest import run_asrkit

    result = run_asrkit("transcribe", str(tmp_path / "missing.wav"), "--model", str(tmp_path),
                        "--chunk-seconds", "3600")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "asrkit: error: --chunk-seconds 3600 is outside 0 < S <= 300 (the alignment of a window "
        "grows with the square of its length); choose at most 300: longer recordings are cut "
        "and stitched anyway")
    result = run_asrkit("transcribe", str(tmp_path / "missing.wav"), "--model", str(tmp_path),
                        "--overlap-seconds", "60")
    assert result.returncode == 1
    assert result.stderr.strip().startswith("asrkit: error: --overlap-seconds 60 is outside")


# -- sox is stopped and reaped ------------------------------------------------------------------


def recording_sox(started: list[subprocess.Popen]) -> type[audio.SoxProcess]:
    """The streams' sox process class, keeping each process it starts in ``started``."""

    class RecordedSox(audio.SoxProcess):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            started.append(self.process)

    return RecordedSox


class FailingRecognizer(ToneRecognizer):
    """Fails on its second window, as a model running out of memory would."""

    def logits(self, audio):
        if self.calls >= 1:
            raise RuntimeError("the model failed")
        return super().logits(audio)


def test_sox_is_killed_and_reaped_when_transcription_fails_midway(tmp_path, monkeypatch):
    started: list[subprocess.Popen] = []

    monkeypatch.setattr(audio_stream, "SoxProcess", recording_sox(started))
    long_file = tmp_path / "long.wav"
    sox(STEREO, long_file, "repeat", "60")  # three minutes: sox is mid-file at the failure
    options = Options(chunk_seconds=20.0, overlap_seconds=2.0)
    transcripts = list(transcribe_files([long_file], FailingRecognizer(), greedy(), options))
    assert transcripts == []
    assert [(f.path, f.message) for f in options.failures] == [(str(long_file),
                                                                "RuntimeError: the model failed")]
    measuring, transcribing = started  # the count, then the windows
    assert measuring.returncode == 0
    assert transcribing.returncode == -signal.SIGKILL  # stopped mid-file, not left running
    for process in started:
        with pytest.raises(ChildProcessError):  # reaped: no zombie left to wait for
            os.waitpid(process.pid, os.WNOHANG)


def test_a_sox_that_hangs_mid_file_ends_the_file_in_one_line(tmp_path, monkeypatch):
    """A sox that writes two seconds of audio, then nothing, used to hang ``asrkit transcribe``
    for good (its reads block). It is stopped after the stall time, both decoders that tried it
    (sox, then libsndfile with sox resampling) are reaped, and the file fails in one line that
    names it, while the next file is transcribed."""
    folder = tmp_path / "fake-bin"
    folder.mkdir()
    fake = folder / "sox"
    fake.write_text("#!/bin/sh\nhead -c 64000 /dev/zero\nexec sleep 20\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(audio, "SOX_STALL_SECONDS", 1.0)
    started: list[subprocess.Popen] = []
    monkeypatch.setattr(audio_stream, "SoxProcess", recording_sox(started))
    native = write_wav(tmp_path / "native.wav", long_recording(3, seed=1)[0])  # no sox
    options = Options(chunk_seconds=20.0, overlap_seconds=2.0)
    begun = time.monotonic()
    transcripts = list(transcribe_files([STEREO, native], ToneRecognizer(), greedy(), options))
    assert time.monotonic() - begun < 10
    assert [t.path for t in transcripts] == [str(native)]
    [failure] = options.failures
    assert failure.path == str(STEREO)
    assert failure.message == (f"sox produced nothing for 1 s while decoding {STEREO.name}, so "
                               "it was stopped (a damaged file can hang it); check the file")
    assert len(started) == 2
    for process in started:
        assert process.returncode == -signal.SIGKILL
        with pytest.raises(ChildProcessError):  # reaped: no zombie left to wait for
            os.waitpid(process.pid, os.WNOHANG)


# -- memory -------------------------------------------------------------------------------------


def peak_rss_mib(args: list[str], log: Path) -> float:
    """Run ``python -m asrkit ARGS`` and return its peak resident memory (with its children's),
    as the process itself measures it at exit (tests/faults/sitecustomize.py: not the
    ``ru_maxrss`` it inherits from this pytest worker), in MiB."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ASRKIT_")}
    peak = log.with_suffix(".peak")
    environment["ASRKIT_TEST_PEAK_FILE"] = str(peak)
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(FAULTS), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    with log.open("wb") as output:
        process = subprocess.run([sys.executable, "-m", "asrkit", *args], env=environment,
                                 stdout=output, stderr=subprocess.STDOUT, check=False)
    assert process.returncode == 0, log.read_text()[-2000:]
    return int(peak.read_text()) / 1024  # KiB


def test_memory_does_not_grow_with_the_recording(tmp_path):
    """Five minutes of 96 kHz stereo float (a studio recording: 230 MB of WAV, what a
    48 kHz stereo 16-bit file is at 20 minutes) take no more memory than three seconds.
    Decoding whole held the file's bytes and its samples at once: 210 MiB more here."""
    run = make_tiny_run(tmp_path / "run")
    long_file = tmp_path / "long.wav"
    sox(STEREO, "-r", "96000", "-e", "floating-point", "-b", "32", long_file, "repeat", "102")
    common = ["--model", str(run), "--no-progress", "--json"]
    short = peak_rss_mib(["transcribe", str(STEREO), *common], tmp_path / "short.log")
    long = peak_rss_mib(["transcribe", str(long_file), *common], tmp_path / "long.log")
    print(f"peak RSS: {long:.0f} MiB for 5 minutes, {short:.0f} MiB for 3 seconds")
    assert long - short < 100, f"{long:.0f} MiB for 5 minutes, {short:.0f} MiB for 3 seconds"
