"""The kenlm plugin: the ARPA estimator (a proper distribution for every context, read by KenLM
exactly as written), ``asrkit lm build``, and the decoder's options and behaviour.

Uses only asrkit's public API and the fixtures of its pytest plugin (``asrkit.testing``).
"""

from __future__ import annotations

import math
import random

import asrkit_decoder_kenlm
import numpy as np
import pytest
from asrkit_decoder_kenlm.arpa import BOS, EOS, UNK, ArpaModel, estimate, read_unigrams
from asrkit_decoder_kenlm.decoder import KenLMConfig, KenLMDecoder

from asrkit.api import Alphabet, AsrkitError, BeamDecoder

ENGLISH = Alphabet()


def corpus(seed: int = 0, sentences: int = 400) -> list[str]:
    """Sentences from a small word chain: enough repetition for proper discounts at every
    order, enough variety for unseen contexts."""
    rng = random.Random(seed)
    words = ["the", "a", "cat", "dog", "sat", "ran", "on", "to", "mat", "house", "big", "small",
             "red", "my", "saw", "was", "and", "then", "it", "he", "she", "home"]
    successors = {w: rng.sample(words, 6) for w in words}
    out = []
    for _ in range(sentences):
        word = rng.choice(words)
        sentence = [word]
        for _ in range(rng.randint(0, 9)):
            word = rng.choice(successors[word])
            sentence.append(word)
        out.append(" ".join(sentence))
    return out


