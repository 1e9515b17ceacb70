"""Forced alignment of a known transcript to a recording of any length: ``asrkit align``.

Frames
    The recording is read in the windows transcription uses (:func:`read_windows`: one window
    in memory at a time, cores cut in pauses, an overlap of context each side). Each window's
    CTC log-probabilities are computed with its context, and the frames whose start lies in its
    core are kept, each with its own time (the window's start plus its index x the frame's
    seconds). Concatenated, they are the whole recording's frames, every moment heard by one
    window with context on both sides. They take frames x classes float32: 11 MB an hour at
    40 ms frames and 29 classes.

Path
    One Viterbi over all the frames (:func:`asrkit.core.viterbi.ctc_align`) spells the whole
    transcript, so no word is lost or doubled at a window's edge. Audio before the first word and
    after the last is free (its ``free_ends``: a wildcard that matches anything), so speech or
    noise the text leaves out there is not pulled onto the first or last words; between words,
    audio the text does not cover goes to the blank. Its memory grows with the square root of
    the frames times the text's length (that module's docstring).

Times and scores
    A character spans the frames its path emits it in: from its first frame's start to its
    last frame's end. CTC emits a character in one or a few frames, so characters are short and
    a word (its first character's start to its last character's end) ends where its last
    character is recognised, slightly before the sound dies away. A character's score is the
    model's probability of it, averaged over those frames; a word's is the geometric mean of its
    characters' scores (one unsure character makes the word unsure). These are transcription's
    word confidences (:func:`asrkit.core.viterbi.token_probability`), in [0, 1]: near 1
    where the model hears the text, near 0 where it hears something else.

Text
    The transcript is normalised as importers normalise training transcripts
    (:func:`asrkit.core.text.normalize`: lower case, punctuation dropped, accents the model lacks
    folded); what that removes or replaces is reported in a warning. Characters the model still
    cannot spell (digits, other scripts) stop the alignment with one line naming them.

Bad input
    :func:`check_alignment` judges the result: a recording whose words score below
    ``min_score`` on average does not match its text and is refused with its score; stretches of
    :data:`LOW_RUN` or more consecutive words below :data:`LOW_WORD_SCORE` (text the audio does
    not say there: a wrong or missing sentence) are reported while all words are kept; audio far
    longer than its text (more than half of it in stretches of :data:`LONG_GAP_SECONDS` or more
    without a word) is aligned and reported.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from asrkit.core.errors import AsrkitError
from asrkit.core.frames import SAMPLE_RATE
from asrkit.core.labels import LabelError
from asrkit.core.text import decode_text, normalize, quote
from asrkit.core.viterbi import Token, ctc_align, geometric_mean, token_probability, word_tokens
from asrkit.decoders.prefix import log_softmax
from asrkit.plugins import one_line
from asrkit.serving.transcribe import (
    DEFAULT_CHUNK_SECONDS,
    DEFAULT_OVERLAP_SECONDS,
    Recognizer,
    Recording,
    as_float,
    read_windows,
    samples_windows,
)

if TYPE_CHECKING:
    import numpy as np

    from asrkit.core.labels import Labels

#: Default of ``--min-score``: a recording whose words' mean score is lower does not match its
#: text. Aligned to the right text, a trained model's words score 0.6-0.95 on average; to
#: unrelated text, below 0.1.
DEFAULT_MIN_SCORE = 0.2
#: A word scoring below this is probably not what the audio says there...
LOW_WORD_SCORE = 0.1
#: ... and so many in a row are reported: a model trained briefly scores one word in 15 of a
#: matching text below 0.1 (docs/benchmarks.md), one at a time, where a sentence of the text
#: that the audio does not hold is a run of them.
LOW_RUN = 3
#: Stretches without a word at least this long count as audio the text does not cover.
LONG_GAP_SECONDS = 2.0


class AlignmentError(AsrkitError):
    """A transcript that cannot be aligned to its recording: characters the model cannot spell,
    more text than frames, or text that does not match the audio."""


# -- records ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Span:
    """A character (or subword piece) or a word: its text, start and end in seconds from the
    start of the recording, and its score in [0, 1] (module docstring)."""

    text: str
    start: float
    end: float
    score: float

    def to_json(self, key: str) -> dict[str, object]:
        return {key: self.text, "start": round(self.start, 3), "end": round(self.end, 3),
                "score": round(self.score, 4)}


@dataclass(frozen=True)
class AlignedWord(Span):
    """A word and its characters."""

    chars: tuple[Span, ...] = ()


@dataclass
class Alignment:
    """One recording's alignment to its transcript."""

    path: str
    duration: float
    words: list[AlignedWord]
    windows: int = 1
    model: str = ""
    #: One line each: what was normalised away, low-scoring words, audio without text.
    warnings: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return " ".join(w.text for w in self.words)

    @property
    def score(self) -> float:
        """The mean of the words' scores (0 without words)."""
        return statistics.fmean(w.score for w in self.words) if self.words else 0.0

    @property
    def name(self) -> str:
        """The recording's name in CTM lines: its file name without the extension."""
        return Path(self.path).stem or "utterance"

    def to_json(self) -> dict[str, object]:
        return {"file": self.path, "duration": round(self.duration, 3), "text": self.text,
                "score": round(self.score, 4), "model": self.model, "windows": self.windows,
                "words": [{**w.to_json("word"), "chars": [c.to_json("char") for c in w.chars]}
                          for w in self.words]}


