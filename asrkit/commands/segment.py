"""``asrkit segment``: long recordings with their whole text cut into utterances by CTC
segmentation, written as a folder corpus that ``asrkit import folder`` reads (the work is
:mod:`asrkit.serving.segment`'s; TensorFlow is imported only when the command runs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from asrkit.commands.options import FiniteFloat
from asrkit.core.errors import AsrkitError
from asrkit.runs.run import CHECKPOINTS

if TYPE_CHECKING:
    from asrkit.serving.segment import Segmentation
    from asrkit.serving.transcribe import Recognizer


@click.command("segment")
@click.argument("audio", required=False, type=click.Path(path_type=Path))
@click.argument("text", required=False, type=click.Path(exists=True, dir_okay=False,
                                                        path_type=Path))
@click.option("--model", "-m", "model", required=True,
              type=click.Path(exists=True, path_type=Path),
              help="A CTC run folder (its best checkpoint) or a CTC export of `asrkit export`.")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="The folder to write: NAME/NAME-0001.wav and .txt per kept utterance, "
                   "and segments.json listings; `asrkit import folder` reads it.")
@click.option("--list", "listing", default=None,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A TSV of AUDIO<TAB>TEXT-FILE lines (paths relative to it), instead of AUDIO "
                   "and TEXT.")
@click.option("--split-sentences", is_flag=True,
              help="The text is running prose: split it into sentences, one utterance each "
                   "[default: one utterance a line].")
@click.option("--min-confidence", type=FiniteFloat(min=0.0, max=1.0), default=0.02,
              show_default=True,
              help="Utterances scoring less are listed but not cut; 0 keeps every one.")
@click.option("--checkpoint", type=click.Choice(CHECKPOINTS), default="best",
              show_default=True, help="Which checkpoint of a run folder.")
@click.option("--chunk-seconds", type=FiniteFloat(min=1.0), default=20.0, show_default=True,
              help="Longest piece the model hears at once (at most 300); the text is placed "
                   "across all pieces in one pass.")
@click.option("--overlap-seconds", type=FiniteFloat(min=0.0), default=2.0, show_default=True,
              help="Context added on each side of a piece (at most 30).")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object a recording: every utterance with start, end, confidence "
                   "and its clip or why it was dropped.")
@click.option("--no-progress", is_flag=True, help="No progress bars.")
def segment_command(audio: Path | None, text: Path | None, model: Path, out: Path,
                    listing: Path | None, split_sentences: bool, min_confidence: float,
                    checkpoint: str, chunk_seconds: float, overlap_seconds: float,
                    as_json: bool, no_progress: bool) -> None:
    """Cut long recordings into utterances of their text (CTC segmentation), as training data.

    AUDIO is any format and length sox reads (an audiobook chapter, a talk), read a piece at a
    time; TEXT its whole text, one utterance a line (or --split-sentences). Each utterance gets
    a start, an end and a confidence; those above --min-confidence are cut into OUT as 16 kHz
    WAV clips with their transcripts. Rerunning continues where a killed run stopped. Lines the
    model cannot spell, text that does not match the audio and audio far longer than the text
    are reported on one line each; with --list, a recording that fails is reported, the others
    are still cut, and the exit status is 1.
    """
    from asrkit.serving.transcribe import check_window_seconds, load_recognizer

    check_window_seconds(chunk_seconds, overlap_seconds)  # before anything is read or loaded
    pairs = _pairs(audio, text, listing)
    names = {}
    for recording, _ in pairs:
        other = names.setdefault(recording.stem, recording)
        if other != recording:
            raise AsrkitError(f"{other} and {recording} would both be cut into {out}/"
                              f"{recording.stem}: rename one")
    recognizer = load_recognizer(model, checkpoint)
    recognizer.check_ctc("asrkit segment")
    model_id = f"{model.resolve()}:{checkpoint}"
    failures = 0
    for recording, text_file in pairs:
        try:
            result = _segment_one(recording, text_file, recognizer, model_id, out,
                                  split_sentences, min_confidence, chunk_seconds,
                                  overlap_seconds, progress=not no_progress)
        except AsrkitError as error:
            if listing is None:
                raise AsrkitError(f"{recording}: {error}") from None
            failures += 1
            _echo(f"asrkit: error: {recording}: {' '.join(str(error).split())}", err=True)
            continue
        for warning in result.warnings:
            _echo(f"asrkit: warning: {recording}: {warning}", err=True)
        if as_json:
            _echo(json.dumps(result.to_json()))
        else:
            again = " (already done)" if result.reused else ""
            _echo(f"{recording}: {result.summary()} -> {out / result.name}{again}")
    if failures:
        raise AsrkitError(f"{failures} of {len(pairs)} recordings could not be segmented")


def _pairs(audio: Path | None, text: Path | None,
           listing: Path | None) -> list[tuple[Path, Path]]:
    """What to segment, from exactly one of: AUDIO TEXT, --list."""
    from asrkit.core.text import decode_text, quote

    if listing is not None:
        if audio is not None or text is not None:
            raise click.UsageError("--list takes no AUDIO or TEXT")
        pairs = []
        lines = decode_text(listing.read_bytes(), listing.name).splitlines()
        for number, line in enumerate(lines, 1):
            if not line.strip() or line.startswith("#"):
                continue
            recording, tab, text_file = line.partition("\t")
            if not tab or not recording.strip() or not text_file.strip():
                raise AsrkitError(f"{listing}:{number}: expected AUDIO<TAB>TEXT-FILE, got "
                                  f"{quote(line)!r}")
            pairs.append((listing.parent / recording.strip(), listing.parent / text_file.strip()))
        if not pairs:
            raise AsrkitError(f"{listing} lists no recordings")
        return pairs
    if audio is None or text is None:
        raise click.UsageError("give AUDIO and TEXT, or --list")
    return [(audio, text)]


def _segment_one(recording: Path, text_file: Path, recognizer: Recognizer, model_id: str,
                 out: Path, split_sentences: bool, min_confidence: float,
                 chunk_seconds: float, overlap_seconds: float, progress: bool) -> Segmentation:
    """One recording: reused from OUT when done before with the same inputs, else segmented
    and its clips written."""
    from asrkit.core.text import decode_text
    from asrkit.serving.segment import (
        inputs_key,
        prepare_lines,
        reusable,
        segment_recording,
        split_text,
        write_clips,
    )
    from asrkit.serving.transcribe import WindowBar

    try:
        content = decode_text(text_file.read_bytes(), text_file.name)
    except OSError as error:
        raise AsrkitError(f"cannot read the text {text_file}: {error.strerror or error}") from None
    lines = prepare_lines(split_text(content, split_sentences), recognizer.labels)
    if not lines:
        raise AsrkitError(f"the text {text_file} is empty")
    if not recording.is_file():
        raise AsrkitError("no such file")
    key = inputs_key(recording, lines, model_id, min_confidence, chunk_seconds, overlap_seconds)
    done = reusable(out, recording.stem, key)
    if done is not None:
        return done
    bar = WindowBar(progress, f"segment {recording.name}")
    try:
        result = segment_recording(recording, lines, recognizer, min_confidence,
                                   recording.stem, chunk_seconds, overlap_seconds, bar.update)
    finally:
        bar.close()
    out.mkdir(parents=True, exist_ok=True)
    write_clips(result, out, key, chunk_seconds, overlap_seconds)
    return result


def _echo(line: str, err: bool = False) -> None:
    """A line printed with the progress bar cleared first and redrawn after."""
    from tqdm import tqdm

    with tqdm.external_write_mode():
        click.echo(line, err=err)
