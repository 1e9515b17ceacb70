"""Decoding subword (SentencePiece-like) labels exactly as characters: greedy, beam, and the
prefix search with a word scorer, which finds words at the pieces' word marker ("▁the" finishes
the word before it and begins "the"). The pieces are hand-written
(:class:`asrkit.core.labels.Pieces`); no tokenizer is needed."""

from __future__ import annotations

import itertools
import math
from typing import ClassVar

import numpy as np
import pytest

from asrkit.core.errors import AsrkitError
from asrkit.core.labels import Pieces
from asrkit.core.text import Alphabet
from asrkit.decoders.beam import BeamDecoder, BeamSearchDecoder
from asrkit.decoders.greedy import GreedyDecoder
from asrkit.decoders.prefix import PrefixBeamSearch, log_softmax
from asrkit.decoders.scoring import WordScorer
from asrkit.testing.decoders import best_path, check_decoder, peaked_logits

PIECES = Pieces(["▁the", "▁cat", "▁c", "at", "ot", "▁sat", "▁s", "▁", "s", "a", "t", "h", "e",
                 "c", "o", "'", "l", "▁t", "▁a"])
ENGLISH = Alphabet()
TEXT = "the cat's tall"


class Unigrams(WordScorer):
    """ln P(word) of a few words; anything else costs -10. Records every word it is asked."""

    LOGP: ClassVar[dict[str, float]] = {"the": -1.0, "cat": -1.5, "sat": -1.5}

    def __init__(self, bounded: bool = False, vocabulary: bool = False) -> None:
        self.asked: list[str] = []
        if bounded:
            self.word_bound = -1.0
            self.unknown_word_bound = -10.0
        if vocabulary:
            self.vocabulary = frozenset(self.LOGP)
            self.partial_penalty = -5.0

    def start(self):
        return None

    def score_word(self, state, word):
        self.asked.append(word)
        return self.LOGP.get(word, -10.0), None

    def score_end(self, state):
        return 0.0


class UnigramDecoder(BeamSearchDecoder):
    name = "unigrams"
    description = "beam search with a unigram table (tests)"

    def __init__(self, config=None, **scorer) -> None:
        super().__init__(config)
        self.scorer_options = scorer
        self.scorers: list[Unigrams] = []

    def make_scorer(self, labels):
        self.scorers.append(Unigrams(**self.scorer_options))
        return self.scorers[-1]


def ambiguous_logits(labels, spelling: list[dict[str, float]]) -> np.ndarray:
    """Logits ``[1, frames, classes]``: for each entry a frame where each symbol has the given
    probability (the rest spread over the other classes), then a blank frame."""
    frames = []
    for probs in spelling:
        for chosen in (probs, {None: 0.99}):
            frame = np.full(labels.num_classes, 0.0)
            for symbol, p in chosen.items():
                frame[labels.blank if symbol is None else labels.symbols.index(symbol)] = p
            rest = 1.0 - frame.sum()
            frame[frame == 0.0] = rest / max(1, int((frame == 0.0).sum()))
            frames.append(np.log(frame))
    return np.array(frames, dtype=np.float32)[None]


# "the cat sat" where the second word sounds a bit more like "cot" (not a word).
SUBWORD_SPELLING = [{"▁the": 0.9}, {"▁c": 0.9}, {"ot": 0.5, "at": 0.4}, {"▁sat": 0.9}]
CHAR_SPELLING = ([{c: 0.9} for c in "the "] + [{"c": 0.9}, {"o": 0.5, "a": 0.4}, {"t": 0.9}]
                 + [{c: 0.9} for c in " sat"])


@pytest.mark.parametrize("bounded", [False, True])
def test_a_word_scorer_over_pieces_flips_a_non_word_as_over_characters(bounded):
    for labels, spelling in ((PIECES, SUBWORD_SPELLING), (ENGLISH, CHAR_SPELLING)):
        logits = ambiguous_logits(labels, spelling)
        assert BeamDecoder().decode(logits, None, labels) == ["the cot sat"]
        decoder = UnigramDecoder(bounded=bounded)
        best = decoder.decode_nbest(logits, None, labels, 1)[0][0]
        assert best.text == "the cat sat"
        # each of the three words finished and scored once
        assert best.lm == pytest.approx(-4.0)
        asked = set(decoder.scorers[-1].asked)
        assert {"the", "cat", "sat"} <= asked
        assert all(word and " " not in word and "▁" not in word for word in asked)


