"""``asrkit export``: a run as a SavedModel, TFLite or ONNX model that takes raw PCM, or as a
sherpa-onnx model (the work is :mod:`asrkit.serving.export`'s)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from asrkit.commands.options import FiniteFloat, LocationType
from asrkit.runs.run import CHECKPOINTS

#: ``--quantize``'s choices (:data:`asrkit.serving.quantize.MODES`, which imports nothing heavy
#: but is kept out of ``asrkit --help``'s start-up like every command's machinery).
QUANTIZE_MODES = ("none", "int8", "float16", "full")


@click.command("export")
@click.argument("run", type=LocationType(exists=True, file_okay=False))
@click.option("--format", "fmt",
              type=click.Choice(["savedmodel", "tflite", "onnx", "sherpa-onnx"]),
              default="savedmodel", show_default=True,
              help="sherpa-onnx: model.onnx (a CTC run's; a transducer's encoder, decoder "
                   "and joiner) and tokens.txt for k2-fsa's sherpa-onnx, for runs trained on -o "
                   "features.kaldi=true (docs/sherpa-onnx.md).")
@click.option("--output", "-o", type=LocationType(), default=None,
              help="Folder to write [default: RUN/export/FORMAT].")
@click.option("--checkpoint", type=click.Choice(CHECKPOINTS), default="best",
              show_default=True)
@click.option("--quantize", "quantization", type=click.Choice(QUANTIZE_MODES), default="none",
              show_default=True,
              help="TFLite only: int8 (int8 weights), float16 (float16 weights) or full (int8 "
                   "weights and activations, calibrated on the run's training split).")
@click.option("--force", is_flag=True,
              help="Replace an earlier export (only a folder asrkit wrote, holding nothing else).")
@click.option("--chunk-ms", type=FiniteFloat(min=0.0), default=None,
              help="A streaming run: the chunk of its `stream_step` and of its whole-utterance "
                   "signatures, in milliseconds [default: the run's].")
@click.option("--json", "as_json", is_flag=True, help="Print the export's asrkit.json.")
def export_command(run: Path, fmt: str, output: Path | None, checkpoint: str,
                   quantization: str, force: bool, chunk_ms: float | None,
                   as_json: bool) -> None:
    """Export a trained run as a model that takes raw 16 kHz PCM (features inside).

    Signatures `logits` and `transcribe` (greedy text), for float32 PCM in [-1, 1] and, as
    `*_int16`, for int16 PCM; a transducer run's: `encode` and `transcribe` (its greedy search,
    each label with its frame), as SavedModel or TFLite; an attention run's: `encode`,
    `transcribe` (its decoder's greedy search) and the decoder's steps (`initial_state`,
    `decode_step`, `ctc_log_probs`), which asrkit's attention decoders call, as SavedModel.
    The export is checked against the checkpoint before it is written. A streaming CTC run
    also gets `stream_step`: a block of audio and the state in, a chunk's logits and the new
    state out (docs/streaming.md).

    `--quantize` makes a smaller TFLite model: its outputs are then compared with the
    checkpoint's, not required to match them (the difference and the greedy transcripts'
    character error rate are recorded in asrkit.json).
    """
    from asrkit.serving.export import export_run

    meta = export_run(run, fmt, output, checkpoint, force, quantization, chunk_ms)
    if quantization == "full":  # integer with float fallback: say what stayed float
        kinds = meta["quantization"]["float32_arithmetic"]
        click.echo(f"asrkit: warning: --quantize full kept {sum(kinds.values())} arithmetic "
                   "operations in float32 (the feature front end, and those without int8 "
                   f"kernels): {', '.join(sorted(kinds))}; see \"quantization\" in asrkit.json",
                   err=True)
    if as_json:
        click.echo(json.dumps(meta, indent=2))
        return
    what = ("encoder frames" if meta.get("objective") in ("transducer", "attention")
            else "log-probabilities (of the same Kaldi fbank)" if fmt == "sherpa-onnx"
            else "logits")
    if quantization != "none":
        click.echo(f"exported {meta['model']} (step {meta['global_step']}) as {fmt} "
                   f"({quantization}) to {meta['path']}; {what} within "
                   f"{meta['verified_max_abs_diff']:.2g} of the checkpoint's, greedy "
                   f"transcripts {100 * meta['verified_transcript_cer']:.1f}% CER apart on "
                   f"{', '.join(meta['verified_on'])}")
        return
    click.echo(f"exported {meta['model']} (step {meta['global_step']}) as {fmt} to "
               f"{meta['path']}; {what} match the checkpoint within "
               f"{meta['verified_max_abs_diff']:.1e}")
