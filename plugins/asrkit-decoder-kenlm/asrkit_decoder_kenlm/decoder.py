"""``kenlm``: CTC prefix beam search with a word n-gram language model queried through KenLM.

The search is asrkit's own, public one (:class:`asrkit.api.BeamSearchDecoder`, the search behind
``beam``); this module only adds a :class:`~asrkit.api.WordScorer` that asks KenLM. A prefix is
ranked by

    ln P_ctc(prefix) + sum over its finished words of (alpha * ln P_lm(word | history) + beta)

plus ``unk_offset`` once for every finished word the model does not know, and ``unk_offset``
while the unfinished last word is no prefix of any word of the model's vocabulary (so non-words
lose the beam early). At the end the unfinished word is finished and ``</s>`` is scored. The
weights and their defaults are pyctcdecode's (alpha 0.5, beta 1.5, unk_offset -10), so weights
tuned with it carry over; one difference: pyctcdecode adds ``unk_offset`` to the log10 score of an
unknown word before weighting (so it costs ``alpha * ln 10 * unk_offset``), asrkit adds it as it is.

Only asrkit's public API is used (``asrkit.api``, ``asrkit.core.errors``): any author could have
written this plugin.

``kenlm`` (a compiled extension) is imported only when a decoder first decodes.
"""

from __future__ import annotations

import math
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asrkit.api import AsrkitError, BeamSearchDecoder, WordScorer, setting, validate

#: ln(10): KenLM scores are log10, the search's are natural logarithms.
LN10 = math.log(10.0)
#: Word scores remembered across utterances before the cache starts afresh (bounded memory over a
#: long evaluation; a few hundred bytes an entry).
CACHE_ENTRIES = 500_000


@dataclass(frozen=True)
class LanguageModelConfig:
    """The language model and its weights: the settings the ``kenlm`` and ``transducer-kenlm``
    decoders share (``-o decoder.NAME=VALUE`` on the command line)."""

    #: The language model: an ARPA file (e.g. from ``asrkit lm build``) or a KenLM binary.
    lm: str = ""
    #: Weight of the language model's natural-log probability of each word.
    alpha: float = setting(0.5, min=0, max=100)
    #: Word insertion bonus: added for every word; counters the LM's preference for few words.
    beta: float = setting(1.5, min=-100, max=100)
    #: Added for a word the model (or ``unigrams``) does not know, and to a prefix whose
    #: unfinished word fits no known word (a penalty: 0 or negative). 0 turns both off.
    unk_offset: float = setting(-10.0, min=-1000, max=0)
    #: One word a line: the vocabulary for the unfinished-word check. Default: the ARPA file's
    #: unigrams; a binary model without this file gets no unfinished-word check.
    unigrams: str = ""
    #: Treat the utterance as a sentence: score the first word after ``<s>`` and end with
    #: ``</s>``. False: the utterance is a fragment of running text.
    sentence_boundaries: bool = True


@dataclass(frozen=True)
class KenLMConfig(LanguageModelConfig):
    """Settings of the ``kenlm`` decoder: the language model's, and the CTC prefix search's."""

    #: Prefixes kept after each frame.
    beam_width: int = setting(100, min=1, max=10_000)
    #: As for ``beam``: labels below this log-probability in a frame extend no prefix.
    #: pyctcdecode's default; ``none`` or ``-inf`` for every label.
    token_min_logp: float | None = setting(-5.0, max=0, finite=False)
    #: Drop prefixes scoring more than this below the best (acoustic + LM, natural log).
    #: pyctcdecode's default; ``none`` keeps the ``beam_width`` best, however far behind.
    beam_prune_logp: float | None = setting(-10.0, max=0, finite=False)

    def __post_init__(self) -> None:
        validate(self)


_MODELS: dict[str, Any] = {}
_MODELS_LOCK = threading.Lock()


