"""``asrkit tokenizer build``: a tokenizer (subword vocabulary) learnt from a dataset's
transcripts, for ``asrkit train -o tokenizer=FILE`` (:mod:`asrkit.tokenizers`)."""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.group("tokenizer")
def tokenizer_group() -> None:
    """Tokenizers: the labels a model is trained on (characters or subword pieces)."""


@tokenizer_group.command("build")
@click.option("--dataset", required=True, metavar="NAME|FOLDER",
              help="An imported dataset: its transcripts are what the tokenizer learns from.")
@click.option("--split", default="train", show_default=True, help="The split to learn from.")
@click.option("--tokenizer", "name", default="sentencepiece", show_default=True,
              help="Which installed tokenizer (asrkit plugins lists them).")
@click.option("--vocab-size", type=click.IntRange(min=1), default=None,
              help="Symbols to learn (the setting vocab_size) [default: the tokenizer's].")
@click.option("-s", "--setting", "settings", multiple=True, metavar="KEY=VALUE",
              help="Any other build setting (asrkit plugins --settings NAME lists them).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The file to write [default: DATASET-TOKENIZER-VOCAB.SUFFIX here].")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def build_command(dataset: str, split: str, name: str, vocab_size: int | None,
                  settings: tuple[str, ...], output: Path | None, as_json: bool) -> None:
    """Learn a tokenizer from a dataset's transcripts and write it to a file.

    \b
    asrkit tokenizer build --dataset librispeech --vocab-size 256 -o tok.model
    asrkit train --model conformer --dataset librispeech -o tokenizer=tok.model
    """
    from asrkit.config.overrides import split_pair
    from asrkit.tokenizers import build_tokenizer

    pairs = [split_pair(pair) for pair in settings]
    if vocab_size is not None:
        pairs.append(("vocab_size", str(vocab_size)))
    report = build_tokenizer(name, dataset, split, pairs, output)
    click.echo(json.dumps(report.to_json(), indent=2) if as_json else report.summary())
