"""CTC prefix beam search, vectorised with numpy over the beams of a batch: the one search behind
every beam decoder. ``beam`` runs it alone; a language-model decoder hands it a :class:`WordScorer`.

The search is the classic prefix beam search (Hannun et al. 2014, "First-pass large vocabulary
continuous speech recognition using bi-directional recurrent DNNs"): every prefix in the beam
carries the probability of all alignments kept so far that end in a blank (``pb``) and in its
last label (``pnb``); a frame either keeps a prefix (blank, or its last label repeated) or
extends it by one label; extensions that spell a prefix already in the beam are merged into it;
the ``beam_width`` best prefixes survive.

Why it is fast without a compiler: a frame is a fixed set of numpy operations on arrays of the
beams (``[utterances, slots]``) and of their extensions (``[utterances, slots, kept labels]``),
never a Python loop over candidates, and the utterances of a batch are searched side by side, so
the cost of those calls is paid once a frame for all of them. Prefixes are identified by a 64-bit
rolling hash of their labels (distinct per utterance), so finding the extension that spells a
prefix already in the beam is one sorted search, not a dictionary lookup per candidate. Python
code runs only per *new* prefix (a record (parent, label) for reading its text back at the end)
and, with a language model, per word: a finished word is spelled and scored only when its
scorer's upper bound says it could make the beam.

Pruning (both configurable, both off when ``None``):

``token_min_logp``
    In each frame only labels whose log-probability is at least this are candidates to extend
    a prefix (the frame's most likely label always is). A frame where only the blank is left
    (blank-dominated frames, most of them for a trained model) costs a few operations on
    ``[utterances, slots]`` arrays: prefixes are kept, none is extended, nothing is sorted.
    This is the pruning pyctcdecode does with its ``token_min_logp``.
``beam_prune_logp``
    After each frame that extends prefixes, drop those whose score is more than this below the
    best one (pyctcdecode's ``beam_prune_logp``).

Hot words (:mod:`asrkit.decoders.context`) ride along the same way: each prefix's state in their
context graph and the boost its labels added are ``[utterances, slots]`` arrays beside the
beams; an extension adds ``boost[state, label]`` (one gather for all of them), candidates are
ranked by probability times exp(that boost), and the final score takes back unfinished matches.

Probabilities are kept as float64 *probabilities* (not logarithms: products and sums are cheaper
than ``logaddexp``), rescaled every frame so that the best prefix is 1, with the log of the
scale kept aside; a prefix more than ~700 nats below the best underflows to 0 and leaves the
beam, which no beam of useful width would have kept anyway. With a language model a candidate is
ranked by its probability times exp(its language-model score minus the utterance's best), for the
same reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from asrkit.core.viterbi import log_softmax
from asrkit.decoders.context import ContextGraph
from asrkit.decoders.scoring import Hypothesis, WordScorer

__all__ = ["PrefixBeamSearch", "log_softmax"]

# Prefix identity: hash(child) = hash(parent) * _MULT + label + 1 (mod 2**64). Two different
# prefixes in one utterance share a hash with probability ~ prefixes**2 / 2**65: never in practice.
_MULT = np.uint64(0x9E3779B97F4A7C15)
_ROOT = np.uint64(0x243F6A8885A308D3)


class PrefixBeamSearch:
    """A prefix beam search for one label set and one set of options; reusable across
    utterances.

    ``symbols`` are the labels' symbols (labels ``0 .. N-1``); the blank is label ``N``.
    ``decode`` turns a hypothesis' labels into its text (a :class:`~asrkit.core.labels.Labels`'
    ``decode``; default: the symbols joined, as characters are).

    With a ``scorer``, words are found as :class:`~asrkit.core.labels.Labels` finds them: a symbol
    starting with ``word_marker`` finishes the word before it (the scorer scores that word)
    and begins a new one whose first text is the symbol's *body*, the symbol without the
    marker. For characters the marker is the space symbol (body ``""``: a pure separator); for
    SentencePiece pieces it is ``"▁"`` (``"▁the"`` finishes a word and begins "the"). Some
    symbol must start with the marker. The scorer's ``vocabulary`` (the partial-word penalty)
    judges the unfinished word's text however it is spelt: a piece walks the vocabulary's
    character trie one character of its body at a time (:class:`_PieceVocabulary`; characters
    use one table lookup a label, :class:`_Vocabulary`).

    With a ``context`` graph (hot words, :mod:`asrkit.decoders.context`) every prefix carries
    its graph state and the hot-word score its labels added; candidates are ranked with it, and
    a final hypothesis keeps the boosts of the hot words it completed (``Hypothesis.boost``).
    """

    def __init__(
        self,
        symbols: Sequence[str],
        beam_width: int,
        token_min_logp: float | None = None,
        beam_prune_logp: float | None = None,
        scorer: WordScorer | None = None,
        word_marker: str = " ",
        decode: Callable[[list[int]], str] | None = None,
        context: ContextGraph | None = None,
    ) -> None:
        if beam_width < 1:
            raise ValueError("beam_width must be at least 1")
        self.symbols = tuple(symbols)
        self.blank = len(self.symbols)
        self.beam_width = int(beam_width)
        self.token_min_logp = token_min_logp
        self.beam_prune_logp = beam_prune_logp
        self.scorer = scorer
        self.decode = decode
        self.context = context
        # Per label (the blank and "no label" last): does it start a word, and with what text.
        self.starts = np.zeros(self.blank + 2, dtype=bool)
        self.bodies = [""] * (self.blank + 2)
        for label, symbol in enumerate(self.symbols):
            if symbol.startswith(word_marker):
                self.starts[label] = True
                self.bodies[label] = symbol[len(word_marker):]
            else:
                self.bodies[label] = symbol
        self.vocab: _Vocabulary | _PieceVocabulary | None = None
        if scorer is not None:
            if not self.starts.any():
                raise ValueError(
                    f"a word-level language model needs a symbol starting with the word marker "
                    f"{word_marker!r} to find words"
                )
            characters = all(len(body) == 1 or (start and not body)
                             for start, body in zip(self.starts, self.bodies[:self.blank],
                                                    strict=False))
            if scorer.vocabulary is not None:
                self.vocab = (_Vocabulary(scorer.vocabulary, self.symbols, self.starts)
                              if characters else
                              _PieceVocabulary(scorer.vocabulary, self.starts, self.bodies))

    def search(self, log_probs: np.ndarray) -> list[Hypothesis]:
        """All final prefixes of one utterance, best first. ``log_probs`` is ``[time, classes]``
        of log-probabilities (see :func:`log_softmax`)."""
        log_probs = np.asarray(log_probs)
        return self.search_batch(log_probs[None], [log_probs.shape[0]])[0]

    def search_batch(self, log_probs: np.ndarray, lengths: Sequence[int],
                     limit: int | None = None) -> list[list[Hypothesis]]:
        """:meth:`search` for a batch ``[batch, time, classes]`` whose utterance ``i`` has
        ``lengths[i]`` valid frames; at most ``limit`` hypotheses each (default: all). The
        utterances are searched side by side, each frame one set of numpy operations for all
        of them: the Python cost of a frame is paid once."""
        log_probs = np.array(log_probs, dtype=np.float64)  # a copy: frames past the end change
        utts, frames, classes = log_probs.shape
        if classes != self.blank + 1:
            raise ValueError(
                f"logits have {classes} classes; an alphabet of {self.blank} symbols needs "
                f"{self.blank + 1} (the blank last)"
            )
        lengths = np.minimum(np.asarray(lengths, dtype=np.int64).reshape(-1), frames)
        blank, width = self.blank, self.beam_width
        # Past its end an utterance sees certain blanks: its beam no longer changes.
        past = np.arange(frames)[None, :] >= lengths[:, None]
        log_probs[past] = -np.inf
        log_probs[past, blank] = 0.0
        # Probabilities with a 0 appended: label ``classes`` is "no last label" (empty prefix).
        probs = np.zeros((utts, frames, classes + 1))
        np.exp(log_probs, out=probs[..., :classes])
        order, counts = self._kept_labels(log_probs)
        rows = np.arange(utts)[:, None]
        colmap = np.full((utts, classes + 1), -1, dtype=np.int64)  # label -> kept column

        # The beams, one row per utterance; a row has as many slots as the fullest beam of the
        # batch (at most ``width``). An empty slot has probability 0, hash 0, no last label.
        hsh = _ROOT + np.arange(utts, dtype=np.uint64)[:, None] * _MULT  # the prefix's hash;
        # the empty prefix's hash differs per utterance, so that all hashes of a batch differ
        phsh = np.zeros((utts, 1), dtype=np.uint64)  # its parent's hash
        last = np.full((utts, 1), classes, dtype=np.int64)  # last label (classes: none)
        rec = np.zeros((utts, 1), dtype=np.int64)  # record, to read the text back
        pb = np.ones((utts, 1))  # P(alignments ending in a blank), scaled per utterance
        pnb = np.zeros((utts, 1))  # P(alignments ending in the last label), scaled
        log_scale = np.zeros(utts)
        records = _Records()
        lm = (_LMState(self.scorer, self.symbols, self.starts, self.bodies, self.vocab,
                       (utts, 1))
              if self.scorer is not None else None)
        graph = self.context
        if graph is not None:
            ctx = np.full((utts, 1), graph.start, dtype=np.int64)  # the prefix's graph state
            bonus = np.zeros((utts, 1))  # the hot-word score its labels added

        for t in range(frames):
            p = probs[:, t]
            total = pb + pnb
            k = int(counts[:, t].max())
            if k == 0:
                # Only blanks are likely: every prefix stays, none is extended.
                pnb = pnb * p[rows, last]
                pb = total * p[:, blank, None]
            else:
                n = total.shape[1]  # slots now; candidates: n stays, then n * k extensions
                labels = order[:, t, :k]  # [utts, k], the likeliest first
                pk = p[rows, labels]
                pk[np.arange(k)[None, :] >= counts[:, t, None]] = 0.0  # pruned labels
                spb = total * p[:, blank, None]
                spnb = pnb * p[rows, last]
                ext = total[:, :, None] * pk[:, None, :]  # [utts, width, k]
                # The column of each prefix's last label among the kept ones (-1: not kept).
                colmap[rows, labels] = np.arange(k)
                lastcol = colmap[rows, last]
                colmap[rows, labels] = -1
                own_u, own_w = np.nonzero(lastcol >= 0)
                own_c = lastcol[own_u, own_w]
                # Repeating the last label extends a prefix only through a blank.
                ext[own_u, own_w, own_c] = pb[own_u, own_w] * pk[own_u, own_c]
                self._merge(hsh, phsh, own_u, own_w, own_c, ext, spnb)
                # Candidates: the n prefixes as they stay, then their n * k extensions.
                keys = np.empty((utts, n + n * k))
                if lm is None:
                    np.add(spb, spnb, out=keys[:, :n])
                    keys[:, n:] = ext.reshape(utts, -1)
                    space_col = None
                else:
                    # Ranked by probability times exp(language-model score), both relative to
                    # the utterance's best: multiplications, no logarithm of every candidate.
                    stay_weight, ext_weight, space_col = lm.weights(labels, rec, records)
                    lm.columns = labels
                    np.multiply(spb + spnb, stay_weight, out=keys[:, :n])
                    np.multiply(ext, ext_weight, out=keys[:, n:].reshape(utts, n, k))
                ext_bias = None
                if graph is not None:
                    # And times exp(hot-word score), relative to the utterance's best prefix.
                    stay_bias, ext_bias = _context_weights(graph, ctx, bonus, total > 0.0,
                                                           labels)
                    keys[:, :n] *= stay_bias
                    keys[:, n:] *= ext_bias.reshape(utts, -1)
                valid = keys > 0.0

                if space_col is None:
                    chosen = _top(keys, valid, width)
                    alive = valid[rows, chosen]
                else:
                    chosen, alive = self._choose_scoring_words(keys, valid, ext, space_col, lm,
                                                               rec, records, n, k, ext_bias)
                kept = keys[rows, chosen]
                if self.beam_prune_logp is not None:
                    # Only where the frame extends prefixes: an utterance whose frame has no
                    # label left is pruned as if searched alone (its frame keeps every prefix).
                    floor = kept.max(axis=1, keepdims=True) * math.exp(self.beam_prune_logp)
                    alive &= (kept >= floor) | (counts[:, t] == 0)[:, None]
                slots = max(int(alive.sum(axis=1).max()), 1)
                if slots < chosen.shape[1]:
                    # Fewer prefixes than slots (early frames, pruning): pack them first and
                    # drop the empty slots that no row needs, so later frames work on less.
                    packed = np.argsort(~alive, axis=1, kind="stable")[:, :slots]
                    chosen = chosen[rows, packed]
                    alive = alive[rows, packed]

                grown = chosen >= n
                src, col = np.divmod(chosen - n, k)
                src = np.where(grown, src, chosen)  # the entry a new one comes from
                label = labels[rows, np.where(grown, col, 0)]
                parent_hash = hsh[rows, src]
                parent_rec = rec[rows, src]
                new = grown & alive
                hsh = np.where(grown, parent_hash * _MULT + (label + 1).astype(np.uint64),
                               parent_hash)
                phsh = np.where(grown, parent_hash, phsh[rows, src])
                last = np.where(grown, label, last[rows, src])
                pb = np.where(grown, 0.0, spb[rows, src])
                pnb = np.where(grown, ext[rows, src, np.where(grown, col, 0)],
                               spnb[rows, src])
                old_rec = rec
                rec = parent_rec.copy()
                rec[new] = records.add(parent_rec[new], label[new])
                dead = ~alive
                hsh[dead] = phsh[dead] = 0
                last[dead] = classes
                pb[dead] = pnb[dead] = 0.0
                if lm is not None:
                    lm.select(src, grown, label, parent_rec, rec, new, dead, old_rec, records)
                if graph is not None:
                    state = ctx[rows, src]
                    bonus = bonus[rows, src] + np.where(grown, graph.boost[state, label], 0.0)
                    ctx = np.where(grown, graph.next[state, label], state)
                    ctx[dead] = graph.start
                    bonus[dead] = 0.0

            # Rescale so that each utterance's best prefix has probability 1.
            top = (pb + pnb).max(axis=1)
            top[top == 0.0] = 1.0
            pb /= top[:, None]
            pnb /= top[:, None]
            log_scale += np.log(top)

        total = pb + pnb
        with np.errstate(divide="ignore"):
            acoustic = np.log(total) + log_scale[:, None]
        lm_scores = lm.final_scores(rec, records, total > 0) if lm is not None else None
        # The hot words completed keep their boosts; an unfinished match is taken back.
        boosts = bonus + graph.final[ctx] if graph is not None else np.zeros(total.shape)
        results = []
        for u in range(utts):
            slots = np.flatnonzero(total[u] > 0)
            lm_u = lm_scores[u, slots] if lm_scores is not None else np.zeros(slots.size)
            boost_u = boosts[u, slots]
            score = acoustic[u, slots] + lm_u + boost_u
            ranked = np.argsort(-score, kind="stable")[:limit]
            results.append([
                Hypothesis(self._text(records, int(rec[u, slots[j]])), float(score[j]),
                           float(acoustic[u, slots[j]]), float(lm_u[j]), float(boost_u[j]))
                for j in ranked
            ])
        return results

    def _text(self, records: _Records, record: int) -> str:
        labels = records.labels(record)
        if self.decode is None:
            return "".join(self.symbols[c] for c in labels)
        return self.decode(labels)

    def _choose_scoring_words(self, keys: np.ndarray, valid: np.ndarray, ext: np.ndarray,
                              space_col: np.ndarray, lm: _LMState, rec: np.ndarray,
                              records: _Records, n: int, k: int,
                              ext_bias: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """:func:`_top` for a frame where spaces finish words that have no score yet (their
        keys hold the scorer's upper bound). The beam is first chosen without them; then only
        the words whose bound beats that beam's worst prefix (and the pruning floor) are scored,
        and the final beam is chosen among the first one and those: words that cannot make the
        beam are never looked up. Returns the chosen candidates and which of them hold a prefix;
        ``keys`` is updated in place. ``ext_bias``: the extensions' hot-word weights, if any."""
        utts, width = keys.shape[0], self.beam_width
        rows = np.arange(utts)[:, None]
        space_u, space_k = np.nonzero(space_col)
        missing = np.isnan(lm.wscore[space_u]) & lm.live[space_u]
        i, w = np.nonzero(missing)
        if i.size == 0:
            chosen = _top(keys, valid, width)
            return chosen, valid[rows, chosen]
        u, col = space_u[i], space_k[i]
        pos = n + w * k + col
        bound = keys[u, pos]
        valid[u, pos] = False
        chosen = _top(keys, valid, width)
        chosen_valid = valid[rows, chosen]
        kept = np.where(chosen_valid, keys[rows, chosen], np.inf)
        full = np.isfinite(kept).sum(axis=1) >= width  # rows whose beam is full without them
        worst = np.where(full, kept.min(axis=1), 0.0)
        need = (bound > worst[u]) & (bound > 0.0)
        if self.beam_prune_logp is not None:
            best = np.where(np.isfinite(kept), kept, 0.0).max(axis=1)
            need &= bound >= best[u] * math.exp(self.beam_prune_logp)
        u, w, pos = u[need], w[need], pos[need]
        if u.size == 0:
            return chosen, chosen_valid
        lm.score_words(u, w, rec, records)
        exact = ext[u, w, col[need]] * lm.weight_of(u, w, col[need])
        if ext_bias is not None:
            exact *= ext_bias[u, w, col[need]]
        keys[u, pos] = exact
        # The final beam: the best ``width`` of the first choice and the words just scored.
        first = np.searchsorted(u, np.arange(utts))  # u is sorted (np.nonzero order)
        rank = np.arange(u.size) - first[u]
        extra = np.zeros((utts, int(rank.max()) + 1), dtype=np.int64)
        extra_valid = np.zeros(extra.shape, dtype=bool)
        extra[u, rank] = pos
        extra_valid[u, rank] = exact > 0.0
        # (a scored word may also sit in the first choice as an invalid filler: only its copy
        # among the extras is valid, so it cannot be chosen twice)
        pool = np.concatenate((chosen, extra), axis=1)
        pool_valid = np.concatenate((chosen_valid, extra_valid), axis=1)
        pick = _top(keys[rows, pool], pool_valid, width)
        return pool[rows, pick], pool_valid[rows, pick]

    @staticmethod
    def _merge(hsh: np.ndarray, phsh: np.ndarray, child_u: np.ndarray, child_w: np.ndarray,
               col: np.ndarray, ext: np.ndarray, spnb: np.ndarray) -> None:
        """An extension that spells a prefix already in the beam joins that prefix: add it to
        the prefix's ``spnb`` and remove it from ``ext``. Such a prefix (at ``child_u,
        child_w``) ends in a kept label (in column ``col``) and its parent's hash is in the
        beam; hashes differ across utterances, so one sorted search serves the batch."""
        if child_u.size == 0:
            return
        width = hsh.shape[1]
        flat = hsh.ravel()
        ordered = np.argsort(flat)
        sorted_hashes = flat[ordered]
        wanted = phsh[child_u, child_w]
        pos = np.minimum(np.searchsorted(sorted_hashes, wanted), flat.size - 1)
        hit = (sorted_hashes[pos] == wanted) & (wanted != 0)
        if not hit.any():
            return
        parent = ordered[pos[hit]]
        u, pw, c = child_u[hit], parent % width, col[hit]
        spnb[u, child_w[hit]] += ext[u, pw, c]
        ext[u, pw, c] = 0.0

    def _kept_labels(self, log_probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The non-blank labels each frame may extend a prefix with: ``order[u, t]`` lists the
        labels likeliest first and the first ``counts[u, t]`` of them are kept (those at or
        above ``token_min_logp``, and the frame's best label when it is not the blank)."""
        blank = log_probs.shape[2] - 1
        labels = log_probs[..., :blank]
        order = np.argsort(-labels, axis=-1, kind="stable")
        if self.token_min_logp is None or self.token_min_logp == -math.inf:
            counts = np.isfinite(labels).sum(-1)
        else:
            counts = (labels >= self.token_min_logp).sum(-1)
            labelled = log_probs.argmax(-1) != blank
            counts[labelled] = np.maximum(counts[labelled], 1)
        return order, counts


def _context_weights(graph: ContextGraph, ctx: np.ndarray, bonus: np.ndarray, live: np.ndarray,
                     labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """exp(hot-word score) of every prefix ``[utterances, slots]`` and of its extensions by
    ``labels`` ``[utterances, slots, labels]`` (each adds ``graph.boost``), relative to the
    utterance's best live prefix, so that nothing overflows."""
    ref = np.max(bonus, axis=1, where=live, initial=-np.inf, keepdims=True)
    stay = np.exp(bonus - np.where(np.isfinite(ref), ref, 0.0))
    return stay, stay[:, :, None] * np.exp(graph.boost[ctx[:, :, None], labels[:, None, :]])


def _top(keys: np.ndarray, valid: np.ndarray, width: int) -> np.ndarray:
    """Column indices of the ``width`` largest ``keys`` of each row (all columns if there are no
    more), in no order. Keys are probabilities (times language-model weights): 0 where not
    ``valid``. Those are replaced by distinct negative values first: numpy's partition slows
    down several times on many equal values."""
    columns = keys.shape[1]
    if columns <= width:
        return np.broadcast_to(np.arange(columns), keys.shape).copy()
    distinct = np.where(valid, keys, -1.0 - np.arange(columns))
    return np.argpartition(distinct, columns - width, axis=1)[:, columns - width:]


class _Records:
    """Every prefix ever created, as (parent record, label): the beam keeps only record numbers
    and the text is read back by following parents. Record 0 is the empty prefix."""

    def __init__(self) -> None:
        self.parent = np.zeros(256, dtype=np.int64)
        self.label = np.full(256, -1, dtype=np.int64)
        self.size = 1

    def add(self, parents: np.ndarray, labels: np.ndarray) -> np.ndarray:
        count = parents.size
        end = self.size + count
        if end > self.parent.size:
            capacity = max(2 * self.parent.size, end)
            self.parent = np.resize(self.parent, capacity)
            self.label = np.resize(self.label, capacity)
        self.parent[self.size:end] = parents
        self.label[self.size:end] = labels
        new = np.arange(self.size, end, dtype=np.int64)
        self.size = end
        return new

    def labels(self, record: int, until: int = 0) -> list[int]:
        """The labels of ``record`` after its ancestor ``until`` (default: the root), in
        order."""
        out = []
        parent, label = self.parent, self.label
        while record != until and record != 0:
            out.append(int(label[record]))
            record = int(parent[record])
        out.reverse()
        return out


class _LMState:
    """The language-model side of the beams: ``[utterances, slots]`` arrays parallel to them,
    the scorer's states where words start, and the scores of words met so far.

    A prefix's unfinished word is identified by where it starts (the record of the word-start
    label that began it, or the empty prefix) and a rolling hash of its labels (that start
    label's own when its body is the word's first text), so that a word is spelled out and
    scored once however many prefixes end in it."""

    def __init__(self, scorer: WordScorer, symbols: Sequence[str], starts: np.ndarray,
                 bodies: Sequence[str], vocab: _Vocabulary | _PieceVocabulary | None,
                 shape: tuple[int, int]) -> None:
        self.scorer = scorer
        self.symbols = symbols
        self.starts = starts  # [classes + 1]: does the label start a word (finish the last)
        self.bodies = bodies
        self.has_body = np.array([s and bool(b) for s, b in zip(starts, bodies, strict=True)])
        self.vocab = vocab
        self.penalty = scorer.partial_penalty if vocab is not None else 0.0
        # Per label: the penalty of the word a word-start label begins ("▁xq" fits no word);
        # None where no such label has a body (characters).
        self.start_penalty: np.ndarray | None = None
        if isinstance(vocab, _PieceVocabulary):
            self.start_penalty = np.where(vocab.start_node < 0, self.penalty, 0.0)
        self.columns = np.zeros((shape[0], 0), dtype=np.int64)  # the frame's kept labels
        self.committed = np.zeros(shape)  # weighted score of the prefix's finished words
        self.vpos = np.zeros(shape, dtype=np.int64)  # unfinished word's vocabulary node (-1: none)
        # committed + the score of the unfinished word if a word start finished it now; NaN
        # until asked. The empty prefix has no word: a word start adds nothing.
        self.wscore = np.zeros(shape)
        self.lm = np.zeros(shape)  # what ranks the prefix: committed + partial-word penalty
        self.start = np.zeros(shape, dtype=np.int64)  # record where the unfinished word starts
        self.whash = np.zeros(shape, dtype=np.uint64)  # hash of the unfinished word (0: empty)
        self.live = np.zeros(shape, dtype=bool)  # slots holding a prefix
        self.live[:, 0] = True
        self.states: dict[int, Any] = {0: scorer.start()}  # word-start record -> scorer state
        # (word-start record, word hash) -> (weighted word score, state after the word)
        self.words: dict[tuple[int, int], tuple[float, Any]] = {}
        self.lazy = math.isfinite(scorer.word_bound) and (
            vocab is None or math.isfinite(scorer.unknown_word_bound))

    def weights(self, labels: np.ndarray, rec: np.ndarray,
                records: _Records) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """exp(language-model score) of every prefix ``[utterances, slots]`` and extension
        ``[utterances, slots, labels]``, relative to each utterance's best prefix (so that
        nothing overflows), and where word-start labels are among ``labels`` (``None`` if
        nowhere).

        A word-start label (the space of characters) finishes a word; until the search asks
        for its exact score (:meth:`score_words`) the word gets the scorer's upper bound, if it
        has one."""
        ref = np.max(self.lm, axis=1, where=self.live, initial=-np.inf, keepdims=True)
        self.ref = np.where(np.isfinite(ref), ref, 0.0)
        live = self.live
        stay = np.exp(np.where(live, self.lm - self.ref, -np.inf))
        base = np.exp(np.where(live, self.committed - self.ref, -np.inf))
        vocab = self.vocab
        if vocab is not None:
            unknown = vocab.unknown(self.vpos, labels)
            ext = np.where(unknown, (base * math.exp(self.penalty))[:, :, None],
                           base[:, :, None])
        else:
            ext = np.repeat(base[:, :, None], labels.shape[1], axis=2)
        space_col = self.starts[labels]
        if not space_col.any():
            return stay, ext, None
        missing = np.isnan(self.wscore)
        if not self.lazy:
            u, w = np.nonzero(missing & live)
            self.score_words(u, w, rec, records)
            value = self.wscore
        elif missing.any():
            bound = np.full(missing.shape, self.scorer.word_bound)
            if vocab is not None:
                bound[~vocab.is_word[self.vpos]] = self.scorer.unknown_word_bound
            value = np.where(missing, self.committed + bound, self.wscore)
        else:
            value = self.wscore
        u, k = np.nonzero(space_col)
        relative = np.where(live, value - self.ref, -np.inf)[u]
        if self.start_penalty is not None:
            relative = relative + self.start_penalty[labels[u, k]][:, None]
        ext[u, :, k] = np.exp(relative)
        return stay, ext, space_col

    def weight_of(self, utts: np.ndarray, slots: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """exp(score) of finishing the word of the prefixes at ``(utts, slots)`` with the
        word-start label in column ``cols`` of the frame's labels, relative as in
        :meth:`weights` (after :meth:`score_words`)."""
        relative = self.wscore[utts, slots] - self.ref[utts, 0]
        if self.start_penalty is not None:
            relative = relative + self.start_penalty[self.columns[utts, cols]]
        return np.exp(relative)

    def _words(self, starts: list[int], hashes: list[int],
               records_of: list[int], records: _Records) -> list[tuple[float, Any]]:
        """For prefixes given by where their unfinished word starts, its hash and their record:
        the weighted score of that word and the state after it (for an empty word: 0 and the
        state where it would start)."""
        words, states = self.words, self.states
        out = []
        for start, whash, record in zip(starts, hashes, records_of, strict=True):
            if whash == 0:
                out.append((0.0, states[start]))
                continue
            found = words.get((start, whash))
            if found is None:
                labels = records.labels(record, until=start)
                first = self.bodies[records.label[start]] if start else ""
                found = words[(start, whash)] = self.scorer.score_word(
                    states[start], first + self._spell(labels))
            out.append(found)
        return out

    def _words_at(self, utts: np.ndarray, slots: np.ndarray, rec: np.ndarray,
                  records: _Records) -> list[tuple[float, Any]]:
        return self._words(self.start[utts, slots].tolist(), self.whash[utts, slots].tolist(),
                           rec[utts, slots].tolist(), records)

    def score_words(self, utts: np.ndarray, slots: np.ndarray, rec: np.ndarray,
                    records: _Records) -> None:
        """Score the unfinished word of the prefixes at ``(utts, slots)``."""
        found = self._words_at(utts, slots, rec, records)
        self.wscore[utts, slots] = self.committed[utts, slots] + [f[0] for f in found]

    def select(self, src: np.ndarray, grown: np.ndarray, label: np.ndarray,
               parent_rec: np.ndarray, rec: np.ndarray, new: np.ndarray, dead: np.ndarray,
               old_rec: np.ndarray, records: _Records) -> None:
        """Follow the search's choice: slot ``w`` now holds entry ``src`` of the previous beam
        (whose records were ``old_rec``), extended by ``label`` where ``grown``."""
        rows = np.arange(src.shape[0])[:, None]
        committed = self.committed[rows, src]
        wscore = self.wscore[rows, src]
        start = self.start[rows, src]
        whash = self.whash[rows, src]
        spaced = grown & self.starts[label]
        bodied = spaced & self.has_body[label]  # the new word already holds text
        u, w = np.nonzero(spaced & new)
        if u.size:
            # A word start finished a word: the next word starts from the state after it.
            found = self._words_at(u, src[u, w], old_rec, records)
            for record, (_, state) in zip(rec[u, w].tolist(), found, strict=True):
                self.states[record] = state
        self.committed = np.where(spaced, wscore, committed)
        # After a bare word start (a space) the next word is empty: a second one would add
        # nothing. After "▁the" the next word is "the", unscored.
        self.wscore = np.where(grown, np.where(spaced & ~bodied, self.committed, np.nan),
                               wscore)
        self.start = np.where(spaced, rec, start)
        step = (label + 1).astype(np.uint64)
        self.whash = np.where(grown, np.where(spaced, np.where(bodied, step, np.uint64(0)),
                                              whash * _MULT + step),
                              whash)
        # An empty slot (pruned, or never filled) holds no word: no NaN may reach the ranking.
        self.committed[dead] = 0.0
        self.wscore[dead] = 0.0
        if self.vocab is not None:
            vpos = self.vpos[rows, src]
            grown_vpos = self.vocab.step(vpos, np.where(grown, label, 0), spaced)
            self.vpos = np.where(grown, grown_vpos, vpos)
            self.vpos[dead] = 0
            self.lm = self.committed + self.penalty * (self.vpos < 0)
        else:
            self.lm = self.committed
        self.live = ~dead

    def final_scores(self, rec: np.ndarray, records: _Records, live: np.ndarray) -> np.ndarray:
        """The prefixes' language-model scores at the end: the unfinished word is finished and
        the end of the utterance is scored."""
        out = np.full(rec.shape, -np.inf)
        u, w = np.nonzero(live)
        found = self._words_at(u, w, rec, records)
        out[u, w] = self.committed[u, w] + [score + self.scorer.score_end(state)
                                            for score, state in found]
        return out

    def _spell(self, labels: list[int]) -> str:
        return "".join(self.symbols[c] for c in labels)


class _Vocabulary:
    """The words of a language model, for judging unfinished words: ``table[node, label]`` is
    the node of the longer prefix (-1 where no word continues so); ``is_word[node]`` says if the
    prefix is a whole word. Node 0 is the empty prefix; the last row (index -1) is all -1 and not
    a word, so that an unfinished word that fits no word stays at -1. Labels are characters: a
    word-start label (``starts``, the space) is no part of a word."""

    def __init__(self, vocabulary: Iterable[str], symbols: Sequence[str],
                 starts: np.ndarray) -> None:
        index = {s: i for i, s in enumerate(symbols)}
        children: list[dict[int, int]] = [{}]
        ends: set[int] = set()
        for word in vocabulary:
            labels = [index.get(c, -1) for c in word]
            if not labels or -1 in labels or starts[labels].any():
                continue  # e.g. <unk>, <s>: words the alphabet cannot spell
            node = 0
            for label in labels:
                nxt = children[node].get(label)
                if nxt is None:
                    nxt = len(children)
                    children[node][label] = nxt
                    children.append({})
                node = nxt
            ends.add(node)
        self.table = np.full((len(children) + 1, len(symbols) + 1), -1, dtype=np.int32)
        for node, kids in enumerate(children):
            for label, nxt in kids.items():
                self.table[node, label] = nxt
        self.is_word = np.zeros(len(children) + 1, dtype=bool)
        self.is_word[list(ends)] = True
        # With at most 64 labels, the labels that continue a node fit in one integer: testing
        # a bit is cheaper than gathering from the table.
        self.bits: np.ndarray | None = None
        if len(symbols) <= 64:
            weights = np.left_shift(np.uint64(1), np.arange(len(symbols), dtype=np.uint64))
            self.bits = ((self.table[:, :-1] >= 0) * weights).sum(axis=1, dtype=np.uint64)

    def unknown(self, nodes: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """``[utts, slots, labels]``: whether adding ``labels[u]`` to the unfinished word at
        ``nodes[u, slot]`` leaves it no prefix of any word."""
        if self.bits is None:
            return self.table[nodes[:, :, None], labels[:, None, :]] < 0
        bits = self.bits[nodes][:, :, None] >> labels.astype(np.uint64)[:, None, :]
        return (bits & np.uint64(1)) == 0

    def step(self, nodes: np.ndarray, labels: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """The node after ``labels`` (where ``starts``: a word start, so a new, empty word)."""
        return np.where(starts, 0, self.table[nodes, labels])


class _PieceVocabulary:
    """:class:`_Vocabulary` for subword pieces: the same character trie of the words (node 0
    the empty prefix, node -1 "fits no word"), entered by pieces. A piece goes from a node to
    the node its characters walk to; only the (node, piece) pairs that stay in the trie are
    kept, as sorted keys ``node * labels + label``, so memory grows with the vocabulary's text,
    not with nodes times pieces. They are found per word: at each character of a word, every
    piece that spells the text that follows there. A word-start piece begins a new word at
    the node of its body (``start_node``, -1 when no word begins so)."""

    def __init__(self, vocabulary: Iterable[str], starts: np.ndarray,
                 bodies: Sequence[str]) -> None:
        count = len(starts)
        pieces: dict[str, Any] = {}  # a trie of the continuing pieces' text; "" -> the label
        for label, body in enumerate(bodies):
            if body and not starts[label]:
                node = pieces
                for char in body:
                    node = node.setdefault(char, {})
                node[""] = label
        children: list[dict[str, int]] = [{}]
        ends: set[int] = set()
        pairs: dict[int, int] = {}
        for word in vocabulary:
            if not word or any(c.isspace() for c in word):
                continue
            path = [0]
            for char in word:
                nxt = children[path[-1]].get(char)
                if nxt is None:
                    nxt = len(children)
                    children[path[-1]][char] = nxt
                    children.append({})
                path.append(nxt)
            ends.add(path[-1])
            for at in range(len(word)):
                piece: dict[str, Any] | None = pieces
                for end in range(at, len(word)):
                    piece = piece.get(word[end]) if piece is not None else None
                    if piece is None:
                        break
                    found = piece.get("")
                    if found is not None:
                        pairs[path[at] * count + found] = path[end + 1]
        self.keys = np.array(sorted(pairs), dtype=np.int64)
        self.next = np.array([pairs[key] for key in self.keys.tolist()], dtype=np.int64)
        # A key no pair has, so that a search past the end finds no pair.
        self.keys = np.append(self.keys, np.iinfo(np.int64).max)
        self.next = np.append(self.next, -1)
        self.count = count
        self.start_node = np.full(count, -1, dtype=np.int64)
        for label, body in enumerate(bodies):
            if starts[label]:
                node_id = 0
                for char in body:
                    node_id = children[node_id].get(char, -1) if node_id >= 0 else -1
                self.start_node[label] = node_id
        self.is_word = np.zeros(len(children) + 1, dtype=bool)
        self.is_word[list(ends)] = True

    def _find(self, keys: np.ndarray) -> np.ndarray:
        """The node each key (``node * labels + label``) leads to, -1 where none."""
        pos = np.searchsorted(self.keys, keys)
        return np.where(self.keys[pos] == keys, self.next[pos], -1)

    def unknown(self, nodes: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """As :meth:`_Vocabulary.unknown`. (Node -1 makes a negative key: no pair.)"""
        keys = nodes[:, :, None] * self.count + labels[:, None, :]
        return self._find(keys) < 0

    def step(self, nodes: np.ndarray, labels: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """The node after ``labels``; a word-start label begins a new word at its body's."""
        return np.where(starts, self.start_node[labels], self._find(nodes * self.count + labels))
