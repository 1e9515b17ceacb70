"""The CTC prefix score of Watanabe et al. 2017 ("Hybrid CTC/attention architecture for
end-to-end speech recognition"; ESPnet's ``CTCPrefixScore``), for a batch of hypotheses at once.

A label-synchronous search (the attention decoder's) extends a hypothesis ``g`` by one label
``c`` a step, and asks the CTC output how likely the frames are to *start* with ``g + c``: the
prefix score ``psi(g + c)``, the probability of every CTC path whose collapsed labels begin with
``g + c``. It is computed from ``g``'s forward variables, the log-probabilities ``r^n_t(g)`` and
``r^b_t(g)`` of the paths through frame ``t`` that spell exactly ``g`` ending in its last label
and in a blank::

    phi_t(g, c) = r^b_t(g) + (r^n_t(g) unless c == last(g))   (a repeat needs a blank between)
    psi(g + c) = logsumexp_t [phi_{t-1}(g, c) + log p_t(c)]    (c's first frame is t)
    r^n_t(g + c) = logaddexp(r^n_{t-1}(g + c), phi_{t-1}(g, c)) + log p_t(c)
    r^b_t(g + c) = logaddexp(r^n_{t-1}(g + c), r^b_{t-1}(g + c)) + log p_t(blank)

and the end symbol's score is the whole sequence's probability, ``log P(g | x) =
logaddexp(r^n_T(g), r^b_T(g))`` at the utterance's last frame. A hypothesis carries its forward
variables ``[frames, 2]`` and its prefix score; the search adds ``psi(g + c) - psi(g)`` a step,
so that a finished hypothesis has collected exactly ``log P(g | x)``.

Why numpy, and how it is fast enough: a step is one loop over the frames (the recursion is
sequential in time) of a few numpy operations on ``[hypotheses, candidates]`` arrays: every
utterance of a batch, every hypothesis of its beam and every label it may be extended by (all
of them, or the few the attention decoder likes best: ESPnet's pre-beam "partial scoring") in
each operation. Padded frames past an utterance's length are made certain blanks, which leaves
every score of that utterance as its own frames make it.

Probabilities are natural logarithms; an impossible path has :data:`LOG_ZERO` (as ESPnet's
``logzero``) rather than ``-inf``, so that differences of scores never become ``nan``.

numpy is imported when first used: this module is imported by a plugin module that
``asrkit plugins`` loads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np

#: The log-probability of what cannot happen (ESPnet's ``logzero``): finite, so that scores
#: can be subtracted; far below any real one.
LOG_ZERO = -1e10
#: A score below this is of something impossible (a sum of a few :data:`LOG_ZERO`).
IMPOSSIBLE = LOG_ZERO / 2


@dataclass
class PrefixStates:
    """The CTC state of ``n`` hypotheses, each of one utterance of the scorer's batch."""

    #: Each hypothesis' utterance (its row in the scorer's batch), ``[n]``.
    rows: np.ndarray
    #: The labels of each hypothesis so far, ``[n]``; all the same in a label-synchronous search
    #: but kept per hypothesis.
    counts: np.ndarray
    #: Each hypothesis' last label, ``-1`` for the empty one, ``[n]``.
    last: np.ndarray
    #: The forward variables ``log r^n_t`` and ``log r^b_t``, ``[frames, n, 2]`` (time first:
    #: the recursion reads one frame at a time).
    forward: np.ndarray
    #: Each hypothesis' prefix score ``psi(g)`` (0 for the empty prefix), ``[n]``.
    scores: np.ndarray

    def __len__(self) -> int:
        return len(self.rows)

    def take(self, index: np.ndarray) -> PrefixStates:
        """The states of the hypotheses at ``index`` (kept unextended)."""
        return PrefixStates(self.rows[index], self.counts[index], self.last[index],
                            self.forward[:, index], self.scores[index])


