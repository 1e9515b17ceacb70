"""Word and character error rates.

Corpus WER and CER are the sum of edit distances over the sum of reference lengths (words or
characters), as DeepSpeech reported them and jiwer computes them, not a mean of per-utterance
rates (which would let short utterances weigh as much as long ones).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def edit_distance(reference: Sequence, hypothesis: Sequence) -> int:
    """Levenshtein distance (substitutions, deletions, insertions all cost 1)."""
    if len(reference) < len(hypothesis):
        reference, hypothesis = hypothesis, reference
    previous = list(range(len(hypothesis) + 1))
    for i, ref in enumerate(reference, 1):
        current = [i]
        for j, hyp in enumerate(hypothesis, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1,
                               previous[j - 1] + (ref != hyp)))
        previous = current
    return previous[-1]


@dataclass(frozen=True)
class Score:
    """Edit counts of one utterance (or summed over many)."""

    word_errors: int
    words: int
    char_errors: int
    chars: int

    @property
    def wer(self) -> float:
        return self.word_errors / self.words if self.words else float(self.word_errors > 0)

    @property
    def cer(self) -> float:
        return self.char_errors / self.chars if self.chars else float(self.char_errors > 0)

    def __add__(self, other: Score) -> Score:
        return Score(self.word_errors + other.word_errors, self.words + other.words,
                     self.char_errors + other.char_errors, self.chars + other.chars)


def score(reference: str, hypothesis: str) -> Score:
    ref_words, hyp_words = reference.split(), hypothesis.split()
    ref_chars, hyp_chars = " ".join(ref_words), " ".join(hyp_words)
    return Score(edit_distance(ref_words, hyp_words), len(ref_words),
                 edit_distance(ref_chars, hyp_chars), len(ref_chars))


def corpus_score(references: Sequence[str], hypotheses: Sequence[str]) -> Score:
    total = Score(0, 0, 0, 0)
    for reference, hypothesis in zip(references, hypotheses, strict=True):
        total = total + score(reference, hypothesis)
    return total
