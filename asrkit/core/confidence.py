"""How far a word's confidence can be trusted, and the temperature that makes it trustworthy;
and how a decoder's N-best list divides its belief among its hypotheses.

Word confidence
    A word's confidence (what ``asrkit transcribe`` reports) is the geometric mean over its
    tokens of each token's probability, averaged over the frames that emit it
    (:func:`asrkit.core.viterbi.token_probability`). It claims to be the probability that the
    word is right. A word *is* right when the WER alignment pairs it with an identical
    reference word (:func:`asrkit.core.metrics.matched_words`).

Calibration error
    The expected calibration error (ECE) sorts words into :data:`BINS` equal-width bins of
    confidence and averages, weighted by the bins' words, the gap between each bin's mean
    confidence and the share of its words that are right: 0 for confidences that mean what they
    say. The Brier score is the mean squared difference between confidence and correctness (1
    or 0): it rewards sharpness as well as calibration.

Temperature
    A model trained with CTC is sure of itself: its softmax is peaked, and its words' confidences
    are higher than their accuracy. Temperature scaling divides the logits by ``T`` before the
    softmax (``T > 1`` softens them) and fits ``T`` on held-out data. The temperature here is
    fitted to what is measured: it minimises the negative log-likelihood of the words'
    correctness under their confidences at ``T`` (:func:`fit_temperature`), not of the frames'
    labels. A frame-level fit would calibrate each frame's posterior against the forced
    alignment of the reference, a different quantity: a word's confidence averages frames and
    multiplies characters, and a wrong word is often wrong in a single character whose frames
    are few. One parameter fitted on a dev split's words cannot overfit it, and dividing the
    logits leaves every CTC path's ranking, so every alignment, as it was: only the confidences
    change.

N-best probabilities
    A beam decoder's hypotheses carry total log scores (acoustic plus language model).
    :func:`nbest_probabilities` normalises them over the list (a softmax of the scores): how the
    decoder divides its belief among the hypotheses it returns, summing to 1 over them, not the
    probability that any one of them is right.

numpy is imported inside functions, as everywhere in the core.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from asrkit.core.viterbi import Token, log_softmax

if TYPE_CHECKING:
    import numpy as np

#: Equal-width bins of the expected calibration error (Guo et al. 2017 use 15; 10 is usual).
BINS = 10
#: The temperatures :func:`fit_temperature` searches.
LOWEST_TEMPERATURE, HIGHEST_TEMPERATURE = 0.05, 20.0
#: Confidences are kept this far from 0 and 1 in the log-likelihood, where a confidence of
#: exactly 1 for a wrong word would be an infinite loss.
EPSILON = 1e-6


@dataclass(frozen=True)
class Bin:
    """One bin of a reliability diagram: the confidences ``lo <= c < hi`` (the last bin holds
    1), how many words fell in it, their mean confidence and the share of them that are right."""

    lo: float
    hi: float
    words: int
    confidence: float
    accuracy: float

    def to_json(self) -> dict[str, float | int]:
        return {"lo": round(self.lo, 4), "hi": round(self.hi, 4), "words": self.words,
                "confidence": round(self.confidence, 4), "accuracy": round(self.accuracy, 4)}


def reliability(confidences: Sequence[float], correct: Sequence[bool],
                bins: int = BINS) -> list[Bin]:
    """The non-empty bins of ``bins`` equal-width bins of [0, 1]."""
    import numpy as np

    conf = np.asarray(confidences, np.float64)
    right = np.asarray(correct, np.float64)
    if conf.shape != right.shape:
        raise ValueError(f"{conf.size} confidences for {right.size} words")
    index = np.minimum((conf * bins).astype(np.int64), bins - 1)
    found = []
    for k in range(bins):
        inside = index == k
        if inside.any():
            found.append(Bin(k / bins, (k + 1) / bins, int(inside.sum()),
                             float(conf[inside].mean()), float(right[inside].mean())))
    return found


def expected_calibration_error(confidences: Sequence[float], correct: Sequence[bool],
                               bins: int = BINS) -> float:
    """The mean over words of the gap between their bin's confidence and accuracy (0 without
    words)."""
    table = reliability(confidences, correct, bins)
    total = sum(b.words for b in table)
    return sum(b.words * abs(b.confidence - b.accuracy) for b in table) / total if total else 0.0


def brier_score(confidences: Sequence[float], correct: Sequence[bool]) -> float:
    """The mean of (confidence - correctness)², correctness 1 or 0 (0 without words)."""
    import numpy as np

    conf = np.asarray(confidences, np.float64)
    right = np.asarray(correct, np.float64)
    return float(((conf - right) ** 2).mean()) if conf.size else 0.0


def correctness_nll(confidences: np.ndarray, correct: np.ndarray) -> float:
    """The mean negative log-likelihood of the words' correctness under their confidences."""
    import numpy as np

    conf = np.clip(confidences, EPSILON, 1 - EPSILON)
    return float(-np.where(correct, np.log(conf), np.log1p(-conf)).mean())


