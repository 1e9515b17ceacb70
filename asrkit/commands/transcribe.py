"""``asrkit transcribe``: audio files to text with a run or an export (the work is
:mod:`asrkit.serving.transcribe`'s; TensorFlow is imported only when the command runs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from asrkit.commands.options import FiniteFloat, LocationType, hotword_options
from asrkit.core.errors import AsrkitError
from asrkit.runs.run import CHECKPOINTS

if TYPE_CHECKING:
    from asrkit.config.overrides import DecoderChoice
    from asrkit.serving.transcribe import Options


@click.command("transcribe")
@click.argument("inputs", nargs=-1, type=click.Path(path_type=Path))
@click.option("--model", "-m", "model", required=True,
              type=LocationType(exists=True),
              help="A run folder (its best checkpoint) or an export of `asrkit export` "
                   "(SavedModel folder, TFLite folder or .tflite file).")
@click.option("--decoder", default=None,
              help="Registered decoder [default: the run's, else greedy].")
@click.option("--checkpoint", type=click.Choice(CHECKPOINTS), default="best",
              show_default=True, help="Which checkpoint of a run folder.")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object a line per file: text, duration, confidence, and words "
                   "with start/end seconds and confidence.")
@click.option("--chunk-seconds", type=FiniteFloat(min=1.0), default=20.0,
              show_default=True, help="Longest piece decoded at once (at most 300); longer "
                                      "recordings are cut (in pauses) and stitched.")
@click.option("--overlap-seconds", type=FiniteFloat(min=0.0), default=2.0,
              show_default=True, help="Audio added on each side of a piece, so that words at "
                                      "a cut are heard whole; keep it longer than the longest "
                                      "word (at most 30).")
@click.option("-o", "settings", multiple=True, metavar="decoder.KEY=VALUE",
              help="A decoder setting, e.g. decoder.beam_width=100 (see docs/decoders.md).")
@click.option("--stream", is_flag=True,
              help="Streaming: words as the audio comes, partial results and final ones at "
                   "pauses (a streaming run; one file, - for audio on standard input, or "
                   "--microphone). See docs/streaming.md.")
@click.option("--chunk-ms", type=FiniteFloat(min=0.0), default=None,
              help="With --stream: the model's chunk in milliseconds [default: the run's].")
@click.option("--realtime", is_flag=True,
              help="With --stream: read a file no faster than it plays, as a live source.")
@click.option("--microphone", is_flag=True,
              help="With --stream: the default microphone, until Ctrl-C (needs "
                   "`pip install 'asrkit[microphone]'`).")
@click.option("--endpoint-seconds", type=FiniteFloat(min=0.1, max=30.0), default=0.8,
              show_default=True,
              help="With --stream: seconds without a new word that end an utterance.")
@click.option("--nbest", type=click.IntRange(1, 1000), default=None, metavar="N",
              help="Also the N best hypotheses of each piece (a beam decoder's), with scores "
                   "and probabilities; numbered, or under \"nbest\" with --json. See "
                   "docs/nbest-confidence.md.")
@click.option("--no-calibration", is_flag=True,
              help="The model's own word confidences, not those of the run's calibrated "
                   "temperature (asrkit evaluate --calibrate).")
@hotword_options
@click.option("--no-progress", is_flag=True, help="No progress bars.")
def transcribe_command(inputs: tuple[Path, ...], model: Path, decoder: str | None,
                       checkpoint: str, as_json: bool, chunk_seconds: float,
                       overlap_seconds: float, settings: tuple[str, ...], stream: bool,
                       chunk_ms: float | None, realtime: bool, microphone: bool,
                       endpoint_seconds: float, nbest: int | None, no_calibration: bool,
                       hotwords: tuple[str, ...], hotword_files: tuple[Path, ...],
                       no_progress: bool) -> None:
    """Transcribe audio files, or every audio file under directories.

    Any format, sample rate and channel count sox reads (WAV, FLAC, MP3, Ogg, Opus, ...) is
    converted to 16 kHz mono on the fly, as a stream: memory holds one piece of a recording,
    not the whole of it. A file that cannot be read is reported on one line and
    the others still transcribe; the exit status is then 1.

    With --stream, a streaming run transcribes as the audio comes (a file, `-` for standard
    input, or --microphone): partial results while a sentence is heard, a final one at each
    pause; --json writes each as a JSON line.
    """
    from asrkit.config.hotwords import parse_hotwords
    from asrkit.config.overrides import parse_decoder_choice

    # the one reading of --decoder, -o and the hot words
    choice = parse_decoder_choice(decoder, settings, parse_hotwords(hotwords, hotword_files))
    if stream or microphone or chunk_ms is not None or realtime:
        if not stream:
            raise AsrkitError("--chunk-ms, --realtime and --microphone go with --stream")
        if nbest is not None:
            raise AsrkitError("--nbest lists a recording's hypotheses: not with --stream")
        _transcribe_stream(inputs, model, choice, checkpoint, as_json, chunk_ms, realtime,
                           microphone, endpoint_seconds)
        return
    if not inputs:
        raise AsrkitError("give the audio files (or directories) to transcribe")
    from asrkit.serving.transcribe import (
        Options,
        audio_files,
        check_nbest,
        check_window_seconds,
        load_recognizer,
        resolve_decoder,
        transcribe_files,
    )

    check_window_seconds(chunk_seconds, overlap_seconds)  # before any file is read or model loaded
    files = list(audio_files(inputs))
    if not files:
        raise AsrkitError("no audio files found in " + ", ".join(map(str, inputs)))
    recognizer = load_recognizer(model, checkpoint, calibrated=not no_calibration)
    chosen, warning = resolve_decoder(choice, recognizer)
    check_nbest(chosen, nbest or 0)
    for line in (warning, recognizer.calibration_warning):
        if line:
            click.echo(f"asrkit: warning: {line}", err=True)
    options = Options(chunk_seconds, overlap_seconds, progress=not no_progress,
                      nbest=nbest or 0)
    reported = 0
    for transcript in transcribe_files(files, recognizer, chosen, options):
        reported = _report_failures(options, reported)
        cut = transcript.cut_warning()
        if cut:
            _echo(f"asrkit: warning: {cut}", err=True)
        if as_json:
            _echo(json.dumps(transcript.to_json()))
        elif nbest:
            _echo("\n".join(([f"{transcript.path}:"] if len(files) > 1 else [])
                             + transcript.nbest_lines()))
        elif len(files) == 1:
            _echo(transcript.text)
        else:
            _echo(f"{transcript.path}: {transcript.text}")
    _report_failures(options, reported)
    if options.failures:
        raise AsrkitError(f"{len(options.failures)} of {len(files)} files could not be "
                          "transcribed")


def _report_failures(options: Options, reported: int) -> int:
    """Print the failures not yet printed, so they appear in file order among the transcripts;
    returns how many are printed now."""
    for failure in options.failures[reported:]:
        _echo(f"asrkit: error: {failure.path}: {failure.message}", err=True)
    return len(options.failures)


def _echo(line: str, err: bool = False) -> None:
    """Print a line with the progress bars (on stderr) cleared first and redrawn after, so the
    two never share a line."""
    from tqdm import tqdm

    with tqdm.external_write_mode():
        click.echo(line, err=err)


def _transcribe_stream(inputs: tuple[Path, ...], model: Path, choice: DecoderChoice,
                       checkpoint: str, as_json: bool, chunk_ms: float | None, realtime: bool,
                       microphone: bool, endpoint_seconds: float) -> None:
    """``--stream``: one source's updates as they come; on a terminal, the partial transcript
    on the last line, rewritten as it changes, and each final one on a line of its own."""
    import sys
    from contextlib import ExitStack

    from asrkit.serving.stream import Endpoints, StreamTranscriber, load_streaming_model
    from asrkit.serving.stream import transcribe_stream as updates_of
    from asrkit.serving.stream_sources import (
        file_blocks,
        microphone_blocks,
        paced,
        stdin_blocks,
    )

    if microphone and inputs:
        raise AsrkitError("--microphone is the source: give no files with it")
    if not microphone and len(inputs) != 1:
        raise AsrkitError("--stream transcribes one source: a file, - for standard input, or "
                          "--microphone")
    if realtime and (microphone or str(inputs[0]) == "-"):
        raise AsrkitError("--realtime paces a file; standard input and the microphone come "
                          "at their own pace")
    streaming = load_streaming_model(model, checkpoint, chunk_ms)
    chosen, warning = streaming.choose_decoder(choice)
    if warning:
        click.echo(f"asrkit: warning: {warning}", err=True)
    transcriber = StreamTranscriber(streaming, chosen, Endpoints(endpoint_seconds))
    live = sys.stdout.isatty() and not as_json
    with ExitStack() as stack:
        if microphone:
            blocks = microphone_blocks()
        elif str(inputs[0]) == "-":
            blocks = stdin_blocks()
        else:
            blocks = stack.enter_context(file_blocks(inputs[0]))
            if realtime:
                blocks = paced(blocks)
        for update in updates_of(blocks, transcriber):
            if as_json:
                click.echo(update.json_line())
            elif update.kind == "final":
                click.echo(("\r\x1b[K" if live else "") + update.text)
            elif live:
                click.echo("\r\x1b[K" + update.text, nl=False)
            sys.stdout.flush()
    if transcriber.interrupted:
        click.echo(f"asrkit: stopped after {transcriber.heard:.1f} s of audio; what was heard "
                   "is above", err=True)
