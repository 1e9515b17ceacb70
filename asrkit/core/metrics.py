"""Word and character error rates.

Corpus WER and CER are the sum of edit distances over the sum of reference lengths (words or
characters), as DeepSpeech reported them and jiwer computes them, not a mean of per-utterance
rates (which would let short utterances weigh as much as long ones).

Word errors are also split into substitutions, deletions and insertions (one minimal alignment,
substitutions preferred where alignments tie): a decoder that stops early deletes words, one
that loops inserts them, and the rate alone hides which (an attention decoder can do either).

The same alignment says which hypothesis words are right (:func:`matched_words`): a word is
correct when the alignment pairs it with an identical reference word, which is what a word's
confidence is a probability of (:mod:`asrkit.core.confidence`).
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


def _cell_moves(ref: object, hyp: object, up: tuple[int, int, int], left: tuple[int, int, int],
                diagonal: tuple[int, int, int]) -> list[tuple[int, int, int]]:
    """A cell's candidates from the cell above (a deletion), to the left (an insertion) and
    diagonally (a match or a substitution), as (distance, deletions + insertions, deletions):
    the minimal tuple wins, and among equal ones the first."""
    return [(up[0] + 1, up[1] + 1, up[2] + 1), (left[0] + 1, left[1] + 1, left[2]),
            (diagonal[0] + (ref != hyp), diagonal[1], diagonal[2])]


def edit_operations(reference: Sequence, hypothesis: Sequence) -> tuple[int, int, int]:
    """``(distance, deletions, insertions)`` of a minimal alignment of ``hypothesis`` to
    ``reference``; of the minimal alignments, one with the fewest deletions and insertions
    (the rest of the distance is substitutions)."""
    # Each cell: (distance, deletions + insertions, deletions); minimal tuples win.
    previous = [(j, j, 0) for j in range(len(hypothesis) + 1)]
    for i, ref in enumerate(reference, 1):
        current = [(i, i, i)]
        for j, hyp in enumerate(hypothesis, 1):
            current.append(min(_cell_moves(ref, hyp, previous[j], current[j - 1],
                                           previous[j - 1])))
        previous = current
    distance, gaps, deletions = previous[-1]
    return distance, deletions, gaps - deletions


def matched_words(reference: Sequence, hypothesis: Sequence) -> list[bool]:
    """For each hypothesis word, whether the alignment of :func:`edit_operations` (minimal,
    then the fewest deletions and insertions) pairs it with an identical reference word; a
    substituted or inserted word is not matched."""
    table = [[(j, j, 0) for j in range(len(hypothesis) + 1)]]
    for i, ref in enumerate(reference, 1):
        row = [(i, i, i)]
        for j, hyp in enumerate(hypothesis, 1):
            row.append(min(_cell_moves(ref, hyp, table[i - 1][j], row[j - 1],
                                       table[i - 1][j - 1])))
        table.append(row)
    matched = [False] * len(hypothesis)
    i, j = len(reference), len(hypothesis)
    while i and j:
        moves = _cell_moves(reference[i - 1], hypothesis[j - 1], table[i - 1][j], table[i][j - 1],
                            table[i - 1][j - 1])
        move = moves.index(table[i][j])
        if move == 2:
            matched[j - 1] = reference[i - 1] == hypothesis[j - 1]
            i, j = i - 1, j - 1
        elif move == 0:
            i -= 1
        else:
            j -= 1
    return matched


@dataclass(frozen=True)
class Score:
    """Edit counts of one utterance (or summed over many)."""

    word_errors: int
    words: int
    char_errors: int
    chars: int
    #: Of ``word_errors``: reference words missing from the hypothesis, and words it adds.
    word_deletions: int = 0
    word_insertions: int = 0

    @property
    def word_substitutions(self) -> int:
        return self.word_errors - self.word_deletions - self.word_insertions

    @property
    def wer(self) -> float:
        return self.word_errors / self.words if self.words else float(self.word_errors > 0)

    @property
    def cer(self) -> float:
        return self.char_errors / self.chars if self.chars else float(self.char_errors > 0)

    def __add__(self, other: Score) -> Score:
        return Score(self.word_errors + other.word_errors, self.words + other.words,
                     self.char_errors + other.char_errors, self.chars + other.chars,
                     self.word_deletions + other.word_deletions,
                     self.word_insertions + other.word_insertions)


def score(reference: str, hypothesis: str) -> Score:
    ref_words, hyp_words = reference.split(), hypothesis.split()
    ref_chars, hyp_chars = " ".join(ref_words), " ".join(hyp_words)
    word_errors, deletions, insertions = edit_operations(ref_words, hyp_words)
    return Score(word_errors, len(ref_words), edit_distance(ref_chars, hyp_chars),
                 len(ref_chars), deletions, insertions)


def corpus_score(references: Sequence[str], hypotheses: Sequence[str]) -> Score:
    total = Score(0, 0, 0, 0)
    for reference, hypothesis in zip(references, hypotheses, strict=True):
        total = total + score(reference, hypothesis)
    return total
