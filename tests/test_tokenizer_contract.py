"""The tokenizer contract (``asrkit.types.Tokenizer`` and the ``Labels`` it loads) checked by
``asrkit.testing``'s contract checks on the built-in ``chars`` tokenizer, and the checks catching
tokenizers that break it, each in one way. (The sentencepiece plugin runs the same checks in its
own tests.)"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from asrkit.api import AsrkitError, LabelError, Labels, Pieces, Tokenizer
from asrkit.core.text import Alphabet
from asrkit.testing import (
    check_build_and_load,
    check_deterministic_build,
    check_load_refuses_garbage,
    check_round_trip,
    check_symbols,
    check_symbols_decode,
    check_tokenizer,
    check_tokenizer_declaration,
    check_unknown_character,
    check_word_boundaries,
    held_out_texts,
    sample_texts,
)
from asrkit.tokenizers import CharTokenizer

TEXTS = ["the cat's tall", "a dog sat on the mat", "she had your dark suit"]


def test_chars_keeps_the_contract():
    check_tokenizer(CharTokenizer())
    check_tokenizer(CharTokenizer(), TEXTS)


def test_the_default_texts_are_the_sample_corpus_normalised():
    texts = sample_texts()
    assert len(texts) == 19 and "she had your dark suit in greasy wash water all year" in texts
    held = held_out_texts(TEXTS)
    assert "" in held and "eht s'tac llat" in held
    assert not set(held) & set(TEXTS) and set("".join(held)) <= set("".join(TEXTS))


# -- tokenizers that break the contract, each in one way ----------------------------------------


class Words(Tokenizer):
    """Pieces that are whole words (each with the marker) and the letters: a correct tokenizer,
    the base of the broken ones. Its file is JSON: ``{"symbols": [...]}``."""

    name = "words"
    description = "Whole words and letters; a test of the contract checks."
    suffix = ".words"

    def symbols(self, texts: Any) -> list[str]:
        words = sorted({"\u2581" + w for t in texts for w in t.split()})
        chars = sorted(set("".join(texts)) - {" "})
        return list(dict.fromkeys(["<unk>", *words, *["\u2581" + c for c in chars], *chars]))

    def build(self, texts: Any, config: Any, path: Any) -> None:
        Path(path).write_text(json.dumps({"symbols": self.symbols(texts)}))

    def labels(self, symbols: list[str]) -> Labels:
        return Pieces(symbols)

    def load(self, path: Any) -> Labels:
        try:
            return self.labels(json.loads(Path(path).read_text())["symbols"])
        except (ValueError, KeyError) as error:
            raise AsrkitError(f"{path} is not a words file: {error}") from None


def test_the_correct_base_keeps_the_contract():
    check_tokenizer(Words(), TEXTS)


def test_the_checks_catch_a_bad_declaration():
    class Dotless(Words):
        suffix = "words"

    @dataclass
    class Mutable:
        size: int = 3

    class Thawed(Words):
        Config = Mutable

    @dataclass(frozen=True)
    class Required:
        size: int

    class NoDefault(Words):
        Config = Required

    @dataclass(frozen=True)
    class Listy:
        names: tuple[str, ...] = ("a,b",)

    class Lossy(Words):  # a setting that does not survive its own string form
        Config = Listy

    with pytest.raises(AssertionError, match=r"-o names=a,b gives \('a', 'b'\)"):
        check_tokenizer_declaration(Lossy())
    with pytest.raises(AssertionError, match="suffix 'words' must be a file ending"):
        check_tokenizer_declaration(Dotless())
    with pytest.raises(AssertionError, match="Config must be a frozen dataclass"):
        check_tokenizer_declaration(Thawed())
    with pytest.raises(AssertionError, match="every setting of Config needs a default"):
        check_tokenizer_declaration(NoDefault())


def test_the_checks_catch_a_build_that_writes_elsewhere_or_more():
    class Prefix(Words):  # SentencePiece's model_prefix habit: the suffix added again
        def build(self, texts, config, path):
            super().build(texts, config, f"{path}{self.suffix}")

    class Sidecar(Words):  # a second file a run would not copy
        def build(self, texts, config, path):
            super().build(texts, config, path)
            Path(path).with_suffix(".vocab").write_text("\n".join(self.symbols(texts)))

    with pytest.raises(AssertionError, match=r"wrote \['tokenizer\.words\.words'\], not the "
                                             r"file tokenizer\.words"):
        check_build_and_load(Prefix(), TEXTS)
    with pytest.raises(AssertionError, match=r"left \['tokenizer\.vocab'\] beside"):
        check_build_and_load(Sidecar(), TEXTS)


def test_the_checks_catch_a_load_that_is_no_labels_or_keeps_reading_the_file():
    class Listing(Words):
        def load(self, path):
            return json.loads(Path(path).read_text())["symbols"]

    class LazyLabels(Pieces):
        def __init__(self, path):
            self.path = Path(path)
            super().__init__(json.loads(self.path.read_text())["symbols"])

        def encode(self, text, utterance=""):
            self.path.stat()  # "is the model still there?"
            return super().encode(text, utterance)

    class Lazy(Words):
        def load(self, path):
            return LazyLabels(path)

    with pytest.raises(AssertionError, match=r"load returned .* not an asrkit.core.labels.Labels"):
        check_build_and_load(Listing(), TEXTS)
    with pytest.raises(AssertionError, match=r"fail once their file is gone .*FileNotFoundError"):
        check_build_and_load(Lazy(), TEXTS)


class Fixed(Labels):
    """Labels of given symbols, spelt one symbol per character."""

    def __init__(self, symbols: tuple[str, ...]) -> None:
        self.symbols = symbols

    def encode(self, text: str, utterance: str = "") -> list[int]:
        return [self.symbols.index(c) for c in text]


def test_the_checks_catch_bad_symbols():
    class WrongBlank(Fixed):
        @property
        def blank(self):
            return 0

    with pytest.raises(AssertionError, match=r"symbols \['a'\] appear twice"):
        check_symbols(Fixed((" ", "a", "b", "a")))
    with pytest.raises(AssertionError, match="every symbol must be a non-empty string"):
        check_symbols(Fixed((" ", "", "b")))
    with pytest.raises(AssertionError, match=r"\(size, num_classes, blank, len\) is \(3, 4, 0, "
                                             r"3\), not \(3, 4, 3, 3\)"):
        check_symbols(WrongBlank((" ", "a", "b")))


def test_the_checks_catch_a_lossy_encode():
    class NoApostrophes(Pieces):
        def encode(self, text, utterance=""):
            return super().encode(text.replace("'", ""), utterance)

    labels = NoApostrophes(Words().symbols(TEXTS))
    with pytest.raises(AssertionError, match=r"decode\(encode\(\"the cat's tall\"\)\) is "
                                             "'the cats tall'"):
        check_round_trip(labels, TEXTS)


def test_the_checks_catch_word_boundaries_that_disagree_with_decode():
    class MarkerInBody(Pieces):  # decodes right, but tells the beam search wrong words
        def decode(self, labels):
            text = "".join(self.symbols[label] for label in self._checked(labels))
            return " ".join(text.replace(self.word_marker, " ").split())

        def body(self, label):
            return self.symbols[label]

    labels = MarkerInBody(Words().symbols(TEXTS))
    check_round_trip(labels, TEXTS)
    with pytest.raises(AssertionError, match=r"decodes to the words \['the', \"cat's\", "
                                             r"'tall'\], but starts_word/body spell"):
        check_word_boundaries(labels, TEXTS)


def test_the_checks_catch_text_it_cannot_spell_going_unnoticed():
    class Skipping(Pieces):  # drops what it cannot spell
        def encode(self, text, utterance=""):
            return super().encode("".join(c for c in text if c in "".join(self.symbols)))

    class Crashing(Pieces):  # a KeyError, not the user's one-line error
        def encode(self, text, utterance=""):
            index = {s: i for i, s in enumerate(self.symbols)}
            return [index["\u2581" + w] for w in text.split()]

    class Vague(Pieces):  # the error does not say where
        def encode(self, text, utterance=""):
            return super().encode(text)

    symbols = Words().symbols(TEXTS)
    with pytest.raises(AssertionError, match=r"gave .* although 'é' is in none of the texts"):
        check_unknown_character(Skipping(symbols), TEXTS)
    with pytest.raises(AssertionError, match=r"raised KeyError: .*raise asrkit.api.LabelError"):
        check_unknown_character(Crashing(symbols), TEXTS)
    with pytest.raises(AssertionError, match="must name the character 'é' and the utterance"):
        check_unknown_character(Vague(symbols), TEXTS)
    with pytest.raises(LabelError, match=r"^'é' in utterance 'clip' is not spelt"):
        Pieces(symbols).encode("the é", "clip")  # what the checks want, from Pieces itself


def test_the_checks_catch_a_decode_the_symbols_cannot_reproduce():
    class Apostrophe(Alphabet):  # "'" as the symbol "<apos>": decodes right only itself
        def encode(self, text, utterance=""):
            return [self.symbols.index("<apos>" if c == "'" else c) for c in text]

        def decode(self, labels):
            return "".join("'" if self.symbols[label] == "<apos>" else self.symbols[label]
                           for label in self._checked(labels))

        def __post_init__(self):
            pass

    chars = sorted(set("".join(TEXTS)) - {" ", "'"})
    labels = Apostrophe((" ", *chars, "<apos>"))
    check_round_trip(labels, TEXTS)
    with pytest.raises(AssertionError, match="decodes from the symbols alone as 'the "
                                             "cat<apos>s tall', but the labels decode"):
        check_symbols_decode(labels, TEXTS)


def test_the_checks_catch_a_load_that_accepts_or_crashes_on_garbage():
    class Trusting(Words):
        def load(self, path):
            return Pieces(["<unk>", "\u2581a"])

    class Crashing(Words):
        def load(self, path):
            return self.labels(json.loads(Path(path).read_text())["symbols"])

    with pytest.raises(AssertionError, match="load of a garbage file gave Pieces"):
        check_load_refuses_garbage(Trusting())
    with pytest.raises(AssertionError, match="load of a garbage file raised UnicodeDecodeError"):
        check_load_refuses_garbage(Crashing())


def test_the_checks_catch_a_build_that_differs_each_time():
    class Shuffled(Words):
        def symbols(self, texts):
            symbols = super().symbols(texts)
            random.shuffle(symbols)
            return symbols

    with pytest.raises(AssertionError, match="two builds from the same texts have other "
                                             "symbols: make build deterministic"):
        check_deterministic_build(Shuffled(), TEXTS)
