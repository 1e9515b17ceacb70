"""``asrkit describe DATASET|RUN``: what a dataset or a run holds
(:mod:`asrkit.evaluation.describe`)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from asrkit.core.storage import location


def is_run(target: str) -> bool:
    return (location(target) / "config.json").is_file()


@click.command("describe")
@click.argument("target", metavar="DATASET|RUN")
@click.option("--plots", "plots_dir", type=click.Path(file_okay=False, path_type=Path),
              default=None, help="Also write PNG plots into this folder.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for machines.")
def describe_command(target: str, plots_dir: Path | None, as_json: bool) -> None:
    """Describe an imported dataset (a name under $ASRKIT_HOME/datasets or a folder) or a run.

    A dataset: hours, utterances and speakers per split, durations, characters, what the import
    skipped. A run: its settings, progress, best dev scores, report, parameters and FLOPs.
    """
    from asrkit.dataset.folders import resolve_dataset
    from asrkit.evaluation.describe import (
        dataset_plots,
        dataset_text,
        describe_dataset,
        describe_run,
        run_plots,
        run_text,
    )

    if is_run(target):
        description, extra = describe_run(location(target))
        drawn = run_plots(description, extra, plots_dir) if plots_dir else []
        text = run_text(description)
    else:
        dataset = resolve_dataset(target)
        description, rows = describe_dataset(dataset)
        drawn = dataset_plots(description, rows, plots_dir) if plots_dir else []
        text = dataset_text(description)
    if plots_dir is not None:
        description["plots"] = [str(p) for p in drawn]
    if as_json:
        click.echo(json.dumps(description, indent=2))
        return
    click.echo(text)
    if drawn:
        click.echo(f"\nplots in {plots_dir}: {', '.join(p.name for p in drawn)}")
