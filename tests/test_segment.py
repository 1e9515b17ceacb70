"""``asrkit segment``: long recordings cut into utterances of their text, written as a folder
corpus.

Boundaries and confidences are checked exactly with the deterministic tone model of
``test_transcribe`` (each character a pure tone, recognised with certainty) on a recording of
known utterances joined by known pauses: a placement wrong anywhere shows as a wrong time. The
command runs end to end with a tiny random-weight run on real speech (fixture clips joined by
sox with known gaps): its folder is checked for layout, imported with ``asrkit import folder``
and trained a step; its times and scores are checked for shape only, never for words.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from asrkit.dataset.audio import read_wav, wav_bytes
from asrkit.serving import segment as segmenting
from asrkit.serving.align import AlignmentError
from asrkit.serving.segment import (
    LISTING,
    prepare_lines,
    reusable,
    segment_recording,
    split_text,
    write_clips,
)
from tests.conftest import SPEECH
from tests.test_align import errors
from tests.test_transcribe import RATE, ToneRecognizer, speak

SENTENCES = ("she had your dark suit", "in greasy wash water all year", "we must find a new home",
             "the stars it was my reports", "from north which chiefly induced people to buy")


def tone_recording(folder: Path, texts: list[str], gaps: list[float],
                   lead: float = 0.7, tail: float = 0.5) -> tuple[Path, list[tuple[float, float]]]:
    """A WAV of ``texts`` spoken as tones, ``gaps[i]`` seconds of silence after the i-th; the
    file and each utterance's true start and end."""
    pieces = [np.zeros(int(lead * RATE), np.float32)]
    truth, position = [], len(pieces[0])
    for text, gap in zip(texts, gaps, strict=True):
        audio = speak(text)
        truth.append((position / RATE, (position + len(audio)) / RATE))
        pieces += [audio, np.zeros(int(gap * RATE), np.float32)]
        position += len(audio) + int(gap * RATE)
    pieces.append(np.zeros(int(tail * RATE), np.float32))
    path = folder / "book.wav"
    path.write_bytes(wav_bytes((np.concatenate(pieces) * 32767).astype(np.int16)))
    return path, truth


def segment_text(path: Path, text: str, min_confidence: float = 0.5, **kwargs):
    recognizer = ToneRecognizer()
    lines = prepare_lines(split_text(text, **kwargs), recognizer.labels)
    return segment_recording(path, lines, recognizer, min_confidence), lines


@pytest.fixture
def book(tmp_path):
    """Twelve utterances (minutes of audio, several windows) with pauses of 0.3-1.5 s."""
    texts = [SENTENCES[i % len(SENTENCES)] for i in range(12)]
    gaps = list(np.random.default_rng(0).uniform(0.3, 1.5, len(texts)))
    path, truth = tone_recording(tmp_path, texts, gaps)
    return path, texts, truth, gaps


def test_boundaries_lie_in_the_pauses_around_each_utterance(book):
    path, texts, truth, _ = book
    result, _ = segment_text(path, "\n".join(texts))
    assert result.windows > 1
    assert [s.text for s in result.segments] == texts
    previous_end = 0.0
    for index, (segment, (start, end)) in enumerate(zip(result.segments, truth, strict=True)):
        # The words: the first tone's start to the last tone's end (each character's tone is
        # followed by 30 ms of silence), within two 10 ms frames.
        assert segment.speech_start == pytest.approx(start, abs=0.021)
        assert segment.speech_end == pytest.approx(end - 0.03, abs=0.021)
        # The cut: into the pauses on each side, by half the pause but at most half a second.
        segments = result.segments
        before = segment.speech_start - (segments[index - 1].speech_end if index else 0.0)
        after = (segments[index + 1].speech_start if index + 1 < len(segments)
                 else result.duration) - segment.speech_end
        assert segment.speech_start - segment.start == pytest.approx(min(0.5, before / 2),
                                                                     abs=0.011)
        assert segment.end - segment.speech_end == pytest.approx(min(0.5, after / 2), abs=0.011)
        assert segment.start >= previous_end - 1e-9
        previous_end = segment.end
        assert segment.confidence == pytest.approx(1.0, abs=1e-3) and not segment.dropped
    assert result.warnings == []


