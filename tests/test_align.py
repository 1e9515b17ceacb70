"""``asrkit align``: the Viterbi, alignment of long recordings across windows, bad input, the
output formats and the command.

The Viterbi is checked against an exhaustive search on small lattices (every path scored), for
every size of its stored blocks. Alignment itself is checked exactly with the deterministic tone
model of ``test_transcribe`` (each character a pure tone, recognised with certainty), so a word
placed wrong anywhere in minutes cut into many windows shows as a wrong time. The command runs
end to end with a tiny random-weight run: its outputs are checked for shape, never for words.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest

from asrkit.core.text import Alphabet
from asrkit.core.viterbi import STAR_SHARE, Token, ctc_align
from asrkit.decoders.prefix import log_softmax
from asrkit.serving.align import (
    AlignedWord,
    Alignment,
    AlignmentError,
    Span,
    align_samples,
    prepare_text,
)
from asrkit.serving.alignment_formats import ctm, textgrid
from asrkit.testing.models import make_tiny_run
from tests.test_transcribe import (
    LDC,
    RATE,
    ToneRecognizer,
    long_recording,
    speak,
)

# -- the Viterbi --------------------------------------------------------------------------------


def path_score(log_probs: np.ndarray, tokens: list[Token], blank: int,
               free_ends: bool = False) -> float:
    """The log-probability of the path ``tokens`` describe: each token's label on its frames,
    the blank everywhere else; with ``free_ends``, before the first token and after the last,
    the best of blanks, then wildcards, then blanks)."""
    classes = np.full(len(log_probs), blank)
    for token in tokens:
        classes[token.first:token.last + 1] = token.label
    scores = log_probs[np.arange(len(log_probs)), classes]
    if not free_ends:
        return float(scores.sum())

    def edge(frames: slice) -> float:
        blanks, stars = log_probs[frames, blank], wildcard(log_probs[frames])
        n = len(blanks)
        return max(blanks[:i].sum() + stars[i:j].sum() + blanks[j:].sum()
                   for i in range(n + 1) for j in range(i, n + 1))

    inner = scores[tokens[0].first:tokens[-1].last + 1].sum()
    return float(edge(slice(0, tokens[0].first)) + inner
                 + edge(slice(tokens[-1].last + 1, len(log_probs))))


def wildcard(log_probs: np.ndarray) -> np.ndarray:
    """The free ends' wildcard's log-probability on each frame."""
    return log_probs.max(axis=1) + np.log(STAR_SHARE)


def best_by_search(log_probs: np.ndarray, labels: list[int], blank: int,
                   free_ends: bool = False) -> float | None:
    """The best score of any frame labelling that collapses to ``labels``: every one tried.
    With ``free_ends``, the wildcard class may come first and last."""
    best = None
    if free_ends:
        log_probs = np.concatenate([log_probs, wildcard(log_probs)[:, None]], axis=1)
    star = log_probs.shape[1] - 1 if free_ends else -1
    for path in itertools.product(range(log_probs.shape[1]), repeat=len(log_probs)):
        collapsed = [c for c, _ in itertools.groupby(path) if c != blank]
        if collapsed[:1] == [star]:
            collapsed = collapsed[1:]
        if collapsed[-1:] == [star]:
            collapsed = collapsed[:-1]
        if collapsed == labels:
            score = float(log_probs[np.arange(len(path)), path].sum())
            best = score if best is None else max(best, score)
    return best


@pytest.mark.parametrize("free_ends", [False, True])
def test_the_viterbi_finds_the_best_path_whatever_its_block_size(free_ends):
    rng = np.random.default_rng(7)
    checked = 0
    for _ in range(30):
        frames, labels = int(rng.integers(1, 7)), [int(c) for c in rng.integers(0, 2, 3)]
        labels = labels[:int(rng.integers(1, 4))]
        log_probs = log_softmax(rng.normal(size=(frames, 3)) * 2)
        best = best_by_search(log_probs, labels, 2, free_ends)
        for block in (1, 2, 3, None):
            tokens = ctc_align(log_probs, labels, 2, block, free_ends)
            if best is None:
                assert tokens is None
                continue
            assert tokens is not None and [t.label for t in tokens] == labels
            score = path_score(log_probs, tokens, 2, free_ends)
            assert score == pytest.approx(best)
            checked += 1
    assert checked > 40


def test_stored_blocks_give_the_same_path_as_the_whole_table():
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(500, 29)) * 3
    logits[:, 28] += 2
    log_probs = log_softmax(logits)
    labels = [int(c) for c in rng.integers(0, 28, 120)]
    whole = ctc_align(log_probs, labels, 28, block=500)
    assert whole is not None
    for block in (1, 7, 23, None):
        assert ctc_align(log_probs, labels, 28, block) == whole


def test_a_known_path():
    """Frames built to say "a", "b", "b" at known frames: the repeated "b" needs a blank."""
    a, b, blank = 0, 1, 2
    says = [a, a, blank, b, blank, b, blank]
    log_probs = np.log(np.full((len(says), 3), 0.05))
    log_probs[np.arange(len(says)), says] = np.log(0.9)
    assert ctc_align(log_probs, [a, b, b], blank) == [Token(a, 0, 1), Token(b, 3, 3),
                                                      Token(b, 5, 5)]
    assert ctc_align(log_probs[:3], [a, b, b], blank) is None  # a, b, blank, b: 4 frames at least


# -- alignment with the tone model --------------------------------------------------------------


def test_a_long_recording_is_aligned_exactly_across_windows():
    audio, words, starts = long_recording(150, seed=4)
    alignment = align_samples(audio, " ".join(words), ToneRecognizer(), chunk_seconds=5.0,
                              overlap_seconds=1.0)
    assert alignment.windows > 10
    assert [w.text for w in alignment.words] == words
    for word, start in zip(alignment.words, starts, strict=True):
        assert word.start == pytest.approx(start, abs=0.011)
        # Each character is a 60 ms tone followed by 30 ms of silence.
        assert word.end == pytest.approx(start + 0.09 * len(word.text) - 0.03, abs=0.011)
        assert [c.text for c in word.chars] == list(word.text)
        for k, char in enumerate(word.chars):
            assert char.start == pytest.approx(start + 0.09 * k, abs=0.011)
            assert char.score == pytest.approx(1.0, abs=1e-3)
    assert alignment.score == pytest.approx(1.0, abs=1e-3)
    assert alignment.warnings == []


def test_text_that_does_not_match_is_refused_with_its_score():
    audio = speak("dark suit in greasy wash water")
    with pytest.raises(AlignmentError, match=r"does not match the audio: its words score 0\.0"):
        align_samples(audio, "she had your year", ToneRecognizer())
    alignment = align_samples(audio, "she had your year", ToneRecognizer(), min_score=0.0)
    assert len(alignment.words) == 4
    assert "in 1 stretch(es) of 3 or more words scoring below 0.1" in alignment.warnings[0]


def test_a_wrong_sentence_is_reported_and_the_other_words_are_kept():
    audio, words, starts = long_recording(40, seed=1)
    text = list(words)
    text[5] = "zzz"  # one wrong word: a low score, no warning (weak models miss single words)
    text[20:23] = ["xx", "yyy", "qq"]
    alignment = align_samples(audio, " ".join(text), ToneRecognizer())
    assert [w.text for w in alignment.words] == text
    assert [w.text for w in alignment.words if w.score < 0.1] == ["zzz", "xx", "yyy", "qq"]
    wrong = alignment.words[20:23]
    assert alignment.warnings == [
        "the text may not match the audio in 1 stretch(es) of 3 or more words scoring below "
        f"0.1: {wrong[0].start:.2f}-{wrong[-1].end:.2f} s (3 words from 'xx')"]
    for k, (word, start) in enumerate(zip(alignment.words, starts, strict=True)):
        if k not in (5, 20, 21, 22):
            assert word.start == pytest.approx(start, abs=0.011)


def test_audio_far_longer_than_the_text_is_aligned_and_reported():
    speech = speak("dark suit in greasy wash water")
    audio = np.concatenate([np.zeros(30 * RATE, np.float32), speech,
                            np.zeros(40 * RATE, np.float32)])
    alignment = align_samples(audio, "dark suit in greasy wash water", ToneRecognizer())
    assert alignment.words[0].start == pytest.approx(30.0, abs=0.011)
    assert alignment.words[-1].text == "water"
    assert alignment.score == pytest.approx(1.0, abs=1e-3)
    assert len(alignment.warnings) == 1
    assert re.fullmatch(r"7\d\.\d s of the 7\d\.\d s recording lie in stretches of 2 s or more "
                        r"without a word of the text: .*", alignment.warnings[0])


def test_a_text_longer_than_the_audio_allows_is_one_line():
    with pytest.raises(AlignmentError, match=r"too long for the audio: its 42 labels need at "
                                             r"least 43 output frames \(0\.4 s\), the "
                                             r"recording has 36 \(0\.4 s\)"):
        align_samples(speak("dark"), "dark suit in greasy wash water all year we", ToneRecognizer())


def test_the_transcript_is_normalised_and_unspellable_characters_named():
    alphabet = Alphabet()
    text, labels, warning = prepare_text("Dark  SUIT, in “greasy” café-water!", alphabet)
    assert text == "dark suit in greasy cafe water"
    assert labels == alphabet.encode(text)
    assert warning is not None
    for removed in (",", "“", "”", "é", "-", "!"):
        assert repr(removed) in warning
    assert prepare_text("dark suit", alphabet)[2] is None
    with pytest.raises(AlignmentError, match=r"2 character\(s\) the model cannot spell: '4', "
                                             r"'ж' \(it spells"):
        prepare_text("dark 44 suits жж", alphabet)
    with pytest.raises(AlignmentError, match="the transcript is empty once punctuation"):
        prepare_text(" ... !", alphabet)


def test_a_transducer_run_is_refused_in_one_line():
    from asrkit.objectives.transducer import TransducerObjective

    recognizer = ToneRecognizer()
    recognizer.objective = TransducerObjective()
    with pytest.raises(Exception, match="asrkit align reads a model's outputs as CTC logits, "
                                        "which the transducer objective's are not"):
        align_samples(speak("dark"), "dark", recognizer)


# -- formats ------------------------------------------------------------------------------------


def sample_alignment() -> Alignment:
    def word(text: str, start: float, step: float) -> AlignedWord:
        chars = tuple(Span(c, start + k * step, start + k * step + 0.04, 0.5)
                      for k, c in enumerate(text))
        return AlignedWord(text, chars[0].start, chars[-1].end, 0.5, chars)

    return Alignment("dir/talk.flac", 3.0, [word("say", 0.5, 0.1), word('"hi"', 1.2, 0.2)])


def parse_textgrid(text: str) -> dict[str, list[tuple[float, float, str]]]:
    """The interval tiers of a long-format TextGrid, checked as Praat reads them."""
    lines = [line.strip() for line in text.splitlines()]
    assert lines[:2] == ['File type = "ooTextFile"', 'Object class = "TextGrid"']
    xmax = float(lines[lines.index("xmin = 0") + 1].split("=")[1])
    tiers: dict[str, list[tuple[float, float, str]]] = {}
    size = int(next(line for line in lines if line.startswith("size =")).split("=")[1])
    for index in range(1, size + 1):
        at = lines.index(f"item [{index}]:")
        assert lines[at + 1] == 'class = "IntervalTier"'
        name = lines[at + 2].split("=", 1)[1].strip().strip('"')
        count = int(lines[at + 5].split("=")[1])
        intervals = []
        for k in range(count):
            block = lines[at + 6 + 4 * k:at + 10 + 4 * k]
            assert block[0] == f"intervals [{k + 1}]:"
            raw = block[3].split("=", 1)[1].strip()
            assert raw.startswith('"') and raw.endswith('"')
            intervals.append((float(block[1].split("=")[1]), float(block[2].split("=")[1]),
                              raw[1:-1].replace('""', '"')))
        # Praat's intervals tile the tier: from 0 to xmax, each starting where the last ended.
        assert intervals[0][0] == 0 and intervals[-1][1] == xmax
        assert all(a[1] == b[0] and a[0] < a[1] for a, b in itertools.pairwise(intervals))
        tiers[name] = intervals
    return tiers


def test_textgrid_tiles_both_tiers_and_quotes_like_praat():
    tiers = parse_textgrid(textgrid(sample_alignment()))
    assert list(tiers) == ["words", "chars"]
    assert [i for i in tiers["words"] if i[2]] == [(0.5, 0.74, "say"), (1.2, 1.84, '"hi"')]
    assert "".join(i[2] for i in tiers["chars"]) == 'say"hi"'
    assert tiers["chars"][1] == (0.5, 0.54, "s")


def test_ctm_has_a_line_a_word():
    lines = ctm(sample_alignment()).splitlines()
    assert lines == ["talk 1 0.500 0.240 say 0.5000", 'talk 1 1.200 0.640 "hi" 0.5000']


# -- the command --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    return make_tiny_run(tmp_path_factory.mktemp("tiny") / "run")


WAV = LDC / "LDC93S1.wav"
TEXT = "She had your dark suit in greasy wash water all year."


def errors(stderr: str) -> list[str]:
    """The command's error lines (the lines of other warnings left out)."""
    assert "Traceback" not in stderr
    return [line for line in stderr.splitlines() if line.startswith("asrkit: error:")]


