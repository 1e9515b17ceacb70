"""Decoders of attention encoder-decoder runs: what they read, and the networks they call.

An attention run's model output is the encoder's frames; the objective's head
(:mod:`asrkit.objectives.attention`) holds an autoregressive decoder over them and, with a CTC
weight above 0, a CTC output layer on the same frames. The decoders here read
:class:`AttentionOutputs` (a batch's frames with that head, what
:meth:`asrkit.objectives.attention.AttentionObjective.decoder_inputs` hands them) and call the
head through :class:`AttentionNetworks`, a protocol any attention objective's head can meet.

- ``attention-greedy``: the attention decoder alone, its most likely label a step until it emits
  the end symbol, the whole batch in one ``decode_step`` call a step.
- ``attention-beam``: the one-pass joint CTC/attention beam search of Watanabe et al. 2017 as
  ESPnet runs it (:class:`AttentionBeamDecoder`): every hypothesis of every utterance of the
  batch in one ``decode_step`` call a step, scored by the decoder and the CTC prefix score
  (:mod:`asrkit.core.ctc_prefix`), with a word language model fused in through the prefix
  search's :class:`~asrkit.decoders.scoring.WordScorer` as the transducer's beam search fuses
  one (:meth:`AttentionBeamDecoder.make_scorer`), and hot words boosted through their context
  graph (:mod:`asrkit.decoders.context`; the end symbol ends the last word).

Both stop a hypothesis at ``max_length_ratio`` labels an encoder frame, and say which
utterances' transcripts that cut (:class:`Decoded`'s ``hit_length_limit``). Both give each
label a frame (``decode_tokens``), which word times read: where the CTC output most likely
first emits it, or, without a CTC output, spread evenly over the utterance.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from asrkit import hookimpl
from asrkit.core.ctc_prefix import LOG_ZERO, CTCPrefixScorer, PrefixStates
from asrkit.core.errors import AsrkitError
from asrkit.core.settings import setting, validate
from asrkit.decoders.context import ContextGraph
from asrkit.decoders.scoring import Hypothesis, WordScorer
from asrkit.decoders.transducer import (
    Token,
    finish_words,
    partial_penalties,
    read_symbol,
    steps_of,
    word_prefixes,
)
from asrkit.types import Decoded, Decoder

if TYPE_CHECKING:
    import numpy as np

    from asrkit.core.labels import Labels
    from asrkit.hookspecs import Register


#: What the attention decoders read (:attr:`asrkit.types.Decoder.reads`) and an attention
#: objective outputs (:attr:`asrkit.types.Objective.outputs`): :class:`AttentionOutputs`.
ATTENTION_OUTPUTS = "attention"


class AttentionNetworks(Protocol):
    """What the decoders call of an attention objective's head (numpy arrays or tensors in,
    float32 tensors out).

    Label sequences are asrkit's labels (classes ``0 .. N-1``); class ``N``, the last (the
    CTC blank of the CTC output), is also the attention decoder's start and end symbol:
    every sequence the decoder reads starts with it, and it emits it to end.
    """

    #: The start and end symbol of the attention decoder: the last class.
    eos: int
    #: Whether the head has a CTC output (the run was trained with ``ctc_weight`` > 0).
    has_ctc: bool

    def ctc_log_probs(self, frames: Any) -> Any:
        """The CTC output's log-probabilities ``[batch, frames, classes]`` of encoder
        ``frames`` ``[batch, frames, width]`` (the blank last). Only when ``has_ctc``."""

    def initial_state(self, frames: Any, lengths: Any) -> Any:
        """The decoder's state before its first step, ``[n, state_size]`` float32, for
        ``frames`` ``[n, frames, width]`` of which the first ``lengths`` ``[n]`` are read."""

    def decode_step(self, frames: Any, lengths: Any, tokens: Any,
                    state: Any) -> tuple[Any, Any]:
        """The log-probabilities ``[n, classes]`` of the next label after ``tokens`` ``[n, L]``
        (the whole prefix so far, the start symbol first: a Transformer decoder reads it all,
        a recurrent one its last label with ``state``), and the state after it."""


@dataclass
class AttentionOutputs:
    """A batch as the attention decoders read it: the encoder's ``frames`` ``[batch, frames,
    width]`` and the ``networks`` that read them."""

    frames: np.ndarray
    networks: AttentionNetworks

    def __len__(self) -> int:
        return len(self.frames)


# -- the decoders ---------------------------------------------------------------------------------

class _AttentionSteps:
    """The head's calls compiled once per head (a ``tf.function`` each), numpy out. A step
    gathers each hypothesis' frames inside the compiled call: the batch's frames are handed
    over once a step, not copied per hypothesis in Python."""

    def __init__(self, networks: AttentionNetworks) -> None:
        import tensorflow as tf

        self.eos = int(networks.eos)
        self.has_ctc = bool(networks.has_ctc)

        def step(frames: Any, lengths: Any, rows: Any, tokens: Any,
                 state: Any) -> tuple[Any, Any]:
            return networks.decode_step(tf.gather(frames, rows), tf.gather(lengths, rows),
                                        tokens, state)

        self._step = tf.function(step, reduce_retracing=True)
        self._initial = tf.function(networks.initial_state, reduce_retracing=True)
        self._ctc = (tf.function(networks.ctc_log_probs, reduce_retracing=True)
                     if self.has_ctc else None)

    def initial_state(self, frames: Any, lengths: Any) -> np.ndarray:
        import numpy as np

        return np.asarray(self._initial(frames, lengths))

    def step(self, frames: Any, lengths: Any, rows: np.ndarray, tokens: np.ndarray,
             state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The log-probabilities ``[n, classes]`` (float64) of the next label of the
        hypotheses whose utterances are ``rows`` and labels ``tokens`` ``[n, L]`` (the start
        symbol not included), and their states after it."""
        import numpy as np

        with_start = np.concatenate([np.full((len(tokens), 1), self.eos), tokens], axis=1)
        log_probs, state = self._step(frames, lengths, rows.astype(np.int32),
                                      with_start.astype(np.int32),
                                      np.asarray(state, np.float32))
        return np.asarray(log_probs, np.float64), np.asarray(state)

    def ctc_log_probs(self, frames: Any) -> np.ndarray:
        import numpy as np

        if self._ctc is None:
            raise AsrkitError("this attention run has no CTC output")
        return np.asarray(self._ctc(frames), np.float64)


