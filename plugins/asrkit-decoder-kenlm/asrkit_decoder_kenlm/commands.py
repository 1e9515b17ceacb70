"""``asrkit lm build``: an n-gram language model from a dataset's transcripts or a text file, so
that a first ``kenlm`` decoding needs no external tool. Pure Python (see :mod:`.arpa`); imports
only click at module level, as every command module must."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import click

from asrkit.api import AsrkitError


def dataset_folder(name: str, split: str) -> Path:
    """An imported dataset given as a folder or by name (``$ASRKIT_HOME/datasets/NAME``)."""
    from asrkit.api import asrkit_home

    candidates = [Path(name), asrkit_home() / "datasets" / name]
    for folder in candidates:
        if (folder / f"{split}.csv").is_file():
            return folder
    raise AsrkitError(
        f"no {split}.csv of a dataset {name!r} (looked in {', '.join(map(str, candidates))}); "
        f"import it first, e.g. `asrkit import {name}`"
    )


def dataset_sentences(folder: Path, split: str) -> Iterator[str]:
    """The transcripts of a dataset split: already normalised to the dataset's alphabet."""
    from asrkit.api import read_csv

    for row in read_csv(folder / f"{split}.csv"):
        yield row.transcript


def text_sentences(path: Path, normalise: bool) -> Iterator[str]:
    """One sentence a line, normalised as asrkit normalises transcripts (lower case, no
    punctuation) unless ``normalise`` is false."""
    from asrkit.api import normalize

    with open(path, encoding="utf-8") as handle:
        for line in handle:
            yield normalize(line) if normalise else line.strip()


@click.group("lm", context_settings={"help_option_names": ["-h", "--help"]})
def lm_group() -> None:
    """Language models for the kenlm decoder."""


@lm_group.command("build")
@click.option("--dataset", metavar="NAME|FOLDER", help="An imported dataset: its transcripts.")
@click.option("--split", default="train", show_default=True,
              help="The dataset split whose transcripts to use.")
@click.option("--text", "texts", multiple=True, metavar="FILE",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A text file, one sentence a line (repeatable).")
@click.option("--order", default=3, show_default=True, type=click.IntRange(1, 9),
              help="The n of the n-grams.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The ARPA file to write.")
@click.option("--vocabulary", "vocabularies", multiple=True, metavar="FILE",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A word list (e.g. /usr/share/dict/words): words the model may predict "
                   "though the text never has them (repeatable).")
@click.option("--no-normalize", is_flag=True,
              help="Use --text and --vocabulary as they are (default: lower-cased, "
                   "punctuation removed).")
def build_command(dataset: str | None, split: str, texts: tuple[Path, ...], order: int,
                  output: Path, vocabularies: tuple[Path, ...], no_normalize: bool) -> None:
    """Estimate an interpolated modified Kneser-Ney n-gram model and write it as ARPA.

    \b
    asrkit lm build --dataset librispeech -o lm.arpa
    asrkit lm build --text corpus.txt --order 4 -o lm.arpa
    asrkit lm build --text corpus.txt --vocabulary /usr/share/dict/words -o lm.arpa
    asrkit evaluate runs/brnn-1 --decoder kenlm -o decoder.lm=lm.arpa
    """
    from asrkit_decoder_kenlm.arpa import estimate

    if not dataset and not texts:
        raise click.UsageError("give --dataset NAME or --text FILE (or both)")

    def sentences() -> Iterator[str]:
        if dataset:
            yield from dataset_sentences(dataset_folder(dataset, split), split)
        for path in texts:
            yield from text_sentences(path, not no_normalize)

    def vocabulary() -> Iterator[str]:
        for path in vocabularies:
            for line in text_sentences(path, not no_normalize):
                yield from line.split()

    started = time.monotonic()
    try:
        model = estimate(sentences(), order, vocabulary())
    except ValueError as error:
        raise AsrkitError(str(error)) from None
    output.parent.mkdir(parents=True, exist_ok=True)
    temporary = output.with_name(output.name + ".partial")
    model.write(temporary)
    temporary.replace(output)
    counts = ", ".join(f"{n}-grams {c}" for n, c in enumerate(model.counts(), 1))
    if vocabularies:
        counts += f" ({model.unseen_words} from the word list only)"
    click.echo(f"wrote {output}: order {model.order}, {counts} "
               f"({time.monotonic() - started:.1f} s)")
    if model.order < order:
        click.echo(f"note: the sentences are too short for order {order}; wrote {model.order}")
    if model.fallback_orders:
        orders = ", ".join(map(str, model.fallback_orders))
        click.echo(f"note: too little text for Kneser-Ney discounts at order(s) {orders}; "
                   "used 0.5, 1, 1.5 (as lmplz --discount_fallback)")
