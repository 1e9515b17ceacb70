"""``asrkit train``: train a model on an imported dataset (the work is :mod:`asrkit.train`'s)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from asrkit.commands.options import LocationType
from asrkit.config.train import PRECISIONS
from asrkit.core.storage import Location

if TYPE_CHECKING:
    from asrkit.runs.run import Run
    from asrkit.train.state import LoopState


@click.command("train")
@click.option("--model", "-m", default=None, help="Registered model name [default: brnn].")
@click.option("--dataset", "-d", default=None,
              help="Imported dataset: a name under $ASRKIT_HOME/datasets or a folder "
                   "[default: sample].")
@click.option("--epochs", type=int, default=None, help="Epochs [default: 10].")
@click.option("--batch-size", type=int, default=None,
              help="Utterances per batch per device [default: 16].")
@click.option("--learning-rate", type=float, default=None, help="Adam's [default: 0.001].")
@click.option("--devices", default=None,
              help="Devices as towers: every GPU by default (the CPU if none), 'cpu', or GPU "
                   "indices '0,1'.")
@click.option("--precision", type=click.Choice(PRECISIONS), default=None,
              help="float32, 16-bit products (mixed_float16 for GPUs, mixed_bfloat16 for CPUs "
                   "with AMX or AVX512-BF16), or auto: bfloat16 where the CPU has it in hardware "
                   "[default: auto].")
@click.option("--seed", type=int, default=None, help="Seed of data order and initialisation.")
@click.option("--run-dir", type=LocationType(), default=None,
              help="Run folder, or a URL (gs://bucket/runs/x) [default: runs/<model>-<n>].")
@click.option("--resume", "resume", type=LocationType(exists=True), default=None,
              help="Continue a run from its latest checkpoint; -o may change train settings "
                   "(e.g. batch_size, epochs), other options are ignored.")
@click.option("--init-from", "init_from", default=None, metavar="RUN[:best|:latest]",
              help="Fine-tune: start from another run's weights (its best checkpoint, else "
                   "its latest) and its model settings, on this --dataset; another alphabet "
                   "starts the output layer afresh. -o freeze=LAYER,... keeps layers fixed.")
@click.option("-o", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Set any setting: epochs=5, model.n_hidden=100, features.normalize=feature, "
                   "pipeline.num_buckets=8, decoder=beam, decoder.beam_width=50, "
                   "objective=NAME, objective.KEY=VALUE (see "
                   "docs/training.md; `asrkit plugins --settings NAME` lists them).")
@click.option("--workers", default=None, metavar="HOST:PORT,...",
              help="Train on several machines: every worker's address, the same list on each "
                   "(TensorFlow's MultiWorkerMirroredStrategy; an existing TF_CONFIG also works).")
@click.option("--worker-index", type=int, default=None,
              help="This machine's position in --workers (0 is the chief, which writes).")
@click.option("--no-progress", is_flag=True, help="No progress bars.")
def train_command(model: str | None, dataset: str | None, epochs: int | None,
                  batch_size: int | None, learning_rate: float | None, devices: str | None,
                  precision: str | None, seed: int | None, run_dir: Location | None,
                  resume: Location | None, init_from: str | None, overrides: tuple[str, ...],
                  workers: str | None, worker_index: int | None, no_progress: bool) -> None:
    """Train a model on an imported dataset (CTC, or -o objective=NAME; every GPU as a tower,
    else the CPU).

    A killed run continues exactly where it stopped with `asrkit train --resume RUN`, or by
    running the same command again: without --run-dir, it continues the newest unfinished
    runs/<model>-<n> saved with the same settings (a new folder when there is none).
    """
    import contextlib

    from asrkit.config.overrides import parse_overrides
    from asrkit.config.run import build_run_config, step_cap
    from asrkit.core.errors import AsrkitError
    from asrkit.core.locks import folder_lock
    from asrkit.runs.run import load_run, new_run, resume_run, same_run
    from asrkit.train.strategy import is_chief, set_cluster

    if (workers is None) != (worker_index is None):
        raise AsrkitError("--workers and --worker-index go together")
    if workers is not None:
        set_cluster(workers, worker_index or 0)
    if resume and init_from:
        raise AsrkitError("--init-from starts a new run, --resume continues one: not both")
    settings = parse_overrides(overrides)  # the one reading of -o
    settings, capped = step_cap(settings)  # ASRKIT_MAX_STEPS: as if -o max_steps=N were given
    if capped:
        click.echo(capped, err=True)
    if resume:
        folder = resume
    else:
        if init_from:  # the source's model, feature and objective settings, unless -o says so
            from asrkit.train.finetune import parse_init_from, prepare, source_settings

            source = parse_init_from(init_from)
            source_run = load_run(source.folder)
            if model is not None and model != source_run.train.model:
                raise AsrkitError(f"--init-from {source.folder} is a {source_run.train.model} "
                                  f"run, not {model}: the model must be the same")
            model = source_run.train.model
            settings = source_settings(source_run, settings) + settings
        named: dict[str, Any] = {
            "model": model, "dataset": dataset, "epochs": epochs, "batch_size": batch_size,
            "learning_rate": learning_rate, "devices": devices, "seed": seed,
            "precision": precision,
        }
        config, preset_note = build_run_config(
            {k: v for k, v in named.items() if v is not None}, settings)
        run = new_run(config, run_dir, preset_note)
        if init_from:
            try:
                run, note = prepare(run, source_run, source)
            except AsrkitError:
                if run_dir is None and isinstance(run.folder, Path):  # new_run just made it
                    with contextlib.suppress(OSError):
                        run.folder.rmdir()
                raise
            if note:
                click.echo(note)
        elif run.train.init_from or run.train.init_reset:
            raise AsrkitError("start from another run's weights with --init-from RUN")
        folder = run.folder
    # Only the chief writes into the run folder (every worker is given the same --run-dir), so
    # only the chief holds its lock, for the whole training.
    lock = (folder_lock(folder, "training", "wait for it to end, or use another --run-dir")
            if is_chief() else contextlib.nullcontext())
    with lock:
        if resume:
            run = load_run(resume)
            if settings.settings:
                run = resume_run(run, settings)
                if is_chief():
                    run.save()
        elif (run.folder / "config.json").exists():
            run = same_run(run)
            click.echo(f"continuing the run in {run.folder} (the same settings"
                       + ("; --run-dir starts another)" if run_dir is None else ")"))
        click.echo(f"run: {run.folder}")
        if run.preset_note:
            click.echo(run.preset_note)
        if run.tokenizer_file is not None:
            tokenizer = run.tokenizer_file
            click.echo(f"labels: {tokenizer.labels.size} symbols of tokenizer "
                       f"{tokenizer.tokenizer} ({tokenizer.path})")
        state = _fit(run, progress=not no_progress)
    click.echo(f"finished after {state.global_step} steps ({state.stop_reason}); "
               f"report: {run.folder / 'report.txt'}")


def _fit(run: Run, progress: bool) -> LoopState:
    """Train ``run`` to its end; a damaged dataset shard is a one-line error naming it."""
    import tensorflow as tf

    from asrkit.dataset.shards import damaged_dataset_error
    from asrkit.train.engine import Trainer

    try:
        trainer = Trainer(run, progress=progress)
        if trainer.chief:
            click.echo(f"precision: {trainer.precision} ({trainer.precision_note})")
        return trainer.fit()
    except tf.errors.DataLossError:
        error = damaged_dataset_error(run.dataset, f"continue with --resume {run.folder}")
        if error is None:
            raise
        raise error from None
