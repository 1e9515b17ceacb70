"""``asrkit transcribe``: formats, rates and channels, long recordings, words, times, errors.

Two kinds of model. The stitching of long recordings is checked exactly with a deterministic
"tone model" (each character is a pure tone, which a 10 ms FFT recognises), so a dropped or
doubled word anywhere in a minute of audio cut into a dozen windows shows up as a wrong
transcript. Everything that needs the real thing (decoding real files in every format, the CLI,
run folders and exports) uses a tiny brnn run built here in a second, with random weights: the
tests compare its outputs with each other, never with the spoken words.
"""

from __future__ import annotations

import itertools
import json
import random
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from asrkit.core.text import Alphabet
from asrkit.core.viterbi import Token, ctc_align, greedy_tokens
from asrkit.decoders.prefix import log_softmax
from asrkit.serving.transcribe import (
    Recognizer,
    Window,
    Word,
    plan_windows,
    quietest_point,
    stitch,
    transcribe_samples,
)
from asrkit.testing.models import make_tiny_run
from asrkit.types import Decoder
from tests.conftest import SPEECH

LDC = SPEECH / "ldc93s1"
RATE = 16000
TINY = {"n_hidden": 32, "n_cell": 32, "context": 2}

# -- the tone model -----------------------------------------------------------------------------

FRAME = 160  # 10 ms: FFT bins are 100 Hz apart
FIRST_BIN = 4  # label k is a tone at (4 + k) * 100 Hz
CHAR_SECONDS, GAP_SECONDS = 0.06, 0.03
VOCABULARY = ("she", "had", "your", "dark", "suit", "in", "greasy", "wash", "water", "all", "year",
              "we", "must", "find", "a", "new", "home", "the", "stars", "it", "was", "my",
              "reports", "from", "north", "which", "chiefly", "induced", "people", "to", "buy")
ENGLISH = Alphabet()


def speak(text: str, alphabet: Alphabet = ENGLISH) -> np.ndarray:
    """Audio of ``text``: a tone per character (the space too), silence between characters."""
    pieces = []
    for char in text:
        frequency = (FIRST_BIN + alphabet.symbols.index(char)) * RATE / FRAME  # a bin's centre
        t = np.arange(int(CHAR_SECONDS * RATE)) / RATE
        pieces += [0.5 * np.sin(2 * np.pi * frequency * t), np.zeros(int(GAP_SECONDS * RATE))]
    return np.concatenate(pieces).astype(np.float32)