@dataclass
class Extensions:
    """The hypotheses of a :class:`PrefixStates` each extended by each of its candidates."""

    #: The parents.
    states: PrefixStates
    #: The labels they are extended by, ``[n, k]`` (the end symbol: the sequence ends).
    candidates: np.ndarray
    #: ``psi(g + c)``, ``[n, k]``; for the end symbol ``log P(g | x)``.
    scores: np.ndarray
    #: The forward variables of ``g + c``, ``r^n`` and ``r^b``, each ``[frames, n, k]``.
    forward_n: np.ndarray
    forward_b: np.ndarray
    #: ``phi_{t-1}(g, c) + log p_t(c)``, ``[frames, n, k]``: how likely ``c`` is to be first
    #: emitted at each frame (the prefix score is their sum).
    starts: np.ndarray

    def take(self, parents: np.ndarray, columns: np.ndarray) -> PrefixStates:
        """The states of the hypotheses ``g + c`` for the candidates at ``columns`` of the
        hypotheses at ``parents`` (none of them the end symbol)."""
        import numpy as np

        states = self.states
        forward = np.stack([self.forward_n[:, parents, columns],
                            self.forward_b[:, parents, columns]], axis=-1)
        return PrefixStates(states.rows[parents], states.counts[parents] + 1,
                            self.candidates[parents, columns], forward,
                            self.scores[parents, columns])