def contexts(model: ArpaModel) -> list[tuple[str, ...]]:
    """Histories to test: empty, every kind of seen context, and unseen ones."""
    picked: list[tuple[str, ...]] = [(), (BOS,), ("zebra",), ("cat", "zebra")]
    for n in range(1, model.order):
        picked += sorted(model.backoffs[n - 1])[:: max(1, len(model.backoffs[n - 1]) // 15)]
    return picked


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_estimate_is_a_distribution_for_every_context(order):
    model = estimate(corpus(), order)
    assert model.order == order
    vocabulary = model.vocabulary
    assert BOS not in vocabulary and EOS in vocabulary and UNK in vocabulary
    for history in contexts(model):
        total = sum(10 ** model.log10prob(word, history) for word in vocabulary)
        assert total == pytest.approx(1.0, abs=1e-6), history


@pytest.mark.parametrize("order", [1, 3])
def test_a_word_list_adds_words_with_the_unknown_words_share(order):
    """Words only in the list are predictable, each with <unk>'s (smaller) uniform share; every
    context still sums to one; a listed word the text has keeps its text-based probability."""
    plain = estimate(corpus(), order)
    listed = estimate(corpus(), order, ["zebra", "apple", "cat", "zebra"])
    assert listed.unseen_words == 2
    assert set(listed.vocabulary) == set(plain.vocabulary) | {"zebra", "apple"}
    assert listed.log10prob("zebra", ()) == listed.log10prob(UNK, ()) < plain.log10prob(UNK, ())
    for history in contexts(listed):
        total = sum(10 ** listed.log10prob(word, history) for word in listed.vocabulary)
        assert total == pytest.approx(1.0, abs=1e-6), history


def test_written_arpa_reads_back_and_kenlm_scores_it_the_same(tmp_path):
    kenlm = pytest.importorskip("kenlm")
    model = estimate(corpus(), 3)
    path = tmp_path / "lm.arpa"
    model.write(path)
    again = ArpaModel.read(path)
    assert again.counts() == model.counts()
    assert sorted(read_unigrams(path)) == sorted(g[0] for g in model.probs[0])

    lm = kenlm.Model(str(path))
    assert lm.order == 3
    for sentence in [*corpus(seed=1, sentences=30), "the zebra sat on my mat", "cat"]:
        history = [BOS]
        words = [*sentence.split(), EOS]
        for (log10, _, _), word in zip(lm.full_scores(sentence), words, strict=True):
            assert log10 == pytest.approx(again.log10prob(word, history), abs=1e-5)
            history.append(word)
    # ... and KenLM's own distribution sums to 1 after a sentence start and after "the cat".
    for history in [(BOS,), (BOS, "the", "cat")]:
        state = kenlm.State()
        lm.BeginSentenceWrite(state)
        for word in history[1:]:
            out = kenlm.State()
            lm.BaseScore(state, word, out)
            state = out
        total = sum(10 ** lm.BaseScore(state, w, kenlm.State()) for w in model.vocabulary)
        assert total == pytest.approx(1.0, abs=1e-6)


def test_modified_kneser_ney_discounts_and_fallback():
    model = estimate(corpus(), 3)
    # 23 words, each seen many times: no unigram is seen once or twice, so order 1 falls back.
    assert model.fallback_orders == [1]
    for d1, d2, d3 in model.discounts[1:]:
        assert 0 < d1 < 1 and 0 < d2 < 2 and 0 < d3 < 3
    tiny = estimate(["one two", "two three"], 5)
    assert tiny.order == 4  # <s> one two </s> has no 5-gram
    assert tiny.fallback_orders == [1, 2, 3, 4] and tiny.discounts[0] == (0.5, 1.0, 1.5)
    for history in [(), (BOS,), ("two",), (BOS, "one")]:
        total = sum(10 ** tiny.log10prob(w, history) for w in tiny.vocabulary)
        assert total == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(ValueError, match="no sentences"):
        estimate(["", "   "], 3)


# -- asrkit lm build ----------------------------------------------------------------------------


def test_lm_build_from_a_dataset_and_a_text(asrkit_cli, asrkit_home, make_plugins, tmp_path):
    plugins = make_plugins(asrkit_decoder_kenlm)
    dataset = asrkit_home / "datasets" / "toy"
    dataset.mkdir(parents=True)
    rows = "".join(f"{i}.wav,100,{s}\n" for i, s in enumerate(corpus(sentences=50)))
    (dataset / "train.csv").write_text("wav_filename,wav_filesize,transcript\n" + rows)
    out = tmp_path / "models" / "toy.arpa"
    result = asrkit_cli(["lm", "build", "--dataset", "toy", "--order", "2", "-o", out], plugins)
    assert result.exit_code == 0, result.stderr
    assert f"wrote {out}: order 2" in result.stdout
    assert ArpaModel.read(out).order == 2
    assert not out.with_name("toy.arpa.partial").exists()

    text = tmp_path / "corpus.txt"
    text.write_text("The Cat, sat!\nthe DOG sat.\n")
    result = asrkit_cli(["lm", "build", "--text", text, "-o", out], plugins)
    assert result.exit_code == 0, result.stderr
    assert {"the", "cat", "dog", "sat"} <= set(read_unigrams(out))

    words = tmp_path / "words"
    words.write_text("Zebra\nAardvark's\ncat\n")
    result = asrkit_cli(["lm", "build", "--text", text, "--vocabulary", words, "-o", out],
                        plugins)
    assert result.exit_code == 0, result.stderr
    assert "(2 from the word list only)" in result.stdout
    assert {"zebra", "aardvark's", "cat"} <= set(read_unigrams(out))

    missing = asrkit_cli(["lm", "build", "--dataset", "nothing", "-o", out], plugins)
    assert missing.exit_code == 1 and "no train.csv of a dataset 'nothing'" in missing.stderr
    neither = asrkit_cli(["lm", "build", "-o", out], plugins)
    assert neither.exit_code != 0 and "--dataset" in neither.stderr


def test_plugin_registers_the_decoder_and_the_command(make_plugins):
    plugins = make_plugins(asrkit_decoder_kenlm)
    assert plugins.registry.names("decoder") == ["attention-kenlm", "kenlm", "transducer-kenlm"]
    assert plugins.plugins["asrkit_decoder_kenlm"].registered == {
        "decoder": ["kenlm", "transducer-kenlm", "attention-kenlm"]}


# -- the decoder --------------------------------------------------------------------------------


def logits_of(text: str, rng: np.random.Generator, peak: float = 4.0) -> np.ndarray:
    """Moderately confident logits spelling ``text``: a character frame, then a blank."""
    frames = []
    for char in text:
        for label in (ENGLISH.symbols.index(char), ENGLISH.blank):
            frame = rng.normal(size=ENGLISH.num_classes)
            frame[label] += peak
            frames.append(frame)
    return np.array(frames)[None]


@pytest.fixture
def lm_path(tmp_path):
    pytest.importorskip("kenlm")
    path = tmp_path / "lm.arpa"
    estimate(corpus(), 3).write(path)
    return path


def test_without_weights_the_lm_decoder_is_the_beam_search(lm_path):
    """alpha = beta = unk_offset = 0: the language model adds nothing, and the search is
    ``beam``'s (spaces collapsed)."""
    rng = np.random.default_rng(0)
    logits = np.concatenate([logits_of("the cat sat on my mat", rng, peak=2.5)] * 2)
    exact = {"beam_width": 32, "token_min_logp": None, "beam_prune_logp": None}
    plain = KenLMDecoder().with_config(lm=str(lm_path), alpha=0.0, beta=0.0, unk_offset=0.0,
                                       **exact)
    beam = BeamDecoder().with_config(**exact)
    expected = [" ".join(t.split()) for t in beam.decode(logits, None, ENGLISH)]
    assert plain.decode(logits, None, ENGLISH) == expected


def test_nbest_scores_add_up(lm_path):
    rng = np.random.default_rng(1)
    logits = logits_of("the dog ran home", rng, peak=3.0)
    hypotheses = KenLMDecoder().with_config(lm=str(lm_path)).decode_nbest(logits, [32], ENGLISH)[0]
    assert len({h.text for h in hypotheses}) == len(hypotheses)
    for h in hypotheses:
        assert h.score == pytest.approx(h.acoustic + h.lm)
        assert h.text == " ".join(h.text.split())
    assert [h.score for h in hypotheses] == sorted((h.score for h in hypotheses), reverse=True)


def test_decoder_options_and_errors(lm_path, tmp_path):
    decoder = KenLMDecoder()
    assert type(decoder).Config is KenLMConfig
    assert decoder.config.alpha == 0.5 and decoder.config.beta == 1.5
    with pytest.raises(AsrkitError, match=r"-o decoder\.lm=PATH"):
        decoder.decode(np.zeros((1, 4, 29)), [4], ENGLISH)
    with pytest.raises(AsrkitError, match="no language model at"):
        decoder.with_config(lm=str(tmp_path / "none.arpa")).decode(np.zeros((1, 4, 29)), [4],
                                                                  ENGLISH)
    with pytest.raises(AsrkitError, match="space"):
        decoder.with_config(lm=str(lm_path)).decode(np.zeros((1, 4, 3)), [4], Alphabet(("a", "b")))
    with pytest.raises(AsrkitError, match="unk_offset"):
        KenLMConfig(unk_offset=1.0)
    with pytest.raises(AsrkitError, match="alpha"):
        KenLMConfig(alpha=math.nan)
    with pytest.raises(AsrkitError, match="unknown option"):
        decoder.with_config(weight=1.0)


def test_unigrams_file_and_fragments(lm_path, tmp_path):
    """A vocabulary given as a file, and ``sentence_boundaries=False`` (no <s>, no </s>)."""
    rng = np.random.default_rng(2)
    logits = logits_of("the cat sat", rng, peak=5.0)
    words = tmp_path / "words.txt"
    words.write_text("the\ncat\nsat\n")
    for config in ({"unigrams": str(words)}, {"sentence_boundaries": False}):
        decoder = KenLMDecoder().with_config(lm=str(lm_path), **config)
        assert decoder.decode(logits, None, ENGLISH) == ["the cat sat"]