def test_the_command_writes_each_format(cli, tiny_run, tmp_path):
    transcript = tmp_path / "ldc.txt"
    transcript.write_text(TEXT + "\n")
    result = cli(["align", WAV, transcript, "-m", tiny_run, "--min-score", "0"])
    assert result.exit_code == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["text"] == "she had your dark suit in greasy wash water all year"
    assert [w["word"] for w in found["words"]] == found["text"].split()
    assert found["duration"] == pytest.approx(2.92, abs=0.01)
    for word in found["words"]:
        assert 0 <= word["start"] < word["end"] <= found["duration"]
        assert "".join(c["char"] for c in word["chars"]) == word["word"]
        assert 0 <= word["score"] <= 1
    starts = [w["start"] for w in found["words"]]
    assert starts == sorted(starts)
    assert "'.' removed or replaced" in result.stderr  # the normalisation is said

    result = cli(["align", WAV, "--text", TEXT, "-m", tiny_run, "--min-score", "0",
                  "--format", "ctm"])
    assert result.exit_code == 0, result.stderr
    rows = [line.split(" ") for line in result.stdout.splitlines()]
    assert [r[4] for r in rows] == found["text"].split()
    for row, word in zip(rows, found["words"], strict=True):
        assert row[:2] == ["LDC93S1", "1"] and len(row) == 6
        assert float(row[2]) == pytest.approx(word["start"], abs=1e-3)
        assert float(row[3]) == pytest.approx(word["end"] - word["start"], abs=2e-3)

    out = tmp_path / "ldc.TextGrid"
    result = cli(["align", WAV, transcript, "-m", tiny_run, "--min-score", "0",
                  "--format", "textgrid", "--output", out])
    assert result.exit_code == 0 and result.stdout == ""
    tiers = parse_textgrid(out.read_text())
    assert [i[2] for i in tiers["words"] if i[2]] == found["text"].split()