class WordEvidence:
    """What the confidences of many words are computed from: each word's tokens, each token's
    frames, and whether the word is right. ``confidences(T)`` are exactly the confidences
    transcription reports with the logits divided by ``T``.

    A fit tries many temperatures, so by default the frames' logits are kept (a row of classes
    a frame: a large vocabulary of subword pieces makes them large). Given the one
    ``temperature`` the confidences will be read at, only each frame's probability is kept."""

    def __init__(self, temperature: float | None = None) -> None:
        self.temperature = temperature
        self._frames: list[np.ndarray] = []  # per utterance: its tokens' frames' logits (or
        self._labels: list[np.ndarray] = []  # their probabilities), each frame's label,
        self._token: list[np.ndarray] = []  # and its token (numbered over all)
        self._word: list[int] = []  # each token's word (numbered over all)
        self._correct: list[bool] = []  # each word's
        self._tokens = 0
        self._joined: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self._correct)

    @property
    def correct(self) -> np.ndarray:
        import numpy as np

        return np.asarray(self._correct, bool)

    def add(self, logits: np.ndarray, words: Sequence[Sequence[Token]],
            correct: Sequence[bool]) -> None:
        """An utterance's words: ``words`` groups its tokens (:func:`asrkit.core.viterbi.
        word_tokens`) in ``logits`` ``[frames, classes]``; ``correct`` says which are right."""
        import numpy as np

        if len(words) != len(correct):
            raise ValueError(f"{len(words)} words, {len(correct)} correctness labels")
        rows, labels, token = [], [], []
        for group, right in zip(words, correct, strict=True):
            for t in group:
                frames = np.arange(t.first, t.last + 1)
                rows.append(frames)
                labels.append(np.full(len(frames), t.label))
                token.append(np.full(len(frames), self._tokens))
                self._word.append(len(self._correct))
                self._tokens += 1
            self._correct.append(bool(right))
        if not rows:
            return
        frames = np.asarray(logits, np.float32)[np.concatenate(rows)]
        label = np.concatenate(labels)
        if self.temperature is not None:
            frames = _label_probability(frames, label, self.temperature)
        self._frames.append(frames)
        self._labels.append(label)
        self._token.append(np.concatenate(token))
        self._joined = None

    def confidences(self, temperature: float = 1.0) -> np.ndarray:
        """Every word's confidence with the logits divided by ``temperature`` (the one given
        when made, if one was)."""
        import numpy as np

        if self.temperature is not None and temperature != self.temperature:
            raise ValueError(f"these words keep their confidences at temperature "
                             f"{self.temperature}, not {temperature}")
        if not self._correct:
            return np.zeros(0)
        if self._joined is None:
            self._joined = (np.concatenate(self._frames), np.concatenate(self._labels),
                            np.concatenate(self._token), np.asarray(self._word))
        frames, labels, token, word = self._joined
        frame = frames if self.temperature is not None else _label_probability(
            frames, labels, temperature)
        per_token = np.bincount(token, frame) / np.bincount(token)
        logs = np.log(np.maximum(per_token, 1e-30))
        return np.exp(np.bincount(word, logs, len(self)) / np.bincount(word, minlength=len(self)))


def _label_probability(logits: np.ndarray, labels: np.ndarray,
                       temperature: float) -> np.ndarray:
    """Each frame's probability of its label, the logits divided by ``temperature``."""
    import numpy as np

    return np.exp(log_softmax(logits / temperature)[np.arange(len(labels)), labels])


def fit_temperature(evidence: WordEvidence) -> float:
    """The temperature in [:data:`LOWEST_TEMPERATURE`, :data:`HIGHEST_TEMPERATURE`] that
    minimises the negative log-likelihood of the words' correctness (1 without words): a
    log-spaced grid, then a golden-section search around its best point."""
    import numpy as np

    if not len(evidence):
        return 1.0
    correct = evidence.correct

    def loss(log_t: float) -> float:
        return correctness_nll(evidence.confidences(math.exp(log_t)), correct)

    grid = np.linspace(math.log(LOWEST_TEMPERATURE), math.log(HIGHEST_TEMPERATURE), 33)
    losses = [loss(float(x)) for x in grid]
    best = int(np.argmin(losses))
    lo, hi = float(grid[max(0, best - 1)]), float(grid[min(len(grid) - 1, best + 1)])
    ratio = (math.sqrt(5) - 1) / 2
    a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    fa, fb = loss(a), loss(b)
    for _ in range(30):
        if fa <= fb:
            hi, b, fb = b, a, fa
            a = hi - ratio * (hi - lo)
            fa = loss(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + ratio * (hi - lo)
            fb = loss(b)
    found = (lo + hi) / 2
    return math.exp(found if loss(found) <= losses[best] else float(grid[best]))


def nbest_probabilities(scores: Sequence[float]) -> list[float]:
    """A softmax of an N-best list's total log scores: each hypothesis' share of the list's
    probability, summing to 1 over the list (empty for an empty list)."""
    if not scores:
        return []
    top = max(scores)
    if not math.isfinite(top):
        return [1 / len(scores)] * len(scores)
    weights = [math.exp(s - top) for s in scores]
    total = sum(weights)
    return [w / total for w in weights]
