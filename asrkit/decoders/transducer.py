"""Decoders of transducer runs: ``transducer-greedy`` and ``transducer-beam``.

A transducer's model output is not logits: it is the encoder's frames, which the objective's
prediction and joint networks turn into label probabilities one emitted label at a time. So
these decoders read :class:`TransducerOutputs` (the frames of a batch with the networks, what
:meth:`asrkit.objectives.transducer.TransducerObjective.decoder_inputs` hands them) and call
the networks through :class:`TransducerNetworks`, a protocol any transducer objective's head
can meet.

- ``transducer-greedy``: at each frame, the most likely class; a label is emitted and the frame
  read again (at most ``max_symbols`` labels a frame), the blank moves to the next frame. The
  whole batch side by side: two network calls a frame and emitted label.
- ``transducer-beam``: a beam search over label sequences, frame by frame: every hypothesis is
  extended by the blank (it has read the frame) or by one of its ``beam_width`` best labels (it
  reads the frame again, up to ``max_symbols`` times); after each extension the ``beam_width``
  best of those that read the frame and of those still extending are kept, and hypotheses that
  read the frame with the same labels are merged (their probabilities summed), as in the
  modified beam search of k2 and icefall, with several labels a frame allowed. At
  ``beam_width=1`` it is exactly the greedy search. A word language model joins through the
  prefix search's :class:`~asrkit.decoders.scoring.WordScorer` (shallow fusion:
  :meth:`TransducerBeamDecoder.make_scorer`; the kenlm plugin's ``transducer-kenlm``), scoring a
  word when the next one starts and at the end, with the scorer's partial-word penalty while
  the unfinished word is no prefix of a word it knows, as in the CTC prefix search. Hot words
  (:mod:`asrkit.decoders.context`) are boosted as the CTC prefix search boosts them: each
  hypothesis walks the context graph, its labels chosen and ranked with their boosts.

A decoder decodes the runs of every objective whose outputs it reads (:data:`TRANSDUCER_OUTPUTS`,
:attr:`asrkit.types.Decoder.reads`): a plugin's transducer decoder is chosen as these are.

Both give each label's frame (:meth:`TransducerDecoder.decode_tokens`), which word times read.
"""

from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from asrkit import hookimpl
from asrkit.core.errors import AsrkitError
from asrkit.core.settings import setting
from asrkit.decoders.context import ContextGraph
from asrkit.decoders.scoring import Hypothesis, WordScorer
from asrkit.types import Decoder

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np

    from asrkit.core.labels import Labels
    from asrkit.hookspecs import Register


#: What the transducer decoders read (:attr:`asrkit.types.Decoder.reads`) and a transducer
#: objective outputs (:attr:`asrkit.types.Objective.outputs`): :class:`TransducerOutputs`.
TRANSDUCER_OUTPUTS = "transducer"


class TransducerNetworks(Protocol):
    """What the decoders call of a transducer's head (tensors or numpy arrays in, tensors out;
    float32)."""

    #: The blank's class (the last: asrkit's labels count it so).
    blank: int

    def initial_state(self, count: int) -> Any:
        """The prediction network's state before any label, ``[count, state_size]``."""

    def predict_step(self, tokens: Any, state: Any) -> tuple[Any, Any]:
        """After reading ``tokens`` ``[n]`` (the blank: the start), the prediction network's
        output ``[n, joint_dim]`` and its state ``[n, state_size]``."""

    def joint_step(self, frames: Any, predicted: Any) -> Any:
        """Log-probabilities ``[n, classes]`` of ``frames`` ``[n, joint_dim]`` after
        ``predicted``."""


@dataclass
class TransducerOutputs:
    """A batch as a transducer's decoders read it: the encoder's ``frames`` ``[batch, frames,
    joint_dim]`` and the ``networks`` that read them."""

    frames: np.ndarray
    networks: TransducerNetworks

    def __len__(self) -> int:
        return len(self.frames)


#: A label and the frame it was emitted at.
Token = tuple[int, int]


