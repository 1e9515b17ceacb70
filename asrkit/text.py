"""Alphabets and transcript normalisation.

An alphabet file has DeepSpeech's format: one symbol a line, in label order; a line starting with
``#`` is a comment; a line holding a single space is the space symbol (a line ``\\s`` means the
same, for editors that strip trailing blanks). Labels are the line order, counted from 0; the CTC
blank is *not* in the file: it is the class after the last symbol (see :mod:`asrkit.types`).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from asrkit.errors import AsrkitError

#: The default English alphabet: space, a-z, apostrophe (28 symbols; 29 classes with the blank).
ENGLISH = (" ", *"abcdefghijklmnopqrstuvwxyz", "'")


class AlphabetError(AsrkitError):
    """A transcript holds a character the alphabet lacks, or a file is malformed."""


@dataclass(frozen=True)
class Alphabet:
    """An ordered set of symbols; label ``i`` is ``symbols[i]``, the blank is ``len(symbols)``."""

    symbols: tuple[str, ...] = ENGLISH

    def __post_init__(self) -> None:
        if len(set(self.symbols)) != len(self.symbols):
            raise AlphabetError("alphabet has a symbol twice")
        if any(len(s) != 1 for s in self.symbols):
            raise AlphabetError("alphabet symbols must be single characters")

    @property
    def size(self) -> int:
        return len(self.symbols)

    @property
    def num_classes(self) -> int:
        """Outputs a CTC model needs: the symbols plus the blank."""
        return len(self.symbols) + 1

    @property
    def blank(self) -> int:
        return len(self.symbols)

    def missing(self, text: str) -> list[str]:
        """Characters of ``text`` the alphabet lacks, each once, in order of appearance."""
        known = set(self.symbols)
        return list(dict.fromkeys(c for c in text if c not in known))

    def encode(self, text: str, utterance: str = "") -> list[int]:
        """Labels of ``text``; an :class:`AlphabetError` names the character and utterance."""
        index = {s: i for i, s in enumerate(self.symbols)}
        try:
            return [index[c] for c in text]
        except KeyError as error:
            where = f" in utterance {utterance!r}" if utterance else ""
            raise AlphabetError(
                f"character {error.args[0]!r}{where} is not in the alphabet; normalise the "
                "transcript or add the character to the alphabet file"
            ) from None

    def decode(self, labels: Iterable[int]) -> str:
        """Text of ``labels``; blanks are dropped, anything else out of range is an error."""
        out = []
        for label in labels:
            label = int(label)
            if label == self.blank:
                continue
            if not 0 <= label < self.size:
                raise AlphabetError(f"label {label} is outside the alphabet of {self.size}")
            out.append(self.symbols[label])
        return "".join(out)

    def to_text(self) -> str:
        lines = ["# asrkit alphabet: one symbol a line; the CTC blank is the class after the last"]
        lines += ["\\#" if s == "#" else s for s in self.symbols]
        return "\n".join(lines) + "\n"

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_text(), encoding="utf-8")

    @classmethod
    def from_text(cls, text: str) -> Alphabet:
        symbols = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.startswith("#") or line == "":
                continue
            if line == "\\s":
                line = " "
            if line == "\\#":
                line = "#"
            if len(line) != 1:
                raise AlphabetError(f"alphabet line {number} holds {line!r}: one symbol a line")
            symbols.append(line)
        return cls(tuple(symbols))

    @classmethod
    def load(cls, path: str | Path) -> Alphabet:
        return cls.from_text(Path(path).read_text(encoding="utf-8"))


# Apostrophe-like characters that corpora use for the apostrophe.
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "`": "'", "\u00b4": "'"})
# Split clitics as TED-LIUM writes them ("i 'd", "it 's") are joined to the word they belong to.
_SPLIT_CLITIC = re.compile(r"(\w) '(s|d|ll|re|ve|m|t|em|all|n)\b")
_PUNCTUATION = re.compile(r"[^\w\s']|_")
_SPACES = re.compile(r"\s+")


def normalize(text: str, keep: Sequence[str] = ENGLISH) -> str:
    """Lower-case, join split clitics, replace punctuation by spaces, fold accents that the
    alphabet lacks (``café`` -> ``cafe``), and collapse spaces. Characters that survive and are
    not in the alphabet are left for the caller to report."""
    text = unicodedata.normalize("NFC", text).translate(_APOSTROPHES).lower()
    text = _SPLIT_CLITIC.sub(r"\1'\2", text)
    text = _PUNCTUATION.sub(" ", text)
    known = set(keep)
    if any(c not in known for c in text):
        text = "".join(_fold(c, known) for c in text)
    # Apostrophes that quote rather than contract ("'hello'") are dropped.
    text = " ".join(word.strip("'") for word in text.split())
    return _SPACES.sub(" ", text).strip()


def _fold(char: str, known: set[str]) -> str:
    if char in known:
        return char
    base = unicodedata.normalize("NFKD", char)
    stripped = "".join(c for c in base if not unicodedata.combining(c))
    return stripped if stripped and all(c in known for c in stripped) else char