class ToneRecognizer(Recognizer):
    """Recognises :func:`speak`'s tones frame by frame: the loudest FFT bin of each 10 ms
    names the character; quiet frames are blanks."""

    def __init__(self) -> None:
        self.labels = Alphabet()
        self.frame_seconds = FRAME / RATE
        self.name = "tones"
        self.calls = 0

    def logits(self, audio: np.ndarray) -> np.ndarray:
        self.calls += 1
        count = -(-len(audio) // FRAME)
        frames = np.pad(audio, [0, count * FRAME - len(audio)]).reshape(count, FRAME)
        peak = np.abs(np.fft.rfft(frames, axis=1)).argmax(axis=1) - FIRST_BIN
        loud = (frames**2).mean(axis=1) > 0.05  # at least 40% of the frame is tone
        labels = np.where(loud & (peak >= 0) & (peak < self.labels.size), peak,
                          self.labels.blank)
        logits = np.full((count, self.labels.num_classes), -10.0, np.float32)
        logits[np.arange(count), labels] = 10.0
        return logits


class FixedTextDecoder(Decoder):
    """A decoder whose text differs from the greedy path's, as a language model's may."""

    name = "fixed"
    description = "test decoder"

    def __init__(self, text: str) -> None:
        self.text = text

    def decode(self, logits, lengths, alphabet):
        return [self.text for _ in lengths]


def greedy():
    from asrkit.decoders.greedy import GreedyDecoder

    return GreedyDecoder()


def long_recording(words: int, seed: int = 0, pauses: Sequence[float] = (0, 0, 0.05, 0.3, 0.8),
                   ) -> tuple[np.ndarray, list[str], list[float]]:
    """A recording of ``words`` random words, each followed by a pause of one of ``pauses``
    seconds; the words and their true start times."""
    rng = random.Random(seed)
    chosen = [rng.choice(VOCABULARY) for _ in range(words)]
    pieces, starts, position = [], [], 0
    for word in chosen:
        starts.append(position / RATE)
        audio = speak(word + " ")
        pause = np.zeros(int(rng.choice(pauses) * RATE), np.float32)
        pieces += [audio, pause]
        position += len(audio) + len(pause)
    return np.concatenate(pieces), chosen, starts


def test_short_audio_is_one_window_and_exact():
    recognizer = ToneRecognizer()
    transcript = transcribe_samples(speak("she had your dark suit"), recognizer, greedy())
    assert transcript.text == "she had your dark suit"
    assert transcript.windows == 1 and recognizer.calls == 1
    assert [w.word for w in transcript.words] == transcript.text.split()
    first = transcript.words[0]
    assert first.start == pytest.approx(0.0, abs=0.011)
    # "she" is three 90 ms characters, the last without its trailing silence.
    assert first.end == pytest.approx(3 * 0.09 - 0.03, abs=0.011)
    assert all(w.confidence == pytest.approx(1.0, abs=1e-3) for w in transcript.words)


@pytest.mark.parametrize(("chunk", "overlap", "seed"), [(5.0, 1.0, 0), (3.0, 1.0, 1),
                                                        (4.0, 2.0, 2), (2.0, 0.7, 3)])
def test_long_recording_is_stitched_without_dropped_or_doubled_words(chunk, overlap, seed):
    """Exact as long as the overlap is longer than the longest word (0.63 s here): a word is
    then heard whole by the window that keeps it."""
    audio, truth, starts = long_recording(150, seed)
    recognizer = ToneRecognizer()
    transcript = transcribe_samples(audio, recognizer, greedy(), chunk, overlap)
    assert transcript.windows >= len(audio) / RATE / chunk - 1 > 8
    assert [w.word for w in transcript.words] == truth
    for word, start in zip(transcript.words, starts, strict=True):
        assert word.start == pytest.approx(start, abs=0.015)
    ends = [w.end for w in transcript.words]
    assert all(a.end <= b.start for a, b in itertools.pairwise(transcript.words))
    assert max(ends) <= len(audio) / RATE


def test_int16_and_float_audio_give_the_same_words():
    audio, truth, _ = long_recording(40, 7)
    pcm = np.round(audio * 32767).astype(np.int16)
    transcript = transcribe_samples(pcm, ToneRecognizer(), greedy(), 4.0, 1.0)
    assert [w.word for w in transcript.words] == truth


def test_windows_cover_the_audio_and_cut_in_pauses():
    audio, _, _ = long_recording(120, 4, pauses=(0.3,))  # a pause at least every 0.8 s
    windows = plan_windows(audio, 5.0, 1.0)
    assert windows[0].core_start == 0 and windows[-1].core_end == len(audio)
    for a, b in itertools.pairwise(windows):
        assert a.core_end == b.core_start  # cores tile the recording
        assert a.end - a.core_end == RATE and b.core_start - b.start == RATE
        assert abs(audio[a.core_end]) < 1e-6  # the cut is in silence
    assert max(w.core_end - w.core_start for w in windows) <= 5.5 * RATE
    assert plan_windows(audio[: 5 * RATE], 5.0, 1.0) == [Window(0, 5 * RATE, 0, 5 * RATE)]


def test_quietest_point_prefers_silence_near_the_centre():
    signal = np.ones(RATE * 4, np.float32)
    signal[RATE:RATE + 3200] = 0  # 200 ms of silence at 1.0-1.2 s
    signal[int(3.3 * RATE):int(3.5 * RATE)] = 0  # and at 3.3-3.5 s
    assert RATE <= quietest_point(signal, int(1.4 * RATE), RATE // 2) <= RATE + 3200
    assert quietest_point(np.ones(RATE * 4), 2 * RATE, RATE // 2) == 2 * RATE


def test_a_word_heard_by_both_windows_is_kept_once():
    """Two windows place a word on the boundary a little differently: by the centre rule alone
    it would be doubled (left centre before 10 s, right after) or dropped (the other way)."""
    windows = [Window(0, 12 * RATE, 0, 10 * RATE),
               Window(8 * RATE, 20 * RATE, 10 * RATE, 20 * RATE)]

    def both(left_cat: tuple[float, float], right_cat: tuple[float, float]) -> list[str]:
        left = [Word("a", 9.0, 9.5, 0.9), Word("cat", *left_cat, 0.9), Word("b", 11, 11.5, 0.9)]
        right = [Word("a", 9.02, 9.5, 0.8), Word("cat", *right_cat, 0.8),
                 Word("b", 11.02, 11.5, 0.8)]
        return [w.word for w in stitch(windows, [left, right], 2.0)]

    assert both((9.8, 10.15), (9.85, 10.3)) == ["a", "cat", "b"]  # centres 9.975 | 10.075
    assert both((9.85, 10.3), (9.8, 10.15)) == ["a", "cat", "b"]  # centres 10.075 | 9.975
    assert both((9.6, 9.9), (9.62, 9.88)) == ["a", "cat", "b"]


def test_forced_alignment_follows_the_greedy_path():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(200, 29)) * 3
    logits[:, 28] += 2  # blanks most likely, as in trained CTC models
    tokens = greedy_tokens(logits, 28)
    assert ctc_align(log_softmax(logits), [t.label for t in tokens], 28) == tokens
    assert ctc_align(log_softmax(logits[:3]), [1, 1, 1], 28) is None  # needs 5 frames
    assert ctc_align(log_softmax(logits[:5]), [1, 1, 1], 28) == [Token(1, 0, 0), Token(1, 2, 2),
                                                                 Token(1, 4, 4)]


def test_a_decoder_whose_text_differs_is_aligned_to_the_logits():
    audio = speak("dark suit in greasy wash water")
    transcript = transcribe_samples(audio, ToneRecognizer(), FixedTextDecoder("dark suits in"))
    assert [w.word for w in transcript.words] == ["dark", "suits", "in"]
    dark, suits, within = transcript.words
    assert dark.start == pytest.approx(0.0, abs=0.011)
    assert suits.confidence < 0.1 < 0.99 < dark.confidence  # the last "s" was never heard
    assert suits.end < within.start < within.end <= len(audio) / RATE


# -- the real thing: files, CLI, runs and exports -----------------------------------------------


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    return make_tiny_run(tmp_path_factory.mktemp("tiny") / "run")


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    """The fixture recording in every variant, plus an MP3 made with sox."""
    folder = tmp_path_factory.mktemp("variants")
    names = ["LDC93S1.wav", "LDC93S1_8k_mono.wav", "LDC93S1_44k_stereo.wav", "LDC93S1.flac",
             "LDC93S1.ogg", "LDC93S1.opus"]
    for name in names:
        shutil.copy(LDC / name, folder / name)
    subprocess.run(["sox", str(LDC / "LDC93S1_44k_stereo.wav"), str(folder / "LDC93S1.mp3")],
                   check=True, capture_output=True)
    return folder


def test_every_format_rate_and_channel_count(cli, tiny_run, variants):
    result = cli(["transcribe", variants, "--model", tiny_run, "--json"])
    assert result.exit_code == 0, result.stderr[-2000:]
    reports = {Path(r["file"]).name: r for r in map(json.loads, result.stdout.splitlines())}
    assert set(reports) == {p.name for p in variants.iterdir()}
    for name, report in reports.items():
        # MP3 encoders add up to a frame of silence at each end.
        assert report["duration"] == pytest.approx(46797 / RATE, abs=0.06 if "mp3" in name
                                                   else 1e-3), name
        assert report["windows"] == 1 and report["decoder"] == "greedy"
        words = report["words"]
        assert words, name
        assert report["text"] == " ".join(w["word"] for w in words)
        assert all(0 <= w["start"] < w["end"] <= report["duration"] for w in words)
        assert all(a["end"] <= b["start"] for a, b in itertools.pairwise(words))
        assert all(0 < w["confidence"] <= 1 for w in words)
    # Lossless copies of the same samples give the same transcript.
    assert reports["LDC93S1.flac"]["text"] == reports["LDC93S1.wav"]["text"]


def test_resampled_audio_is_what_sox_makes(tiny_run, variants):
    from asrkit.serving.transcribe import load_audio

    original = load_audio(LDC / "LDC93S1.wav").astype(np.float64)
    for name in ("LDC93S1_44k_stereo.wav", "LDC93S1.mp3", "LDC93S1.opus"):
        converted = load_audio(variants / name).astype(np.float64)
        if name.endswith(".mp3"):  # the encoder's delay: find it, then compare
            shift = np.argmax(np.correlate(converted[:8000], original[:4000], "valid"))
            converted = converted[shift:shift + len(original)]
        n = min(len(original), len(converted))
        correlation = np.corrcoef(original[:n], converted[:n])[0, 1]
        assert correlation > 0.9, name


def test_long_recording_through_the_cli(cli, tiny_run, tmp_path):
    long_file = tmp_path / "long.flac"
    clips = [str(LDC / "LDC93S1.wav"), str(SPEECH / "misc/new-home-in-the-stars-16k.wav")] * 4
    subprocess.run(["sox", *clips, str(long_file)], check=True, capture_output=True)
    duration = (46797 + 57375) * 4 / RATE
    result = cli(["transcribe", long_file, "--model", tiny_run, "--json", "--chunk-seconds", "4",
                  "--overlap-seconds", "1"])
    assert result.exit_code == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert report["duration"] == pytest.approx(duration, abs=0.01)
    assert report["windows"] >= 6
    words = report["words"]
    assert words and words[-1]["end"] <= report["duration"]
    assert all(a["end"] <= b["start"] for a, b in itertools.pairwise(words))
    # Words come from all along the recording, not only from some windows.
    assert words[0]["start"] < 3 and words[-1]["end"] > duration - 3

    whole = cli(["transcribe", long_file, "--model", tiny_run, "--chunk-seconds", "60"])
    assert whole.exit_code == 0 and whole.stdout.strip()


def test_unreadable_files_are_one_line_errors_and_the_others_go_on(cli, tiny_run, tmp_path):
    good = tmp_path / "good.wav"
    shutil.copy(LDC / "LDC93S1.wav", good)
    corrupt = tmp_path / "corrupt.mp3"
    corrupt.write_bytes(b"ID3 this is not really an mp3" * 50)
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    missing = tmp_path / "missing.wav"
    result = cli(["transcribe", corrupt, good, empty, missing, "--model", tiny_run])
    assert result.exit_code == 1
    assert "Traceback" not in result.stderr
    # Progress bars (on: several files) are cleared before a line is written, not mixed in.
    errors = [line for line in result.stderr.splitlines() if line.startswith("asrkit: error:")]
    assert [e.split(": ")[2] for e in errors[:3]] == [str(corrupt), str(empty), str(missing)]
    assert errors[-1] == "asrkit: error: 3 of 4 files could not be transcribed"
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{good}: ")


def test_bad_model_and_empty_directory_are_one_line_errors(cli, tiny_run, tmp_path):
    result = cli(["transcribe", LDC / "LDC93S1.wav", "--model", tmp_path])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1].startswith(
        f"asrkit: error: {tmp_path} is neither a run folder")
    (tmp_path / "notes.txt").write_text("no audio here")
    result = cli(["transcribe", tmp_path, "--model", tiny_run])
    assert result.exit_code == 1
    assert result.stderr.strip() == f"asrkit: error: no audio files found in {tmp_path}"
