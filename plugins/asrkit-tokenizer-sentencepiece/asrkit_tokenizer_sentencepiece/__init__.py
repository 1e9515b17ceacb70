"""asrkit-tokenizer-sentencepiece: subword labels (unigram or BPE pieces) learnt from a
dataset's transcripts with SentencePiece, for ``asrkit tokenizer build --tokenizer
sentencepiece`` and ``asrkit train -o tokenizer=FILE.model``.

A separate distribution because it depends on ``sentencepiece``, a compiled extension.
Registered through the ``asrkit`` entry-point group like any third-party plugin::

    [project.entry-points.asrkit]
    sentencepiece = "asrkit_tokenizer_sentencepiece"

Importing this module is cheap: ``sentencepiece`` is imported when a model is built or loaded.
"""

from __future__ import annotations

from typing import Any

from asrkit.api import hookimpl
from asrkit_tokenizer_sentencepiece.tokenizer import (
    SentencePieceConfig,
    SentencePieceLabels,
    SentencePieceTokenizer,
)

__version__ = "0.1.0"
__all__ = ["SentencePieceConfig", "SentencePieceLabels", "SentencePieceTokenizer"]


@hookimpl
def register_tokenizers(register: Any) -> None:
    register(SentencePieceTokenizer())