class _Steps:
    """The networks' step functions compiled once per head (a ``tf.function`` each), with
    numpy in and out: a decoder calls them a few hundred times an utterance."""

    def __init__(self, networks: TransducerNetworks) -> None:
        import tensorflow as tf

        self.blank = int(networks.blank)
        self.initial_state = lambda count: networks.initial_state(count).numpy()
        self._predict = tf.function(networks.predict_step, reduce_retracing=True)
        self._joint = tf.function(networks.joint_step, reduce_retracing=True)

    def predict(self, tokens: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        import numpy as np

        predicted, after = self._predict(np.asarray(tokens, np.int32),
                                         np.asarray(state, np.float32))
        return predicted.numpy(), after.numpy()

    def joint(self, frames: np.ndarray, predicted: np.ndarray) -> np.ndarray:
        import numpy as np

        return self._joint(np.asarray(frames, np.float32),
                           np.asarray(predicted, np.float32)).numpy()


S = TypeVar("S")


def steps_of(networks: Any, make: Callable[[Any], S]) -> S:
    """The compiled steps ``make(networks)`` of a head (its network calls, each a ``tf.function``
    traced once), made once per head and kind of steps and kept on it: every batch a decoder
    decodes calls the same head. The transducer's decoders and the attention decoders
    (:mod:`asrkit.decoders.attention`) keep theirs so."""
    kept = getattr(networks, "_asrkit_decoding_steps", None)
    if not isinstance(kept, dict):
        kept = {}
        with contextlib.suppress(AttributeError, TypeError):  # kept when the head takes it
            object.__setattr__(networks, "_asrkit_decoding_steps", kept)
    steps = kept.get(make)
    if steps is None:
        steps = kept[make] = make(networks)
    return steps


def _inputs(outputs: Any, decoder: str) -> TransducerOutputs:
    if not isinstance(outputs, TransducerOutputs):
        raise AsrkitError(f"the {decoder} decoder reads a transducer's outputs, not CTC logits: "
                          "decode a CTC run with greedy, beam or a language-model decoder")
    return outputs


def greedy_search(networks: TransducerNetworks, frames: np.ndarray, lengths: np.ndarray,
                  max_symbols: int) -> list[list[Token]]:
    """The greedy search over a batch (see the module docstring): each utterance's labels with
    the frame each was emitted at."""
    import numpy as np

    steps = steps_of(networks, _Steps)
    frames = np.asarray(frames, np.float32)
    lengths = np.asarray(lengths)
    size = len(frames)
    found: list[list[Token]] = [[] for _ in range(size)]
    if size == 0:
        return found
    predicted, state = steps.predict(np.full(size, steps.blank), steps.initial_state(size))
    for t in range(int(lengths.max(initial=0))):
        reading = lengths > t
        for _ in range(max_symbols):
            best = steps.joint(frames[:, t], predicted).argmax(-1)
            emits = reading & (best != steps.blank)
            if not emits.any():
                break
            for row in np.flatnonzero(emits):
                found[row].append((int(best[row]), t))
            new_predicted, new_state = steps.predict(np.where(emits, best, steps.blank), state)
            predicted = np.where(emits[:, None], new_predicted, predicted)
            state = np.where(emits[:, None], new_state, state)
            reading = emits
    return found


class TransducerDecoder(Decoder):
    """What the transducer decoders share: text from the labels each finds."""

    reads = TRANSDUCER_OUTPUTS

    def decode(self, logits: Any, lengths: Any, labels: Labels) -> list[str]:
        return [labels.decode(token for token, _ in found)
                for found in self.decode_tokens(logits, lengths, labels)]

    def decode_tokens(self, outputs: Any, lengths: Any, labels: Labels) -> list[list[Token]]:
        """Each utterance's labels and the frame each was emitted at."""
        raise NotImplementedError


@dataclass(frozen=True)
class TransducerGreedyConfig:
    #: The most labels emitted at one frame before the search moves on (a model that keeps
    #: emitting at a frame would otherwise never stop).
    max_symbols: int = setting(4, min=1, max=100)


class TransducerGreedyDecoder(TransducerDecoder):
    name = "transducer-greedy"
    description = "Transducer greedy search: the best class a step, a few labels a frame at most."
    Config = TransducerGreedyConfig

    def decode_tokens(self, outputs: Any, lengths: Any, labels: Labels) -> list[list[Token]]:
        inputs = _inputs(outputs, self.name)
        return greedy_search(inputs.networks, inputs.frames, lengths, self.config.max_symbols)


@dataclass(frozen=True)
class TransducerBeamConfig:
    #: Hypotheses kept after each extension; 1 is the greedy search.
    beam_width: int = setting(4, min=1, max=1000)
    #: The most labels one hypothesis emits at one frame.
    max_symbols: int = setting(4, min=1, max=100)
    #: Rank the final hypotheses by their score divided by their labels + 1 (longer transcripts
    #: gather more negative log-probabilities); off, by the score.
    length_norm: bool = setting(False)


@dataclass
class _Hyp:
    tokens: tuple[int, ...]
    frames: tuple[int, ...]
    acoustic: float
    lm: float
    predicted: Any  # [joint_dim]
    state: Any  # [state_size]
    lm_state: Any = None
    word: str = ""
    #: The scorer's partial-word penalty while ``word`` fits no word it knows, else 0.
    partial: float = 0.0
    #: Its state in the hot words' context graph, and what its labels added there.
    context: int = 0
    boost: float = 0.0

    @property
    def score(self) -> float:
        return self.acoustic + self.lm + self.partial + self.boost


class TransducerBeamDecoder(TransducerDecoder):
    name = "transducer-beam"
    description = "Transducer beam search (modified beam search, several labels a frame)."
    Config = TransducerBeamConfig
    takes_hotwords = True

    def make_scorer(self, labels: Labels) -> WordScorer | None:
        """The word scorer (language model) fused into the search; ``None``: acoustics
        alone. A language-model decoder for transducers overrides this."""
        return None

    def decode_tokens(self, outputs: Any, lengths: Any, labels: Labels) -> list[list[Token]]:
        return [list(zip(best.tokens, best.frames, strict=True))
                for best in (h[0] for h in self._search(outputs, lengths, labels))]

    def decode_nbest(self, outputs: Any, lengths: Any, labels: Labels,
                     count: int | None = None) -> list[list[Hypothesis]]:
        """The ``count`` best hypotheses of each utterance (default: the whole beam), best
        first."""
        found = []
        for hyps in self._search(outputs, lengths, labels):
            found.append([Hypothesis(labels.decode(h.tokens), self._rank(h), h.acoustic, h.lm,
                                     h.boost)
                          for h in hyps[:count]])
        return found

    def _rank(self, hyp: _Hyp) -> float:
        return hyp.score / (len(hyp.tokens) + 1) if self.config.length_norm else hyp.score

    def _search(self, outputs: Any, lengths: Any, labels: Labels) -> list[list[_Hyp]]:
        import numpy as np

        inputs = _inputs(outputs, self.name)
        scorer = self.make_scorer(labels)
        graph = ContextGraph.build(labels, self.hotwords) if self.hotwords else None
        steps = steps_of(inputs.networks, _Steps)
        return [self._utterance(steps, np.asarray(inputs.frames[row], np.float32),
                                int(length), labels, scorer, graph)
                for row, length in enumerate(np.asarray(lengths))]

    def _utterance(self, steps: _Steps, frames: np.ndarray, length: int, labels: Labels,
                   scorer: WordScorer | None, graph: ContextGraph | None = None) -> list[_Hyp]:
        import numpy as np

        beam, cap = self.config.beam_width, self.config.max_symbols
        predicted, state = steps.predict(np.full(1, steps.blank), steps.initial_state(1))
        hyps = [_Hyp((), (), 0.0, 0.0, predicted[0], state[0],
                     scorer.start() if scorer else None,
                     context=graph.start if graph is not None else 0)]
        known = (word_prefixes(scorer.vocabulary)
                 if scorer is not None and scorer.vocabulary is not None else None)
        penalties: dict[str, np.ndarray] = {}  # unfinished word -> each label's penalty after
        for t in range(length):
            done: dict[tuple[int, ...], _Hyp] = {}
            active = hyps
            for emitted in range(cap + 1):
                if not active:
                    break
                logprobs = steps.joint(np.repeat(frames[t][None], len(active), 0),
                                       np.stack([h.predicted for h in active]))
                candidates: list[tuple[float, _Hyp, int]] = []
                for row, hyp in enumerate(active):
                    _merge(done, _Hyp(hyp.tokens, hyp.frames,
                                      hyp.acoustic + float(logprobs[row, steps.blank]), hyp.lm,
                                      hyp.predicted, hyp.state, hyp.lm_state, hyp.word,
                                      hyp.partial, hyp.context, hyp.boost))
                    if emitted == cap:
                        continue
                    scores = logprobs[row].copy()
                    scores[steps.blank] = -np.inf
                    if scorer is not None and known is not None:  # with the partial penalty
                        if hyp.word not in penalties:
                            penalties[hyp.word] = partial_penalties(
                                hyp.word, labels, scorer.partial_penalty, known)
                        scores += penalties[hyp.word] - hyp.partial
                    if graph is not None:  # labels chosen with their hot-word boosts
                        scores += graph.boost[hyp.context]
                    for label in np.argsort(-scores)[:beam]:
                        label = int(label)
                        child = _Hyp((*hyp.tokens, label), (*hyp.frames, t),
                                     hyp.acoustic + float(logprobs[row, label]), hyp.lm,
                                     hyp.predicted, hyp.state, hyp.lm_state, hyp.word,
                                     hyp.partial)
                        if graph is not None:
                            child.context = int(graph.next[hyp.context, label])
                            child.boost = hyp.boost + float(graph.boost[hyp.context, label])
                        if scorer is not None:
                            read_symbol(child, labels.symbols[label], labels, scorer, known)
                        candidates.append((child.score, child, row))
                # The best of those that read the frame and of those that go on extending.
                pool = sorted([(h.score, h, -1) for h in done.values()] + candidates,
                              key=lambda item: -item[0])[:beam]
                done = {h.tokens: h for _, h, row in pool if row < 0}
                active = self._predicted(steps, [(h, row) for _, h, row in pool if row >= 0],
                                         active)
            hyps = sorted(done.values(), key=lambda h: -h.score)[:beam]
        if scorer is not None:
            hyps = [finish_words(h, scorer) for h in hyps]
        if graph is not None:  # completed hot words keep their boosts, a partial match not
            for hyp in hyps:
                hyp.boost += float(graph.final[hyp.context])
                hyp.context = graph.start
        return sorted(hyps, key=lambda h: -self._rank(h))

    @staticmethod
    def _predicted(steps: _Steps, children: list[tuple[_Hyp, int]],
                   parents: list[_Hyp]) -> list[_Hyp]:
        """``children`` (each with its parent's row in ``parents``) after the prediction
        network has read their last label."""
        import numpy as np

        if not children:
            return []
        predicted, state = steps.predict(
            np.array([child.tokens[-1] for child, _ in children]),
            np.stack([parents[row].state for _, row in children]))
        for index, (child, _) in enumerate(children):
            child.predicted, child.state = predicted[index], state[index]
        return [child for child, _ in children]


class WordState(Protocol):
    """What :func:`read_symbol` and :func:`finish_words` keep of a hypothesis for a word
    language model: the transducer's and the attention decoders' hypotheses alike."""

    #: The unfinished word's text.
    word: str
    #: The language model's score of the finished words (and of the end, once finished).
    lm: float
    #: The scorer's state after them.
    lm_state: Any
    #: The scorer's partial-word penalty while ``word`` fits no word it knows, else 0.
    partial: float


W = TypeVar("W", bound=WordState)


def read_symbol(hyp: WordState, symbol: str, labels: Labels, scorer: WordScorer,
                known: frozenset[str] | None) -> None:
    """Score the word ``symbol`` finishes (a symbol starting with the word marker starts
    the next one), with the language model; the unfinished word pays the scorer's
    ``partial_penalty`` while it is no prefix of the ``known`` prefixes of its words."""
    marker = getattr(labels, "word_marker", " ")
    if not symbol.startswith(marker):
        hyp.word += symbol
    else:
        if hyp.word:
            score, hyp.lm_state = scorer.score_word(hyp.lm_state, hyp.word)
            hyp.lm += score
        hyp.word = symbol[len(marker):]
    fits = known is None or not hyp.word or hyp.word in known
    hyp.partial = 0.0 if fits else scorer.partial_penalty


def partial_penalties(word: str, labels: Labels, penalty: float,
                      known: frozenset[str]) -> np.ndarray:
    """The partial-word penalty after each label follows the unfinished ``word``: the
    labels that extend a hypothesis are chosen by their acoustic score with it, so that a
    likelier non-word ("k" before "at") does not take the place of a word ("c")."""
    import numpy as np

    marker = getattr(labels, "word_marker", " ")
    after = np.zeros(labels.num_classes)
    for label, symbol in enumerate(labels.symbols):
        spelt = symbol[len(marker):] if symbol.startswith(marker) else word + symbol
        if spelt and spelt not in known:
            after[label] = penalty
    return after


def finish_words(hyp: W, scorer: WordScorer) -> W:
    """``hyp`` at the end of the utterance: its last word and the end scored."""
    if hyp.word:
        score, hyp.lm_state = scorer.score_word(hyp.lm_state, hyp.word)
        hyp.lm += score
        hyp.word = ""
    hyp.partial = 0.0
    hyp.lm += scorer.score_end(hyp.lm_state)
    return hyp


@functools.lru_cache(maxsize=4)
def word_prefixes(vocabulary: frozenset[str]) -> frozenset[str]:
    """Every prefix of every word of ``vocabulary`` (the words too): what an unfinished word
    may be without paying the partial-word penalty. Kept for the few vocabularies a process
    decodes with (a frozenset hashes once)."""
    return frozenset(word[:end] for word in vocabulary for end in range(1, len(word) + 1))


def _merge(done: dict[tuple[int, ...], _Hyp], hyp: _Hyp) -> None:
    """Keep ``hyp`` among the hypotheses that read the frame, its probability summed with one of
    the same labels (the same prediction-network state: the same labels)."""
    same = done.get(hyp.tokens)
    if same is None:
        done[hyp.tokens] = hyp
        return
    high, low = max(same.acoustic, hyp.acoustic), min(same.acoustic, hyp.acoustic)
    same.acoustic = high + math.log1p(math.exp(low - high))


@hookimpl
def register_decoders(register: Register) -> None:
    register(TransducerGreedyDecoder())
    register(TransducerBeamDecoder())