def test_the_threshold_drops_a_line_the_audio_does_not_say(book):
    path, texts, truth, _ = book
    # A line of the text that the reader left out (its letters are nowhere in the audio).
    wrong = [*texts[:5], "jazz quiz", *texts[5:]]
    result, _ = segment_text(path, "\n".join(wrong))
    dropped = [s for s in result.segments if s.dropped]
    assert [s.number for s in dropped] == [6]
    assert dropped[0].confidence < 0.5  # nine letters forced into 1.4 s of silence
    assert dropped[0].dropped == "confidence below --min-confidence 0.5"
    kept = [s for s in result.segments if not s.dropped]
    # The others keep their places (the next one may lose its first frames to the last letter
    # forced before it).
    for segment, (start, _) in zip(kept, truth, strict=True):
        assert segment.speech_start == pytest.approx(start, abs=0.06)
        assert segment.confidence > 0.99
    assert "12 of 13 utterances kept" in result.summary()
    everything, _ = segment_text(path, "\n".join(wrong), min_confidence=0.0)
    assert not any(s.dropped for s in everything.segments)


def test_bad_input_keeps_what_can_be_cut(book, tmp_path):
    path, texts, truth, _ = book
    # A line the model cannot spell is aligned without those characters, then left out.
    spelt = list(texts)
    spelt[2] = "we must find 2 new home"
    result, _ = segment_text(path, "\n".join(spelt))
    assert [s.number for s in result.segments if s.dropped] == [3]
    assert result.warnings == [
        "line 3: 1 character(s) the model cannot spell: '2' (it spells "
        "\"'abcdefghijklmnopqrstuvwxyz\" and the space); write them out (numbers as words) or "
        "remove them; it is not cut"]
    assert result.segments[3].speech_start == pytest.approx(truth[3][0], abs=0.021)
    # Text that is not what the audio says anywhere.
    with pytest.raises(AlignmentError, match=r"^the text does not match the audio: all 3 "
                       r"utterances score below --min-confidence 0.5 \(median 0\.\d+\)$"):
        segment_text(path, "aaaa bbbb\nzzz yyy xxx\nqqq")
    # Audio far longer than its text: the text's utterances are found, the rest is skipped.
    result, _ = segment_text(path, "\n".join(texts[5:7]))
    assert [round(s.speech_start, 2) for s in result.segments] == pytest.approx(
        [truth[5][0], truth[6][0]], abs=0.021)
    assert any("outside every utterance: the audio holds far more than the text" in w
               for w in result.warnings)
    # More text than audio.
    with pytest.raises(AlignmentError, match="too long for the audio"):
        segment_text(path, "\n".join(texts * 20))


def test_clips_longer_than_an_import_takes_are_reported(book, monkeypatch):
    path, texts, _, _ = book
    monkeypatch.setattr(segmenting, "DEFAULT_MAX_SECONDS", 4.0)
    result, _ = segment_text(path, "\n".join(texts))
    long = [s for s in result.segments if s.end - s.start > 4.0]
    assert long and result.warnings == [
        f"{len(long)} clip(s) are longer than 4 s (the first: number {long[0].number}, "
        f"{long[0].end - long[0].start:.1f} s), which `asrkit import` skips unless "
        "--max-duration is raised: split those lines"]


def test_sentences_are_split_from_running_text():
    text = ("Mr. Smith came home. Was it late? It was!\n\n\"Yes,\" she said. Then\nthey "
            "slept…\nThe end")
    assert [s for s, _ in split_text(text, sentences=True)] == [
        "Mr. Smith came home.", "Was it late?", "It was!", '"Yes," she said.',
        "Then they slept…", "The end"]
    assert split_text("a\n\n b \n", sentences=False) == [("a", "line 1"), ("b", "line 3")]


