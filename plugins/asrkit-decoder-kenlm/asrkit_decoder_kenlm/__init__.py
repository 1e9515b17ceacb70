"""asrkit-decoder-kenlm: beam search with a KenLM n-gram language model, for CTC runs
(``kenlm``), transducer runs (``transducer-kenlm``) and attention encoder-decoder runs
(``attention-kenlm``), and ``asrkit lm build`` to estimate a first model from a dataset's
transcripts.

A separate distribution because it depends on ``kenlm``, a compiled extension: asrkit itself
installs without a compiler. Registered through the ``asrkit`` entry-point group like any
third-party plugin::

    [project.entry-points.asrkit]
    kenlm = "asrkit_decoder_kenlm"

Importing this module is cheap: the decoder imports numpy and kenlm when it first decodes.
"""

from __future__ import annotations

from typing import Any

from asrkit import hookimpl
from asrkit_decoder_kenlm.attention import AttentionKenLMConfig, AttentionKenLMDecoder
from asrkit_decoder_kenlm.commands import lm_group
from asrkit_decoder_kenlm.decoder import KenLMConfig, KenLMDecoder, LanguageModelConfig
from asrkit_decoder_kenlm.transducer import TransducerKenLMConfig, TransducerKenLMDecoder

__version__ = "0.1.0"
__all__ = ["AttentionKenLMConfig", "AttentionKenLMDecoder", "KenLMConfig", "KenLMDecoder",
           "LanguageModelConfig", "TransducerKenLMConfig", "TransducerKenLMDecoder", "lm_group"]


@hookimpl
def register_decoders(register: Any) -> None:
    register(KenLMDecoder())
    register(TransducerKenLMDecoder())
    register(AttentionKenLMDecoder())


@hookimpl
def register_commands(cli: Any) -> None:
    cli.add_command(lm_group)
