"""``transducer-kenlm``: the transducer's beam search with a KenLM word n-gram model fused in
(shallow fusion), for the runs of a transducer objective.

The search is asrkit's public ``transducer-beam`` (:class:`asrkit.api.TransducerBeamDecoder`,
k2's modified beam search); this module gives it the ``kenlm`` decoder's
:class:`~asrkit.api.WordScorer`, so a hypothesis is ranked by

    ln P(labels) + sum over its finished words of (alpha * ln P_lm(word | history) + beta)

plus ``unk_offset`` for every finished word the model does not know, and once while its unfinished
word is no prefix of a known word, as the CTC decoder ranks its prefixes. The language model and
its weights are the ``kenlm`` decoder's settings; the search's are ``transducer-beam``'s. A word is
scored when the label starting the next one is emitted (a space, or a piece starting with ``▁``)
and at the end, so the fused score of a hypothesis is exact whatever the labels.

Which runs it decodes is said by what it reads (``reads``: the transducer's outputs), not by a
list in the objective: a CTC run refuses it in one line, as a transducer run refuses ``kenlm``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from asrkit.api import TransducerBeamConfig, TransducerBeamDecoder, WordScorer, validate
from asrkit_decoder_kenlm.decoder import LanguageModelConfig, make_scorer


@dataclass(frozen=True)
class TransducerKenLMConfig(TransducerBeamConfig, LanguageModelConfig):
    """Settings of ``transducer-kenlm``: the language model's (``lm``, ``alpha``, ``beta``, ...)
    and the transducer beam search's (``beam_width``, ``max_symbols``, ``length_norm``)."""

    def __post_init__(self) -> None:
        validate(self)


class TransducerKenLMDecoder(TransducerBeamDecoder):
    name = "transducer-kenlm"
    description = ("Transducer beam search with a KenLM word n-gram model (shallow fusion; "
                   "settings: lm, alpha, beta, beam_width, ...).")
    Config = TransducerKenLMConfig

    def make_scorer(self, labels: Any) -> WordScorer:
        """The language model, as the transducer search's word scorer."""
        return make_scorer(self.config, self.name)
