"""``asrkit average RUN --last N``: a run's last checkpoints averaged
(:mod:`asrkit.evaluation.average`)."""

from __future__ import annotations

from pathlib import Path

import click

from asrkit.commands.options import LocationType
from asrkit.evaluation.average import average_run


@click.command("average")
@click.argument("run", type=LocationType(exists=True))
@click.option("--last", type=click.IntRange(min=1), required=True,
              help="How many of the run's newest kept checkpoints to average.")
def average_command(run: Path, last: int) -> None:
    """Average the weights of a run's last N checkpoints into its `averaged` checkpoint.

    The run must keep them: train with -o keep_checkpoints=N. Then use it with
    `asrkit evaluate RUN --checkpoint averaged` (also transcribe and export).
    """
    from asrkit.core.locks import folder_lock

    with folder_lock(run, "averaging", "wait for the training to end"):
        state = average_run(run, last)
    steps = ", ".join(map(str, state["averaged_steps"]))
    click.echo(f"averaged the checkpoints of steps {steps} into "
               f"{run / 'checkpoints' / 'averaged.json'}")
