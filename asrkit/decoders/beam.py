"""``beam``: CTC prefix beam search without a language model, and :class:`BeamSearchDecoder`, the
public base of every decoder built on the one search (:mod:`asrkit.decoders.prefix`): a
language-model decoder is a ``BeamSearchDecoder`` whose :meth:`~BeamSearchDecoder.make_scorer`
returns a :class:`~asrkit.decoders.scoring.WordScorer` (the kenlm plugin's decoder is one).

Why a beam at all without a language model: best-path (``greedy``) decoding takes the single most
likely alignment; the beam sums the probability of all alignments of a transcript it keeps, so a
transcript spread over several moderately likely alignments can win. It also yields an n-best list
with probabilities (:meth:`BeamSearchDecoder.decode_nbest`).

Settings are a frozen dataclass, ``BeamDecoder.Config``; a configured decoder is a new object
(the :class:`~asrkit.types.Decoder` contract)::

    decoder = BeamDecoder().with_config(beam_width=500)
    decoder = BeamDecoder(BeamDecoder.Config(beam_width=500, token_min_logp=None))

The module imports nothing heavy: numpy and the search load when a decoder first decodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from asrkit import hookimpl
from asrkit.core.errors import AsrkitError
from asrkit.core.settings import setting, validate
from asrkit.decoders.context import ContextGraph
from asrkit.decoders.scoring import Hypothesis, WordScorer
from asrkit.types import Decoder

if TYPE_CHECKING:
    import numpy as np

    from asrkit.core.labels import Labels
    from asrkit.decoders.prefix import PrefixBeamSearch
    from asrkit.hookspecs import Register

#: Utterances searched side by side (see PrefixBeamSearch.search_batch): enough to amortise
#: the per-frame cost of numpy calls, few enough to keep the arrays in cache ...
BATCH = 32
#: ... and fewer for wide beams (at most this many prefixes a frame in a batch): the record of
#: every prefix created lives until the batch is done.
BATCH_PREFIXES = 6400


@dataclass(frozen=True)
class BeamConfig:
    """Settings of the ``beam`` decoder (``-o decoder.NAME=VALUE`` on the command line); the
    three search settings every :class:`BeamSearchDecoder`'s ``Config`` has."""

    #: Prefixes kept after each frame. Cost grows about linearly with it.
    beam_width: int = setting(100, min=1, max=10_000)
    #: Only labels with at least this log-probability in a frame may extend a prefix (the
    #: frame's best label always may); a frame where only the blank is left is handled without
    #: sorting. ``None`` (or ``-inf``): every label, the exact search. e^-10 is 4.5e-5: such a
    #: label would have to beat ``beam_width`` better-scored prefixes to matter.
    token_min_logp: float | None = setting(-10.0, max=0, finite=False)
    #: Drop prefixes whose probability is more than this (natural log) below the best one's.
    #: ``None``: keep the ``beam_width`` best, however far behind.
    beam_prune_logp: float | None = setting(None, max=0, finite=False)

    def __post_init__(self) -> None:
        validate(self)


