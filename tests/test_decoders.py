"""The bundled CTC decoders (``greedy``, ``beam``) against TensorFlow's and a textbook reference,
their options, their registration through ``register_decoders``, and the kenlm plugin's decoder
on a case that only a language model gets right.

About ``tf.nn.ctc_beam_search_decoder`` as an oracle: when its beam is full it can lose a
candidate that the textbook prefix beam search keeps (an entry pushed out of the beam and then
revisited as the child of another entry has its previous probabilities reset, so its own
children are never grown), and then the probabilities of the beams it returns differ. So the
beam search is checked three ways: exactly against a plain-Python textbook prefix beam search,
exactly against TensorFlow (and the CTC forward probability) when nothing is pruned, and on
peaked logits for the same best transcript and nearly the same probability.
"""

from __future__ import annotations

import collections
import json
import math
import shutil
import sys
from collections.abc import Sequence
from typing import ClassVar

import numpy as np
import pytest

from asrkit.core.errors import AsrkitError
from asrkit.core.text import Alphabet
from asrkit.decoders import beam as beam_module
from asrkit.decoders import greedy as greedy_module
from asrkit.decoders.beam import BeamConfig, BeamDecoder
from asrkit.decoders.greedy import GreedyDecoder
from asrkit.decoders.prefix import PrefixBeamSearch, log_softmax
from asrkit.decoders.scoring import WordScorer
from tests.conftest import ROOT, pip_install, run_asrkit

KENLM_PLUGIN = ROOT / "plugins" / "asrkit-decoder-kenlm"
ENGLISH = Alphabet()


def peaked_logits(seed: int, batch: int = 6, frames: int = 80, peak: float = 8.0,
                  classes: int = 29) -> np.ndarray:
    """Logits of a confident model: one label a frame stands out (half the frames blank)."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(batch, frames, classes)).astype(np.float32)
    for b in range(batch):
        for t in range(frames):
            label = classes - 1 if rng.random() < 0.5 else int(rng.integers(0, classes - 1))
            logits[b, t, label] += peak
    return logits


def tf_beam(logits: np.ndarray, lengths: np.ndarray, width: int, paths: int):
    """TensorFlow's beam search: texts [batch][paths] (as label tuples) and log-probabilities."""
    import tensorflow as tf

    decoded, log_probs = tf.nn.ctc_beam_search_decoder(
        tf.transpose(tf.constant(logits, tf.float32), [1, 0, 2]),
        tf.constant(lengths, tf.int32), beam_width=width, top_paths=paths)
    out = [[() for _ in range(paths)] for _ in range(logits.shape[0])]
    for p, sparse in enumerate(decoded):
        rows = sparse.indices.numpy()[:, 0]
        values = sparse.values.numpy()
        for b in range(logits.shape[0]):
            out[b][p] = tuple(int(v) for v in values[rows == b])
    return out, log_probs.numpy()


