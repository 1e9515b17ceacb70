"""The kenlm decoder on subword labels (SentencePiece-like pieces, ``"▁"`` starting a word): the
n-gram model scores the words the pieces spell, as it scores words spelt by characters.

Uses only asrkit's public API; the pieces are hand-written (``asrkit.api.Pieces``).
"""

from __future__ import annotations

import numpy as np
from asrkit_decoder_kenlm.decoder import KenLMDecoder

from asrkit.api import Alphabet, BeamDecoder, Pieces
from asrkit.testing import check_decoder

PIECES = Pieces(["▁the", "▁cat", "▁c", "▁k", "at", "▁sat", "▁ran", "▁on", "▁mat", "▁a", "▁m",
                 "▁", "a", "t", "h", "e", "c", "k", "s", "r", "n", "o", "m"])


def spell(labels, spelling: list[dict[str, float]]) -> np.ndarray:
    """Log-probabilities ``[1, frames, classes]``: a frame per entry (the symbols' probabilities,
    the rest spread evenly), each followed by a nearly certain blank."""
    frames = []
    for probs in spelling:
        for chosen in (probs, {"": 0.98}):
            frame = np.zeros(labels.num_classes)
            for symbol, p in chosen.items():
                frame[labels.blank if symbol == "" else labels.symbols.index(symbol)] = p
            frame[frame == 0.0] = (1.0 - frame.sum()) / (frame == 0.0).sum()
            frames.append(np.log(frame))
    return np.array(frames, np.float32)[None]



def test_kenlm_over_pieces_gives_the_words_the_model_knows(cat_lm):
    """The acoustics favour "▁k at" ("kat") over "▁c at"; the n-gram model picks "cat", as it
    does when the same words are spelt by characters."""
    spelling = [{"▁the": 0.9}, {"▁k": 0.5, "▁c": 0.4}, {"at": 0.9}, {"▁sat": 0.9}, {"▁on": 0.9},
                {"▁the": 0.9}, {"▁mat": 0.9}]
    logits = spell(PIECES, spelling)
    assert BeamDecoder().decode(logits, None, PIECES) == ["the kat sat on the mat"]
    decoder = KenLMDecoder().with_config(lm=str(cat_lm))
    assert decoder.decode(logits, None, PIECES) == ["the cat sat on the mat"]
    english = Alphabet()
    chars = [{c: 0.9} for c in "the "] + [{"k": 0.5, "c": 0.4}] + [
        {c: 0.9} for c in "at sat on the mat"]
    assert decoder.decode(spell(english, chars), None, english) == ["the cat sat on the mat"]


def test_kenlm_keeps_the_decoder_contract_on_pieces(cat_lm):
    check_decoder(KenLMDecoder().with_config(lm=str(cat_lm)), PIECES, "the cat sat on the mat")