def test_a_rerun_reuses_whole_recordings_and_redoes_partial_ones(book, tmp_path, monkeypatch):
    path, texts, _, _ = book
    out = tmp_path / "corpus"
    out.mkdir()
    result, _ = segment_text(path, "\n".join(texts))
    # Killed while writing clips: only the hidden partial folder exists, which importers skip.
    original = segmenting._write_clip
    calls = []

    def dies(folder, segment, samples):
        calls.append(segment.number)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return original(folder, segment, samples)

    monkeypatch.setattr(segmenting, "_write_clip", dies)
    with pytest.raises(KeyboardInterrupt):
        write_clips(result, out, "key-1")
    assert sorted(p.name for p in out.iterdir()) == [".book.partial"]
    assert reusable(out, "book", "key-1") is None
    monkeypatch.setattr(segmenting, "_write_clip", original)
    write_clips(result, out, "key-1")
    assert sorted(p.name for p in out.iterdir()) == ["book", LISTING]
    clips = sorted((out / "book").glob("*.wav"))
    assert [p.stem for p in clips] == [f"book-{n:04d}" for n in range(1, 13)]
    assert sorted(p.stem for p in (out / "book").glob("*.txt")) == [p.stem for p in clips]
    assert (out / "book" / "book-0002.txt").read_text() == texts[1] + "\n"
    # Each clip holds its cut of the recording.
    whole = read_wav(path)
    second = result.segments[1]
    assert np.array_equal(read_wav(clips[1]),
                          whole[round(second.start * RATE):round(second.end * RATE)])
    # The same inputs again: reused as it is.
    again = reusable(out, "book", "key-1")
    assert again is not None and again.reused
    assert [s.to_json() for s in again.segments] == [s.to_json() for s in result.segments]
    # Other inputs (a line dropped now): redone whole, no clip left over from before.
    wrong = list(texts)
    wrong[0] = "year all water wash greasy"
    changed, _ = segment_text(path, "\n".join(wrong))
    assert reusable(out, "book", "key-2") is None
    write_clips(changed, out, "key-2")
    assert sorted(p.stem for p in (out / "book").glob("*.wav")) == [
        f"book-{n:04d}" for n in range(2, 13)]
    listing = json.loads((out / LISTING).read_text())
    assert [r["name"] for r in listing["recordings"]] == ["book"]
    assert listing["recordings"][0]["segments"][0]["clip"] == ""


# -- the command, on real speech with a tiny run -------------------------------------------------

CLIPS = [(SPEECH / "ldc93s1" / "LDC93S1.wav",
          "She had your dark suit in greasy wash water all year.")]
for _line in (SPEECH / "librispeech" / "transcripts.txt").read_text().splitlines():
    _key, _text = _line.split(" ", 1)
    CLIPS.append((SPEECH / "librispeech" / f"{_key}.wav", _text))


def joined_with_sox(folder: Path, gap: float = 0.8) -> tuple[Path, Path]:
    """The fixture clips joined by sox with ``gap`` seconds of silence, and the text file, one
    utterance a line."""
    silence = folder / "silence.wav"
    subprocess.run(["sox", "-n", "-r", "16000", "-c", "1", "-b", "16", str(silence), "trim",
                    "0", str(gap)], check=True)
    parts = []
    for source, _ in CLIPS:
        parts += [str(source), str(silence)]
    audio = folder / "talk.wav"
    subprocess.run(["sox", *parts, "-r", "16000", "-c", "1", str(audio)], check=True)
    text = folder / "talk.txt"
    text.write_text("".join(t + "\n" for _, t in CLIPS))
    return audio, text


def test_the_command_writes_a_folder_that_imports_and_trains(cli, tiny_run, tmp_path,
                                                          asrkit_home, monkeypatch):
    audio, text = joined_with_sox(tmp_path)
    out = tmp_path / "corpus"
    args = ["segment", audio, text, "--model", tiny_run, "--out", out, "--min-confidence", "0",
            "--json", "--no-progress"]
    result = cli(args)
    assert result.exit_code == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["name"] == "talk" and found["kept"] == len(CLIPS) and found["dropped"] == 0
    assert found["reused"] is False
    previous = 0.0
    for number, segment in enumerate(found["segments"], 1):
        assert segment["number"] == number and segment["clip"] == f"talk/talk-{number:04d}.wav"
        assert previous <= segment["start"] < segment["end"] <= found["duration"]
        assert segment["start"] <= segment["speech_start"] < segment["speech_end"] \
            <= segment["end"]
        assert 0 <= segment["confidence"] <= 1
        previous = segment["end"]
    assert (out / "talk" / "talk-0001.txt").read_text() == CLIPS[0][1] + "\n"
    assert json.loads((out / LISTING).read_text())["recordings"][0]["segments"] == \
        found["segments"]
    # Run again: nothing redone.
    again = cli(args)
    assert again.exit_code == 0 and json.loads(again.stdout)["reused"] is True
    # The folder imports as it is, and its dataset trains.
    result = cli(["import", "folder", out, "--name", "talk", "--no-progress"])
    assert result.exit_code == 0, result.stderr
    assert f"train {len(CLIPS)} utt" in result.stdout
    monkeypatch.setenv("ASRKIT_MAX_STEPS", "1")
    result = cli(["train", "--dataset", "talk", "--run-dir", tmp_path / "run", "--no-progress",
                  "-o", "model.n_hidden=16", "-o", "model.n_cell=16", "-o", "model.context=2",
                  "--batch-size", "2"])
    assert result.exit_code == 0, result.stderr[-2000:]
    assert (tmp_path / "run" / "config.json").exists()