class BeamSearchDecoder(Decoder):
    """A decoder running :class:`~asrkit.decoders.prefix.PrefixBeamSearch`, optionally with a
    word scorer (a language model). A subclass sets ``name``, ``description`` and ``Config`` (a
    frozen dataclass with at least ``beam_width``, ``token_min_logp`` and ``beam_prune_logp``,
    as :class:`BeamConfig`), and, for a language model, :meth:`make_scorer`. The settings API is
    the :class:`~asrkit.types.Decoder` contract: ``Config``, ``config``, ``with_config``.
    """

    Config: ClassVar[type] = BeamConfig
    takes_hotwords = True
    #: Hypotheses read out beyond the ``n`` asked for, for :meth:`finish` to merge or drop.
    spare_hypotheses: ClassVar[int] = 0

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        # Built per label set on first use: the search precomputes tables for its labels.
        self._searches: dict[tuple[type, tuple[str, ...], str], PrefixBeamSearch] = {}

    def make_scorer(self, labels: Labels) -> WordScorer | None:
        """The word scorer (language model) for ``labels``; ``None``: acoustics alone."""
        return None

    def make_search(self, labels: Labels) -> PrefixBeamSearch:
        """The search for ``labels`` (an :class:`~asrkit.core.labels.Labels`: characters or
        subword pieces) with this decoder's settings, scorer and hot words (their context graph,
        :mod:`asrkit.decoders.context`). The scorer's words are found at the labels' word
        marker: the space among characters, ``"▁"`` pieces among SentencePiece pieces."""
        from asrkit.decoders.prefix import PrefixBeamSearch

        marker = getattr(labels, "word_marker", " ")
        scorer = self.make_scorer(labels)
        if scorer is not None and not any(s.startswith(marker) for s in labels.symbols):
            what = "a space" if marker == " " else f"a symbol starting with {marker!r}"
            raise AsrkitError(f"the {self.name} decoder finds words where a symbol starts "
                              f"one, and the labels hold no such symbol ({what})")
        return PrefixBeamSearch(
            labels.symbols,
            self.config.beam_width,
            token_min_logp=self.config.token_min_logp,
            beam_prune_logp=self.config.beam_prune_logp,
            scorer=scorer,
            word_marker=marker,
            decode=getattr(labels, "decode", None),
            context=ContextGraph.build(labels, self.hotwords) if self.hotwords else None,
        )

    def search_for(self, labels: Labels) -> PrefixBeamSearch:
        key = (type(labels), tuple(labels.symbols), getattr(labels, "word_marker", " "))
        search = self._searches.get(key)
        if search is None:
            search = self._searches[key] = self.make_search(labels)
        return search

    def finish(self, hypotheses: list[Hypothesis]) -> list[Hypothesis]:
        """Post-process one utterance's hypotheses (best first); the default keeps them."""
        return hypotheses

    def decode(self, logits: np.ndarray, lengths: np.ndarray | None,
               labels: Labels) -> list[str]:
        """The best transcript of each utterance of ``logits [batch, time, classes]``."""
        return [best[0].text if best else ""
                for best in self.decode_nbest(logits, lengths, labels, 1)]

    def decode_nbest(self, logits: np.ndarray, lengths: np.ndarray | None, labels: Labels,
                     n: int | None = None) -> list[list[Hypothesis]]:
        """Up to ``n`` hypotheses per utterance (default: the whole final beam), best first,
        each with its total, acoustic and language-model log scores."""
        import numpy as np

        from asrkit.decoders.prefix import log_softmax

        logits = np.asarray(logits)
        if logits.ndim != 3:
            raise AsrkitError(f"logits must be [batch, time, classes], not shape {logits.shape}")
        if lengths is None:
            lengths = np.full(logits.shape[0], logits.shape[1])
        lengths = np.asarray(lengths).reshape(-1)
        if lengths.shape[0] != logits.shape[0]:
            raise AsrkitError(f"{lengths.shape[0]} lengths for a batch of {logits.shape[0]}")
        search = self.search_for(labels)
        lengths = np.minimum(lengths.astype(np.int64), logits.shape[1])
        out: list[list[Hypothesis]] = [[] for _ in lengths]
        # Utterances of similar length side by side: the search pays per frame of the longest.
        by_length = np.argsort(lengths, kind="stable")
        batch = max(1, min(BATCH, BATCH_PREFIXES // search.beam_width))
        for start in range(0, len(by_length), batch):
            chunk = by_length[start:start + batch]
            frames = int(lengths[chunk].max(initial=0))
            limit = None if n is None else n + self.spare_hypotheses
            found = search.search_batch(log_softmax(logits[chunk, :frames]), lengths[chunk],
                                        limit)
            for index, hypotheses in zip(chunk.tolist(), found, strict=True):
                hypotheses = self.finish(hypotheses)
                out[index] = hypotheses if n is None else hypotheses[:n]
        return out


class BeamDecoder(BeamSearchDecoder):
    name = "beam"
    description = "CTC prefix beam search without a language model (settings: beam_width, ...)."
    Config = BeamConfig


@hookimpl
def register_decoders(register: Register) -> None:
    register(BeamDecoder())