def test_bad_input_is_one_line(cli, tiny_run, tmp_path):
    result = cli(["align", WAV, "--text", "she had 2 suits", "-m", tiny_run])
    assert result.exit_code == 1
    assert errors(result.stderr) == [
        f"asrkit: error: {WAV}: the transcript holds 1 character(s) the model cannot spell: '2' "
        "(it spells \"'abcdefghijklmnopqrstuvwxyz\" and the space); write them out (numbers "
        "as words) or remove them"]
    result = cli(["align", WAV, "--text", TEXT, "-m", tiny_run, "--min-score", "1"])
    assert result.exit_code == 1
    assert re.fullmatch(r"asrkit: error: .*: the text does not match the audio: its words score "
                        r"0\.\d+ on average, below --min-score 1", errors(result.stderr)[0])
    result = cli(["align", WAV, "--text", "words " * 200, "-m", tiny_run])
    assert "too long for the audio" in errors(result.stderr)[0]
    for args in (["align", WAV, "-m", tiny_run], ["align", "-m", tiny_run, "--text", "x"]):
        result = cli(args)
        assert result.exit_code == 2 and len(errors(result.stderr)) == 1


def test_a_list_keeps_the_recordings_that_align(cli, tiny_run, tmp_path):
    listing = tmp_path / "pairs.tsv"
    listing.write_text(f"# audio\ttext\n{WAV}\t{TEXT}\nmissing.wav\t{TEXT}\n"
                       f"{WAV}\tshe had 2 suits\n{WAV}\tdark suit\n")
    result = cli(["align", "--list", listing, "-m", tiny_run, "--min-score", "0",
                  "--format", "ctm"])
    assert result.exit_code == 1
    lines = errors(result.stderr)
    assert len(lines) == 3
    assert lines[0].startswith(f"asrkit: error: {tmp_path / 'missing.wav'}: ")
    assert "cannot spell: '2'" in lines[1]
    assert lines[2] == "asrkit: error: 2 of 4 recordings could not be aligned"
    words = [line.split()[4] for line in result.stdout.splitlines()]
    assert words == [*TEXT.lower().rstrip(".").split(), "dark", "suit"]

    folder = tmp_path / "grids"
    listing.write_text(f"{WAV}\t{TEXT}\n")
    result = cli(["align", "--list", listing, "-m", tiny_run, "--min-score", "0",
                  "--format", "textgrid", "--output", folder])
    assert result.exit_code == 0, result.stderr
    assert [p.name for p in folder.iterdir()] == ["LDC93S1.TextGrid"]
    assert Path(folder / "LDC93S1.TextGrid").read_text().startswith('File type = "ooTextFile"')
