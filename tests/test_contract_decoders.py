"""The decoder contract (``Config``, ``config``, ``with_config``, ``decode``) checked by
``asrkit.testing``'s contract checks on every decoder asrkit ships (``greedy``, ``beam``, and the
kenlm plugin's ``kenlm`` with a tiny language model), and the checks themselves catching
decoders that break it."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest

from asrkit.api import BeamDecoder, Decoder, setting
from asrkit.config.decoding import choose_decoder
from asrkit.config.overrides import parse_decoder_choice
from asrkit.core.errors import AsrkitError
from asrkit.core.text import Alphabet
from asrkit.decoders.greedy import GreedyDecoder
from asrkit.testing import (
    check_batch_matches_single,
    check_decoder,
    check_empty_input,
    check_peaked_input,
    check_settings_round_trip,
)
from tests.conftest import ROOT

KENLM_PLUGIN = ROOT / "plugins" / "asrkit-decoder-kenlm"
#: Words of the tiny language model, and a text made of them for the peaked logits.
LM_SENTENCES = ["the cat sat on the mat", "a cat sat on a mat", "the dog sat on the mat",
                "the cat ran", "a dog ran to the cat", "my cat sat", "the mat was red"]
LM_TEXT = "the cat sat on the mat"


@pytest.mark.parametrize("decoder", [
    GreedyDecoder(),
    BeamDecoder(),
    BeamDecoder().with_config(beam_width=3),
    BeamDecoder().with_config(token_min_logp=-math.inf, beam_prune_logp=-8.0),
    BeamDecoder().with_config(token_min_logp=None),
], ids=repr)
def test_bundled_decoders_keep_the_contract(decoder):
    check_decoder(decoder)


@pytest.fixture(scope="module")
def kenlm_plugin():
    """The kenlm plugin: installed, or else from the source tree."""
    pytest.importorskip("kenlm")
    added = False
    try:
        import asrkit_decoder_kenlm
    except ImportError:
        sys.path.insert(0, str(KENLM_PLUGIN))
        added = True
        import asrkit_decoder_kenlm
    yield asrkit_decoder_kenlm
    if added:
        sys.path.remove(str(KENLM_PLUGIN))


@pytest.fixture(scope="module")
def tiny_lm(kenlm_plugin, tmp_path_factory) -> Path:
    from asrkit_decoder_kenlm.arpa import estimate

    path = tmp_path_factory.mktemp("lm") / "lm.arpa"
    estimate(LM_SENTENCES, 3).write(path)
    return path


@pytest.mark.parametrize("settings", [{}, {"token_min_logp": -math.inf},
                                      {"beam_prune_logp": None, "sentence_boundaries": False}],
                         ids=repr)
def test_kenlm_keeps_the_contract(kenlm_plugin, tiny_lm, settings):
    decoder = kenlm_plugin.KenLMDecoder().with_config(lm=str(tiny_lm), **settings)
    check_decoder(decoder, text=LM_TEXT)


def test_kenlm_takes_minus_infinity_from_the_command_line(kenlm_plugin, tiny_lm, make_plugins):
    """``-o decoder.token_min_logp=-inf`` (its documented "every label") is a setting the
    settings validation accepts, and it means what ``none`` means."""
    make_plugins(kenlm_plugin)
    decoder = choose_decoder(parse_decoder_choice(
        "kenlm", [f"decoder.lm={tiny_lm}", "decoder.token_min_logp=-inf"]), "greedy")
    assert decoder.config.token_min_logp == -math.inf
    exact = choose_decoder(parse_decoder_choice(
        "kenlm", [f"decoder.lm={tiny_lm}", "decoder.token_min_logp=none"]), "greedy")
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 30, 29)) * 3
    assert decoder.decode(logits, [30, 20], Alphabet()) == exact.decode(logits, [30, 20],
                                                                         Alphabet())


# -- a decoder written against the contract alone -----------------------------------------------


@dataclass(frozen=True)
class EchoConfig:
    """Settings of every type a decoder's Config may declare."""

    bonus: float = setting(0.0, min=0, finite=False)
    note: str | None = None
    words: tuple[str, ...] = ()
    path: Path = Path("lexicon.txt")
    mode: Literal["best", "all"] = "best"
    upper: bool = False


class Echo(Decoder):
    """Best path, through nothing but the contract's defaults (no __init__, no with_config)."""

    name = "echo"
    description = "Best path; a test of the contract's defaults."
    Config = EchoConfig

    def decode(self, logits: Any, lengths: Any, alphabet: Any) -> list[str]:
        from asrkit.testing.decoders import best_path

        texts = best_path(logits, lengths, alphabet)
        return [t.upper() for t in texts] if self.config.upper else texts


def test_a_plugin_decoder_gets_the_contract_from_the_base_class():
    echo = Echo()
    assert echo.config == EchoConfig()
    check_decoder(echo)
    check_decoder(echo.with_config(note="x", words=("a", "b"), bonus=math.inf, mode="all"))
    with pytest.raises(AsrkitError, match="unknown option"):
        echo.with_config(volume=3)
    with pytest.raises(AsrkitError, match="takes a EchoConfig"):
        echo.with_config({"note": "x"})


# -- the checks catch what breaks the contract -------------------------------------------------


class Broken(Echo):
    name = "broken"


def test_the_checks_catch_a_decoder_that_breaks_the_contract(monkeypatch):
    class Shouting(Broken):  # not the best path on peaked logits
        def decode(self, logits, lengths, alphabet):
            return [t.upper() or "?" for t in super().decode(logits, lengths, alphabet)]

    class Padded(Broken):  # reads frames past each utterance's length
        def decode(self, logits, lengths, alphabet):
            full = [np.asarray(logits).shape[1]] * len(lengths)
            return super().decode(logits, full, alphabet)

    class Sticky(Broken):  # with_config changes the decoder itself
        def with_config(self, config=None, /, **changes):
            self.config = super().with_config(config, **changes).config
            return self

    class Lossy(Broken):  # a setting that does not survive its own string form
        Config = dataclass(frozen=True)(type("LossyConfig", (), {
            "__annotations__": {"names": "tuple[str, ...]"}, "names": ("a,b",)}))

    with pytest.raises(AssertionError, match="peaked logits decoded as"):
        check_peaked_input(Shouting())
    with pytest.raises(AssertionError, match=r"blank-only logits decoded as \['\?', '\?'\]"):
        check_empty_input(Shouting())
    with pytest.raises(AssertionError, match="a batch decoded as"):
        check_batch_matches_single(Padded())
    with pytest.raises(AssertionError, match="with_config changed the decoder"):
        check_settings_round_trip(Sticky())
    with pytest.raises(AssertionError, match=r"-o decoder\.names=a,b gives \('a', 'b'\)"):
        check_settings_round_trip(Lossy())