# -- text ---------------------------------------------------------------------------------------


def spelt_characters(labels: Labels) -> list[str]:
    """The characters the labels spell, the space included."""
    return sorted(set("".join(labels.body(i) for i in range(labels.size))) | {" "})


def unspellable(missing: Sequence[str], labels: Labels) -> str:
    """The message naming the characters of a transcript that the labels cannot spell."""
    shown = ", ".join(repr(c) for c in missing[:10])
    spelt = "".join(c for c in spelt_characters(labels) if c != " ")
    return (f"{len(missing)} character(s) the model cannot spell: {shown} (it spells {spelt!r} "
            "and the space); write them out (numbers as words) or remove them")


def prepare_text(text: str, labels: Labels) -> tuple[str, list[int], str | None]:
    """The transcript as the model spells it: normalised text, its labels, and a warning naming
    what normalisation removed or replaced (``None`` when it only lower-cased and collapsed
    spaces). A one-line :class:`AlignmentError` names the characters the labels cannot spell."""
    normalised = normalize(text, spelt_characters(labels))
    if not normalised:
        raise AlignmentError("the transcript is empty" + (
            f" once punctuation is dropped ({quote(text)})" if text.strip() else ""))
    missing = labels.missing(normalised)
    if missing:
        raise AlignmentError(f"the transcript holds {unspellable(missing, labels)}")
    try:
        encoded = labels.encode(normalised)
    except LabelError as error:
        raise AlignmentError(f"the transcript cannot be spelt: {one_line(error)}") from None
    kept = set(normalised)
    changed = sorted({c for c in text.lower() if not c.isspace() and c not in kept})
    warning = None
    if changed:
        warning = ("the transcript was normalised as training transcripts are: "
                   + ", ".join(repr(c) for c in changed[:15]) + " removed or replaced")
    return normalised, encoded, warning


# -- frames -------------------------------------------------------------------------------------


@dataclass
class Frames:
    """A recording's CTC log-probabilities ``[frames, classes]`` and each frame's start in
    seconds."""

    log_probs: np.ndarray
    times: np.ndarray
    seconds: float
    windows: int


