"""What a CTC model's output classes mean: :class:`Labels`, the one interface that training,
decoding, transcription and export read, whatever tokenizer made the labels.

A model outputs ``N + 1`` classes: ``N`` symbols (label ``i`` is ``symbols[i]``) and the blank,
the last class (see :mod:`asrkit.types`). Symbols are characters
(:class:`asrkit.core.text.Alphabet`, the default) or subword pieces (:class:`Pieces`, e.g. a
SentencePiece vocabulary).

Words are found the same way for both: a symbol that starts with the labels' ``word_marker``
begins a new word, and the rest of it (its *body*) is the word's first text. For characters the
marker is the space symbol itself (body ``""``: a separator); for SentencePiece it is ``"▁"``
(``"▁the"`` begins the word "the", ``"re"`` continues one). So the word-level language model of
the beam search, word times in transcripts and an export's text output need nothing but this
module, and a decoder works unchanged on characters and on subwords.

Characters build on this module, not the other way round: :mod:`asrkit.core.text` defines
:class:`~asrkit.core.text.Alphabet` and reads an export's labels back
(:func:`asrkit.core.text.labels_from_json`), which may be either kind.

This module is pure Python: a plugin can subclass :class:`Pieces` at import time.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from asrkit.core.errors import AsrkitError

#: SentencePiece's word-start marker (U+2581, LOWER ONE EIGHTH BLOCK).
PIECE_MARKER = "\u2581"


class LabelError(AsrkitError):
    """A transcript the labels cannot spell, a label out of range, or a malformed label file."""


class Labels(ABC):
    """The symbols of a model's output classes and how text maps to them.

    Subclasses set ``symbols`` (a tuple of distinct non-empty strings) and implement
    :meth:`encode`; everything else here follows from the symbols and ``word_marker``.
    """

    #: Text inside a symbol that starts a word (see the module docstring).
    word_marker: ClassVar[str] = " "
    symbols: tuple[str, ...]

    @property
    def size(self) -> int:
        """Symbols, the blank excluded."""
        return len(self.symbols)

    @property
    def num_classes(self) -> int:
        """Outputs a CTC model needs: the symbols plus the blank."""
        return len(self.symbols) + 1

    @property
    def blank(self) -> int:
        return len(self.symbols)

    @abstractmethod
    def encode(self, text: str, utterance: str = "") -> list[int]:
        """Labels of normalised ``text``; a :class:`LabelError` naming what cannot be spelt
        (and ``utterance``, when given)."""

    def missing(self, text: str) -> list[str]:
        """Characters of ``text`` the labels cannot spell, each once, in order of appearance."""
        out = []
        for char in dict.fromkeys(text):
            if char == " ":
                continue
            try:
                self.encode(char)
            except LabelError:
                out.append(char)
        return out

    def starts_word(self, label: int) -> bool:
        """Whether symbol ``label`` begins a new word (and ends the one before it)."""
        return self.symbols[label].startswith(self.word_marker)

    def body(self, label: int) -> str:
        """The text symbol ``label`` adds to its word: the symbol without a leading marker."""
        symbol = self.symbols[label]
        return symbol[len(self.word_marker):] if symbol.startswith(self.word_marker) else symbol

    def decode(self, labels: Iterable[int]) -> str:
        """Text of ``labels`` (blanks dropped): words separated by single spaces."""
        out = []
        for label in self._checked(labels):
            if self.starts_word(label):
                out.append(" ")
            out.append(self.body(label))
        return " ".join("".join(out).split())

    def _checked(self, labels: Iterable[int]) -> Iterable[int]:
        for label in labels:
            label = int(label)
            if label == self.blank:
                continue
            if not 0 <= label < self.size:
                raise LabelError(f"label {label} is outside the {self.size} symbols")
            yield label

    def fingerprint(self) -> str:
        """Identifies how text becomes labels (for caches of encoded data): two label sets with
        one fingerprint encode every text alike. The default hashes the symbols; a tokenizer
        whose encoding depends on more (scores, merges) adds that."""
        digest = hashlib.sha256(type(self).__qualname__.encode())
        digest.update("\n".join(self.symbols).encode())
        return digest.hexdigest()[:16]

    def to_json(self) -> dict[str, Any]:
        """What a program needs to read labels back as text: an export's ``asrkit.json``."""
        return {"symbols": list(self.symbols), "word_marker": self.word_marker,
                "blank": self.blank}

    def __len__(self) -> int:
        return self.size


class Pieces(Labels):
    """Subword pieces with a word-start marker (SentencePiece's ``"▁"`` by default).

    :meth:`encode` segments by longest match from the left: always a valid spelling of the
    text, though not necessarily the one the tokenizer that made the pieces would choose (a
    SentencePiece model subclasses this and encodes with its own model). That is all forced
    alignment (word times) and an exported model need.
    """

    word_marker: ClassVar[str] = PIECE_MARKER

    def __init__(self, symbols: Sequence[str], word_marker: str | None = None) -> None:
        self.symbols = tuple(symbols)
        if word_marker is not None:
            self.word_marker = word_marker  # type: ignore[misc]  # per instance, from a file
        if len(set(self.symbols)) != len(self.symbols):
            raise LabelError("the pieces hold a symbol twice")
        if not all(isinstance(s, str) and s for s in self.symbols):
            raise LabelError("every piece must be a non-empty string")
        self._index = {s: i for i, s in enumerate(self.symbols)}
        self._longest = max((len(s) for s in self.symbols), default=0)

    def encode(self, text: str, utterance: str = "") -> list[int]:
        marked = "".join(self.word_marker + word for word in text.split())
        out, at = [], 0
        while at < len(marked):
            for length in range(min(self._longest, len(marked) - at), 0, -1):
                label = self._index.get(marked[at:at + length])
                if label is not None:
                    out.append(label)
                    at += length
                    break
            else:
                where = f" in utterance {utterance!r}" if utterance else ""
                if marked[at] == self.word_marker and at + 1 < len(marked):
                    at += 1  # no piece starts a word with the character after the marker
                raise LabelError(f"{marked[at]!r}{where} is not spelt by any piece; build the "
                                 "tokenizer from transcripts that hold it")
        return out

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Pieces) and type(other) is type(self)
                and other.symbols == self.symbols and other.word_marker == self.word_marker)

    def __hash__(self) -> int:
        return hash((self.symbols, self.word_marker))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self.symbols)} pieces)"