def test_a_word_made_of_several_pieces_is_spelled_from_its_start_piece():
    """"▁c" + "at" is the word "cat"; "▁" + "cat"... pieces after the start are its text."""
    pieces = Pieces(["▁c", "at", "▁s", "▁", "a", "t", "c"])
    logits = ambiguous_logits(pieces, [{"▁": 0.9}, {"c": 0.9}, {"at": 0.9}, {"▁s": 0.9},
                                       {"at": 0.9}])
    decoder = UnigramDecoder()
    best = decoder.decode_nbest(logits, None, pieces, 1)[0][0]
    assert best.text == "cat sat"
    assert best.lm == pytest.approx(-3.0)
    assert "cat" in decoder.scorers[-1].asked and "sat" in decoder.scorers[-1].asked


def test_the_vocabulary_judges_unfinished_words_spelt_by_pieces():
    """Pieces walk the vocabulary's character trie by their bodies; characters (and pieces that
    are characters with a bare marker) keep the one-lookup-a-label table."""
    from asrkit.decoders.prefix import _PieceVocabulary, _Vocabulary

    with_vocab = Unigrams(vocabulary=True)
    search = PrefixBeamSearch(PIECES.symbols, 8, scorer=with_vocab, word_marker="▁")
    assert isinstance(search.vocab, _PieceVocabulary)
    assert isinstance(PrefixBeamSearch(ENGLISH.symbols, 8, scorer=with_vocab).vocab, _Vocabulary)
    letters = Pieces(["▁", *"abcdefghijklmnopqrstuvwxyz'"])
    assert isinstance(PrefixBeamSearch(letters.symbols, 8, scorer=with_vocab,
                                       word_marker="▁").vocab, _Vocabulary)
    vocab = search.vocab
    label = PIECES.symbols.index
    node = vocab.start_node[label("▁c")]
    assert node > 0 and not vocab.is_word[node]
    cat = vocab.step(np.array([node]), np.array([label("at")]), np.array([False]))[0]
    assert vocab.is_word[cat]
    assert vocab.step(np.array([node]), np.array([label("ot")]), np.array([False]))[0] == -1
    assert vocab.start_node[label("▁the")] > 0 and vocab.start_node[label("▁")] == 0
    unknown = vocab.unknown(np.array([[node, cat, -1]]), np.array([[label("at"), label("h")]]))
    assert unknown.tolist() == [[[False, True], [True, True], [True, True]]]
    for labels, spelling in ((PIECES, SUBWORD_SPELLING), (ENGLISH, CHAR_SPELLING)):
        logits = ambiguous_logits(labels, spelling)
        assert UnigramDecoder(vocabulary=True).decode(logits, None, labels) == ["the cat sat"]
    logits = ambiguous_logits(letters, [{"▁": 0.9}, {"t": 0.9}, {"h": 0.9}, {"e": 0.9},
                                        {"▁": 0.9}, {"c": 0.9}, {"o": 0.5, "a": 0.4},
                                        {"t": 0.9}])
    assert BeamDecoder().decode(logits, None, letters) == ["the cot"]
    assert UnigramDecoder(vocabulary=True).decode(logits, None, letters) == ["the cat"]


@pytest.mark.parametrize(("width", "bounded", "prune"),
                         [(2, False, None), (6, False, None), (6, True, None), (2, True, None),
                          (8, True, -3.0), (8, False, -3.0)])
def test_search_over_pieces_with_a_word_scorer_equals_the_textbook(width, bounded, prune):
    """Words begun by a piece with a body ("▁a"), continued by multi-character pieces ("ab"),
    separated by a bare marker, or begun by a non-word ("▁bb"): the vectorised search ranks as
    the textbook does, bounded word scoring, pruning and batching included."""
    from tests.test_decoders import ToyScorer, textbook_label_lm_beam

    pieces = Pieces(["▁a", "▁b", "a", "b", "ab", "▁", "▁bb"])
    rng = np.random.default_rng(width)
    search = PrefixBeamSearch(pieces.symbols, width, beam_prune_logp=prune,
                              scorer=ToyScorer(bounded), word_marker="▁", decode=pieces.decode)
    log_probs = log_softmax(rng.normal(size=(5, 12, pieces.num_classes)) * 2.5)
    lengths = [12, 9, 12, 3, 10]
    batch = search.search_batch(log_probs, lengths)
    for utterance, length, found in zip(log_probs, lengths, batch, strict=True):
        expected = textbook_label_lm_beam(utterance[:length], width, ToyScorer(bounded),
                                          pieces.symbols, pieces.word_marker,
                                          prune)
        assert [h.text for h in found] == [pieces.decode(p) for p, _ in expected]
        np.testing.assert_allclose([h.score for h in found], [s for _, s in expected],
                                   rtol=0, atol=1e-9)
        assert found == search.search(utterance[:length])