def recording_frames(recording: Recording, recognizer: Recognizer,
                     on_window: Callable[[int, int], None] | None = None) -> Frames:
    """Each window's core frames, concatenated (module docstring)."""
    import numpy as np

    step = recognizer.frame_seconds
    kept: list[np.ndarray] = []
    times: list[np.ndarray] = []
    count = 0
    for count, (window, piece) in enumerate(recording.pieces, 1):
        logits = recognizer.logits(as_float(piece))
        starts = window.start / SAMPLE_RATE + np.arange(len(logits)) * step
        lo = -np.inf if window.core_start == 0 else window.core_start / SAMPLE_RATE
        hi = np.inf if window.core_end >= recording.total else window.core_end / SAMPLE_RATE
        inside = (starts >= lo) & (starts < hi)
        kept.append(log_softmax(logits[inside]).astype(np.float32))
        times.append(starts[inside])
        if on_window is not None:
            on_window(count, recording.count)
    classes = recognizer.labels.num_classes
    return Frames(np.concatenate(kept) if kept else np.zeros((0, classes), np.float32),
                  np.concatenate(times) if times else np.zeros(0), step, count)


# -- alignment ----------------------------------------------------------------------------------


def align_frames(frames: Frames, labels: Labels, encoded: Sequence[int],
                 duration: float) -> list[AlignedWord]:
    """The transcript's words (``encoded``: its labels) on the frames' Viterbi path; a one-line
    :class:`AlignmentError` when the frames are too few to spell it."""
    tokens = ctc_align(frames.log_probs, encoded, labels.blank, free_ends=True)
    if tokens is None:
        needed = len(encoded) + sum(a == b for a, b in itertools.pairwise(encoded))
        raise AlignmentError(
            f"the transcript is too long for the audio: its {len(encoded)} labels need at least "
            f"{needed} output frames ({needed * frames.seconds:.1f} s), the recording has "
            f"{len(frames.log_probs)} ({duration:.1f} s)")

    def span(token: Token) -> Span:
        start = float(frames.times[token.first])
        end = min(duration, float(frames.times[token.last]) + frames.seconds)
        return Span(labels.body(token.label), min(start, end), end,
                    token_probability(frames.log_probs, token))

    words = []
    for group in word_tokens(tokens, labels):
        chars = tuple(span(t) for t in group)
        words.append(AlignedWord("".join(c.text for c in chars), chars[0].start, chars[-1].end,
                                 geometric_mean([c.score for c in chars]), chars))
    return words


def check_alignment(alignment: Alignment, min_score: float = DEFAULT_MIN_SCORE) -> None:
    """Refuse a recording that does not match its text (a one-line :class:`AlignmentError`
    with its score); add a warning for low-scoring words and for audio the text does not
    cover."""
    words = alignment.words
    if words and alignment.score < min_score:
        raise AlignmentError(
            f"the text does not match the audio: its words score {alignment.score:.3f} on "
            f"average, below --min-score {min_score:g}")
    runs = low_runs(words)
    if runs:
        shown = "; ".join(f"{words[a].start:.2f}-{words[b].end:.2f} s ({b - a + 1} words from "
                          f"{words[a].text!r})" for a, b in runs[:3])
        more = f" and {len(runs) - 3} more" if len(runs) > 3 else ""
        alignment.warnings.append(
            f"the text may not match the audio in {len(runs)} stretch(es) of {LOW_RUN} or more "
            f"words scoring below {LOW_WORD_SCORE:g}: {shown}{more}")
    edges = [0.0, *(t for w in words for t in (w.start, w.end)), alignment.duration]
    gaps = [b - a for a, b in zip(edges[::2], edges[1::2], strict=True)]
    uncovered = sum(g for g in gaps if g >= LONG_GAP_SECONDS)
    if uncovered > alignment.duration / 2:
        alignment.warnings.append(
            f"{uncovered:.1f} s of the {alignment.duration:.1f} s recording lie in stretches of "
            f"{LONG_GAP_SECONDS:g} s or more without a word of the text: the audio holds far "
            "more than the text, and only the text's words are aligned")


def low_runs(words: Sequence[AlignedWord]) -> list[tuple[int, int]]:
    """First and last index of each run of :data:`LOW_RUN` or more consecutive words scoring
    below :data:`LOW_WORD_SCORE`."""
    runs = []
    start = None
    for index, word in enumerate([*words, None]):
        if word is not None and word.score < LOW_WORD_SCORE:
            start = index if start is None else start
            continue
        if start is not None and index - start >= LOW_RUN:
            runs.append((start, index - 1))
        start = None
    return runs


