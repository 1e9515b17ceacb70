"""Contract checks for decoders: what every :class:`~asrkit.types.Decoder` must do, for a plugin
author's tests (and asrkit's own)::

    from asrkit.testing import check_decoder

    def test_my_decoder_keeps_the_contract():
        check_decoder(MyDecoder())

:func:`check_decoder` runs them all; each is also a function of its own. A failed check raises
``AssertionError`` saying what the decoder did and what was expected. The logits are made here,
seeded, so a failure repeats.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from asrkit.core.labels import LabelError, Labels
from asrkit.core.text import Alphabet
from asrkit.testing.settings import check_settings_read_back
from asrkit.types import Decoder

if TYPE_CHECKING:
    import numpy as np

__all__ = ["check_batch_matches_single", "check_decoder", "check_empty_input",
           "check_peaked_input", "check_settings_round_trip"]

#: Logit of the intended class above the others in a "peaked" frame: e^-30 is below any
#: language-model weight a decoder could add, so the best path is the only sensible answer.
PEAK = 30.0
#: The text peaked logits spell unless told otherwise (a space, repeated letters, an apostrophe).
TEXT = "the cat's tall"


def check_decoder(decoder: Decoder, alphabet: Labels | None = None, text: str = TEXT) -> None:
    """Every contract check on ``decoder`` (default labels: asrkit's English alphabet; any
    :class:`~asrkit.core.labels.Labels`, subword pieces too). ``text`` is what the peaked logits
    spell (it must be the labels' ``decode`` of its own encoding, e.g. single spaces); give a
    decoder with a vocabulary words it knows."""
    alphabet = _alphabet(alphabet)
    check_settings_round_trip(decoder)
    check_peaked_input(decoder, alphabet, text)
    check_empty_input(decoder, alphabet)
    check_batch_matches_single(decoder, alphabet, text)


def check_settings_round_trip(decoder: Decoder) -> None:
    """``Config`` is a dataclass and ``config`` one of it; every setting, written as the command
    line writes it, parses back to the same ``Config``; ``with_config(config)`` returns a new
    decoder of the same kind using it, and leaves ``decoder`` as it was."""
    kind: Any = type(decoder).Config
    config = decoder.config
    if not (isinstance(kind, type) and dataclasses.is_dataclass(kind)
            and isinstance(config, kind)):
        raise AssertionError(f"{decoder.name}: Config must be a dataclass and config one of it; "
                             f"got Config={kind!r}, config={config!r}")
    check_settings_read_back(decoder.name, config, "decoder.")
    configured = decoder.with_config(config)
    if not isinstance(configured, Decoder) or type(configured) is not type(decoder):
        raise AssertionError(f"{decoder.name}: with_config returned {configured!r}, not a "
                             f"{type(decoder).__name__}")
    if configured.config != config:
        raise AssertionError(f"{decoder.name}: with_config(config) uses {configured.config!r}, "
                             f"not {config!r}")
    if decoder.config is not config:
        raise AssertionError(f"{decoder.name}: with_config changed the decoder it was called on")


def check_peaked_input(decoder: Decoder, alphabet: Labels | None = None, text: str = TEXT) -> None:
    """On peaked (one-hot-like) logits spelling ``text`` the decoder gives the best path: the
    text itself, for each utterance of a batch of two."""
    import numpy as np

    alphabet = _alphabet(alphabet)
    logits = peaked_logits(alphabet, text)
    batch = np.concatenate([logits, logits])
    frames = logits.shape[1]
    expected = best_path(batch, [frames, frames], alphabet)
    if expected != [text, text]:
        raise AssertionError(f"the peaked logits spell {expected!r}, not {text!r}: "
                             "can the labels spell the text?")
    got = decoder.decode(batch, np.array([frames, frames]), alphabet)
    if list(got) != expected:
        raise AssertionError(f"{decoder.name}: peaked logits decoded as {got!r}, the best "
                             f"path is {expected!r}")


def check_empty_input(decoder: Decoder, alphabet: Labels | None = None) -> None:
    """Blank-only logits, utterances of length 0 and logits without frames all decode to
    ``""``, one text per utterance."""
    import numpy as np

    alphabet = _alphabet(alphabet)
    rng = np.random.default_rng(0)
    blank = np.zeros((2, 6, alphabet.num_classes), dtype=np.float32)
    blank[..., alphabet.blank] = PEAK
    junk = rng.normal(size=(2, 6, alphabet.num_classes)).astype(np.float32)
    cases = {
        "blank-only logits": (blank, np.array([6, 3])),
        "length 0": (junk, np.array([0, 0])),
        "no frames": (np.zeros((2, 0, alphabet.num_classes), dtype=np.float32),
                      np.array([0, 0])),
    }
    for what, (logits, lengths) in cases.items():
        got = decoder.decode(logits, lengths, alphabet)
        if list(got) != ["", ""]:
            raise AssertionError(f"{decoder.name}: {what} decoded as {got!r}, not ['', '']")


def check_batch_matches_single(decoder: Decoder, alphabet: Labels | None = None,
                               text: str = TEXT) -> None:
    """A batch of utterances of different lengths (padded with noise) decodes as each
    utterance alone: padding and neighbours change nothing."""
    import numpy as np

    alphabet = _alphabet(alphabet)
    rng = np.random.default_rng(1)
    words = text.split() or [text]
    texts = [text, words[0], " ".join(reversed(words))]
    rows = [peaked_logits(alphabet, t, peak=3.0, rng=rng)[0] for t in texts]
    frames = max(len(r) for r in rows) + 3
    batch = rng.normal(size=(len(rows), frames, alphabet.num_classes)).astype(np.float32) * 3
    for i, row in enumerate(rows):
        batch[i, :len(row)] = row
    lengths = np.array([len(r) for r in rows])
    together = list(decoder.decode(batch, lengths, alphabet))
    alone = [decoder.decode(r[None], np.array([len(r)]), alphabet)[0] for r in rows]
    if together != alone:
        raise AssertionError(f"{decoder.name}: a batch decoded as {together!r}, each utterance "
                             f"alone as {alone!r}")


def peaked_logits(alphabet: Labels, text: str, peak: float = PEAK,
                  rng: np.random.Generator | None = None) -> np.ndarray:
    """Logits ``[1, frames, classes]`` spelling ``text``: a frame for each label of
    ``alphabet.encode(text)`` (a character, or a subword piece), then a blank frame; the
    intended class ``peak`` above the others (plus noise from ``rng``). A character the labels
    lack gets a frame where nothing stands out."""
    import numpy as np

    try:
        encoded = list(alphabet.encode(text))
    except LabelError:
        encoded = [alphabet.symbols.index(c) if c in alphabet.symbols else -1 for c in text]
    labels = []
    for label in encoded:
        labels += [label, alphabet.blank]
    frames = np.zeros((len(labels), alphabet.num_classes), dtype=np.float32)
    if rng is not None:
        frames += rng.normal(size=frames.shape).astype(np.float32)
    for t, label in enumerate(labels):
        if label >= 0:
            frames[t, label] += peak
    return frames[None]


def best_path(logits: np.ndarray, lengths: np.ndarray, alphabet: Labels) -> list[str]:
    """Greedy CTC decoding, the reference of :func:`check_peaked_input`."""
    import numpy as np

    texts = []
    for row, length in zip(np.asarray(logits), np.asarray(lengths), strict=True):
        best = row[: int(length)].argmax(-1)
        keep = [c for i, c in enumerate(best) if i == 0 or c != best[i - 1]]
        texts.append(alphabet.decode(int(c) for c in keep if c != alphabet.blank))
    return texts


def _alphabet(alphabet: Labels | None) -> Labels:
    if alphabet is not None:
        return alphabet
    return Alphabet()