def test_beam_on_peaked_pieces_is_greedy():
    rng = np.random.default_rng(0)
    for text in ("the cat sat", "a cat's tall hat", "sat at the cat"):
        logits = peaked_logits(PIECES, text, peak=6.0, rng=rng)
        frames = logits.shape[1]
        expected = best_path(logits, [frames], PIECES)
        assert expected == [text]
        assert GreedyDecoder().decode(logits, np.array([frames]), PIECES) == expected
        assert BeamDecoder().decode(logits, np.array([frames]), PIECES) == expected
        if set(text.split()) <= set(Unigrams.LOGP):  # a scorer agrees with words it knows
            assert UnigramDecoder().decode(logits, np.array([frames]), PIECES) == expected


@pytest.mark.parametrize("decoder", [GreedyDecoder(), BeamDecoder(),
                                     BeamDecoder().with_config(beam_width=4,
                                                               token_min_logp=None)],
                         ids=["greedy", "beam", "beam-exact"])
def test_decoders_keep_the_contract_on_pieces(decoder):
    check_decoder(decoder, PIECES, TEXT)


def test_nbest_texts_are_the_labels_decode():
    logits = ambiguous_logits(PIECES, SUBWORD_SPELLING)
    for hypothesis in BeamDecoder().decode_nbest(logits, None, PIECES)[0]:
        assert hypothesis.text == " ".join(hypothesis.text.split())
        assert "▁" not in hypothesis.text
        assert math.isfinite(hypothesis.score)


def test_a_scorer_needs_a_word_start_symbol():
    no_marker = Pieces(["th", "e", "ca", "t"])
    logits = np.zeros((1, 3, no_marker.num_classes), np.float32)
    logits[..., no_marker.blank] = 10.0
    with pytest.raises(AsrkitError, match="'▁'"):
        UnigramDecoder().decode(logits, None, no_marker)
    assert BeamDecoder().decode(logits, None, no_marker) == [""]  # no scorer: fine
    with pytest.raises(AsrkitError, match="a space"):
        UnigramDecoder().decode(np.zeros((1, 3, 3)), None, Alphabet(("a", "b")))


# -- word times ---------------------------------------------------------------------------------


def test_word_times_on_subword_tokens():
    """A word starts at a piece with the marker: "▁the" is the word "the", "▁c" + "at" is "cat",
    and a bare "▁" only separates ("s" + "at" is "sat")."""
    from asrkit.core.viterbi import Token
    from asrkit.serving.transcribe import words_from_tokens

    pieces = [PIECES.symbols.index(s) for s in ("▁the", "▁c", "at", "▁", "s", "at")]
    tokens = [Token(label, 2 * i, 2 * i + 1) for i, label in enumerate(pieces)]
    log_probs = np.full((12, PIECES.num_classes), math.log(0.5 / PIECES.size))
    for token in tokens:
        log_probs[token.first:token.last + 1, token.label] = math.log(0.5)
    words = words_from_tokens(tokens, log_probs, PIECES, offset=1.0, frame_seconds=0.1)
    assert [w.word for w in words] == ["the", "cat", "sat"]
    assert [w.start for w in words] == pytest.approx([1.0, 1.2, 1.8])
    assert [w.end for w in words] == pytest.approx([1.2, 1.6, 2.2])
    assert all(w.confidence == pytest.approx(0.5) for w in words)


def test_window_words_align_a_decoder_text_on_pieces():
    """The decoder's text ("the cat sat") is not the greedy path's ("the cot sat"): its pieces
    are force-aligned on the logits and the words keep their order and frames."""
    from asrkit.serving.transcribe import window_words

    logits = ambiguous_logits(PIECES, SUBWORD_SPELLING)[0]
    greedy = window_words(logits, GreedyDecoder(), PIECES, 0.0, 0.02)
    assert [w.word for w in greedy] == ["the", "cot", "sat"]
    words = window_words(logits, UnigramDecoder(), PIECES, 0.0, 0.02)
    assert [w.word for w in words] == ["the", "cat", "sat"]
    assert all(w.confidence is not None for w in words)
    assert words[0].start == 0.0 and words[-1].end <= len(logits) * 0.02
    assert all(a.end <= b.start for a, b in itertools.pairwise(words))
    assert (words[0].start, words[0].end) == (greedy[0].start, greedy[0].end)
    assert (words[2].start, words[2].end) == (greedy[2].start, greedy[2].end)
