"""``attention-kenlm``: the joint CTC/attention beam search with a KenLM word n-gram model fused
in (shallow fusion), for the runs of an attention encoder-decoder objective.

The search is asrkit's public ``attention-beam`` (:class:`asrkit.api.AttentionBeamDecoder`,
ESPnet's one-pass joint decoding); this module gives it the ``kenlm`` decoder's
:class:`~asrkit.api.WordScorer`, so a hypothesis is ranked by its joint CTC/attention score plus,
for each finished word, ``alpha * ln P_lm(word | history) + beta`` (``unk_offset`` more for a word
the model does not know), and the partial-word penalty while its unfinished word is no prefix of a
known word, as the CTC and transducer decoders rank theirs. The language model and its weights
are the ``kenlm`` decoder's settings; the search's are ``attention-beam``'s.

Which runs it decodes is said by what it reads (``reads``: the attention objective's outputs):
a CTC or transducer run refuses it in one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from asrkit.api import AttentionBeamConfig, AttentionBeamDecoder, WordScorer, validate
from asrkit_decoder_kenlm.decoder import LanguageModelConfig, make_scorer


@dataclass(frozen=True)
class AttentionKenLMConfig(AttentionBeamConfig, LanguageModelConfig):
    """Settings of ``attention-kenlm``: the language model's (``lm``, ``alpha``, ``beta``, ...)
    and the joint beam search's (``beam_width``, ``ctc_weight``, ``length_bonus``, ...)."""

    def __post_init__(self) -> None:
        validate(self)


class AttentionKenLMDecoder(AttentionBeamDecoder):
    name = "attention-kenlm"
    description = ("Joint CTC/attention beam search with a KenLM word n-gram model (shallow "
                   "fusion; settings: lm, alpha, beta, beam_width, ctc_weight, ...).")
    Config = AttentionKenLMConfig

    def make_scorer(self, labels: Any) -> WordScorer:
        """The language model, as the attention search's word scorer."""
        return make_scorer(self.config, self.name)
