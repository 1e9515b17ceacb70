"""CTC paths over a model's output frames: the greedy path, and the Viterbi forced alignment of a
known text. Transcription times a decoder's words with them (:mod:`asrkit.serving.transcribe`),
``asrkit align`` aligns a whole transcript with the second (:mod:`asrkit.serving.align`), and
``asrkit evaluate`` finds the words whose confidence it scores with them
(:mod:`asrkit.runs.scoring`): one Viterbi serves all three, in the core because it is plain
arithmetic on the frames' log-probabilities.

Memory
    A Viterbi keeps a back-pointer per frame and state (a byte each), frames x states, where
    states = 2 x labels + 1: for an hour of speech at 40 ms frames and 15 characters a second,
    90,000 x 108,000 bytes = 9.7 GB. :func:`ctc_align` keeps instead the forward scores at every
    ``block``-th frame (``block`` = ceil(sqrt(frames))) and recomputes one block's back-pointers
    at a time while tracing back: 8 x sqrt(frames) x states bytes of checkpoints plus
    sqrt(frames) x states bytes of back-pointers (about 0.3 GB for that hour), for twice the
    arithmetic. The path is the same as with the full table (same ties).

Time
    Frames x states steps, each vectorised over the states, twice (the recomputation): 23 s on
    one core for a quarter of an hour of speech (22,500 frames of 40 ms, 13,500 characters).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from asrkit.core.errors import AsrkitError

if TYPE_CHECKING:
    import numpy as np

    from asrkit.core.labels import Labels


#: The wildcard of :func:`ctc_align`'s free ends takes a frame only where the text's label (or
#: the blank) is less than half as likely as the model's best class: a frame the model gives
#: to the text's first letter is not taken from it.
STAR_SHARE = 0.5


@dataclass(frozen=True)
class Token:
    """One emitted label (a character or a subword piece) of a CTC alignment: its label and
    first/last output frame."""

    label: int
    first: int
    last: int


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Log-probabilities of unnormalised ``logits`` over the last axis, in float64."""
    import numpy as np

    logits = np.asarray(logits, dtype=np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def greedy_tokens(logits: np.ndarray, blank: int) -> list[Token]:
    """The greedy path's characters: runs of the same most likely class, blanks dropped (the
    text of these tokens is exactly what the ``greedy`` decoder outputs)."""
    import numpy as np

    if len(logits) == 0:
        return []
    best = np.argmax(logits, axis=-1)
    starts = np.flatnonzero(np.concatenate([[True], best[1:] != best[:-1]]))
    ends = np.concatenate([starts[1:] - 1, [len(best) - 1]])
    return [Token(int(best[s]), int(s), int(e)) for s, e in zip(starts, ends, strict=True)
            if best[s] != blank]


class _Lattice:
    """The CTC states of one label sequence (blank, label, blank, ..., label, blank) and one
    Viterbi step over them."""

    def __init__(self, log_probs: np.ndarray, labels: Sequence[int], blank: int,
                 ends: int = 2) -> None:
        import numpy as np

        self.log_probs = log_probs
        #: A path starts in one of the first ``ends`` states and ends in one of the last.
        self.ends = ends
        self.frames = len(log_probs)
        self.states = 2 * len(labels) + 1
        self.extended = np.full(self.states, blank)
        self.extended[1::2] = labels
        # A path may skip the blank between two different characters, never between equal ones.
        self.can_skip = np.zeros(self.states, bool)
        self.can_skip[3::2] = self.extended[3::2] != self.extended[1:-2:2]

    def first(self) -> np.ndarray:
        """The scores at frame 0: a path starts on the first blank or the first label (or, with
        free ends, on the wildcard, the blank after it or the first label)."""
        import numpy as np

        score = np.full(self.states, -np.inf)
        score[:self.ends] = self.log_probs[0, self.extended[:self.ends]]
        return score

    def final(self, score: np.ndarray) -> int:
        """The best state a path can end in (the later of equals)."""
        import numpy as np

        return self.states - 1 - int(np.argmax(score[::-1][:self.ends]))

    def step(self, score: np.ndarray, t: int, back: np.ndarray | None = None) -> np.ndarray:
        """The scores at frame ``t`` from those at ``t - 1``; each state's choice (0 stay,
        1 from the state before, 2 skipping a blank; the first of equals) into ``back``."""
        import numpy as np

        advance = np.concatenate([[-np.inf], score[:-1]])
        skip = np.where(self.can_skip, np.concatenate([[-np.inf, -np.inf], score[:-2]]),
                        -np.inf)
        candidates = np.stack([score, advance, skip])
        choice = np.argmax(candidates, axis=0)
        if back is not None:
            back[:] = choice
        return (np.take_along_axis(candidates, choice[np.newaxis], 0)[0]
                + self.log_probs[t, self.extended])


def ctc_align(log_probs: np.ndarray, labels: Sequence[int], blank: int,
              block: int | None = None, free_ends: bool = False) -> list[Token] | None:
    """The most likely CTC path that spells ``labels`` (Viterbi forced alignment) through the
    frames of ``log_probs`` ``[frames, classes]``, as tokens; ``None`` when no path can (more
    characters than frames allow). Memory grows with sqrt(frames) x labels (module docstring);
    ``block`` (frames per stored score vector) is for tests.

    With ``free_ends``, the frames before the first label and after the last may go to a
    wildcard (the "star" token with which partial transcripts are aligned), whose probability
    on a frame is :data:`STAR_SHARE` of the model's most likely class there: so audio the text
    does not cover at its start or end (speech left out, noise the model takes for letters) is
    not forced onto the text's first or last words, while a frame where the text's label (or
    the blank) is at least that likely stays with it. Between labels, frames are the blank's."""
    import numpy as np

    if not labels:
        return []
    wrapped = list(labels)
    if free_ends:
        star = log_probs.shape[1]
        wildcard = log_probs.max(axis=1, keepdims=True) + math.log(STAR_SHARE)
        log_probs = np.concatenate([log_probs, wildcard.astype(log_probs.dtype)], axis=1)
        wrapped = [star, *labels, star]
    lattice = _Lattice(log_probs, wrapped, blank, 4 if free_ends else 2)
    frames, states = lattice.frames, lattice.states
    if frames == 0:
        return None
    block = block or max(1, math.isqrt(frames - 1) + 1)
    # Forward, keeping the scores at the frame before each block (block 0: frame 0 itself).
    stored = []
    score = lattice.first()
    for t in range(frames):
        if t and t % block == 0:
            stored.append(score)
        if t:
            score = lattice.step(score, t)
    final = lattice.final(score)
    if not np.isfinite(score[final]):
        return None
    stored.insert(0, lattice.first())
    # Backward, one block's back-pointers at a time, recomputed from its stored scores.
    path = np.empty(frames, np.int64)
    state = final
    back = np.zeros((block, states), np.int8)
    for k in range(len(stored) - 1, -1, -1):
        start, stop = k * block, min(frames, (k + 1) * block)
        score = stored[k]
        for t in range(max(start, 1), stop):
            score = lattice.step(score, t, back[t - start])
        for t in range(stop - 1, start - 1, -1):
            path[t] = state
            if t:
                state -= int(back[t - start, state])
    tokens = []
    skipped = 1 if free_ends else 0  # the wildcard before the labels
    for index, label in enumerate(labels, skipped):
        where = np.flatnonzero(path == 2 * index + 1)
        if len(where) == 0:
            return None
        tokens.append(Token(int(label), int(where[0]), int(where[-1])))
    return tokens


def text_tokens(logits: np.ndarray, log_probs: np.ndarray, text: str,
                labels: Labels) -> list[Token] | None:
    """The tokens of a decoder's ``text`` in one utterance's ``logits`` (``log_probs`` their
    :func:`log_softmax`): the greedy path's when ``text`` is the greedy text, else the forced
    alignment of the text's labels (``labels.encode``; for subword pieces one valid
    segmentation of it). ``None`` when the text cannot be aligned (a character the labels
    cannot spell, more labels than frames)."""
    greedy = greedy_tokens(logits, labels.blank)
    if text == labels.decode(t.label for t in greedy):
        return greedy
    try:
        return ctc_align(log_probs, labels.encode(text), labels.blank)
    except AsrkitError:  # a character the labels cannot spell
        return None


def word_tokens(tokens: Sequence[Token], labels: Labels) -> list[list[Token]]:
    """``tokens`` grouped into words as :class:`~asrkit.core.labels.Labels` splits them: a token
    that starts a word (``labels.starts_word``) ends the word before it; its body (``"▁the"``:
    "the") begins the next one, and an empty body (the space among characters) is a pure
    separator, in no word."""
    words: list[list[Token]] = []
    current: list[Token] = []
    for token in tokens:
        if labels.starts_word(token.label):
            if current:
                words.append(current)
            current = [token] if labels.body(token.label) else []
        else:
            current.append(token)
    if current:
        words.append(current)
    return words


def token_probability(log_probs: np.ndarray, token: Token) -> float:
    """The mean over the frames that emit ``token`` of the model's probability of its label:
    how sure the model is of that character where the path puts it."""
    import numpy as np

    return float(np.exp(log_probs[token.first:token.last + 1, token.label]).mean())


def geometric_mean(probabilities: Sequence[float]) -> float:
    """Of a word's tokens' probabilities: one unsure character makes the word unsure."""
    return math.exp(sum(math.log(max(p, 1e-30)) for p in probabilities) / len(probabilities))
