"""``asrkit evaluate``: score a run's checkpoint on a split (:mod:`asrkit.evaluation.evaluate`),
against another run's (``--compare``, :mod:`asrkit.evaluation.compare`),
every checkpoint of a training as it is written (``--watch``, :mod:`asrkit.evaluation.watch`), or a
grid of decoder settings to choose them on dev (``--grid``,
:mod:`asrkit.evaluation.decoder_search`), or the temperature of its word confidences
(``--calibrate``, :mod:`asrkit.evaluation.calibration`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from asrkit.commands.options import FiniteFloat, LocationType, hotword_options
from asrkit.runs.run import CHECKPOINTS

if TYPE_CHECKING:
    from asrkit.evaluation.calibration import Calibrated
    from asrkit.evaluation.compare import Comparison
    from asrkit.evaluation.decoder_search import DecoderSearch
    from asrkit.runs.scoring import Evaluation


@click.command("evaluate")
@click.argument("run", type=LocationType(exists=True))
@click.option("--split", "splits", multiple=True,
              help="The split to score [default: test; with --watch, the run's dev split]; "
                   "several with --watch.")
@click.option("--decoder", default=None, help="Registered decoder [default: the run's].")
@click.option("--checkpoint", type=click.Choice(CHECKPOINTS), default="best",
              show_default=True,
              help="averaged: the one `asrkit average` wrote; best-by-METRIC: the one "
                   "`asrkit evaluate --watch` kept.")
@click.option("--json", "json_file", type=LocationType(), default=None,
              help="Also write the full results (every utterance) as JSON here ('-': stdout).")
@click.option("-o", "settings", multiple=True, metavar="decoder.KEY=VALUE",
              help="The decoder (decoder=NAME) or one of its settings, e.g. "
                   "decoder.beam_width=100 (see docs/decoders.md).")
@click.option("--watch", is_flag=True,
              help="Score every checkpoint of the training as it is written, until the "
                   "training has finished (docs/runs.md).")
@click.option("--grid", "grid", multiple=True, metavar="decoder.KEY=V1,V2,...",
              help="Score every combination of these decoder settings' values (repeatable) "
                   "and report the best, e.g. --grid decoder.alpha=0.5,1,1.5 on the dev split.")
@click.option("--best-by", type=click.Choice(["wer", "cer", "loss"]), default="wer",
              show_default=True, help="With --watch: keep the checkpoint best by this metric "
                                      "on the first split as RUN/watch/best-by-METRIC; with "
                                      "--grid: choose the settings by it (wer or cer).")
@click.option("--compare", "other", type=LocationType(exists=True), default=None,
              help="Also score this run on the split and test whether their WER and CER "
                   "differ beyond chance (paired bootstrap).")
@click.option("--chunk-ms", type=FiniteFloat(min=0.0), default=None,
              help="A streaming run: decode in chunks of this many milliseconds, as "
                   "`asrkit transcribe --stream` would (0: whole utterances) [default: the "
                   "run's].")
@click.option("--calibrate", is_flag=True,
              help="Fit the temperature of the word confidences on the split (dev: give "
                   "--split dev) and save it in the run, for transcribe and evaluate to use.")
@click.option("--no-calibration", is_flag=True,
              help="Report the model's own word confidences, not the run's calibrated ones.")
@hotword_options
@click.option("--no-progress", is_flag=True, help="No progress bars.")
def evaluate_command(run: Path, splits: tuple[str, ...], decoder: str | None, checkpoint: str,
                     json_file: Path | None, settings: tuple[str, ...], watch: bool,
                     grid: tuple[str, ...], best_by: str, other: Path | None,
                     chunk_ms: float | None, calibrate: bool, no_calibration: bool,
                     hotwords: tuple[str, ...], hotword_files: tuple[Path, ...],
                     no_progress: bool) -> None:
    """Corpus WER and CER of a trained run on a split, with best, median and worst samples,
    and the calibration error of its word confidences."""
    from asrkit.config.hotwords import parse_hotwords
    from asrkit.config.overrides import parse_decoder_choice
    from asrkit.core.errors import AsrkitError
    from asrkit.evaluation.evaluate import evaluate_run

    # the one reading of --decoder, -o and the hot words
    choice = parse_decoder_choice(decoder, settings, parse_hotwords(hotwords, hotword_files))
    if watch and grid:
        raise AsrkitError("--watch scores checkpoints with one decoder; --grid searches "
                          "decoder settings on one checkpoint: give one of them")
    if other is not None and (watch or grid):
        raise AsrkitError("--compare scores two runs' checkpoints once: not with --watch or "
                          "--grid")
    if chunk_ms is not None and (watch or grid or other is not None):
        raise AsrkitError("--chunk-ms scores one run's checkpoint: not with --watch, --grid "
                          "or --compare")
    if calibrate:
        from asrkit.evaluation.calibration import calibrate_run

        _check_calibrate(splits, watch or bool(grid) or other is not None, chunk_ms,
                         no_calibration)
        _show(calibrate_run(run, splits[0], choice, checkpoint, progress=not no_progress),
              json_file)
        return
    if watch:
        from asrkit.evaluation.watch import watch_run

        if json_file is not None:
            raise AsrkitError("--watch writes RUN/evaluations.jsonl; --json is for one checkpoint")
        watch_run(run, splits, choice, best_by, not no_progress, click.echo)
        return
    if len(splits) > 1:
        raise AsrkitError("one --split at a time, or several with --watch")
    split = splits[0] if splits else "test"
    if grid:
        from asrkit.evaluation.decoder_search import parse_grid, search_decoder

        search = search_decoder(run, split, parse_grid(grid), choice, checkpoint, best_by,
                                progress=not no_progress)
        _show(search, json_file)
        return
    evaluation = evaluate_run(run, split, choice, checkpoint, progress=not no_progress,
                              chunk_ms=chunk_ms, calibrated=not no_calibration)
    if other is not None:
        from asrkit.evaluation.compare import compare

        second = evaluate_run(other, split, choice, checkpoint, progress=not no_progress)
        _show(compare((str(run), str(other)), evaluation, second), json_file)
        return
    _show(evaluation, json_file)


def _check_calibrate(splits: tuple[str, ...], other_mode: bool, chunk_ms: float | None,
                     no_calibration: bool) -> None:
    """--calibrate fits on one held-out split the user names, with nothing else to do."""
    from asrkit.core.errors import AsrkitError

    if len(splits) != 1:
        raise AsrkitError("--calibrate fits the temperature on one held-out split: give it, "
                          "--split dev (never the split you report results on)")
    if other_mode or chunk_ms is not None or no_calibration:
        raise AsrkitError("--calibrate scores one run's checkpoint on one split: not with "
                          "--watch, --grid, --compare, --chunk-ms or --no-calibration")


def _show(result: Evaluation | DecoderSearch | Comparison | Calibrated,
          json_file: Path | None) -> None:
    """Print ``result``'s text, and write its JSON to ``json_file`` (``-``: print only it)."""
    if json_file is not None and str(json_file) == "-":
        click.echo(json.dumps(result.to_json(), indent=2))
        return
    click.echo(result.text())
    if json_file is not None:
        json_file.write_text(json.dumps(result.to_json(), indent=2) + "\n")