def textbook_beam(log_probs: np.ndarray, width: int) -> list[tuple[tuple[int, ...], float]]:
    """The prefix beam search as Hannun et al. write it: dictionaries, no pruning but the beam."""
    probs = np.exp(log_probs)
    blank = probs.shape[1] - 1
    beams: dict[tuple[int, ...], tuple[float, float]] = {(): (1.0, 0.0)}
    for frame in probs:
        new: dict[tuple[int, ...], list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
        for prefix, (pb, pnb) in beams.items():
            new[prefix][0] += (pb + pnb) * frame[blank]
            if prefix:
                new[prefix][1] += pnb * frame[prefix[-1]]
            for label in range(blank):
                through = pb if prefix and prefix[-1] == label else pb + pnb
                new[(*prefix, label)][1] += through * frame[label]
        possible = [item for item in new.items() if sum(item[1]) > 0]
        best = sorted(possible, key=lambda item: -sum(item[1]))[:width]
        beams = {prefix: (pb, pnb) for prefix, (pb, pnb) in best}
    ranked = sorted(beams.items(), key=lambda item: -sum(item[1]))
    return [(prefix, math.log(pb + pnb)) for prefix, (pb, pnb) in ranked]


class ToyScorer(WordScorer):
    """A word-bigram table over "ab", "b", "ba": what a language model is to the search."""

    vocabulary = frozenset({"ab", "b", "ba"})
    partial_penalty = -4.0
    BIGRAMS: ClassVar[dict[tuple[str, str], float]] = {
        ("<s>", "ab"): -0.5, ("ab", "b"): -0.7, ("b", "ba"): -1.0, ("ba", "ab"): -0.2}

    def __init__(self, bounded: bool) -> None:
        if bounded:  # what lets the search skip scoring words that cannot make the beam
            self.word_bound = -0.2
            self.unknown_word_bound = -6.0

    def start(self):
        return "<s>"

    def score_word(self, state, word):
        if word not in self.vocabulary:
            return -6.0, "<unk>"
        return self.BIGRAMS.get((state, word), -2.5), word

    def score_end(self, state):
        return -0.3 if state == "ab" else -1.5


def textbook_label_lm_beam(log_probs: np.ndarray, width: int, scorer: WordScorer,
                           symbols: Sequence[str], word_marker: str,
                           prune: float | None = None) -> list[tuple[tuple[int, ...], float]]:
    """The prefix beam search over label sequences, ranked by log P(prefix) + the scores of its
    finished words + the partial-word penalty, words being the text between ``word_marker``s
    (prefixes more than ``prune`` below the best dropped each frame); at the end the last word
    is finished and the end scored. Characters or subword pieces alike."""

    def lm(prefix: tuple[int, ...], final: bool) -> float:
        *finished, partial = "".join(symbols[c] for c in prefix).split(word_marker)
        state, total = scorer.start(), 0.0
        for word in finished:
            if word:
                score, state = scorer.score_word(state, word)
                total += score
        if final:
            if partial:
                score, state = scorer.score_word(state, partial)
                total += score
            return total + scorer.score_end(state)
        if partial and not any(w.startswith(partial) for w in scorer.vocabulary):
            total += scorer.partial_penalty
        return total

    probs = np.exp(log_probs)
    blank = probs.shape[1] - 1
    beams: dict[tuple[int, ...], tuple[float, float]] = {(): (1.0, 0.0)}
    for frame in probs:
        new: dict[tuple[int, ...], list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
        for prefix, (pb, pnb) in beams.items():
            new[prefix][0] += (pb + pnb) * frame[blank]
            if prefix:
                new[prefix][1] += pnb * frame[prefix[-1]]
            for label in range(blank):
                through = pb if prefix and prefix[-1] == label else pb + pnb
                new[(*prefix, label)][1] += through * frame[label]
        scored = sorted(((math.log(sum(v)) + lm(prefix, False), prefix, v)
                         for prefix, v in new.items() if sum(v) > 0), reverse=True)[:width]
        floor = scored[0][0] + prune if prune is not None else -math.inf
        beams = {prefix: (pb, pnb) for key, prefix, (pb, pnb) in scored if key >= floor}
    final = [(prefix, math.log(pb + pnb) + lm(prefix, True)) for prefix, (pb, pnb)
             in beams.items()]
    return sorted(final, key=lambda item: -item[1])


def textbook_lm_beam(log_probs: np.ndarray, width: int, scorer: WordScorer,
                     symbols: tuple[str, ...], prune: float | None = None
                     ) -> list[tuple[str, float]]:
    """:func:`textbook_label_lm_beam` over characters, words between spaces, as texts."""
    return [("".join(symbols[c] for c in prefix), score) for prefix, score
            in textbook_label_lm_beam(log_probs, width, scorer, symbols, " ", prune)]


# -- greedy -------------------------------------------------------------------------------------


def test_greedy_matches_tf_greedy_decoder():
    import tensorflow as tf

    rng = np.random.default_rng(0)
    logits = rng.normal(size=(8, 60, 29)).astype(np.float32) * 3
    lengths = rng.integers(0, 61, size=8)
    decoded, _ = tf.nn.ctc_greedy_decoder(tf.transpose(logits, [1, 0, 2]),
                                          tf.constant(lengths, tf.int32), merge_repeated=True)
    rows, values = decoded[0].indices.numpy()[:, 0], decoded[0].values.numpy()
    expected = [ENGLISH.decode(values[rows == b]) for b in range(8)]
    assert GreedyDecoder().decode(logits, lengths, ENGLISH) == expected


# -- beam: correctness --------------------------------------------------------------------------


@pytest.mark.parametrize("width", [1, 3, 8])
def test_beam_equals_textbook_prefix_beam_search(width):
    """Unpruned, the vectorised search is the textbook algorithm: same final beam, same order,
    same probabilities (to float64 rounding), on logits with no clear winner."""
    rng = np.random.default_rng(width)
    symbols = tuple("abcd")
    search = PrefixBeamSearch(symbols, width)
    for _ in range(10):
        log_probs = log_softmax(rng.normal(size=(25, 5)) * 2)
        expected = textbook_beam(log_probs, width)
        got = search.search(log_probs)
        assert [h.text for h in got] == ["".join(symbols[c] for c in p) for p, _ in expected]
        np.testing.assert_allclose([h.acoustic for h in got], [s for _, s in expected],
                                   rtol=0, atol=1e-9)


@pytest.mark.parametrize(("width", "bounded", "prune"),
                         [(2, False, None), (6, False, None), (6, True, None), (2, True, None),
                          (8, True, -3.0), (8, False, -3.0)])
def test_search_with_a_word_scorer_equals_the_textbook(width, bounded, prune):
    """With a language model the search ranks by acoustics plus word scores. Scoring finished
    words only when their upper bound could make the beam (``bounded``) changes nothing, nor
    does it with beam pruning, and a batch of utterances of different lengths is searched as
    each alone."""
    rng = np.random.default_rng(width)
    symbols = ("a", "b", " ")
    search = PrefixBeamSearch(symbols, width, beam_prune_logp=prune, scorer=ToyScorer(bounded))
    log_probs = log_softmax(rng.normal(size=(5, 14, 4)) * 2.5)
    lengths = [14, 9, 14, 3, 11]
    batch = search.search_batch(log_probs, lengths)
    for utterance, length, found in zip(log_probs, lengths, batch, strict=True):
        expected = textbook_lm_beam(utterance[:length], width, ToyScorer(bounded), symbols,
                                    prune)
        assert [h.text for h in found] == [text for text, _ in expected]
        np.testing.assert_allclose([h.score for h in found], [s for _, s in expected],
                                   rtol=0, atol=1e-9)
        assert found == search.search(utterance[:length])


def test_beam_equals_tf_and_ctc_probability_when_nothing_is_pruned():
    """A beam wide enough for every prefix: ours, TensorFlow's and the CTC forward probability
    (``tf.nn.ctc_loss``) of each transcript agree."""
    import tensorflow as tf

    rng = np.random.default_rng(7)
    alphabet = Alphabet(("a", "b", "c"))
    logits = (rng.normal(size=(2, 5, 4)) * 2).astype(np.float32)
    lengths = np.array([5, 4])
    nbest = BeamDecoder(BeamConfig(beam_width=1000, token_min_logp=None)).decode_nbest(
        logits, lengths, alphabet, 10)
    paths, tf_scores = tf_beam(logits, lengths, width=1000, paths=10)
    for b in range(2):
        assert [h.text for h in nbest[b]] == [alphabet.decode(p) for p in paths[b]]
        np.testing.assert_allclose([h.acoustic for h in nbest[b]], tf_scores[b], atol=1e-5)
        labels = [alphabet.encode(h.text) for h in nbest[b] if h.text]
        loss = tf.nn.ctc_loss(
            tf.ragged.constant(labels).to_sparse(),
            tf.constant(np.repeat(logits[b:b + 1, :lengths[b]], len(labels), 0)),
            None, tf.fill([len(labels)], int(lengths[b])), logits_time_major=False,
            blank_index=-1)
        np.testing.assert_allclose([h.acoustic for h in nbest[b] if h.text], -loss.numpy(),
                                   atol=1e-5)


@pytest.mark.parametrize("width", [16, 100])
def test_beam_agrees_with_tf_beam_search_on_peaked_logits(width):
    logits = peaked_logits(seed=width)
    lengths = np.array([80, 80, 71, 64, 50, 33])
    ours = BeamDecoder().with_config(beam_width=width, token_min_logp=None).decode_nbest(
        logits, lengths, ENGLISH, 1)
    paths, scores = tf_beam(logits, lengths, width, 1)
    assert [h[0].text for h in ours] == [ENGLISH.decode(p[0]) for p in paths]
    np.testing.assert_allclose([h[0].acoustic for h in ours], scores[:, 0], atol=1e-2)


def test_pruning_keeps_the_results():
    """The default pruning (labels below e^-10 in a frame never extend a prefix) and a prune of
    prefixes 30 nats behind the best change nothing here but time."""
    logits = peaked_logits(seed=3, batch=4, frames=120)
    exact = BeamDecoder(BeamConfig(beam_width=64, token_min_logp=None))
    pruned = BeamDecoder(BeamConfig(beam_width=64, beam_prune_logp=-30.0))
    for a, b in zip(exact.decode_nbest(logits, None, ENGLISH, 5),
                    pruned.decode_nbest(logits, None, ENGLISH, 5), strict=True):
        assert [h.text for h in a] == [h.text for h in b]
        np.testing.assert_allclose([h.acoustic for h in a], [h.acoustic for h in b], atol=1e-4)


def test_a_batch_is_searched_as_each_utterance_alone():
    """Utterances are searched side by side; with both prunings on, and lengths that differ,
    each still gets what a search of it alone gives (pruning applies to an utterance only in
    frames that extend its prefixes, whatever the others do)."""
    logits = peaked_logits(seed=21, batch=6, frames=70, peak=6.0)
    lengths = [70, 52, 70, 18, 69, 41]
    search = PrefixBeamSearch(ENGLISH.symbols, 16, token_min_logp=-6.0, beam_prune_logp=-4.0)
    log_probs = log_softmax(logits)
    for found, row, length in zip(search.search_batch(log_probs, lengths), log_probs, lengths,
                                  strict=True):
        alone = search.search(row[:length])
        assert [h.text for h in found] == [h.text for h in alone]
        np.testing.assert_allclose([h.score for h in found], [h.score for h in alone],
                                   rtol=1e-12)


def test_blank_dominated_frames_are_skipped_exactly():
    """Frames where only the blank passes ``token_min_logp`` keep every prefix unextended: on
    logits where most frames are almost surely blank, pruned and exact searches agree."""
    logits = peaked_logits(seed=11, batch=3, frames=150, peak=14.0)
    exact = BeamDecoder(BeamConfig(beam_width=20, token_min_logp=None))
    pruned = BeamDecoder(BeamConfig(beam_width=20, token_min_logp=-5.0))
    a = exact.decode_nbest(logits, None, ENGLISH, 1)
    b = pruned.decode_nbest(logits, None, ENGLISH, 1)
    assert [h[0].text for h in a] == [h[0].text for h in b]
    np.testing.assert_allclose([h[0].acoustic for h in a], [h[0].acoustic for h in b], atol=1e-4)
    assert [h[0].text for h in a] == GreedyDecoder().decode(logits, [150] * 3, ENGLISH)


def test_beam_takes_tensors_lengths_and_empty_utterances():
    import tensorflow as tf

    logits = peaked_logits(seed=5, batch=3, frames=40)
    decoder = BeamDecoder().with_config(beam_width=8)
    from_numpy = decoder.decode(logits, np.array([40, 0, 12]), ENGLISH)
    from_tensor = decoder.decode(tf.constant(logits), tf.constant([40, 0, 12]), ENGLISH)
    assert from_numpy == from_tensor
    assert from_numpy[1] == ""
    assert from_numpy[2] == GreedyDecoder().decode(logits[2:], [12], ENGLISH)[0]


def test_nbest_is_sorted_and_distinct():
    logits = peaked_logits(seed=9, batch=2, frames=60, peak=3.0)
    for hypotheses in BeamDecoder().with_config(beam_width=32).decode_nbest(
            logits, None, ENGLISH, 10):
        assert len(hypotheses) == 10
        assert len({h.text for h in hypotheses}) == 10
        scores = [h.score for h in hypotheses]
        assert scores == sorted(scores, reverse=True)
        assert all(h.score == h.acoustic and h.lm == 0.0 for h in hypotheses)


def test_wrong_number_of_classes_is_reported():
    with pytest.raises(ValueError, match="29"):
        BeamDecoder().decode(np.zeros((1, 5, 10)), [5], ENGLISH)


# -- options ------------------------------------------------------------------------------------


def test_decoder_options_api():
    registered = BeamDecoder()
    assert registered.config == BeamConfig()
    assert type(registered).Config is BeamConfig
    wider = registered.with_config(beam_width=500)
    assert wider.config.beam_width == 500 and wider is not registered
    assert registered.config.beam_width == 100  # the registered instance is never changed
    exact = registered.with_config(BeamConfig(token_min_logp=None), beam_width=7)
    assert exact.config == BeamConfig(beam_width=7, token_min_logp=None)
    with pytest.raises(AsrkitError, match=r"unknown option.*beam_widht.*known: beam_prune_logp"):
        registered.with_config(beam_widht=5)
    with pytest.raises(AsrkitError, match="beam_width"):
        BeamConfig(beam_width=0)
    with pytest.raises(AsrkitError, match="token_min_logp"):
        BeamConfig(token_min_logp=2.0)
    with pytest.raises(AsrkitError, match="BeamConfig"):
        BeamDecoder({"beam_width": 3})
    assert BeamConfig(token_min_logp=-math.inf).token_min_logp == -math.inf


# -- the hook -----------------------------------------------------------------------------------


def test_register_decoders_hook(make_plugins):
    plugins = make_plugins(greedy_module, beam_module)
    assert plugins.registry.names("decoder") == ["beam", "greedy"]
    logits = peaked_logits(seed=1, batch=2, frames=30)
    greedy = plugins.registry.get("decoder", "greedy").decode(logits, [30, 30], ENGLISH)
    beam = plugins.registry.get("decoder", "beam").decode(logits, [30, 30], ENGLISH)
    assert beam == greedy  # peaked logits: the best path is the best transcript
    assert plugins.plugins["beam"].registered == {"decoder": ["beam"]}


def test_kenlm_plugin_installs_as_a_distribution(tmp_path):
    """``pip install plugins/asrkit-decoder-kenlm`` (here without its dependencies, into a folder
    of its own): ``asrkit plugins`` lists its decoder and ``asrkit lm build`` exists. Nothing
    compiled is imported for that: kenlm loads only when the decoder decodes."""
    source = tmp_path / "src"
    shutil.copytree(KENLM_PLUGIN, source, ignore=shutil.ignore_patterns(
        "__pycache__", "build", "*.egg-info", ".pytest_cache", "tests"))
    pip_install(source, tmp_path / "site")
    listing = run_asrkit("plugins", "--json", pythonpath=tmp_path / "site")
    assert listing.returncode == 0, listing.stderr
    report = json.loads(listing.stdout)
    [kenlm] = [p for p in report["plugins"] if p["name"] == "kenlm"]
    assert kenlm["distribution"] == "asrkit-decoder-kenlm"
    assert kenlm["registered"] == {"decoder": ["kenlm", "transducer-kenlm", "attention-kenlm"],
                                  "command": ["lm"]}
    assert not [f for f in report["failures"] if f["name"] == "kenlm"]
    result = run_asrkit("lm", "build", "--help", pythonpath=tmp_path / "site")
    assert result.returncode == 0, result.stderr
    assert "--dataset" in result.stdout and "--order" in result.stdout


# -- a language model fixes what the acoustics get wrong ----------------------------------------


LM_SENTENCES = [
    "the cat sat on the mat", "a cat sat on a mat", "the dog sat on the mat", "the cat ran",
    "a dog ran to the cat", "the cat saw the dog", "my cat sat", "the mat was red",
    "the dog saw a cat on the mat", "a red cat ran to the mat",
]


def spell(text: str, alphabet: Alphabet, confusions: dict[int, dict[str, float]]) -> np.ndarray:
    """Logits [frames, classes] of a clear reading of ``text``: two frames a character (p 0.9)
    then a blank; ``confusions`` replaces the distribution of the character at an index (the
    symbol ``""`` is the blank)."""
    frames = []
    floor = 1e-4
    for index, char in enumerate(text):
        dist = confusions.get(index, {char: 0.9})
        frame = np.full(alphabet.num_classes, floor)
        for symbol, p in dist.items():
            frame[alphabet.symbols.index(symbol) if symbol else alphabet.blank] = p
        frames += [frame, frame]
        blank = np.full(alphabet.num_classes, floor)
        blank[alphabet.blank] = 0.9
        frames.append(blank)
    return np.log(np.array(frames))


@pytest.fixture
def kenlm_plugin(monkeypatch):
    """The kenlm plugin: installed, or else from the source tree."""
    pytest.importorskip("kenlm")
    try:
        import asrkit_decoder_kenlm
    except ImportError:
        monkeypatch.syspath_prepend(str(KENLM_PLUGIN))
        import asrkit_decoder_kenlm
    yield asrkit_decoder_kenlm
    if str(KENLM_PLUGIN) in sys.path:
        for name in [m for m in sys.modules if m.startswith("asrkit_decoder_kenlm")]:
            del sys.modules[name]


def test_language_model_fixes_an_acoustically_ambiguous_word(kenlm_plugin, tmp_path):
    """The acoustics favour "kat" (0.5) over "cat" (0.4); without a language model the beam
    search trusts them, with an n-gram model of cat-and-mat sentences the decoder does not."""
    from asrkit_decoder_kenlm.arpa import estimate

    estimate(LM_SENTENCES, order=3).write(tmp_path / "lm.arpa")
    text = "the cat sat on the mat"
    logits = spell(text, ENGLISH, {4: {"k": 0.5, "c": 0.4}})[None]
    assert GreedyDecoder().decode(logits, [len(logits[0])], ENGLISH) == ["the kat sat on the mat"]
    assert BeamDecoder().decode(logits, None, ENGLISH) == ["the kat sat on the mat"]
    lm_decoder = kenlm_plugin.KenLMDecoder().with_config(lm=str(tmp_path / "lm.arpa"))
    assert lm_decoder.decode(logits, None, ENGLISH) == [text]
    unpruned = lm_decoder.with_config(beam_prune_logp=None)  # keep the losers for the n-best
    [best, second, *_] = unpruned.decode_nbest(logits, None, ENGLISH)[0]
    assert best.text == text
    assert best.acoustic < second.acoustic  # the acoustics alone preferred another transcript
    assert best.lm > second.lm


def test_language_model_finds_word_boundaries(kenlm_plugin, tmp_path):
    """A space heard faintly (p 0.2 against a blank's 0.7): the language model puts it in."""
    from asrkit_decoder_kenlm.arpa import estimate

    estimate(LM_SENTENCES, order=3).write(tmp_path / "lm.arpa")
    text = "the cat ran"
    faint = {" ": 0.2, "": 0.7}
    logits = spell(text, ENGLISH, {3: faint, 7: faint})[None]
    assert BeamDecoder().decode(logits, None, ENGLISH) == ["thecatran"]
    lm_decoder = kenlm_plugin.KenLMDecoder().with_config(lm=str(tmp_path / "lm.arpa"))
    assert lm_decoder.decode(logits, None, ENGLISH) == [text]
