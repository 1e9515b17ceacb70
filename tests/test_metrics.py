"""Error rates and the split of word errors into substitutions, deletions and insertions
(``asrkit.core.metrics``), against a brute-force enumeration of alignments."""

from __future__ import annotations

import itertools
import random

from asrkit.core.metrics import Score, edit_distance, edit_operations, score


def brute_force(reference: list[str], hypothesis: list[str]) -> tuple[int, int, int]:
    """Every alignment as a sequence of moves; the minimal cost, then the fewest gaps."""
    best = None
    n, m = len(reference), len(hypothesis)
    for moves in itertools.product("SDI", repeat=n + m):
        i = j = cost = deletions = insertions = 0
        for move in moves:
            if i == n and j == m:
                break
            if move == "S" and i < n and j < m:
                cost += reference[i] != hypothesis[j]
                i, j = i + 1, j + 1
            elif move == "D" and i < n:
                cost, deletions, i = cost + 1, deletions + 1, i + 1
            elif move == "I" and j < m:
                cost, insertions, j = cost + 1, insertions + 1, j + 1
            else:
                break
        if (i, j) != (n, m):
            continue
        key = (cost, deletions + insertions, deletions)
        best = key if best is None or key < best else best
    assert best is not None
    return best[0], best[2], best[1] - best[2]


def test_the_operations_are_those_of_a_minimal_alignment_with_fewest_gaps():
    draw = random.Random(0)
    for _ in range(200):
        reference = [draw.choice("ab") for _ in range(draw.randint(0, 4))]
        hypothesis = [draw.choice("abc") for _ in range(draw.randint(0, 4))]
        found = edit_operations(reference, hypothesis)
        assert found == brute_force(reference, hypothesis), (reference, hypothesis)
        assert found[0] == edit_distance(reference, hypothesis)


def test_a_looping_hypothesis_inserts_and_an_early_stop_deletes():
    looped = score("the cat sat", "the cat sat sat sat")
    assert (looped.word_insertions, looped.word_deletions, looped.word_substitutions) == (2, 0, 0)
    stopped = score("the cat sat on the mat", "the cat")
    assert (stopped.word_insertions, stopped.word_deletions) == (0, 4)
    assert stopped.word_substitutions == 0
    assert (looped + stopped) == Score(6, 9, looped.char_errors + stopped.char_errors,
                                       looped.chars + stopped.chars, 4, 2)