class CTCPrefixScorer:
    """Prefix scores of hypotheses over one batch's CTC log-probabilities ``[batch, frames,
    classes]`` (normalised; the blank, also the end symbol, is ``blank``), of which utterance
    ``i`` has ``lengths[i]`` frames."""

    def __init__(self, log_probs: np.ndarray, lengths: np.ndarray, blank: int) -> None:
        import numpy as np

        x = np.array(log_probs, dtype=np.float64)  # a copy: padded frames change
        batch, frames, _ = x.shape
        if frames == 0:  # no frame at all: one certain blank keeps the recursion defined
            x = np.zeros((batch, 1, x.shape[2]))
            frames = 1
        self.lengths = np.clip(np.asarray(lengths, dtype=np.int64).reshape(-1), 0, frames)
        # Past its end an utterance sees certain blanks: none of its scores change there.
        past = np.arange(frames)[None, :] >= self.lengths[:, None]
        x[past] = LOG_ZERO
        x[past, blank] = 0.0
        np.maximum(x, LOG_ZERO, out=x)
        self.x = np.ascontiguousarray(x.transpose(1, 0, 2))  # [frames, batch, classes]
        self.blank = blank
        self.frames = frames

    def initial(self, rows: np.ndarray) -> PrefixStates:
        """The empty hypothesis of each utterance in ``rows``: its paths are all blanks."""
        import numpy as np

        rows = np.asarray(rows, dtype=np.int64)
        forward = np.full((self.frames, len(rows), 2), LOG_ZERO)
        forward[:, :, 1] = np.cumsum(self.x[:, rows, self.blank], axis=0)
        return PrefixStates(rows, np.zeros(len(rows), np.int64), np.full(len(rows), -1),
                            forward, np.zeros(len(rows)))

    def extend(self, states: PrefixStates, candidates: np.ndarray) -> Extensions:
        """The prefix scores of every hypothesis of ``states`` extended by each of its
        ``candidates`` ``[n, k]`` (labels; the blank is the end symbol), all in one pass over
        the frames."""
        import numpy as np

        candidates = np.asarray(candidates, dtype=np.int64)
        n, k = candidates.shape
        frames, rows = self.frames, states.rows
        xc = self.x[:, rows[:, None], candidates]  # [frames, n, k]
        xb = self.x[:, rows, self.blank][:, :, None]  # [frames, n, 1]
        r_n, r_b = states.forward[:, :, 0, None], states.forward[:, :, 1, None]
        total = np.logaddexp(r_n, r_b)
        # A repeated label is reached only through the blank between.
        phi = np.where(candidates[None] == states.last[None, :, None], r_b, total)
        # A prefix of m labels has no path before frame m - 1: start there.
        first = max(1, int(states.counts.min(initial=0)))
        r_nc = np.empty((frames, n, k))  # r^n_t(g + c)
        r_bc = np.empty((frames, n, k))  # r^b_t(g + c)
        r_nc[:first] = r_bc[:first] = LOG_ZERO
        empty = states.counts == 0
        r_nc[0, empty] = xc[0, empty]
        # phi_{t-1}(g, c) + log p_t(c): c first emitted at frame t (at 0 only after nothing)
        starts = np.empty((frames, n, k))
        starts[0] = np.where(empty[:, None], xc[0], LOG_ZERO)
        np.add(phi[:-1], xc[1:], out=starts[1:])
        work = np.empty((2, n, k))
        for t in range(first, frames):
            _logaddexp(r_nc[t - 1], phi[t - 1], r_nc[t], work)
            r_nc[t] += xc[t]
            _logaddexp(r_nc[t - 1], r_bc[t - 1], r_bc[t], work)
            r_bc[t] += xb[t]
        scores = _logsumexp(starts, axis=0)
        # The end symbol: the probability of exactly ``g``, at the utterance's last frame.
        ends = candidates == self.blank
        if ends.any():
            last_frame = np.maximum(self.lengths[rows], 1) - 1
            whole = total[last_frame, np.arange(n), 0]
            scores = np.where(ends, whole[:, None], scores)
        return Extensions(states, candidates, np.maximum(scores, LOG_ZERO), r_nc, r_bc, starts)

    def first_frames(self, found: Sequence[Sequence[int]]) -> list[list[int] | None]:
        """For the labels ``found[i]`` of one hypothesis of each utterance ``i``, the frame at
        which each is most likely first emitted given the labels before it (the largest term
        of its prefix score), never before the previous label's; ``None`` where the CTC output
        cannot spell them in the utterance's frames. All utterances side by side, a label a
        pass over the frames."""
        import numpy as np

        count = len(found)
        longest = max((len(labels) for labels in found), default=0)
        padded = np.zeros((count, longest), np.int64)
        for row, labels in enumerate(found):
            padded[row, :len(labels)] = labels
        sizes = np.array([len(labels) for labels in found], np.int64)
        frames = np.zeros((count, longest), np.int64)
        possible = np.ones(count, bool)
        state = self.initial(np.arange(count))
        everyone, column = np.arange(count), np.zeros(count, np.int64)
        for k in range(longest):
            extended = self.extend(state, padded[:, k, None])
            spelt = sizes > k
            possible &= ~spelt | (extended.scores[:, 0] >= IMPOSSIBLE)
            frames[:, k] = np.argmax(extended.starts[:, :, 0], axis=0)
            if k:
                frames[:, k] = np.maximum(frames[:, k], frames[:, k - 1] + 1)
            state = extended.take(everyone, column)
        return [frames[row, :sizes[row]].tolist() if possible[row] else None
                for row in range(count)]


def _logaddexp(a: np.ndarray, b: np.ndarray, out: np.ndarray, work: np.ndarray) -> None:
    """``np.logaddexp(a, b, out=out)`` (the same formula: the larger plus ``log1p(exp(-|a -
    b|))``) in operations numpy vectorises, three times as fast; ``work``: two arrays of
    ``out``'s shape."""
    import numpy as np

    top, gap = work[0], work[1]
    np.maximum(a, b, out=top)
    np.subtract(a, b, out=gap)
    np.abs(gap, out=gap)
    np.negative(gap, out=gap)
    np.exp(gap, out=gap)
    np.log1p(gap, out=gap)
    np.add(top, gap, out=out)


def _logsumexp(values: np.ndarray, axis: int) -> np.ndarray:
    import numpy as np

    top = values.max(axis=axis)
    return top + np.log(np.exp(values - np.expand_dims(top, axis)).sum(axis=axis))
