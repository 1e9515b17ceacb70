"""How sure a WER is: bootstrap confidence intervals of corpus error rates, and the paired
bootstrap test of the difference between two systems on the same utterances (Koehn 2004;
Bisani and Ney 2004).

A corpus error rate is a sum of errors over a sum of reference lengths, so the utterance is the
unit that is resampled: ``samples`` times, as many utterances as the test set has, drawn with
replacement; each draw gives a rate, and the interval holds the middle ``level`` of them. Two
systems are compared on the *same* draws (paired): the share of draws on which their difference
has the other sign than on the whole set (or none) is the evidence that it is chance; the
two-sided p-value is twice the smaller tail. A seed makes both repeatable.

Why bootstrap and not a formula: utterances differ in length and difficulty, and errors cluster
within them, so the usual binomial interval of a rate is far too narrow.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: Resamples drawn by default: enough for the 2.5 % tails of a 95 % interval to move by less
#: than a tenth of a point between seeds on a test set of a few hundred utterances.
SAMPLES = 1000
LEVEL = 0.95
SEED = 0


@dataclass(frozen=True)
class Interval:
    """A corpus rate and its bootstrap confidence interval."""

    rate: float
    low: float
    high: float

    def to_json(self) -> list[float]:
        return [self.low, self.high]


@dataclass(frozen=True)
class PairedTest:
    """The difference of two systems' rates (``a - b``) on the same utterances, its bootstrap
    interval, and the two-sided p-value of the paired test."""

    difference: Interval
    p_value: float


def _draws(count: int, samples: int, seed: int):  # -> np.ndarray [samples, count]
    import numpy as np

    return np.random.default_rng(seed).integers(0, count, size=(samples, count))


def _rates(errors, totals, draws):  # -> np.ndarray [samples]
    import numpy as np

    sums = np.asarray(totals, np.float64)[draws].sum(axis=1)
    return np.asarray(errors, np.float64)[draws].sum(axis=1) / np.maximum(sums, 1)


def _interval(rate: float, rates, level: float) -> Interval:
    import numpy as np

    low, high = np.quantile(rates, [(1 - level) / 2, (1 + level) / 2])
    return Interval(rate, float(low), float(high))


def rate_interval(errors: Sequence[int], totals: Sequence[int], samples: int = SAMPLES,
                  level: float = LEVEL, seed: int = SEED) -> Interval:
    """The corpus rate ``sum(errors) / sum(totals)`` over utterances and its ``level``
    bootstrap interval from ``samples`` resamples of the utterances."""
    if len(errors) != len(totals):
        raise ValueError("one error count and one reference length an utterance")
    rate = sum(errors) / max(sum(totals), 1)
    if not errors:
        return Interval(rate, rate, rate)
    return _interval(rate, _rates(errors, totals, _draws(len(errors), samples, seed)), level)


def paired_test(errors_a: Sequence[int], errors_b: Sequence[int], totals: Sequence[int],
                samples: int = SAMPLES, level: float = LEVEL, seed: int = SEED) -> PairedTest:
    """The paired bootstrap test of system ``a`` against ``b``, whose error counts on the same
    utterances (of reference lengths ``totals``) are ``errors_a`` and ``errors_b``."""
    import numpy as np

    if not len(errors_a) == len(errors_b) == len(totals):
        raise ValueError("both systems need an error count for every utterance")
    whole = sum(totals)
    observed = (sum(errors_a) - sum(errors_b)) / max(whole, 1)
    if not totals:
        return PairedTest(Interval(observed, observed, observed), 1.0)
    draws = _draws(len(totals), samples, seed)
    differences = _rates(errors_a, totals, draws) - _rates(errors_b, totals, draws)
    below, above = float(np.mean(differences <= 0)), float(np.mean(differences >= 0))
    return PairedTest(_interval(observed, differences, level), min(1.0, 2 * min(below, above)))
