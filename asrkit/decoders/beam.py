"""``beam``: CTC prefix beam search without a language model, and the base class of every decoder
built on :mod:`asrkit.decoders.prefix` (the kenlm plugin's language-model decoder is one).

Why a beam at all without a language model: best-path (``greedy``) decoding takes the single most
likely alignment; the beam sums the probability of all alignments of a transcript it keeps, so a
transcript spread over several moderately likely alignments can win. It also yields an n-best list
with probabilities (:meth:`BeamSearchDecoder.decode_nbest`).

Options are a frozen dataclass, ``BeamDecoder.Config``; a configured decoder is a new object::

    decoder = BeamDecoder().with_config(beam_width=500)
    decoder = BeamDecoder(BeamDecoder.Config(beam_width=500, token_min_logp=None))

The module imports nothing heavy: numpy and the search load when a decoder first decodes.
"""

from __future__ import annotations

import dataclasses
import math
from abc import abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from asrkit import hookimpl
from asrkit.errors import AsrkitError
from asrkit.train.config import setting, validate
from asrkit.types import Decoder

if TYPE_CHECKING:
    from asrkit.decoders.prefix import Hypothesis, PrefixBeamSearch

D = TypeVar("D", bound="BeamSearchDecoder")

#: Utterances searched side by side (see PrefixBeamSearch.search_batch): enough to amortise
#: the per-frame cost of numpy calls, few enough to keep the arrays in cache ...
BATCH = 32
#: ... and fewer for wide beams (at most this many prefixes a frame in a batch): the record of
#: every prefix created lives until the batch is done.
BATCH_PREFIXES = 6400


def check_search_options(beam_width: int, token_min_logp: float | None,
                         beam_prune_logp: float | None) -> None:
    """Reject search options that cannot work, with a message naming the option."""
    if not isinstance(beam_width, int) or beam_width < 1:
        raise AsrkitError(f"beam_width must be a positive integer, not {beam_width!r}")
    if token_min_logp is not None and (math.isnan(token_min_logp) or token_min_logp > 0):
        raise AsrkitError(
            f"token_min_logp is a log-probability (<= 0; none or -inf: no pruning), "
            f"not {token_min_logp!r}"
        )
    if beam_prune_logp is not None and (math.isnan(beam_prune_logp) or beam_prune_logp > 0):
        raise AsrkitError(
            f"beam_prune_logp is a log-probability ratio (<= 0; none: no pruning), "
            f"not {beam_prune_logp!r}"
        )


@dataclass(frozen=True)
class BeamConfig:
    """Options of the ``beam`` decoder (``-o decoder.NAME=VALUE`` on the command line)."""

    #: Prefixes kept after each frame. Cost grows about linearly with it.
    beam_width: int = setting(100, min=1)
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
    """A decoder running :class:`~asrkit.decoders.prefix.PrefixBeamSearch`: subclasses set
    ``Config`` (a frozen dataclass) and build the search for an alphabet in :meth:`make_search`.

    The configuration API every such decoder shares:

    - ``type(decoder).Config``: the options, with their defaults;
    - ``decoder.config``: this decoder's options;
    - ``decoder.with_config(config=None, **changes)``: a new decoder with ``config`` (default:
      this one's) and the fields in ``changes`` replaced. Decoders are immutable: the registered
      instance keeps its defaults.
    """

    Config: ClassVar[type]
    #: Hypotheses read out beyond the ``n`` asked for, for :meth:`finish` to merge or drop.
    spare_hypotheses: ClassVar[int] = 0

    def __init__(self, config: Any = None) -> None:
        if config is None:
            config = self.Config()
        if not isinstance(config, self.Config):
            raise AsrkitError(
                f"the {self.name} decoder takes a {self.Config.__qualname__}, "
                f"not {type(config).__name__}"
            )
        self.config = config
        # Built per alphabet on first use: the search precomputes tables for its alphabet.
        self._searches: dict[tuple[str, ...], PrefixBeamSearch] = {}

    def with_config(self: D, config: Any = None, /, **changes: Any) -> D:
        """A new decoder with ``config`` (default: this decoder's) and ``changes`` applied;
        an unknown option is an :class:`~asrkit.errors.AsrkitError` naming the known ones."""
        base = self.config if config is None else config
        if not isinstance(base, self.Config):
            raise AsrkitError(
                f"the {self.name} decoder takes a {self.Config.__qualname__}, "
                f"not {type(base).__name__}"
            )
        known = {f.name for f in dataclasses.fields(self.Config)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise AsrkitError(
                f"unknown option(s) {', '.join(unknown)} for the {self.name} decoder; "
                f"known: {', '.join(sorted(known))}"
            )
        return type(self)(dataclasses.replace(base, **changes))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config!r})"

    @abstractmethod
    def make_search(self, alphabet: Any) -> PrefixBeamSearch:
        """The search for ``alphabet`` with this decoder's options."""

    def search_for(self, alphabet: Any) -> PrefixBeamSearch:
        key = tuple(alphabet.symbols)
        search = self._searches.get(key)
        if search is None:
            search = self._searches[key] = self.make_search(alphabet)
        return search

    def finish(self, hypotheses: list[Hypothesis]) -> list[Hypothesis]:
        """Post-process one utterance's hypotheses (best first); the default keeps them."""
        return hypotheses

    def decode(self, logits: Any, lengths: Any, alphabet: Any) -> list[str]:
        """The best transcript of each utterance of ``logits [batch, time, classes]``."""
        return [best[0].text if best else ""
                for best in self.decode_nbest(logits, lengths, alphabet, 1)]

    def decode_nbest(self, logits: Any, lengths: Any, alphabet: Any,
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
        search = self.search_for(alphabet)
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
    description = "CTC prefix beam search without a language model (options: beam_width, ...)."
    Config = BeamConfig

    def make_search(self, alphabet: Any) -> PrefixBeamSearch:
        from asrkit.decoders.prefix import PrefixBeamSearch

        return PrefixBeamSearch(
            alphabet.symbols,
            self.config.beam_width,
            token_min_logp=self.config.token_min_logp,
            beam_prune_logp=self.config.beam_prune_logp,
        )


@hookimpl
def register_decoders(register: Any) -> None:
    register(BeamDecoder())
