"""Contract checks for tokenizers: what every :class:`~asrkit.types.Tokenizer` and the
:class:`~asrkit.core.labels.Labels` it loads must do, for a plugin author's tests (and asrkit's
own)::

    from asrkit.testing import check_tokenizer

    def test_my_tokenizer_keeps_the_contract():
        check_tokenizer(MyTokenizer(), texts=my_transcripts, config=MyTokenizer.Config(...))

:func:`check_tokenizer` runs them all; each is also a function of its own. A failed check raises
``AssertionError`` saying what the tokenizer did and what to fix. The default texts are the
normalised transcripts of asrkit's bundled ``sample`` corpus (19 sentences): a subword
tokenizer may need more text, or a smaller vocabulary, than that.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from asrkit.core.errors import AsrkitError
from asrkit.core.labels import LabelError, Labels
from asrkit.core.text import labels_from_json, normalize
from asrkit.testing.settings import check_settings_read_back
from asrkit.types import NAME_PATTERN, Tokenizer

__all__ = ["check_build_and_load", "check_deterministic_build", "check_load_refuses_garbage",
           "check_round_trip", "check_symbols", "check_symbols_decode", "check_tokenizer",
           "check_tokenizer_declaration", "check_unknown_character", "check_word_boundaries",
           "held_out_texts", "sample_texts"]

#: Characters tried, in order, as one the texts lack (accented, other scripts, a digit, a sign).
UNKNOWN_CANDIDATES = "éßж0#qzxj"
#: What :func:`check_load_refuses_garbage` writes: neither text nor any tokenizer's format.
GARBAGE = b"\x00\xff\xfe not a tokenizer file \x80\n\x00\x01"


def check_tokenizer(tokenizer: Tokenizer, texts: Sequence[str] | None = None,
                    config: Any = None) -> None:
    """Every contract check on ``tokenizer``, built from ``texts`` (normalised transcripts;
    default :func:`sample_texts`) with ``config`` (default: its ``Config()``)."""
    texts = _texts(texts)
    check_tokenizer_declaration(tokenizer, config)
    labels = check_build_and_load(tokenizer, texts, config)
    check_symbols(labels)
    check_round_trip(labels, texts)
    check_word_boundaries(labels, texts)
    check_unknown_character(labels, texts)
    check_symbols_decode(labels, texts)
    check_load_refuses_garbage(tokenizer)
    check_deterministic_build(tokenizer, texts, config)


def check_tokenizer_declaration(tokenizer: Tokenizer, config: Any = None) -> None:
    """``name`` is a registrable name, ``description`` a line, ``suffix`` a file ending (``.``
    and more); ``Config`` is a frozen dataclass with a default for every setting, ``config``
    (if given) one of it, and each of its settings, written as the command line writes it,
    parses back to the same value."""
    name = getattr(tokenizer, "name", None)
    if not isinstance(tokenizer, Tokenizer):
        raise AssertionError(f"{tokenizer!r} must subclass asrkit.types.Tokenizer")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise AssertionError(f"tokenizer name {name!r} must match {NAME_PATTERN.pattern}")
    if not isinstance(tokenizer.description, str) or not tokenizer.description.strip():
        raise AssertionError(f"{name}: description must be a line of text (asrkit plugins "
                             "shows it)")
    suffix = tokenizer.suffix
    if not (isinstance(suffix, str) and suffix.startswith(".") and len(suffix) > 1
            and "/" not in suffix and suffix.strip() == suffix):
        raise AssertionError(f"{name}: suffix {suffix!r} must be a file ending such as "
                             "'.model' (-o tokenizer=FILE finds the tokenizer by it)")
    kind = tokenizer.Config
    if not (isinstance(kind, type) and dataclasses.is_dataclass(kind)):
        raise AssertionError(f"{name}: Config must be a dataclass, not {kind!r}")
    try:
        kind()
    except TypeError as error:
        raise AssertionError(f"{name}: every setting of Config needs a default ({error})"
                             ) from None
    if not kind.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise AssertionError(f"{name}: Config must be a frozen dataclass "
                             "(@dataclass(frozen=True)): a build's settings cannot drift")
    if config is not None and not isinstance(config, kind):
        raise AssertionError(f"{name}: config {config!r} is not a {kind.__name__}")
    config = kind() if config is None else config
    check_settings_read_back(name, config)  # as `asrkit tokenizer build -o KEY=VALUE` sets it


def check_build_and_load(tokenizer: Tokenizer, texts: Sequence[str] | None = None,
                         config: Any = None) -> Labels:
    """``build`` writes exactly one file, at the path it is given (``tokenizer<suffix>``), and
    nothing beside it (no side files, no temporary files left); ``load`` of it gives
    :class:`~asrkit.core.labels.Labels` that keep working after the file is gone (a run reads the
    file once). Returns the labels."""
    texts = _texts(texts)
    config = tokenizer.Config() if config is None else config
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"tokenizer{tokenizer.suffix}"
        tokenizer.build(list(texts), config, path)
        written = sorted(p.name for p in Path(folder).iterdir())
        if not path.is_file():
            raise AssertionError(f"{tokenizer.name}: build(texts, config, path) wrote "
                                 f"{written or 'nothing'}, not the file {path.name}: write "
                                 "to path exactly as given")
        if written != [path.name]:
            extra = [n for n in written if n != path.name]
            raise AssertionError(f"{tokenizer.name}: build left {extra} beside {path.name}: "
                                 "a tokenizer is one file (a run copies only that one)")
        labels = tokenizer.load(path)
    if not isinstance(labels, Labels):
        raise AssertionError(f"{tokenizer.name}: load returned {labels!r}, not an "
                             "asrkit.core.labels.Labels (subclass Labels or Pieces)")
    try:
        labels.encode(texts[0])
    except Exception as error:
        raise AssertionError(f"{tokenizer.name}: the labels fail once their file is gone "
                             f"({type(error).__name__}: {error}); read the whole file in "
                             "load") from None
    return labels


def check_symbols(labels: Labels) -> None:
    """``symbols`` is a tuple of distinct non-empty strings; ``size`` is their number,
    ``num_classes`` one more and ``blank`` the last class; ``word_marker`` a non-empty
    string."""
    symbols = labels.symbols
    what = type(labels).__name__
    if not isinstance(symbols, tuple) or not symbols:
        raise AssertionError(f"{what}: symbols must be a non-empty tuple, not {symbols!r}")
    bad = [s for s in symbols if not isinstance(s, str) or not s]
    if bad:
        raise AssertionError(f"{what}: every symbol must be a non-empty string; found {bad[:5]}")
    twice = sorted({s for s in symbols if symbols.count(s) > 1})
    if twice:
        raise AssertionError(f"{what}: symbols {twice[:5]} appear twice; each label needs a "
                             "symbol of its own")
    n = len(symbols)
    got, expected = (labels.size, labels.num_classes, labels.blank, len(labels)), (n, n + 1, n, n)
    if got != expected:
        raise AssertionError(f"{what}: (size, num_classes, blank, len) is {got}, not "
                             f"{expected}: CTC's blank is the class after the {n} symbols")
    if not isinstance(labels.word_marker, str) or not labels.word_marker:
        raise AssertionError(f"{what}: word_marker must be a non-empty string, not "
                             f"{labels.word_marker!r}")


def check_round_trip(labels: Labels, texts: Sequence[str] | None = None) -> None:
    """``decode(encode(text)) == text`` for every text the labels were built from and for
    held-out texts of the same characters (:func:`held_out_texts`); ``encode`` gives labels of
    symbols (never the blank)."""
    texts = _texts(texts)
    what = type(labels).__name__
    for text in [*texts, *held_out_texts(texts)]:
        encoded = labels.encode(text)
        outside = [label for label in encoded if not 0 <= int(label) < labels.size]
        if outside:
            raise AssertionError(f"{what}: encode({text!r}) gives labels {outside[:5]} outside "
                                 f"the {labels.size} symbols")
        decoded = labels.decode(encoded)
        if decoded != text:
            raise AssertionError(f"{what}: decode(encode({text!r})) is {decoded!r}: decoding "
                                 "must give the normalised text back exactly")


def check_word_boundaries(labels: Labels, texts: Sequence[str] | None = None) -> None:
    """``starts_word`` and ``body`` agree with ``decode``: the words spelled by starting a word
    at each label that ``starts_word`` and adding each label's ``body`` are the words of the
    decoded text (the beam search's language model and word times find words that way)."""
    texts = _texts(texts)
    what = type(labels).__name__
    for text in [*texts, *held_out_texts(texts)]:
        encoded = [int(label) for label in labels.encode(text)]
        words: list[str] = []
        for label in encoded:
            if labels.starts_word(label) or not words:
                words.append("")
            words[-1] += labels.body(label)
        spelled = [word for word in words if word]
        decoded = labels.decode(encoded).split()
        if spelled != decoded:
            raise AssertionError(
                f"{what}: {text!r} decodes to the words {decoded}, but starts_word/body spell "
                f"{spelled}: a symbol starting with word_marker {labels.word_marker!r} must "
                "start a word, and body must be the rest of the symbol")


def check_unknown_character(labels: Labels, texts: Sequence[str] | None = None) -> None:
    """A character none of the texts holds cannot be spelt: ``encode`` raises
    :class:`~asrkit.core.labels.LabelError` naming it and the utterance, and ``missing`` names it
    (a run checks its dataset's alphabet with ``missing`` before it starts). ``missing`` of the
    texts themselves is empty."""
    texts = _texts(texts)
    what = type(labels).__name__
    known = set("".join(texts))
    unknown = next((c for c in UNKNOWN_CANDIDATES if c not in known), None)
    if unknown is None:
        raise ValueError(f"the texts hold every character of {UNKNOWN_CANDIDATES!r}: the check "
                         "needs one they lack")
    word = texts[0].split()[0] if texts[0].split() else ""
    text = f"{word} {unknown}{word}".strip()
    try:
        encoded = labels.encode(text, "utterance-7")
    except LabelError as error:
        if unknown not in str(error) or "utterance-7" not in str(error):
            raise AssertionError(f"{what}: encode({text!r}, 'utterance-7') failed with "
                                 f"{str(error)!r}, which must name the character {unknown!r} "
                                 "and the utterance") from None
    except Exception as error:
        raise AssertionError(f"{what}: encode({text!r}) raised {type(error).__name__}: "
                             f"{error}; raise asrkit.api.LabelError (the one-line error a user "
                             "sees) for text the labels cannot spell") from None
    else:
        raise AssertionError(f"{what}: encode({text!r}) gave {encoded} although {unknown!r} "
                             "is in none of the texts it was built from; raise LabelError "
                             "naming the character, never drop it or spell it as <unk>")
    missing = labels.missing(text)
    if list(missing) != [unknown]:
        raise AssertionError(f"{what}: missing({text!r}) is {missing!r}, not [{unknown!r}]")
    for known_text in texts:
        if labels.missing(known_text):
            raise AssertionError(f"{what}: missing({known_text!r}) is "
                                 f"{labels.missing(known_text)!r}, a text it was built from")


def check_symbols_decode(labels: Labels, texts: Sequence[str] | None = None) -> None:
    """Decoding needs nothing but ``symbols`` and ``word_marker``: labels read back from
    ``to_json()`` (what an export's ``asrkit.json`` holds) decode every encoded text as the
    labels themselves do."""
    texts = _texts(texts)
    what = type(labels).__name__
    saved = labels.to_json()
    expected = {"symbols": list(labels.symbols), "word_marker": labels.word_marker,
                "blank": labels.blank}
    if {k: saved.get(k) for k in expected} != expected:
        raise AssertionError(f"{what}: to_json() must hold symbols, word_marker and blank as "
                             f"the labels have them; got {saved!r}")
    again = labels_from_json(saved)
    for text in [*texts, *held_out_texts(texts)]:
        encoded = labels.encode(text)
        if again.decode(encoded) != labels.decode(encoded):
            raise AssertionError(
                f"{what}: {text!r} decodes from the symbols alone as "
                f"{again.decode(encoded)!r}, but the labels decode it as "
                f"{labels.decode(encoded)!r}: an exported model, word times and the beam "
                "search read only symbols and word_marker, so decode must follow from them")


def check_load_refuses_garbage(tokenizer: Tokenizer) -> None:
    """``load`` of a file with the right suffix that is not one of the tokenizer's raises
    :class:`~asrkit.core.errors.AsrkitError` in one line (a user named the wrong file)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"garbage{tokenizer.suffix}"
        path.write_bytes(GARBAGE)
        try:
            labels = tokenizer.load(path)
        except AsrkitError as error:
            if "\n" in str(error).strip() or not str(error).strip():
                raise AssertionError(f"{tokenizer.name}: load of a garbage file must say why "
                                     f"in one line, not {str(error)!r}") from None
            return
        except Exception as error:
            raise AssertionError(f"{tokenizer.name}: load of a garbage file raised "
                                 f"{type(error).__name__}: {error}; raise "
                                 "asrkit.api.AsrkitError in one line") from None
    raise AssertionError(f"{tokenizer.name}: load of a garbage file gave {labels!r}; refuse a "
                         "file that is not the tokenizer's with asrkit.api.AsrkitError")


def check_deterministic_build(tokenizer: Tokenizer, texts: Sequence[str] | None = None,
                              config: Any = None) -> None:
    """Building twice from the same texts and settings gives equal labels: the same symbols,
    word marker, fingerprint and encoding of every text (a run's tokenizer can be rebuilt, and
    caches of encoded data keyed by the fingerprint stay valid)."""
    texts = _texts(texts)
    first = check_build_and_load(tokenizer, texts, config)
    second = check_build_and_load(tokenizer, texts, config)
    for what in ("symbols", "word_marker"):
        if getattr(first, what) != getattr(second, what):
            raise AssertionError(f"{tokenizer.name}: two builds from the same texts have other "
                                 f"{what}: make build deterministic (fixed seeds and order, "
                                 "one thread)")
    if first.fingerprint() != second.fingerprint():
        raise AssertionError(f"{tokenizer.name}: two builds from the same texts have other "
                             "fingerprints: make build deterministic")
    for text in texts:
        if first.encode(text) != second.encode(text):
            raise AssertionError(f"{tokenizer.name}: two builds encode {text!r} differently: "
                                 "make build deterministic")


def held_out_texts(texts: Sequence[str]) -> list[str]:
    """Texts none of ``texts`` is, made of their characters: every character as one word,
    all of them as one word, each word reversed, words of different texts side by side, and
    the empty text."""
    texts = list(texts)
    words = sorted({word for text in texts for word in text.split()})
    chars = sorted(set("".join(words)))
    out = ["", " ".join(chars), "".join(chars)]
    out += [" ".join(word[::-1] for word in text.split()) for text in texts[:20]]
    out += [" ".join(words[start::7][:12]) for start in range(min(7, len(words)))]
    given = set(texts)
    return [text for text in dict.fromkeys(out) if text not in given or text == ""]


def sample_texts() -> list[str]:
    """The normalised transcripts of asrkit's bundled ``sample`` corpus."""
    from asrkit_importers.sample import DATA, TRANSCRIPTS

    lines = (DATA / TRANSCRIPTS).read_text(encoding="utf-8").splitlines()[1:]
    return [normalize(line.split("\t")[3]) for line in lines if line.strip()]


def _texts(texts: Sequence[str] | None) -> list[str]:
    texts = sample_texts() if texts is None else [text for text in texts if text.strip()]
    if not texts:
        raise ValueError("the checks need at least one non-empty text")
    return texts
