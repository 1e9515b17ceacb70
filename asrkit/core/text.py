"""Alphabets, the labels an export describes, and transcript normalisation.

An alphabet file has DeepSpeech's format: one symbol a line, in label order; a line starting with
``#`` is a comment; a line holding a single space is the space symbol (a line ``\\s`` means the
same, for editors that strip trailing blanks). Labels are the line order, counted from 0; the CTC
blank is *not* in the file: it is the class after the last symbol (see :mod:`asrkit.types`).
"""

from __future__ import annotations

import contextlib
import contextvars
import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from asrkit.core.files import write_atomic
from asrkit.core.labels import LabelError, Labels, Pieces
from asrkit.core.storage import Location, location

#: The default English alphabet: space, a-z, apostrophe (28 symbols; 29 classes with the blank).
ENGLISH = (" ", *"abcdefghijklmnopqrstuvwxyz", "'")


class AlphabetError(LabelError):
    """A transcript holds a character the alphabet lacks, or a file is malformed."""


@dataclass(frozen=True)
class Alphabet(Labels):
    """Characters as labels: label ``i`` is ``symbols[i]``, the blank is ``len(symbols)``; the
    space symbol separates words (:class:`asrkit.core.labels.Labels`' ``word_marker``)."""

    symbols: tuple[str, ...] = ENGLISH

    def __post_init__(self) -> None:
        if len(set(self.symbols)) != len(self.symbols):
            raise AlphabetError("alphabet has a symbol twice")
        if any(len(s) != 1 for s in self.symbols):
            raise AlphabetError("alphabet symbols must be single characters")

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
        """Text of ``labels``, the symbols as they are (spaces too); blanks are dropped,
        anything else out of range is an error."""
        return "".join(self.symbols[label] for label in self._checked(labels))

    def to_text(self) -> str:
        lines = ["# asrkit alphabet: one symbol a line; the CTC blank is the class after the last"]
        lines += ["\\#" if s == "#" else s for s in self.symbols]
        return "\n".join(lines) + "\n"

    def save(self, path: str | Location) -> None:
        """Write the alphabet whole or not at all (a run and a dataset are read back by it)."""
        write_atomic(location(path), self.to_text())

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
    def load(cls, path: str | Location) -> Alphabet:
        return cls.from_text(location(path).read_text(encoding="utf-8"))


def labels_from_json(saved: dict[str, Any]) -> Labels:
    """The labels an export's ``asrkit.json`` describes (its ``labels`` entry; older exports
    hold only an ``alphabet`` list of characters).

    Here rather than in :mod:`asrkit.core.labels` because the answer may be an :class:`Alphabet`:
    labels stay below the characters that subclass them."""
    symbols = saved.get("symbols", saved.get("alphabet"))
    if not isinstance(symbols, list):
        raise LabelError("the export's asrkit.json lists no symbols")
    marker = saved.get("word_marker", " ")
    if marker == " " and all(len(s) == 1 for s in symbols):
        return Alphabet(tuple(symbols))
    return Pieces(symbols, marker)


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


# -- reading the text of transcripts and listings --------------------------------------------------

#: How much of an input an error message quotes: enough to recognise it, never a whole file.
QUOTE_CHARS = 80
_BOMS = ((b"\xff\xfe\x00\x00", "utf-32"), (b"\x00\x00\xfe\xff", "utf-32"),
         (b"\xef\xbb\xbf", "utf-8-sig"), (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16"))
_decodings: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "asrkit_decodings", default=None)


def quote(text: str, limit: int = QUOTE_CHARS) -> str:
    """``repr`` of at most ``limit`` characters of ``text``, with ``...`` when cut: an error
    message quotes the input, never a 512 MB line of it."""
    return repr(text[:limit]) + ("..." if len(text) > limit else "")


def decode_text(data: bytes, name: str) -> str:
    """The text of a transcript or listing, whatever encoding the corpus used.

    A byte-order mark says UTF-8, UTF-16 or UTF-32; without one, UTF-8 is tried, then UTF-16
    without a mark (every other byte zero), then Windows-1252 (Latin-1 with curly quotes and
    dashes, what Windows editors write), then Latin-1, which reads any bytes. So no file is
    ever lost to its encoding; a file read as anything but UTF-8 is recorded (``name`` ->
    encoding) in the import's ``dataset.json`` under ``decoded``, for the user to check."""
    for bom, codec in _BOMS:
        if data.startswith(bom):
            try:
                text = data.decode(codec)
            except UnicodeDecodeError:
                text = data[len(bom):].decode(codec.split("-sig")[0], errors="replace")
            if codec != "utf-8-sig":
                _record(name, codec)
            return text
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    for codec, fits in (("utf-16-le", _zeros_at(data, 1)), ("utf-16-be", _zeros_at(data, 0))):
        if fits:
            with contextlib.suppress(UnicodeDecodeError):
                text = data.decode(codec)
                _record(name, "utf-16")
                return text
    try:
        text, codec = data.decode("cp1252"), "cp1252"
    except UnicodeDecodeError:  # cp1252 leaves five bytes undefined; Latin-1 maps them all
        text, codec = data.decode("latin-1"), "latin-1"
    _record(name, codec)
    return text


def _zeros_at(data: bytes, offset: int) -> bool:
    """UTF-16 of mostly-ASCII text: even length, and zero bytes at every ``offset`` + 2k."""
    sample = data[:4096]
    return (len(data) % 2 == 0 and len(sample) >= 2
            and sample[offset::2].count(0) >= 0.9 * (len(sample) // 2))


def _record(name: str, codec: str) -> None:
    decisions = _decodings.get()
    if decisions is not None:
        decisions[name] = codec


@contextlib.contextmanager
def recording_decodings() -> Iterator[dict[str, str]]:
    """Collect what :func:`decode_text` decides (file name -> encoding) while in the block."""
    decisions: dict[str, str] = {}
    token = _decodings.set(decisions)
    try:
        yield decisions
    finally:
        _decodings.reset(token)
