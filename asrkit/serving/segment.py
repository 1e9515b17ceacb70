"""Long recordings cut into utterances of their known text: ``asrkit segment``.

An audiobook chapter with its text, a talk with its transcript: the text, one utterance a line
(or split into sentences), is placed in the recording by CTC segmentation (Kürzinger et al.
2020, "CTC-Segmentation of Large Corpora for German End-to-end Speech Recognition"), each
utterance gets a confidence, those above a threshold are cut out as clips, and the clips with
their transcripts form a folder that ``asrkit import folder`` reads as it is: training data.

Frames
    The recording's CTC log-probabilities come from the windows ``asrkit align`` reads
    (:func:`asrkit.serving.align.recording_frames`: one window in memory at a time, every moment
    heard with context).

Segmentation
    CTC segmentation as Kürzinger et al. describe it, on asrkit's own Viterbi
    (:func:`asrkit.core.viterbi.ctc_align`, memory growing with the square root of the
    frames): the whole text, its utterances joined by a word boundary, is aligned in one pass
    over all the frames; audio before the text and after it is free (the Viterbi's wildcard),
    audio between utterances goes to the blank. Each utterance spans its first letter to its
    last, widened into the pause on each side by half the pause, at most :data:`PAD_SECONDS`
    (the paper's rule). The ``ctc-segmentation`` package (the paper's authors') slides a window
    of frames along the text instead, whose size must be guessed: too small and no path is
    found (it then doubles it), as large as the recording and it takes frames x letters x 4
    bytes (2 GB for 20 minutes of speech at 40 ms frames).

Confidence
    The paper's score: the path's log-probabilities averaged over every stretch of
    :data:`SCORE_SECONDS` of the utterance, the lowest of these means; reported as its
    exponent, in [0, 1]. One stretch the model does not hear as the text (a wrong sentence, a
    word the reader skipped, noise) makes the whole utterance unsure. A ``ds2`` trained for 15
    minutes (19 % CER) scores the right lines 0.13-0.56 (10th to 90th percentile), lines the
    audio does not hold 0.0001 or less (docs/benchmarks.md). Utterances below
    ``min_confidence`` are listed but not cut.

Text
    Normalised as ``asrkit align`` normalises (:func:`asrkit.serving.align.prepare_text`). A
    line with characters the model cannot spell is still aligned, without them, so that its
    audio stays with it and not with its neighbours, but it is not cut: its transcript is not
    what the model can learn; one line names the characters.

Bad input
    Text that does not match the audio at all leaves no utterance above the threshold: the
    recording fails with its median confidence. Audio far longer than the text (more than half
    of it outside every utterance) is reported; the uncovered audio is skipped.

Output folder
    ``FOLDER/NAME/NAME-0001.wav`` (16 kHz mono 16-bit) and ``NAME-0001.txt`` for each kept
    utterance (``NAME``: the recording's file name without extension, which the importer takes
    for the speaker; the number: the utterance's place in the text), ``FOLDER/NAME/segments.json``
    (every utterance: start, end, confidence, kept or why not), and ``FOLDER/segments.json``
    gathering all recordings. A recording is written in a hidden folder (``.NAME.partial``, which
    the importer skips) and renamed into place when whole, its ``segments.json`` holding a key of
    its inputs: a rerun after a kill skips the recordings done with the same inputs and redoes
    the rest, never leaving half of one or a clip twice.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asrkit.core.files import sync_files, sync_to_disk, write_atomic, write_durable
from asrkit.core.frames import SAMPLE_RATE
from asrkit.core.labels import LabelError
from asrkit.core.text import normalize
from asrkit.core.viterbi import Token, ctc_align
from asrkit.dataset.audio import wav_bytes
from asrkit.dataset.folders import DEFAULT_MAX_SECONDS
from asrkit.serving.align import (
    LONG_GAP_SECONDS,
    AlignmentError,
    Frames,
    recording_frames,
    spelt_characters,
    unspellable,
)
from asrkit.serving.transcribe import (
    DEFAULT_CHUNK_SECONDS,
    DEFAULT_OVERLAP_SECONDS,
    Recognizer,
    read_windows,
)

if TYPE_CHECKING:
    import numpy as np

    from asrkit.core.labels import Labels

#: Default of ``--min-confidence``: utterances scoring less are not cut. On the benchmark
#: (docs/benchmarks.md) it keeps 97-98 % of the right lines of a briefly trained model, in
#: recordings with short pauses and with long silences, and drops nine of ten lines the audio
#: does not hold (those score 0.03 or less, most under 0.01).
DEFAULT_MIN_CONFIDENCE = 0.02
#: The stretch of an utterance over which the confidence averages the path's log-probabilities.
SCORE_SECONDS = 1.0
#: An utterance's clip reaches this far into the pause on each side (at most half way to its
#: neighbour).
PAD_SECONDS = 0.5
#: The listing of a recording's utterances, in its folder and (all recordings) at the top.
LISTING = "segments.json"
#: How a segment dropped by the threshold says so.
LOW = "confidence below"
#: Abbreviations whose full stop does not end a sentence (``--split-sentences``).
ABBREVIATIONS = frozenset({"mr.", "mrs.", "ms.", "dr.", "st.", "prof.", "sr.", "jr.", "vs.",
                           "etc.", "e.g.", "i.e.", "no.", "mt.", "capt.", "col.", "gen.", "lt."})
_SENTENCE_END = re.compile(r"[.!?…]+[\"'”’)\]]*$")


# -- text ---------------------------------------------------------------------------------------


def split_text(text: str, sentences: bool = False) -> list[tuple[str, str]]:
    """The utterances of a text and where each is (``line 7``, ``sentence 3``): its non-empty
    lines, or with ``sentences`` its sentences (a word ending in ``.``, ``!``, ``?`` or ``…``
    ends one, except common abbreviations; so does an empty line)."""
    if not sentences:
        return [(line.strip(), f"line {number}")
                for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    found: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        current: list[str] = []
        for word in paragraph.split():
            current.append(word)
            if _SENTENCE_END.search(word) and word.lower() not in ABBREVIATIONS:
                found.append(" ".join(current))
                current = []
        if current:
            found.append(" ".join(current))
    return [(sentence, f"sentence {number}") for number, sentence in enumerate(found, 1)]


@dataclass
class Line:
    """One utterance of the text: as written, where it is, the labels it is aligned with, and
    why it cannot be cut even when aligned (``""``: it can)."""

    number: int
    text: str
    where: str
    labels: list[int]
    problem: str = ""


def prepare_lines(utterances: Sequence[tuple[str, str]], labels: Labels) -> list[Line]:
    """Each utterance normalised as ``asrkit align`` normalises; characters the labels cannot
    spell are left out of what is aligned and named in the line's problem."""
    known = spelt_characters(labels)
    lines = []
    for number, (text, where) in enumerate(utterances, 1):
        spoken = normalize(text, known)
        problem = ""
        missing = labels.missing(spoken)
        if missing:
            problem = unspellable(missing, labels)
            spoken = " ".join("".join(c for c in spoken if c not in missing).split())
        try:
            encoded = labels.encode(spoken) if spoken else []
        except LabelError as error:
            encoded, problem = [], f"cannot be spelt: {' '.join(str(error).split())}"
        if not encoded and not problem:
            problem = "empty once punctuation is dropped"
        lines.append(Line(number, " ".join(text.split()), where, encoded, problem))
    return lines


