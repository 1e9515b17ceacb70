"""``asrkit evaluate RUN --compare OTHER``: two runs scored on the same split, and whether the
difference of their WER and CER is more than chance (the paired bootstrap test of
:mod:`asrkit.core.bootstrap`).

Both runs must have scored the same utterances (the same dataset and split): the test pairs
them by id. Each run decodes with its own decoder unless ``--decoder`` or ``-o`` names one,
which then decodes both.
"""

from __future__ import annotations

from dataclasses import dataclass

from asrkit.core.bootstrap import LEVEL, SAMPLES, SEED, PairedTest, paired_test
from asrkit.core.errors import AsrkitError
from asrkit.runs.scoring import Evaluation


@dataclass
class Comparison:
    """Two evaluations of the same split, and the paired tests of their WER and CER."""

    names: tuple[str, str]
    evaluations: tuple[Evaluation, Evaluation]
    tests: dict[str, PairedTest]

    def text(self) -> str:
        (a, b), (first, second) = self.names, self.evaluations
        lines = [f"{name}: {e.split}, {len(e.utterances)} utterances, WER {e.wer:.2%}, CER "
                 f"{e.cer:.2%} ({e.decoder} decoder)"
                 for name, e in ((a, first), (b, second))]
        for metric, test in self.tests.items():
            d = test.difference
            verdict = ("a difference beyond chance" if test.p_value < 0.05
                       else "no difference beyond chance")
            lines.append(f"{metric.upper()} {a} - {b}: {d.rate * 100:+.2f} points ({LEVEL:.0%} "
                         f"interval {d.low * 100:+.2f} to {d.high * 100:+.2f}), paired bootstrap "
                         f"p = {test.p_value:.3f}: {verdict}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, object]:
        def summary(name: str, e: Evaluation) -> dict[str, object]:
            return {"run": name, "decoder": e.decoder, "wer": e.wer, "cer": e.cer,
                    "checkpoint": e.checkpoint}

        return {"split": self.evaluations[0].split,
                "utterances": len(self.evaluations[0].utterances),
                "runs": [summary(n, e) for n, e in zip(self.names, self.evaluations, strict=True)],
                "test": {"method": "paired bootstrap", "level": LEVEL, "samples": SAMPLES,
                         "seed": SEED},
                **{metric: {"difference": t.difference.rate,
                            "interval": t.difference.to_json(), "p_value": t.p_value}
                   for metric, t in self.tests.items()}}


def compare(names: tuple[str, str], first: Evaluation, second: Evaluation) -> Comparison:
    """The paired tests of ``first`` against ``second``, which must hold the same utterances."""
    a = {u.id: u for u in first.utterances}
    b = {u.id: u for u in second.utterances}
    if a.keys() != b.keys():
        raise AsrkitError(f"{names[0]} and {names[1]} scored different utterances on "
                          f"{first.split} ({len(a.keys() - b.keys())} only in the first, "
                          f"{len(b.keys() - a.keys())} only in the second): compare runs on "
                          "the same dataset")
    ids = sorted(a)
    tests = {
        "wer": paired_test([a[i].word_errors for i in ids], [b[i].word_errors for i in ids],
                           [a[i].words for i in ids]),
        "cer": paired_test([a[i].char_errors for i in ids], [b[i].char_errors for i in ids],
                           [a[i].chars for i in ids]),
    }
    return Comparison(names, (first, second), tests)