def test_the_command_splits_running_text_into_sentences(cli, tiny_run, tmp_path):
    audio, text = joined_with_sox(tmp_path)
    prose = tmp_path / "prose.txt"
    prose.write_text(" ".join(text.read_text().splitlines()).replace("year.", "year.\n\n"))
    result = cli(["segment", audio, prose, "-m", tiny_run, "--out", tmp_path / "corpus",
                  "--min-confidence", "0", "--split-sentences", "--json", "--no-progress"])
    assert result.exit_code == 0, result.stderr
    found = json.loads(result.stdout)["segments"]
    assert found[0]["text"] == CLIPS[0][1]  # a sentence ending in a full stop
    assert len(found) == 2  # and a paragraph: the transcripts have no full stops


def test_the_command_reports_bad_input_on_one_line_each(cli, tiny_run, tmp_path):
    audio, text = joined_with_sox(tmp_path)
    out = tmp_path / "corpus"
    bad = tmp_path / "bad.txt"
    bad.write_text(text.read_text().replace("dark suit", "dark 2 suit"))
    result = cli(["segment", audio, bad, "-m", tiny_run, "--out", out, "--min-confidence", "0",
                  "--no-progress"])
    assert result.exit_code == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]
    assert warnings == [f"asrkit: warning: {audio}: line 1: 1 character(s) the model cannot "
                        "spell: '2' (it spells \"'abcdefghijklmnopqrstuvwxyz\" and the space); "
                        "write them out (numbers as words) or remove them; it is not cut"]
    assert result.stdout.startswith(f"{audio}: {len(CLIPS) - 1} of {len(CLIPS)} utterances kept")
    assert not (out / "talk" / "talk-0001.wav").exists()
    result = cli(["segment", audio, text, "-m", tiny_run, "--out", out, "--min-confidence", "1",
                  "--no-progress"])
    assert result.exit_code == 1
    assert errors(result.stderr)[0].startswith(
        f"asrkit: error: {audio}: the text does not match the audio: all {len(CLIPS)} "
        "utterances score below --min-confidence 1")
    listing = tmp_path / "pairs.tsv"
    listing.write_text(f"{audio}\t{text}\nmissing.wav\t{text}\n")
    result = cli(["segment", "--list", listing, "-m", tiny_run, "--out", tmp_path / "two",
                  "--min-confidence", "0", "--no-progress"])
    assert result.exit_code == 1
    assert errors(result.stderr) == [
        f"asrkit: error: {tmp_path / 'missing.wav'}: no such file",
        "asrkit: error: 1 of 2 recordings could not be segmented"]
    assert (tmp_path / "two" / "talk" / "talk-0002.wav").exists()
    twin = tmp_path / "other" / "talk.wav"
    twin.parent.mkdir()
    twin.write_bytes(audio.read_bytes())
    listing.write_text(f"{audio}\t{text}\n{twin}\t{text}\n")
    result = cli(["segment", "--list", listing, "-m", tiny_run, "--out", out])
    assert errors(result.stderr) == [f"asrkit: error: {audio} and {twin} would both be cut into "
                                     f"{out}/talk: rename one"]
    for args in (["segment", audio, "-m", tiny_run, "--out", out],
                 ["segment", "--list", listing, audio, "-m", tiny_run, "--out", out]):
        result = cli(args)
        assert result.exit_code == 2 and len(errors(result.stderr)) == 1