# -- segmentation -------------------------------------------------------------------------------


@dataclass
class Segment:
    """One utterance placed in the recording: seconds from its start, its confidence in [0, 1],
    its clip (a path in the output folder; ``""`` when not cut) and why it was not cut."""

    number: int
    text: str
    start: float
    end: float
    confidence: float
    clip: str = ""
    dropped: str = ""
    #: Where its words are (the cut reaches into the pauses around them).
    speech_start: float = 0.0
    speech_end: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"number": self.number, "text": self.text, "start": round(self.start, 3),
                "end": round(self.end, 3), "speech_start": round(self.speech_start, 3),
                "speech_end": round(self.speech_end, 3),
                "confidence": round(self.confidence, 4), "clip": self.clip,
                "dropped": self.dropped}


@dataclass
class Segmentation:
    """A recording cut into utterances."""

    path: str
    name: str
    duration: float
    segments: list[Segment]
    min_confidence: float
    model: str = ""
    windows: int = 1
    #: One line each: unspellable lines, low confidence, audio the text does not cover.
    warnings: list[str] = field(default_factory=list)
    #: Found whole in the output folder from an earlier run with the same inputs.
    reused: bool = False

    @property
    def kept(self) -> list[Segment]:
        return [s for s in self.segments if not s.dropped]

    @property
    def kept_seconds(self) -> float:
        return sum(s.end - s.start for s in self.kept)

    def summary(self) -> str:
        below = sum(s.dropped.startswith(LOW) for s in self.segments)
        other = len(self.segments) - len(self.kept) - below
        parts = [f"{below} below --min-confidence {self.min_confidence:g}"]
        if other:
            parts.append(f"{other} not spellable")
        return (f"{len(self.kept)} of {len(self.segments)} utterances kept "
                f"({self.kept_seconds / 60:.1f} of {self.duration / 60:.1f} min; dropped: "
                + ", ".join(parts) + ")")

    def to_json(self) -> dict[str, Any]:
        return {"file": self.path, "name": self.name, "duration": round(self.duration, 3),
                "model": self.model, "windows": self.windows,
                "min_confidence": self.min_confidence, "kept": len(self.kept),
                "dropped": len(self.segments) - len(self.kept),
                "kept_seconds": round(self.kept_seconds, 3), "reused": self.reused,
                "warnings": self.warnings, "segments": [s.to_json() for s in self.segments]}