def align_recording(recording: Recording, text: str, recognizer: Recognizer, path: str = "",
                    min_score: float = DEFAULT_MIN_SCORE,
                    on_window: Callable[[int, int], None] | None = None) -> Alignment:
    """Align ``text`` to a recording's windows (module docstring). The text is checked before
    any audio is read."""
    recognizer.check_ctc("asrkit align")
    _, encoded, warning = prepare_text(text, recognizer.labels)
    frames = recording_frames(recording, recognizer, on_window)
    duration = recording.total / SAMPLE_RATE
    words = align_frames(frames, recognizer.labels, encoded, duration)
    alignment = Alignment(path, duration, words, frames.windows, recognizer.name,
                          [warning] if warning else [])
    check_alignment(alignment, min_score)
    return alignment


def align_samples(samples: np.ndarray, text: str, recognizer: Recognizer,
                  chunk_seconds: float = DEFAULT_CHUNK_SECONDS,
                  overlap_seconds: float = DEFAULT_OVERLAP_SECONDS,
                  min_score: float = DEFAULT_MIN_SCORE, path: str = "") -> Alignment:
    """Align ``text`` to 16 kHz mono samples (int16, or float in [-1, 1]) of any length."""
    recording = samples_windows(samples, chunk_seconds, overlap_seconds)
    return align_recording(recording, text, recognizer, path, min_score)


def align_file(path: Path, text: str, recognizer: Recognizer,
               chunk_seconds: float = DEFAULT_CHUNK_SECONDS,
               overlap_seconds: float = DEFAULT_OVERLAP_SECONDS,
               min_score: float = DEFAULT_MIN_SCORE,
               on_window: Callable[[int, int], None] | None = None) -> Alignment:
    """Align ``text`` to a file of any format and length, holding one window of its audio at a
    time. Error messages do not repeat the path: the caller prefixes it."""
    recognizer.check_ctc("asrkit align")
    prepare_text(text, recognizer.labels)  # a text that cannot be spelt fails before any audio
    with read_windows(path, chunk_seconds, overlap_seconds) as recording:
        return align_recording(recording, text, recognizer, str(path), min_score, on_window)


# -- lists --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pair:
    """A recording and its transcript's text."""

    audio: Path
    text: str


def read_pairs(listing: Path) -> list[Pair]:
    """A TSV of ``audio<TAB>transcript`` lines (audio paths relative to the list's folder; empty
    lines and lines starting with ``#`` skipped); one line naming a malformed line."""
    pairs = []
    text = decode_text(listing.read_bytes(), listing.name)
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        audio, tab, transcript = line.partition("\t")
        if not tab or not audio.strip():
            raise AsrkitError(f"{listing}:{number}: expected AUDIO<TAB>TRANSCRIPT, got "
                              f"{quote(line)!r}")
        pairs.append(Pair(listing.parent / audio.strip(), transcript))
    if not pairs:
        raise AsrkitError(f"{listing} lists no recordings")
    return pairs


@dataclass
class Failure:
    """A recording that could not be aligned, with a one-line reason."""

    path: str
    message: str


def align_pairs(pairs: Iterable[Pair], recognizer: Recognizer, failures: list[Failure],
                chunk_seconds: float = DEFAULT_CHUNK_SECONDS,
                overlap_seconds: float = DEFAULT_OVERLAP_SECONDS,
                min_score: float = DEFAULT_MIN_SCORE) -> Iterator[Alignment]:
    """Align each pair, yielding as they finish; one that fails goes to ``failures`` with its
    one-line reason and the others go on."""
    for pair in pairs:
        try:
            yield align_file(pair.audio, pair.text, recognizer, chunk_seconds, overlap_seconds,
                             min_score)
        except AsrkitError as error:
            failures.append(Failure(str(pair.audio), " ".join(str(error).split())))
        except Exception as error:  # one bad recording must not end a list's alignment
            failures.append(Failure(str(pair.audio), one_line(error)))
