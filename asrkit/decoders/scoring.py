"""The scorer interface of the prefix beam search, and its result: pure Python, so that a plugin
can subclass :class:`WordScorer` at import time without loading numpy (the search itself,
:mod:`asrkit.decoders.prefix`, loads it when a decoder first decodes).

A language-model decoder is a :class:`WordScorer` plugged into the one search
(:class:`asrkit.decoders.beam.BeamSearchDecoder` builds it from the decoder's ``make_scorer``):
the search asks the scorer for a word's score when a word-start label finishes it (the space
among characters, a ``"▁"`` piece among SentencePiece pieces: words are the labels' words, see
:mod:`asrkit.core.labels`), and for the end of the utterance; everything else (alignments, merging,
pruning, n-best) is the search's.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Hypothesis:
    """One decoded transcript with its scores (natural logarithms).

    ``acoustic`` is log P(text | logits) summed over the alignments the beam kept; ``lm`` is the
    weighted language-model score (0 without one); ``boost`` what the hot words it holds add (0
    without hot words, :mod:`asrkit.decoders.context`); ``score = acoustic + lm + boost`` ranks
    hypotheses.
    """

    text: str
    score: float
    acoustic: float
    lm: float = 0.0
    boost: float = 0.0


class WordScorer(ABC):
    """A word-level language model as the prefix search consults it.

    Scores are natural logarithms, already weighted: exactly what is added to the acoustic
    log-probability (e.g. ``alpha * ln P(word | history) + beta``). A *state* is whatever the
    scorer needs to remember the history; the search stores it and hands it back.
    """

    #: Words the model knows. When set, a prefix whose unfinished last word is no prefix of any
    #: of them gets ``partial_penalty``, so that non-words lose the beam before they finish.
    vocabulary: frozenset[str] | None = None
    #: Added (once, while it holds) to a prefix whose unfinished word fits no vocabulary word.
    partial_penalty: float = 0.0
    #: An upper bound of :meth:`score_word`'s score (e.g. ``beta`` for ``alpha * ln p + beta``
    #: with ``alpha >= 0``). The search scores a finished word only when its prefix could make
    #: the beam with this bound; ``inf`` makes it score every word it meets.
    word_bound: float = math.inf
    #: The same for words outside ``vocabulary`` (e.g. ``beta + unk_offset``).
    unknown_word_bound: float = math.inf

    @abstractmethod
    def start(self) -> Any:
        """The state at the start of an utterance."""

    @abstractmethod
    def score_word(self, state: Any, word: str) -> tuple[float, Any]:
        """The weighted score of ``word`` following ``state``, and the state after it."""

    @abstractmethod
    def score_end(self, state: Any) -> float:
        """The weighted score of ending the utterance in ``state``."""


