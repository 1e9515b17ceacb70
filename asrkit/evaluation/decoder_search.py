"""Decoder settings chosen on a dev split: ``asrkit evaluate RUN --split dev --grid KEY=V1,V2``.

A language model's weights (``kenlm``'s ``alpha`` and ``beta``) are not learned with the acoustic
model: their best values depend on how confident the model is, and on the language model, so
they are tuned on held-out data for each pair, as DeepSpeech's ``lm_optimizer`` did. The model
runs over the split once; its outputs are kept and decoded with every combination of the grid's
values, so a grid of 30 points costs 30 decodings, not 30 evaluations. The best combination by
WER (or CER) is reported with the ``-o`` settings that use it; the test split is for scoring
those settings afterwards, never for choosing them.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from asrkit.config.decoding import try_decoder, with_settings
from asrkit.config.overrides import DECODER_PREFIX, DecoderChoice, split_pair
from asrkit.core.errors import AsrkitError
from asrkit.evaluation.evaluate import load_split_model
from asrkit.runs.run import load_run
from asrkit.runs.scoring import decode_outputs

#: The metrics a search may choose by (the loss does not depend on the decoder).
METRICS = ("wer", "cer")


@dataclass
class SearchPoint:
    """One combination of the grid's values and its scores on the split."""

    settings: dict[str, str]
    wer: float
    cer: float

    def options(self) -> list[str]:
        """The command line that uses these settings: ``-o decoder.KEY=VALUE`` each."""
        return [f"-o decoder.{key}={value}" for key, value in self.settings.items()]


@dataclass
class DecoderSearch:
    """Every point of a grid, scored on one split by one checkpoint."""

    split: str
    decoder: str
    best_by: str
    utterances: int
    grid: dict[str, list[str]]
    points: list[SearchPoint] = field(default_factory=list)
    #: Which weights were scored (as in :attr:`asrkit.evaluation.evaluate.Evaluation.checkpoint`).
    checkpoint: dict[str, Any] | None = None

    def rank(self, point: SearchPoint) -> tuple[float, float]:
        """Lower is better: ``best_by``, then the other metric."""
        other = "cer" if self.best_by == "wer" else "wer"
        return getattr(point, self.best_by), getattr(point, other)

    @property
    def best(self) -> SearchPoint:
        """The point of the lowest :meth:`rank` (the first of equals)."""
        return min(self.points, key=self.rank)

    def to_json(self) -> dict[str, object]:
        best = self.best
        return {
            **({"checkpoint": self.checkpoint} if self.checkpoint else {}),
            "split": self.split, "decoder": self.decoder, "utterances": self.utterances,
            "best_by": self.best_by, "grid": self.grid,
            "best": {"settings": best.settings, "wer": best.wer, "cer": best.cer,
                     "options": best.options()},
            "points": [{"settings": p.settings, "wer": p.wer, "cer": p.cer}
                       for p in self.points],
        }

    def text(self) -> str:
        keys = list(self.grid)
        where = ""
        if self.checkpoint:
            where = f", {self.checkpoint['kind']} checkpoint (step {self.checkpoint['step']})"
        lines = [f"{self.split}: {self.utterances} utterances, {self.decoder} decoder, "
                 f"{len(self.points)} settings{where}, best by {self.best_by.upper()}"]
        widths = [max(len(k), *(len(v) for v in self.grid[k])) for k in keys]
        lines.append("  " + "  ".join(k.rjust(w) for k, w in zip(keys, widths, strict=True))
                     + "      WER      CER")
        for p in sorted(self.points, key=self.rank):
            values = "  ".join(p.settings[k].rjust(w) for k, w in zip(keys, widths, strict=True))
            lines.append(f"  {values}  {p.wer:7.2%}  {p.cer:7.2%}")
        best = self.best
        lines.append(f"best: WER {best.wer:.2%}, CER {best.cer:.2%} with "
                     + " ".join(best.options()))
        return "\n".join(lines)


def parse_grid(items: Sequence[str]) -> dict[str, list[str]]:
    """``["decoder.alpha=0.5,1", "beta=0,2"]`` -> ``{"alpha": ["0.5", "1"], "beta": ["0",
    "2"]}``: each key once, at least one value each."""
    grid: dict[str, list[str]] = {}
    for item in items:
        key, values = split_pair(item, "decoder.KEY=VALUE,VALUE,...")
        key = key.removeprefix(DECODER_PREFIX)
        if key in grid:
            raise AsrkitError(f"--grid {item}: {key} is already in the grid; list its values "
                              "once, separated by commas")
        if key == "decoder":
            raise AsrkitError(f"--grid {item}: the grid varies one decoder's settings; choose "
                              "the decoder with --decoder NAME")
        grid[key] = [v.strip() for v in values.split(",") if v.strip()]
        if not grid[key]:
            raise AsrkitError(f"--grid {item}: no values; e.g. --grid decoder.{key}=0.5,1,2")
    if not grid:
        raise AsrkitError("the search needs a grid, e.g. --grid decoder.alpha=0.5,1,2")
    return grid


def search_decoder(folder: str | Path, split: str, grid: dict[str, list[str]],
                   decoder: DecoderChoice | None = None, checkpoint: str = "best",
                   best_by: str = "wer", progress: bool = True) -> DecoderSearch:
    """Score every combination of ``grid``'s values of the decoder's settings (over the run's
    decoder, or the one ``decoder`` chooses, with its settings applied) on ``split``."""
    if best_by not in METRICS:
        raise AsrkitError(f"a decoder search chooses by {' or '.join(METRICS)}, not "
                          f"{best_by}: the loss is the model's, whatever the decoder")
    run = load_run(folder)
    base = run.choose_decoder(decoder or DecoderChoice())
    keys = list(grid)
    combinations = [dict(zip(keys, values, strict=True))
                    for values in itertools.product(*(grid[k] for k in keys))]
    # Every combination is a valid decoder, and the decoder has what it needs, before the
    # model loads: a typo in the last value is said at once.
    decoders = [with_settings(base, point.items()) for point in combinations]
    try_decoder(decoders[0], run.labels)
    loaded = load_split_model(run, split, checkpoint)
    outputs = list(loaded.outputs())
    search = DecoderSearch(split, base.name, best_by, sum(len(o.ids) for o in outputs),
                           grid, checkpoint=loaded.checkpoint)
    bar = tqdm(zip(combinations, decoders, strict=True), total=len(decoders),
               desc=f"search {split}", unit="setting", disable=not progress, leave=False)
    for point, candidate in bar:
        evaluation = decode_outputs(outputs, candidate, loaded.run.labels, split, progress=False)
        search.points.append(SearchPoint(point, evaluation.wer, evaluation.cer))
        best = search.best
        bar.set_postfix_str(f"best WER {best.wer:.1%} CER {best.cer:.1%}")
    return search
