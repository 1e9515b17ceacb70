"""``asrkit align``: CTC forced alignment of a known transcript to a recording of any length,
as JSON, CTM or a Praat TextGrid (the work is :mod:`asrkit.serving.align`'s; TensorFlow is
imported only when the command runs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from asrkit.commands.options import FiniteFloat
from asrkit.core.errors import AsrkitError
from asrkit.runs.run import CHECKPOINTS

if TYPE_CHECKING:
    from asrkit.serving.align import Alignment, Failure, Pair
    from asrkit.serving.transcribe import Recognizer

FORMATS = ("json", "ctm", "textgrid")


@click.command("align")
@click.argument("audio", required=False, type=click.Path(path_type=Path))
@click.argument("transcript", required=False, type=click.Path(exists=True, dir_okay=False,
                                                              path_type=Path))
@click.option("--model", "-m", "model", required=True,
              type=click.Path(exists=True, path_type=Path),
              help="A CTC run folder (its best checkpoint) or a CTC export of `asrkit export`.")
@click.option("--text", default=None, help="The transcript itself, instead of a TRANSCRIPT file.")
@click.option("--list", "listing", default=None,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A TSV of AUDIO<TAB>TRANSCRIPT-TEXT lines (audio paths relative to it), "
                   "instead of AUDIO and TRANSCRIPT.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="json", show_default=True,
              help="json: words and characters with start, end and score; ctm: one line a word "
                   "(`NAME 1 START DURATION WORD SCORE`); textgrid: a Praat TextGrid with "
                   "interval tiers `words` and `chars`.")
@click.option("--output", "output", default=None, type=click.Path(path_type=Path),
              help="Write here instead of stdout (with --list and --format textgrid: a folder, "
                   "one NAME.TextGrid per recording).")
@click.option("--checkpoint", type=click.Choice(CHECKPOINTS), default="best",
              show_default=True, help="Which checkpoint of a run folder.")
@click.option("--min-score", type=FiniteFloat(min=0.0, max=1.0), default=0.2, show_default=True,
              help="Refuse a recording whose words score less on average (the text does not "
                   "match the audio); 0 accepts anything.")
@click.option("--chunk-seconds", type=FiniteFloat(min=1.0), default=20.0, show_default=True,
              help="Longest piece the model hears at once (at most 300); the text is aligned "
                   "across all pieces in one pass.")
@click.option("--overlap-seconds", type=FiniteFloat(min=0.0), default=2.0, show_default=True,
              help="Context added on each side of a piece (at most 30).")
def align_command(audio: Path | None, transcript: Path | None, model: Path, text: str | None,
                  listing: Path | None, fmt: str, output: Path | None, checkpoint: str,
                  min_score: float, chunk_seconds: float, overlap_seconds: float) -> None:
    """Align a known transcript to its recording: start and end times, with a score, of every
    word and character.

    AUDIO is any format and length sox reads, read a piece at a time; TRANSCRIPT a text file
    (or --text). The text is normalised as training transcripts are; characters the model
    cannot spell, text that does not match the audio, or audio far longer than the text are
    reported on one line each. With --list, a recording that cannot be aligned is reported and
    the others are still aligned; the exit status is then 1.
    """
    from asrkit.serving.transcribe import check_window_seconds, load_recognizer

    check_window_seconds(chunk_seconds, overlap_seconds)  # before anything is read or loaded
    pairs = _pairs(audio, transcript, text, listing)
    if listing is not None and fmt == "textgrid" and output is None:
        raise AsrkitError("--list with --format textgrid writes one TextGrid per recording: "
                          "give --output FOLDER")
    recognizer = load_recognizer(model, checkpoint)
    recognizer.check_ctc("asrkit align")
    if listing is None:
        _align_one(pairs[0], recognizer, fmt, output, min_score, chunk_seconds, overlap_seconds)
    else:
        _align_list(pairs, recognizer, fmt, output, min_score, chunk_seconds, overlap_seconds)


def _pairs(audio: Path | None, transcript: Path | None, text: str | None,
           listing: Path | None) -> list[Pair]:
    """What to align, from exactly one of: AUDIO TRANSCRIPT, AUDIO --text, --list."""
    from asrkit.core.text import decode_text
    from asrkit.serving.align import Pair, read_pairs

    if listing is not None:
        if audio is not None or text is not None:
            raise click.UsageError("--list takes no AUDIO, TRANSCRIPT or --text")
        return read_pairs(listing)
    if audio is None:
        raise click.UsageError("give AUDIO and TRANSCRIPT, AUDIO and --text, or --list")
    if (transcript is None) == (text is None):
        raise click.UsageError("give the transcript as a TRANSCRIPT file or as --text, once")
    if transcript is not None:
        text = decode_text(transcript.read_bytes(), transcript.name)
    assert text is not None
    return [Pair(audio, text)]


def _align_one(pair: Pair, recognizer: Recognizer, fmt: str, output: Path | None,
               min_score: float, chunk_seconds: float, overlap_seconds: float) -> None:
    from asrkit.serving.align import align_file
    try:
        alignment = align_file(pair.audio, pair.text, recognizer, chunk_seconds,
                               overlap_seconds, min_score)
    except AsrkitError as error:
        raise AsrkitError(f"{pair.audio}: {error}") from None
    _warn(alignment)
    _write(_render(fmt, [alignment]), output)


def _align_list(pairs: list[Pair], recognizer: Recognizer, fmt: str, output: Path | None,
                min_score: float, chunk_seconds: float, overlap_seconds: float) -> None:
    from asrkit.core.files import write_atomic
    from asrkit.serving.align import align_pairs
    failures: list[Failure] = []
    done: list[Alignment] = []
    reported = 0
    for alignment in align_pairs(pairs, recognizer, failures, chunk_seconds, overlap_seconds,
                                 min_score):
        reported = _report(failures, reported)
        _warn(alignment)
        if fmt == "textgrid":
            assert output is not None
            output.mkdir(parents=True, exist_ok=True)
            write_atomic(output / f"{alignment.name}.TextGrid", _render(fmt, [alignment]))
        done.append(alignment)
    _report(failures, reported)
    if fmt != "textgrid":
        _write(_render(fmt, done), output)
    if failures:
        raise AsrkitError(f"{len(failures)} of {len(pairs)} recordings could not be aligned")


def _render(fmt: str, alignments: list[Alignment]) -> str:
    from asrkit.serving.alignment_formats import ctm, textgrid

    if fmt == "json":
        if len(alignments) == 1:
            return json.dumps(alignments[0].to_json(), indent=1) + "\n"
        return "".join(json.dumps(a.to_json()) + "\n" for a in alignments)
    if fmt == "ctm":
        return "".join(ctm(a) for a in alignments)
    return textgrid(alignments[0])


def _write(text: str, output: Path | None) -> None:
    if output is None:
        click.echo(text, nl=False)
        return
    from asrkit.core.files import write_atomic

    write_atomic(output, text)


def _warn(alignment: Alignment) -> None:
    for warning in alignment.warnings:
        click.echo(f"asrkit: warning: {alignment.path}: {warning}", err=True)


def _report(failures: list[Failure], reported: int) -> int:
    """Print the failures not yet printed, in list order; returns how many are printed now."""
    for failure in failures[reported:]:
        click.echo(f"asrkit: error: {failure.path}: {failure.message}", err=True)
    return len(failures)