def load_model(path: str, decoder: str = "kenlm") -> Any:
    """The KenLM model at ``path``, loaded once per process (decoders share it: a configured
    copy of a decoder does not load the file again); ``decoder`` names the decoder in errors."""
    if not path:
        raise AsrkitError(
            f"the {decoder} decoder needs a language model: -o decoder.lm=PATH (build one with "
            "`asrkit lm build`)"
        )
    resolved = str(Path(path).expanduser().resolve())
    with _MODELS_LOCK:
        model = _MODELS.get(resolved)
        if model is None:
            try:
                import kenlm
            except ImportError as error:
                raise AsrkitError(
                    f"the {decoder} decoder needs the kenlm package: pip install kenlm"
                ) from error
            if not Path(resolved).is_file():
                raise AsrkitError(f"no language model at {path}")
            config = kenlm.Config()
            # KenLM draws its own loading bar on stderr: useful on a terminal for a large
            # ARPA file, noise in a log or a pipe.
            config.show_progress = sys.stderr.isatty()
            try:
                model = _MODELS[resolved] = kenlm.Model(resolved, config)
            except (OSError, RuntimeError) as error:
                raise AsrkitError(f"cannot load the language model {path}: {error}") from None
    return model


def _is_arpa(path: str) -> bool:
    with open(path, "rb") as handle:
        head = handle.read(64).lstrip()
    return head.startswith(b"\\data\\")


def load_vocabulary(config: LanguageModelConfig) -> frozenset[str] | None:
    """The words for the unfinished-word check: ``unigrams``, else the ARPA file's unigrams."""
    from asrkit_decoder_kenlm.arpa import BOS, EOS, UNK, read_unigrams

    if config.unigrams:
        words = Path(config.unigrams).read_text(encoding="utf-8").split()
    elif _is_arpa(config.lm):
        words = read_unigrams(config.lm)
    else:
        return None
    return frozenset(w for w in words if w not in (BOS, EOS, UNK))


def make_scorer(config: LanguageModelConfig, decoder: str = "kenlm") -> Any:
    """A :class:`~asrkit.api.WordScorer` over the configured KenLM model."""
    import kenlm

    class KenLMScorer(WordScorer):
        """Weighted KenLM word scores, cached per (state, word): beams share histories."""

        def __init__(self) -> None:
            self.model = load_model(config.lm, decoder)
            self.vocabulary = load_vocabulary(config)
            self.partial_penalty = config.unk_offset
            # alpha >= 0, log P <= 0 and unk_offset <= 0: no word scores more than beta, and
            # none outside the vocabulary more than beta + unk_offset. The search uses these
            # bounds to ask only for the scores that can change its choice.
            self.word_bound = config.beta
            self.unknown_word_bound = config.beta + config.unk_offset
            self.alpha = config.alpha * LN10
            self.cache: dict[tuple[Any, str], tuple[float, Any]] = {}

        def start(self) -> Any:
            state = kenlm.State()
            if config.sentence_boundaries:
                self.model.BeginSentenceWrite(state)
            else:
                self.model.NullContextWrite(state)
            return state

        def score_word(self, state: Any, word: str) -> tuple[float, Any]:
            key = (state, word)
            cached = self.cache.get(key)
            if cached is None:
                if len(self.cache) >= CACHE_ENTRIES:
                    self.cache.clear()
                out = kenlm.State()
                score = self.alpha * self.model.BaseScore(state, word, out) + config.beta
                known = word in self.model and (self.vocabulary is None
                                                or word in self.vocabulary)
                if not known:
                    score += config.unk_offset
                cached = self.cache[key] = (score, out)
            return cached

        def score_end(self, state: Any) -> float:
            if not config.sentence_boundaries:
                return 0.0
            return self.alpha * self.model.BaseScore(state, "</s>", kenlm.State())

    return KenLMScorer()


class KenLMDecoder(BeamSearchDecoder):
    name = "kenlm"
    description = ("CTC prefix beam search with a KenLM word n-gram model "
                   "(settings: lm, alpha, beta, beam_width, ...).")
    Config = KenLMConfig
    spare_hypotheses = 8  # "a b" and "a  b" are one transcript: see finish()

    def make_scorer(self, alphabet: Any) -> WordScorer:
        """The language model, as the scorer of asrkit's prefix beam search."""
        return make_scorer(self.config)

    def finish(self, hypotheses: list[Any]) -> list[Any]:
        """Words are what the model scored: spaces are collapsed, and a transcript that two
        prefixes spell (``"a b"``, ``"a  b"``) is listed once, with its better score."""
        import dataclasses

        seen: set[str] = set()
        out = []
        for hypothesis in hypotheses:
            text = " ".join(hypothesis.text.split())
            if text not in seen:
                seen.add(text)
                out.append(dataclasses.replace(hypothesis, text=text))
        return out