@dataclass(frozen=True)
class Placed:
    """An utterance's cut (seconds: half way into the pauses around it), its speech (its first
    letter's start to its last letter's end) and its confidence."""

    start: float
    end: float
    speech_start: float
    speech_end: float
    confidence: float


def joined_labels(lines: Sequence[Line], labels: Labels) -> tuple[list[int], list[int]]:
    """The labels of all ``lines`` in one sequence, a word boundary between utterances (the
    space among characters; subword pieces start words themselves), and where each line's
    labels begin in it."""
    space = labels.encode(" ") if " " in getattr(labels, "symbols", ()) else []
    joined: list[int] = []
    begins = []
    for line in lines:
        if joined and not labels.starts_word(line.labels[0]):
            joined += space
        begins.append(len(joined))
        joined += line.labels
    return joined, begins


def path_scores(log_probs: np.ndarray, tokens: Sequence[Token], blank: int,
                optional: Sequence[int] = ()) -> np.ndarray:
    """The Viterbi path's log-probability on each frame: its token's label where it emits one,
    the blank elsewhere. The tokens at the indices ``optional`` (the word boundaries put between
    utterances, which a pause need not voice: the path puts them on any frame) score the
    model's most likely class: they belong to no utterance."""
    import numpy as np

    classes = np.full(len(log_probs), blank)
    for token in tokens:
        classes[token.first:token.last + 1] = token.label
    scores = log_probs[np.arange(len(log_probs)), classes]
    for index in optional:
        token = tokens[index]
        frames = slice(token.first, token.last + 1)
        scores[frames] = log_probs[frames].max(axis=1)
    return scores


def lowest_mean(scores: np.ndarray, width: int) -> float:
    """The lowest mean of ``width`` consecutive ``scores`` (of all of them when fewer)."""
    import numpy as np

    if len(scores) <= width:
        return float(scores.mean())
    sums = np.cumsum(np.concatenate([[0.0], scores]))
    return float((sums[width:] - sums[:-width]).min() / width)


