"""Hot words (context biasing): the words and phrases a beam search favours, read once from the
command line (``--hotword WORD[:BOOST]``, ``--hotwords FILE``) into :class:`Hotwords`.

One format serves both: a word or phrase, then optionally ``:BOOST``, the log-score added for
each of its labels (characters, spaces excepted, or subword pieces) while a hypothesis spells it.
A file holds one such entry a line; blank lines and lines starting with ``#`` are skipped::

    kubernetes
    new york:3.5

Without a boost an entry gets the default of its run's labels (:data:`CHARACTER_BOOST`,
:data:`PIECE_BOOST`): the labels are known only when a model is loaded, so the default is chosen
then (:meth:`Hotwords.spell`). What a decoder does with the boosts is
:mod:`asrkit.decoders.context`'s.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from asrkit.core.errors import AsrkitError
from asrkit.core.labels import LabelError, Labels
from asrkit.core.text import normalize

#: The default boost a label of a character run (natural log): the largest of a sweep on the
#: open-vocabulary benchmark's dev sentences at which the WER of the sentences without hot words
#: did not rise, with and without a word language model (docs/benchmarks.md, "Hot words"). A
#: subword piece is about three characters, so it agrees with icefall's choice for pieces.
CHARACTER_BOOST = 0.6
#: The default boost a subword piece: icefall's ``context_score`` (2.0), its choice for pieces.
PIECE_BOOST = 2.0
#: The largest boost a label accepts: beyond it a hot word wins whatever the audio says.
MAX_BOOST = 20.0


@dataclass(frozen=True)
class Hotword:
    """One hot word or phrase: its normalised text (words separated by single spaces) and its
    boost a label (``None``: the default of the labels it is spelt with)."""

    text: str
    boost: float | None = None


@dataclass(frozen=True)
class Hotwords:
    """The hot words of a decoding: what ``--hotword`` and ``--hotwords`` gave, in order; a
    word given twice keeps its last boost."""

    words: tuple[Hotword, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.words)

    def spell(self, labels: Labels) -> list[tuple[list[int], float]]:
        """Each hot word's labels and its boost a label; a one-line error naming the characters
        ``labels`` cannot spell, and the words that hold them."""
        pieces = any(labels.body(label) and labels.starts_word(label)
                     for label in range(labels.size))
        default = PIECE_BOOST if pieces else CHARACTER_BOOST
        known = {char for label in range(labels.size) for char in labels.body(label)}
        spelt, unspellable = [], {}
        for word in self.words:
            try:
                spelt.append((labels.encode(word.text),
                              default if word.boost is None else word.boost))
            except LabelError as error:
                missing = [c for c in dict.fromkeys(word.text) if c != " " and c not in known]
                if not missing:
                    raise AsrkitError(f"hot word {word.text!r}: {error}") from None
                unspellable[word.text] = missing
        if unspellable:
            chars = " ".join(repr(c) for c in dict.fromkeys(
                c for missing in unspellable.values() for c in missing))
            words = ", ".join(repr(w) for w in unspellable)
            raise AsrkitError(f"the model's labels cannot spell {chars} (in the hot words "
                              f"{words}): write the words with the characters of its "
                              "transcripts, or leave them out")
        return spelt


def parse_hotword(entry: str, where: str = "--hotword") -> Hotword:
    """``"new york:3.5"`` -> ``Hotword("new york", 3.5)``; ``"kubernetes"`` -> no boost of its
    own. The text is normalised as transcripts are (lower case, punctuation dropped). An empty
    word, or a boost that is no number in ``0 < BOOST <= MAX_BOOST``, is a one-line error
    naming ``where`` it was given."""
    text, colon, boost_text = entry.rpartition(":")
    if not colon:
        text, boost_text = entry, ""
    words = normalize(text)
    if not words:
        raise AsrkitError(f"{where} {entry!r}: no word (expected WORD or PHRASE, then "
                          "optionally :BOOST)")
    if not colon:
        return Hotword(words)
    try:
        boost = float(boost_text)
    except ValueError:
        boost = math.nan
    if not (0 < boost <= MAX_BOOST):
        raise AsrkitError(f"{where} {entry!r}: the boost {boost_text.strip()!r} is not a number "
                          f"above 0 and at most {MAX_BOOST:g} (WORD:BOOST, e.g. {words}:2)")
    return Hotword(words, boost)


def read_hotwords_file(path: str | Path) -> list[Hotword]:
    """The entries of a hot-word file (the module docstring's format), each error naming the
    file and line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise AsrkitError(f"cannot read the hot words in {path}: {reason}") from None
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        entry = line.strip()
        if entry and not entry.startswith("#"):
            out.append(parse_hotword(entry, f"{path}:{number}:"))
    if not out:
        raise AsrkitError(f"{path} holds no hot words (one WORD or WORD:BOOST a line)")
    return out


def parse_hotwords(entries: Iterable[str] = (),
                   files: Iterable[str | Path] = ()) -> Hotwords | None:
    """``--hotwords FILE`` (each file's entries in order) then ``--hotword WORD[:BOOST]``, so
    that a word given on the command line overrides its line in a file; ``None`` when there
    are none."""
    found: dict[str, Hotword] = {}
    for path in files:
        for word in read_hotwords_file(path):
            found[word.text] = word
    for entry in entries:
        word = parse_hotword(entry)
        found[word.text] = word
    return Hotwords(tuple(found.values())) if found else None
