"""Alphabets (DeepSpeech's alphabet.txt format, the CTC blank last) and transcript normalisation."""

from __future__ import annotations

from pathlib import Path

import pytest

from asrkit.core.labels import LabelError
from asrkit.core.text import ENGLISH, Alphabet, AlphabetError, normalize

# DeepSpeech's data/alphabet.txt, verbatim (comments, a line holding one space, a-z, apostrophe);
# the space line is formatted in so that editors cannot strip it.
DEEPSPEECH_ALPHABET = """\
# Each line in this file represents the Unicode codepoint (UTF-8 encoded)
# associated with a numeric label.
# A line that starts with # is a comment. You can escape it with \\# if you wish
# to use '#' as a label.
{space}
a
b
c
d
e
f
g
h
i
j
k
l
m
n
o
p
q
r
s
t
u
v
w
x
y
z
'
# The last (non-comment) line needs to end with a newline.
""".format(space=" ")


def test_default_alphabet_is_english_with_blank_last() -> None:
    alphabet = Alphabet()
    assert alphabet.symbols == ENGLISH
    assert alphabet.size == 28
    assert alphabet.num_classes == 29  # brnn's 29 outputs: a-z, space, apostrophe, blank
    assert alphabet.blank == 28 == alphabet.num_classes - 1


def test_deepspeech_alphabet_file_reads_as_the_default() -> None:
    assert Alphabet.from_text(DEEPSPEECH_ALPHABET) == Alphabet()


def test_labels_are_file_order() -> None:
    alphabet = Alphabet.from_text("# comment\nb\n\\s\na\n")
    assert alphabet.symbols == ("b", " ", "a")
    assert alphabet.encode("a b") == [2, 1, 0]
    assert alphabet.blank == 3


def test_encode_decode_round_trip() -> None:
    alphabet = Alphabet()
    text = "she had your dark suit in greasy wash water all year don't"
    labels = alphabet.encode(text)
    assert labels[:4] == [19, 8, 5, 0]
    assert alphabet.decode(labels) == text


def test_decode_drops_blanks_and_rejects_other_labels() -> None:
    alphabet = Alphabet()
    assert alphabet.decode([8, alphabet.blank, 9, alphabet.blank]) == "hi"
    with pytest.raises(LabelError, match="label 29 is outside the 28 symbols"):
        alphabet.decode([1, 29])
    with pytest.raises(LabelError, match="label -1"):
        alphabet.decode([-1])


def test_encode_error_names_the_character_and_utterance() -> None:
    with pytest.raises(AlphabetError) as error:
        Alphabet().encode("room 101", utterance="61-70968-0002")
    message = str(error.value)
    assert "'1'" in message and "'61-70968-0002'" in message and "alphabet" in message
    with pytest.raises(AlphabetError, match="character 'é' is not in the alphabet"):
        Alphabet().encode("café")


def test_missing_lists_each_unknown_character_once_in_order() -> None:
    assert Alphabet().missing("x9y9z-") == ["9", "-"]
    assert Alphabet().missing("all fine") == []


def test_malformed_alphabets_are_rejected() -> None:
    with pytest.raises(AlphabetError, match="line 3 holds 'ab'"):
        Alphabet.from_text("# c\na\nab\n")
    with pytest.raises(AlphabetError, match="twice"):
        Alphabet.from_text("a\nb\na\n")
    with pytest.raises(AlphabetError, match="single characters"):
        Alphabet(("a", "bc"))


def test_escaped_hash_is_a_symbol() -> None:
    assert Alphabet.from_text("\\#\na\n").symbols == ("#", "a")


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    alphabet = Alphabet((" ", *"abcäöü", "'"))
    path = tmp_path / "alphabet.txt"
    alphabet.save(path)
    assert Alphabet.load(path) == alphabet
    assert path.read_text(encoding="utf-8").startswith("#")


def test_save_escapes_hash(tmp_path: Path) -> None:
    alphabet = Alphabet((" ", "#", "a"))
    alphabet.save(tmp_path / "alphabet.txt")
    assert Alphabet.load(tmp_path / "alphabet.txt") == alphabet


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            "She had your dark suit in greasy wash water all year.",
            "she had your dark suit in greasy wash water all year",
        ),
        ("EXPERIENCE PROVES THIS", "experience proves this"),
        ("Hello,   World!", "hello world"),
        ("rock-n-roll", "rock n roll"),
        ("I 'd say it 's fine", "i'd say it's fine"),  # TED-LIUM's split clitics
        ("don\u2019t \u2018quote\u2019", "don't quote"),  # typographic apostrophes
        ("'hello' said o'brien", "hello said o'brien"),  # quoting apostrophes go
        ("Café naïve Ça", "cafe naive ca"),  # accents the alphabet lacks are folded
        ("  spaced\tout\n", "spaced out"),
    ],
)
def test_normalize(raw: str, expected: str) -> None:
    assert normalize(raw) == expected
    assert Alphabet().missing(normalize(raw)) == []


def test_normalize_keeps_characters_the_alphabet_has() -> None:
    german = (" ", *"abcdefghijklmnopqrstuvwxyzäöüß", "'")
    assert normalize("Schöne Straße", keep=german) == "schöne straße"
    # Leftovers are kept for the caller to report, not silently dropped.
    leftover = normalize("room 101")
    assert leftover == "room 101" and Alphabet().missing(leftover) == ["1", "0"]