def segment_frames(frames: Frames, labels: Labels, lines: Sequence[Line],
                   duration: float) -> list[Placed]:
    """Where each of ``lines`` (all with labels) lies in the frames, with its confidence
    (module docstring); a one-line :class:`AlignmentError` when the frames are too few
    for the text."""
    joined, begins = joined_labels(lines, labels)
    tokens = ctc_align(frames.log_probs, joined, labels.blank, free_ends=True)
    if tokens is None:
        raise AlignmentError(
            f"the text is too long for the audio: its {len(joined)} labels need more output "
            f"frames than the recording's {len(frames.log_probs)} ({duration:.1f} s)")
    inside = {i for begin, line in zip(begins, lines, strict=True)
              for i in range(begin, begin + len(line.labels))}
    between = [i for i in range(len(tokens)) if i not in inside]
    scores = path_scores(frames.log_probs, tokens, labels.blank, between)
    width = max(1, round(SCORE_SECONDS / frames.seconds))
    spans = []  # each utterance's first and last frame
    for line, begin in zip(lines, begins, strict=True):
        spans.append((tokens[begin].first, tokens[begin + len(line.labels) - 1].last))
    found = []
    for index, (first, last) in enumerate(spans):
        before = spans[index - 1][1] + 1 if index else 0
        after = spans[index + 1][0] if index + 1 < len(spans) else len(scores)
        # Half way into the pause on each side, at most PAD_SECONDS from the speech.
        lo = max(first - round(PAD_SECONDS / frames.seconds), (before + first) // 2)
        hi = min(last + 1 + round(PAD_SECONDS / frames.seconds), (last + 1 + after) // 2)
        confidence = math.exp(min(0.0, lowest_mean(scores[lo:hi], width)))
        start = float(frames.times[lo])
        end = float(frames.times[hi - 1]) + frames.seconds
        speech = (float(frames.times[first]), float(frames.times[last]) + frames.seconds)
        found.append(Placed(*(min(max(t, 0.0), duration) for t in (start, end, *speech)),
                            confidence))
    return found


def segment_recording(path: Path, lines: Sequence[Line], recognizer: Recognizer,
                      min_confidence: float = DEFAULT_MIN_CONFIDENCE, name: str = "",
                      chunk_seconds: float = DEFAULT_CHUNK_SECONDS,
                      overlap_seconds: float = DEFAULT_OVERLAP_SECONDS,
                      on_window: Callable[[int, int], None] | None = None) -> Segmentation:
    """Place ``lines`` in the recording at ``path`` (any format and length, one window in memory
    at a time) and judge each by ``min_confidence``; clips are not written yet
    (:func:`write_clips`). Error messages do not repeat the path."""
    recognizer.check_ctc("asrkit segment")
    aligned = [line for line in lines if line.labels]
    if not aligned:
        raise AlignmentError("the text holds no utterance the model can spell")
    with read_windows(path, chunk_seconds, overlap_seconds) as recording:
        frames = recording_frames(recording, recognizer, on_window)
        duration = recording.total / SAMPLE_RATE
    placed = iter(segment_frames(frames, recognizer.labels, aligned, duration))
    segments = []
    for line in lines:
        where = next(placed) if line.labels else Placed(0.0, 0.0, 0.0, 0.0, 0.0)
        segment = Segment(line.number, line.text, where.start, where.end, where.confidence,
                          speech_start=where.speech_start, speech_end=where.speech_end)
        if line.problem:
            segment.dropped = line.problem
        elif where.confidence < min_confidence or where.end <= where.start:
            segment.dropped = f"{LOW} --min-confidence {min_confidence:g}"
        segments.append(segment)
    result = Segmentation(str(path), name or Path(path).stem, duration, segments,
                          min_confidence, recognizer.name, frames.windows)
    check_segmentation(result, lines)
    return result


def check_segmentation(result: Segmentation, lines: Sequence[Line]) -> None:
    """One warning per line that cannot be cut; a one-line :class:`AlignmentError` when the text
    does not match the audio (no utterance above the threshold); warnings for many utterances
    below it and for audio the text does not cover."""
    for line in lines:
        if line.problem:
            result.warnings.append(f"{line.where}: {line.problem}; it is not cut")
    scored = [s for s, line in zip(result.segments, lines, strict=True)
              if line.labels and not line.problem]
    low = [s for s in scored if s.confidence < result.min_confidence]
    if scored and len(low) == len(scored):
        median = statistics.median(s.confidence for s in scored)
        threshold = f"--min-confidence {result.min_confidence:g}"
        said = (f"its one utterance scores {median:.3f}, below {threshold}" if len(scored) == 1
                else f"all {len(scored)} utterances score below {threshold} (median "
                     f"{median:.3f})")
        raise AlignmentError(f"the text does not match the audio: {said}")
    if len(low) * 2 > len(scored):
        result.warnings.append(
            f"{len(low)} of {len(scored)} utterances score below --min-confidence "
            f"{result.min_confidence:g}: the text may not match the audio in many places")
    long = [s for s in result.kept if s.end - s.start > DEFAULT_MAX_SECONDS]
    if long:
        result.warnings.append(
            f"{len(long)} clip(s) are longer than {DEFAULT_MAX_SECONDS:g} s (the first: number "
            f"{long[0].number}, {long[0].end - long[0].start:.1f} s), which `asrkit import` "
            "skips unless --max-duration is raised: split those lines")
    covered = sorted((s.start, s.end) for s, line in zip(result.segments, lines, strict=True)
                     if line.labels)
    edges = [0.0, *(t for pair in covered for t in pair), result.duration]
    gaps = [b - a for a, b in zip(edges[::2], edges[1::2], strict=True)]
    uncovered = sum(g for g in gaps if g >= LONG_GAP_SECONDS)
    if uncovered > result.duration / 2:
        result.warnings.append(
            f"{uncovered:.1f} s of the {result.duration:.1f} s recording lie outside every "
            "utterance: the audio holds far more than the text; that audio is skipped")


# -- the output folder --------------------------------------------------------------------------


def inputs_key(path: Path, lines: Sequence[Line], model: str, min_confidence: float,
               chunk_seconds: float, overlap_seconds: float) -> str:
    """What a recording's segmentation depends on, hashed: a rerun with the same key reuses it."""
    status = path.stat()
    described = json.dumps([str(path.resolve()), status.st_size, status.st_mtime_ns,
                            [(line.text, line.labels) for line in lines], model,
                            min_confidence, chunk_seconds, overlap_seconds])
    return hashlib.sha256(described.encode()).hexdigest()[:20]


def reusable(out: Path, name: str, key: str) -> Segmentation | None:
    """The segmentation of ``name`` already in ``out`` with the same inputs, if any."""
    try:
        saved = json.loads((out / name / LISTING).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(saved, dict) or saved.get("key") != key:
        return None
    try:
        segments = [Segment(**s) for s in saved["segments"]]
        return Segmentation(saved["file"], name, saved["duration"], segments,
                            saved["min_confidence"], saved["model"], saved["windows"],
                            saved["warnings"], reused=True)
    except (KeyError, TypeError):  # written by another version: done again
        return None


def write_clips(result: Segmentation, out: Path, key: str,
                chunk_seconds: float = DEFAULT_CHUNK_SECONDS,
                overlap_seconds: float = DEFAULT_OVERLAP_SECONDS) -> None:
    """Cut the kept utterances from the recording (read again, a window at a time) into
    ``out/NAME`` with their transcripts and listing, through a hidden partial folder renamed
    into place when whole (module docstring); then rewrite the top-level listing."""
    import numpy as np

    name = result.name
    partial, final = out / f".{name}.partial", out / name
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    wanted = sorted((s for s in result.segments if not s.dropped), key=lambda s: s.start)
    for segment in wanted:
        segment.clip = f"{name}/{name}-{segment.number:04d}.wav"
    written: list[Path] = []
    pending = list(wanted)
    buffer, buffer_start = np.zeros(0, np.int16), 0
    with read_windows(Path(result.path), chunk_seconds, overlap_seconds) as recording:
        for window, piece in recording.pieces:
            core = piece[window.core_start - window.start:window.core_end - window.start]
            if not len(buffer):
                buffer_start = window.core_start
            buffer = np.concatenate([buffer, core.astype(np.int16)])
            end_of_buffer = buffer_start + len(buffer)
            while pending and (round(pending[0].end * SAMPLE_RATE) <= end_of_buffer
                               or end_of_buffer >= recording.total):
                segment = pending.pop(0)
                lo = round(segment.start * SAMPLE_RATE) - buffer_start
                hi = round(segment.end * SAMPLE_RATE) - buffer_start
                written += _write_clip(partial, segment, buffer[max(0, lo):max(0, hi)])
            keep_from = (round(pending[0].start * SAMPLE_RATE) - buffer_start if pending
                         else len(buffer))
            if keep_from > 0:
                buffer, buffer_start = buffer[keep_from:], buffer_start + keep_from
    sync_files(written)
    listing = {"key": key, **result.to_json()}
    write_durable(partial / LISTING, json.dumps(listing, indent=1) + "\n")
    sync_to_disk(partial)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(partial, final)
    sync_to_disk(out)
    write_listing(out)


def _write_clip(folder: Path, segment: Segment, samples: np.ndarray) -> list[Path]:
    stem = folder / Path(segment.clip).stem
    audio, text = stem.with_suffix(".wav"), stem.with_suffix(".txt")
    audio.write_bytes(wav_bytes(samples))
    text.write_text(segment.text + "\n", encoding="utf-8")
    return [audio, text]


def write_listing(out: Path) -> None:
    """``out/segments.json``: every recording's listing in the folder, by name."""
    recordings = []
    for listing in sorted(out.glob(f"*/{LISTING}")):
        try:
            saved = json.loads(listing.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        saved.pop("key", None)
        recordings.append(saved)
    write_atomic(out / LISTING, json.dumps({"recordings": recordings}, indent=1) + "\n")