class _Batch:
    """One batch as the searches read it: the frames as tensors (converted once), the
    lengths, each utterance's label limit, and the CTC output's prefix scores once read."""

    def __init__(self, decoder: str, outputs: Any, lengths: Any,
                 max_length_ratio: float) -> None:
        import numpy as np
        import tensorflow as tf

        inputs = _inputs(outputs, decoder)
        self.steps = steps_of(inputs.networks, _AttentionSteps)
        frames = np.asarray(inputs.frames, np.float32)
        if lengths is None:
            lengths = np.full(len(frames), frames.shape[1])
        self.lengths = np.minimum(np.asarray(lengths, np.int64).reshape(-1), frames.shape[1])
        self.size = len(frames)
        self.frames = tf.convert_to_tensor(frames)
        self.frame_lengths = tf.convert_to_tensor(self.lengths.astype(np.int32))
        #: The most labels an utterance's hypothesis may emit (ESPnet's ``maxlen``: at least 1).
        self.limits = np.maximum(1, np.floor(max_length_ratio * self.lengths)).astype(np.int64)
        #: The CTC output's prefix scores, once :meth:`read_ctc` has read them.
        self.ctc: CTCPrefixScorer | None = None

    def read_ctc(self) -> None:
        """Score the batch's CTC output once, for prefix scores and label frames."""
        if self.ctc is None and self.size:
            self.ctc = CTCPrefixScorer(self.steps.ctc_log_probs(self.frames), self.lengths,
                                       self.steps.eos)

    def initial_state(self) -> np.ndarray:
        return self.steps.initial_state(self.frames, self.frame_lengths)

    def step(self, rows: np.ndarray, tokens: np.ndarray,
             state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.steps.step(self.frames, self.frame_lengths, rows, tokens, state)

    def tokens(self, found: Sequence[Sequence[int]]) -> list[list[Token]]:
        """Each utterance's labels with a frame each: the frame the CTC output most likely
        first emits it at (:meth:`CTCPrefixScorer.first_frames`), else (no CTC output, or
        labels it cannot spell in the frames) spread evenly over the utterance."""
        if self.steps.has_ctc and any(found):
            self.read_ctc()
        aligned = (self.ctc.first_frames(found) if self.ctc is not None
                   else [None] * len(found))
        out = []
        for row, labels in enumerate(found):
            length = int(self.lengths[row])
            frames = aligned[row]
            if frames is None:
                frames = [min(max(length - 1, 0), int((k + 0.5) * length / len(labels)))
                          for k in range(len(labels))]
            out.append(list(zip(labels, frames, strict=True)))
        return out


def _inputs(outputs: Any, decoder: str) -> AttentionOutputs:
    if not isinstance(outputs, AttentionOutputs):
        raise AsrkitError(f"the {decoder} decoder reads an attention run's outputs, not CTC "
                          "logits: decode a CTC run with greedy, beam or a language-model "
                          "decoder")
    return outputs


class AttentionDecoder(Decoder):
    """What the attention decoders share: text from the labels each finds, and each label's
    frame."""

    reads = ATTENTION_OUTPUTS

    def decode(self, logits: Any, lengths: Any, labels: Labels) -> Decoded[str]:
        _, found = self._best(logits, lengths, labels)
        return Decoded([labels.decode(tokens) for tokens in found], found.hit_length_limit)

    def decode_tokens(self, outputs: Any, lengths: Any, labels: Labels) -> Decoded[list[Token]]:
        """Each utterance's labels and a frame each (:meth:`_Batch.tokens`); the utterances
        cut by the length limit in ``hit_length_limit``."""
        batch, found = self._best(outputs, lengths, labels)
        return Decoded(batch.tokens(found), found.hit_length_limit)

    def _best(self, outputs: Any, lengths: Any,
              labels: Labels) -> tuple[_Batch, Decoded[list[int]]]:
        """The batch as read, and each utterance's best labels."""
        raise NotImplementedError


@dataclass(frozen=True)
class AttentionGreedyConfig:
    #: The most labels a transcript has, per encoder frame of its utterance (at least 1): a
    #: decoder that never emits the end symbol stops there.
    max_length_ratio: float = setting(1.0, above=0.0, max=100.0)

    def __post_init__(self) -> None:
        validate(self)


def greedy_search(batch: _Batch) -> tuple[list[list[int]], list[int]]:
    """The attention decoder's most likely label at each step, for the whole batch side by
    side (one ``decode_step`` a step), until it emits the end symbol or reaches its
    utterance's limit: each utterance's labels, and the utterances that reached it."""
    import numpy as np

    found: list[list[int]] = [[] for _ in range(batch.size)]
    cut: list[int] = []
    if batch.size == 0:
        return found, cut
    rows = np.arange(batch.size)
    tokens = np.zeros((batch.size, 0), np.int64)
    state = batch.initial_state()
    while len(rows):
        log_probs, state = batch.step(rows, tokens, state)
        best = log_probs.argmax(-1)
        going = best != batch.steps.eos
        for row, label in zip(rows[going], best[going], strict=True):
            found[row].append(int(label))
        rows, tokens, state = rows[going], np.concatenate(
            [tokens[going], best[going, None]], axis=1), state[going]
        full = tokens.shape[1] >= batch.limits[rows]
        cut += rows[full].tolist()
        rows, tokens, state = rows[~full], tokens[~full], state[~full]
    return found, sorted(cut)


class AttentionGreedyDecoder(AttentionDecoder):
    """The attention decoder alone, its best label a step (no CTC, no beam). Of the choices
    (this, or the joint search at width 1) the fastest: a step is one batched network call
    and an argmax, where the CTC prefix score would cost a pass over the frames a step. The
    CTC output's help, against an attention decoder that ends early or loops, is what
    ``attention-beam`` is for."""

    name = "attention-greedy"
    description = "Attention decoder, greedy: its best label a step until it ends."
    Config = AttentionGreedyConfig

    def _best(self, outputs: Any, lengths: Any,
              labels: Labels) -> tuple[_Batch, Decoded[list[int]]]:
        batch = _Batch(self.name, outputs, lengths, self.config.max_length_ratio)
        found, cut = greedy_search(batch)
        return batch, Decoded(found, cut)


@dataclass(frozen=True)
class AttentionBeamConfig:
    #: Hypotheses kept a step per utterance (ended ones leave the beam, as in ESPnet).
    beam_width: int = setting(10, min=1, max=1000)
    #: The CTC prefix score's weight in a hypothesis' score, the attention decoder's is
    #: 1 - it: 0 the decoder alone, 1 the CTC output alone. A run trained without a CTC
    #: output (objective.ctc_weight=0) is searched with the decoder alone; 1 needs one.
    ctc_weight: float = setting(0.3, min=0.0, max=1.0)
    #: The labels a hypothesis is extended by are the attention decoder's best
    #: beam_width x this, before the CTC output scores them (ESPnet's pre-beam: the CTC
    #: prefix score costs a pass over the frames per candidate). With ctc_weight 0 or 1,
    #: every label.
    pre_beam_ratio: float = setting(1.5, min=1.0, max=100.0)
    #: Added to a hypothesis' score per label it emits (ESPnet's "penalty"): above 0 against
    #: transcripts that end too early, below 0 against long ones.
    length_bonus: float = setting(0.0, min=-100.0, max=100.0)
    #: Rank the final hypotheses by their score divided by their labels + 1; off, by the
    #: score.
    length_norm: bool = setting(False)
    #: The most labels a transcript has, per encoder frame of its utterance (at least 1); a
    #: hypothesis that reaches it ends there, and an utterance whose best one did is named in
    #: the result's hit_length_limit.
    max_length_ratio: float = setting(1.0, above=0.0, max=100.0)
    #: Stop an utterance's search when the best hypotheses ended at each of the last 3
    #: lengths are this far (natural log) below the best ended one (ESPnet's end_detect); none:
    #: search until every hypothesis ended or reached the limit.
    end_margin: float | None = setting(10.0, above=0.0, max=1e6)

    def __post_init__(self) -> None:
        validate(self)


#: The most cells (frames x hypotheses x candidate labels) of a batch's CTC prefix scores at
#: once: each of the few arrays of a step's scores is 8 bytes a cell, 128 MB at this size. A wider
#: beam searches fewer utterances side by side (at width 10 and 300 frames, 372).
CTC_CELLS = 1 << 24
#: End detection looks at the hypotheses ended at this many last lengths (ESPnet's ``M``).
END_LENGTHS = 3


@dataclass
class _Words:
    """A hypothesis' word-language-model state (:class:`WordState`)."""

    word: str = ""
    lm: float = 0.0
    lm_state: Any = None
    partial: float = 0.0


@dataclass
class _Ended:
    """A finished hypothesis: its labels, scores, and whether the length limit ended it."""

    tokens: tuple[int, ...]
    acoustic: float
    lm: float
    cut: bool
    #: What the hot words it completed add (:mod:`asrkit.decoders.context`).
    boost: float = 0.0

    @property
    def score(self) -> float:
        return self.acoustic + self.lm + self.boost


@dataclass
class _Running:
    """The hypotheses being extended, of every utterance of the batch, row by row."""

    rows: np.ndarray  # [n] each one's utterance
    tokens: np.ndarray  # [n, L] its labels (L: the step)
    attention: np.ndarray  # [n] the attention decoder's log-probability of them
    state: np.ndarray  # [n, state_size] the attention decoder's state
    ctc: PrefixStates | None  # their CTC prefix states (with a CTC weight)
    words: list[_Words] | None  # their language-model states (with a word scorer)
    context: np.ndarray  # [n] their states in the hot words' graph (0 without hot words)
    boost: np.ndarray  # [n] what their labels added there

    def take(self, index: np.ndarray) -> _Running:
        return _Running(self.rows[index], self.tokens[index], self.attention[index],
                        self.state[index], None if self.ctc is None else self.ctc.take(index),
                        None if self.words is None else [self.words[i] for i in index],
                        self.context[index], self.boost[index])


class AttentionBeamDecoder(AttentionDecoder):
    """The one-pass joint CTC/attention beam search of Watanabe et al. 2017, as ESPnet's
    ``BatchBeamSearch`` runs it: label-synchronous, every hypothesis of every utterance of the
    batch extended in one ``decode_step`` call a step; a hypothesis scores
    ``(1 - ctc_weight) x log P_att + ctc_weight x log psi_ctc + length_bonus x labels`` (+ a
    word language model, :meth:`make_scorer`), where ``psi_ctc`` is the CTC prefix score
    (:mod:`asrkit.core.ctc_prefix`), which becomes the CTC probability of the whole transcript
    when the hypothesis ends. The CTC output keeps the decoder from ending early or looping,
    the decoder gives the CTC output context.

    A step: the attention decoder's ``pre_beam_ratio x beam_width`` best labels of each
    hypothesis (only the end symbol for one at its utterance's length limit) are scored with
    the CTC output; each hypothesis' ``beam_width`` best extensions (with the partial-word
    penalty), with a language model scoring the words they finish, compete for its
    utterance's ``beam_width`` places; those that chose the end symbol leave the beam for the
    ended ones. An utterance's search stops when no hypothesis is left, or at end detection
    (``end_margin``; ESPnet applies it only without a length limit, and looks two lengths
    further back). The ended hypotheses, best first, are the n-best list."""

    name = "attention-beam"
    description = ("Attention decoder, joint CTC/attention beam search (ESPnet's one-pass "
                   "search; settings: beam_width, ctc_weight, ...).")
    Config = AttentionBeamConfig
    takes_hotwords = True

    def make_scorer(self, labels: Labels) -> WordScorer | None:
        """The word scorer (language model) fused into the search, scoring a word when the
        next one starts and at the end; ``None``: none. A language-model decoder for attention
        runs overrides this."""
        return None

    def _best(self, outputs: Any, lengths: Any,
              labels: Labels) -> tuple[_Batch, Decoded[list[int]]]:
        batch, found = self._search(outputs, lengths, labels)
        return batch, Decoded([list(hyps[0].tokens) for hyps in found],
                              [row for row, hyps in enumerate(found) if hyps[0].cut])

    def decode_nbest(self, outputs: Any, lengths: Any, labels: Labels,
                     count: int | None = None) -> Decoded[list[Hypothesis]]:
        """The ``count`` best hypotheses of each utterance (default: ``beam_width``), best
        first; ``hit_length_limit`` names the utterances whose best one was cut."""
        _, found = self._search(outputs, lengths, labels)
        count = self.config.beam_width if count is None else count
        return Decoded([[Hypothesis(labels.decode(h.tokens), self._rank(h), h.acoustic, h.lm,
                                    h.boost)
                         for h in hyps[:count]] for hyps in found],
                       [row for row, hyps in enumerate(found) if hyps[0].cut])

    def _rank(self, hyp: _Ended) -> float:
        return hyp.score / (len(hyp.tokens) + 1) if self.config.length_norm else hyp.score

    def _search(self, outputs: Any, lengths: Any,
                labels: Labels) -> tuple[_Batch, list[list[_Ended]]]:
        """Each utterance's ended hypotheses, best first (at least one each)."""
        import numpy as np

        inputs = _inputs(outputs, self.name)
        decoder = self
        if self.config.ctc_weight and not inputs.networks.has_ctc:
            if self.config.ctc_weight == 1:
                raise AsrkitError(f"the {self.name} decoder's ctc_weight is 1 (CTC alone) and "
                                  "this run has no CTC output (trained with objective."
                                  "ctc_weight=0): set decoder.ctc_weight below 1")
            # A run trained without CTC: the joint search is the attention decoder's alone.
            decoder = self.with_config(ctc_weight=0.0)
        config = decoder.config
        weight = config.ctc_weight
        batch = _Batch(self.name, inputs, lengths, config.max_length_ratio)
        ended: list[list[_Ended]] = [[] for _ in range(batch.size)]
        # Utterances side by side, as many as keep the CTC prefix score's arrays (frames x
        # hypotheses x candidates) within CTC_CELLS.
        candidates = (labels.num_classes if weight in (0, 1)
                      else min(labels.num_classes, int(config.pre_beam_ratio * config.beam_width)))
        cells = int(np.shape(inputs.frames)[1]) * config.beam_width * candidates
        step = max(1, batch.size if weight == 0 else CTC_CELLS // max(1, cells))
        for start in range(0, batch.size, step):
            part = slice(start, start + step)
            searched = batch if step >= batch.size else _Batch(
                self.name, AttentionOutputs(inputs.frames[part], inputs.networks),
                batch.lengths[part], config.max_length_ratio)
            if weight > 0:
                searched.read_ctc()
            _Search(decoder, searched, labels, ended[part]).run()
        return batch, [sorted(hyps, key=self._rank, reverse=True) or [_Ended((), LOG_ZERO, 0.0,
                                                                              False)]
                       for hyps in ended]


class _Search:
    """One batch's joint beam search (:class:`AttentionBeamDecoder`)."""

    def __init__(self, decoder: AttentionBeamDecoder, batch: _Batch, labels: Labels,
                 ended: list[list[_Ended]]) -> None:
        self.config = decoder.config
        self.batch = batch
        self.labels = labels
        self.ended = ended
        self.eos = batch.steps.eos
        self.scorer = decoder.make_scorer(labels)
        self.known = (word_prefixes(self.scorer.vocabulary)
                      if self.scorer is not None and self.scorer.vocabulary is not None
                      else None)
        self.penalties: dict[str, np.ndarray] = {}  # unfinished word -> after each label
        self.graph = (ContextGraph.build(labels, decoder.hotwords) if decoder.hotwords
                      else None)
        #: Per utterance, the best score of the hypotheses ended at each length.
        self.best_by_length: list[dict[int, float]] = [{} for _ in range(batch.size)]

    def run(self) -> None:
        import numpy as np

        batch, config = self.batch, self.config
        rows = np.arange(batch.size)
        running = _Running(
            rows, np.zeros((batch.size, 0), np.int64), np.zeros(batch.size),
            batch.initial_state() if config.ctc_weight < 1 else np.zeros((batch.size, 0)),
            None if batch.ctc is None else batch.ctc.initial(rows),
            None if self.scorer is None else [_Words(lm_state=self.scorer.start())
                                              for _ in rows],
            np.full(batch.size, self.graph.start if self.graph is not None else 0),
            np.zeros(batch.size))
        step = 0
        while len(running.rows):
            running = self._step(running, step)
            step += 1

    def _acoustic(self, attention: np.ndarray, ctc: np.ndarray | float,
                  labels: int) -> np.ndarray:
        import numpy as np

        weight = self.config.ctc_weight
        return ((1 - weight) * attention + weight * np.asarray(ctc)
                + self.config.length_bonus * labels)

    def _step(self, running: _Running, step: int) -> _Running:
        import numpy as np

        batch, config, eos = self.batch, self.config, self.eos
        weight, beam = config.ctc_weight, config.beam_width
        n = len(running.rows)
        state = running.state
        if weight < 1:
            log_probs, state = batch.step(running.rows, running.tokens, running.state)
            classes = log_probs.shape[1]
        else:
            assert batch.ctc is not None
            classes = batch.ctc.x.shape[2]
            log_probs = np.zeros((n, classes))
        # The labels each hypothesis may be extended by.
        pre_beam = int(config.pre_beam_ratio * beam)
        if 0 < weight < 1 and pre_beam < classes:
            candidates = np.argpartition(-log_probs, pre_beam - 1, axis=1)[:, :pre_beam]
        else:
            candidates = np.broadcast_to(np.arange(classes), (n, classes)).copy()
        # A hypothesis at its utterance's limit may only end.
        forced = step >= batch.limits[running.rows]
        candidates[forced, 0] = eos
        columns = np.arange(candidates.shape[1])
        allowed = ~(forced[:, None] & (columns[None] > 0))
        attention = running.attention[:, None] + np.take_along_axis(log_probs, candidates, 1)
        if running.ctc is not None:
            assert batch.ctc is not None
            extensions = batch.ctc.extend(running.ctc, candidates)
            ctc = extensions.scores
        else:
            extensions, ctc = None, np.zeros(candidates.shape)
        ends = candidates == eos
        scores = self._acoustic(attention, ctc, step + 1) - np.where(ends, config.length_bonus,
                                                                     0.0)
        words = running.words
        if words is not None:  # the words' scores so far, the partial-word penalty after
            scores = scores + self._penalties(words, candidates)
        boosts = self._boosts(running, candidates)
        if boosts is not None:
            scores = scores + boosts
        scores = np.where(allowed, scores, -np.inf)
        # Each hypothesis' beam best, with the words they finish scored ...
        width = min(beam, candidates.shape[1])
        best = np.argpartition(-scores, width - 1, axis=1)[:, :width]
        parents = np.repeat(np.arange(n), width)
        chosen = best.reshape(-1)
        totals = scores[parents, chosen]
        children: list[_Words] | None = None
        if words is not None:
            children, totals = self._read(words, parents, candidates[parents, chosen], totals)
        # ... and the utterance's beam best of them all.
        keep = np.isfinite(totals)
        order = np.lexsort((-totals, running.rows[parents]))
        order = order[keep[order]]
        utterance = running.rows[parents[order]]
        first = np.searchsorted(utterance, utterance, side="left")
        order = order[np.arange(len(order)) - first < beam]
        parents, chosen = parents[order], chosen[order]
        labels = candidates[parents, chosen]
        finishing = labels == eos
        for index in np.flatnonzero(finishing):
            parent = parents[index]
            row = int(running.rows[parent])
            lm = children[order[index]].lm if children is not None else 0.0
            boost = float(boosts[parent, chosen[index]]) if boosts is not None else 0.0
            hyp = _Ended(tuple(int(t) for t in running.tokens[parent]),
                         float(totals[order[index]]) - lm - boost, lm, bool(forced[parent]),
                         boost)
            self.ended[row].append(hyp)
            known = self.best_by_length[row]
            known[step] = max(known.get(step, -np.inf), hyp.score)
        going = ~finishing
        parents, chosen, labels = parents[going], chosen[going], labels[going]
        context = running.context[parents]
        following = _Running(
            running.rows[parents],
            np.concatenate([running.tokens[parents], labels[:, None]], axis=1),
            attention[parents, chosen], state[parents],
            None if extensions is None else extensions.take(parents, chosen),
            None if children is None else [children[i] for i in order[going]],
            context if self.graph is None else self.graph.next[context, labels],
            running.boost[parents] if boosts is None else boosts[parents, chosen])
        return following.take(np.flatnonzero(~self._stopped(following.rows, step)))

    def _boosts(self, running: _Running, candidates: np.ndarray) -> np.ndarray | None:
        """Each candidate's hot-word score: its parent's and what its label adds (the end
        symbol: the completed hot words kept, a partial match taken back); ``None`` without
        hot words."""
        import numpy as np

        graph = self.graph
        if graph is None:
            return None
        context = running.context[:, None]
        return running.boost[:, None] + np.where(candidates == self.eos, graph.final[context],
                                                 graph.boost[context, candidates])

    def _penalties(self, words: list[_Words], candidates: np.ndarray) -> np.ndarray:
        """Each candidate's language-model score before the word it may finish: its parent's
        words, and the partial-word penalty after it (none after the end)."""
        import numpy as np

        lm = np.array([hyp.lm for hyp in words])[:, None]
        if self.known is None or self.scorer is None:
            return np.broadcast_to(lm, candidates.shape)
        rows = []
        for hyp in words:
            if hyp.word not in self.penalties:
                self.penalties[hyp.word] = partial_penalties(
                    hyp.word, self.labels, self.scorer.partial_penalty, self.known)
            rows.append(self.penalties[hyp.word])
        return lm + np.take_along_axis(np.stack(rows), candidates, 1)

    def _read(self, words: list[_Words], parents: np.ndarray, labels: np.ndarray,
              totals: np.ndarray) -> tuple[list[_Words], np.ndarray]:
        """The children's language-model states after their labels (a finished word scored,
        the end scored at the end), and their totals with the scores it added."""
        import numpy as np

        assert self.scorer is not None
        children = []
        totals = totals.copy()
        for index, (parent, label) in enumerate(zip(parents, labels, strict=True)):
            hyp = words[parent]
            child = dataclasses.replace(hyp)
            if not np.isfinite(totals[index]):
                children.append(child)
                continue
            if label == self.eos:
                finish_words(child, self.scorer)
            else:
                read_symbol(child, self.labels.symbols[label], self.labels, self.scorer,
                            self.known)
            # The penalty is already in the total; the words' scores are not.
            totals[index] += child.lm - hyp.lm
            children.append(child)
        return children, totals

    def _stopped(self, rows: np.ndarray, step: int) -> np.ndarray:
        """Which of ``rows`` belong to utterances whose search ends (end detection): the
        best hypotheses ended at each of the last :data:`END_LENGTHS` lengths are all more
        than ``end_margin`` below the best ended."""
        import numpy as np

        margin = self.config.end_margin
        if margin is None:
            return np.zeros(len(rows), bool)
        done = np.zeros(self.batch.size, bool)
        for row in np.unique(rows):
            known = self.best_by_length[row]
            if not known:
                continue
            best = max(known.values())
            done[row] = all(known.get(step - m, np.inf) < best - margin
                            for m in range(END_LENGTHS))
        return done[rows]


@hookimpl
def register_decoders(register: Register) -> None:
    register(AttentionGreedyDecoder())
    register(AttentionBeamDecoder())
