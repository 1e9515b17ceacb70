"""Hot words: their context graph (``asrkit.decoders.context``), every beam search boosting them
on crafted outputs where the acoustics slightly prefer a near-homophone ("kat" for "cat"), the
command line (``--hotword``, ``--hotwords FILE``) on the fixture runs, and the refusals.

The crafted outputs spell "kat is" or "cat is": the first letter is ``k`` with probability 0.55
and ``c`` with 0.45, the rest is certain. Unbiased, every search says "kat is"; with the hot word
"cat" it says "cat is"; with a hot word the audio holds no trace of, it still says "kat is".
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import tensorflow as tf

from asrkit.config.hotwords import (
    CHARACTER_BOOST,
    MAX_BOOST,
    PIECE_BOOST,
    Hotword,
    Hotwords,
    parse_hotword,
    parse_hotwords,
)
from asrkit.config.overrides import DecoderChoice
from asrkit.core.errors import AsrkitError
from asrkit.core.labels import Pieces
from asrkit.core.text import Alphabet
from asrkit.decoders.attention import AttentionBeamDecoder, AttentionOutputs
from asrkit.decoders.beam import BeamDecoder
from asrkit.decoders.context import ContextGraph
from asrkit.decoders.transducer import TransducerBeamDecoder, TransducerOutputs
from asrkit.runs.run import load_run
from tests.conftest import SPEECH

CHARS = Alphabet()
WAV = SPEECH / "ldc93s1" / "LDC93S1.wav"


def walk(graph: ContextGraph, labels, text: str) -> tuple[list[float], float]:
    """The hot-word score after each label of ``text``, and at its end."""
    state, total, trace = graph.start, 0.0, []
    for label in labels.encode(text):
        total += float(graph.boost[state, label])
        state = int(graph.next[state, label])
        trace.append(total)
    return trace, total + float(graph.final[state])


def graph_of(*entries: str, labels=CHARS) -> ContextGraph:
    return ContextGraph.build(labels, parse_hotwords(entries))


# -- the graph ---------------------------------------------------------------------------------


def test_a_match_adds_its_boost_a_label_and_a_failed_one_takes_it_back():
    graph = graph_of("cat:1.5")
    assert walk(graph, CHARS, "cat") == ([1.5, 3.0, 4.5], 4.5)
    assert walk(graph, CHARS, "a cat sat") == ([0, 0, 1.5, 3.0, 4.5, 4.5, 4.5, 4.5, 4.5], 4.5)
    # "cats" leaves the word: everything "cat" added is taken back, at the "s".
    assert walk(graph, CHARS, "cats") == ([1.5, 3.0, 4.5, 0.0], 0.0)
    # unfinished at the end of the utterance: taken back at the end
    assert walk(graph, CHARS, "ca") == ([1.5, 3.0], 0.0)
    # hot words are whole words: no boost inside another word
    assert walk(graph, CHARS, "scat") == ([0.0] * 4, 0.0)


def test_overlapping_words_each_keep_their_own_boost():
    graph = graph_of("he:1", "hello:1", "she:1")
    assert walk(graph, CHARS, "he")[1] == 2
    assert walk(graph, CHARS, "hello")[1] == 5  # "he" is no word of "hello"
    assert walk(graph, CHARS, "she")[1] == 3  # nor of "she"
    assert walk(graph, CHARS, "help") == ([1, 2, 3, 0], 0)  # "hel" was hello's: taken back
    assert walk(graph, CHARS, "the")[1] == 0
    assert walk(graph, CHARS, "she said hello he")[1] == 3 + 5 + 2
    # "hex" leaves the trie after "he": back to 0, then "he" starts afresh
    assert walk(graph, CHARS, "hex he")[0] == [1, 2, 0, 0, 1, 2]


def test_phrases_match_across_spaces_and_a_failed_phrase_falls_back_to_another():
    graph = graph_of("new york:2", "york city:0.5")
    trace, final = walk(graph, CHARS, "new york city")
    assert trace[:9] == [2, 4, 6, 6, 8, 10, 12, 14, 14]  # the space adds nothing
    assert final == 14 + 8 * 0.5  # both phrases: "york" counts for each
    # "new yorker": the whole partial match is taken back
    assert walk(graph, CHARS, "a new yorker")[1] == 0
    # "new york cats": "new york" kept, the "york c" of "york city" taken back
    assert walk(graph, CHARS, "new york cats")[1] == 14
    # "new jersey": only "new " was matched
    assert walk(graph, CHARS, "new jersey")[1] == 0


def test_pieces_are_labels_and_a_word_start_piece_ends_the_word_before():
    pieces = Pieces(["▁he", "llo", "▁s", "he", "▁the", "▁new", "▁york", "▁y", "ork", "x", "▁",
                     "h", "e", "l", "o"])
    graph = graph_of("hello", "new york:3", labels=pieces)
    assert pieces.encode("hello") == [0, 1]
    assert walk(graph, pieces, "hello") == ([PIECE_BOOST, 2 * PIECE_BOOST], 2 * PIECE_BOOST)
    assert walk(graph, pieces, "the hello new york")[1] == 2 * PIECE_BOOST + 6
    assert walk(graph, pieces, "he")[1] == 0  # "▁he" alone is unfinished
    assert walk(graph, pieces, "new yorkx") == ([3, 6, 0], 0)


def test_default_boosts_follow_the_labels():
    word = Hotwords((Hotword("cat"),))
    assert word.spell(CHARS) == [([3, 1, 20], CHARACTER_BOOST)]
    pieces = Pieces(["▁ca", "t"])
    assert word.spell(pieces) == [([0, 1], PIECE_BOOST)]


def test_entries_are_read_once_normalised_and_the_last_boost_wins(tmp_path):
    assert parse_hotword("New-York:2.5") == Hotword("new york", 2.5)
    assert parse_hotword("  Café ") == Hotword("cafe", None)
    listing = tmp_path / "words.txt"
    listing.write_text("# names\nkubernetes\n\nnew york:3\n", encoding="utf-8")
    assert parse_hotwords(["new york:1"], [listing]) == Hotwords(
        (Hotword("kubernetes"), Hotword("new york", 1.0)))
    assert parse_hotwords() is None


# -- the searches --------------------------------------------------------------------------------

#: "kat is" or "cat is", frame by frame: the first letter 0.55 k, 0.45 c; the rest certain.
SCRIPT = [{"k": .55, "c": .45}, {"_": 1}, {"a": 1}, {"t": 1}, {"_": 1}, {" ": 1}, {"i": 1},
          {"s": 1}]


def log_probs(script, labels=CHARS) -> np.ndarray:
    """``[1, frames, classes]`` log-probabilities of a script (``_`` is the blank)."""
    probs = np.full((len(script), labels.num_classes), 1e-6)
    for t, frame in enumerate(script):
        for char, p in frame.items():
            probs[t, labels.blank if char == "_" else labels.symbols.index(char)] = p
    probs /= probs.sum(axis=1, keepdims=True)
    return np.log(probs)[None]


def with_words(decoder, *entries):
    return decoder.with_hotwords(parse_hotwords(entries))


def test_the_ctc_prefix_search_prefers_the_hot_word_and_keeps_its_boost():
    beam = BeamDecoder().with_config(beam_width=8)
    logits = log_probs(SCRIPT)
    assert beam.decode(logits, None, CHARS) == ["kat is"]
    boosted = with_words(beam, "cat")
    best, second = boosted.decode_nbest(logits, None, CHARS, 2)[0]
    assert (best.text, second.text) == ("cat is", "kat is")
    assert best.boost == 3 * CHARACTER_BOOST and second.boost == 0
    assert best.score == pytest.approx(best.acoustic + best.boost)
    assert best.acoustic == pytest.approx(math.log(.45), abs=1e-3)  # 1e-6 elsewhere
    # In a batch, each utterance walks the graph on its own.
    batch = np.concatenate([logits, log_probs([{"k": 1}, {"a": 1}, {"t": 1}, {"_": 1},
                                               {"_": 1}, {"_": 1}, {"_": 1}, {"_": 1}])])
    assert boosted.decode(batch, None, CHARS) == ["cat is", "kat"]


def test_the_search_boosts_words_spelt_in_pieces():
    """"▁is" both ends the hot word "cat" (spelt "▁c" "at") and begins the next word."""
    pieces = Pieces(["▁k", "▁c", "at", "▁is", "▁"])
    script = [{"▁k": .55, "▁c": .45}, {"_": 1}, {"at": 1}, {"_": 1}, {"▁is": 1}]
    logits = log_probs(script, pieces)
    beam = BeamDecoder().with_config(beam_width=8)
    assert beam.decode(logits, None, pieces) == ["kat is"]
    best = with_words(beam, "cat").decode_nbest(logits, None, pieces, 1)[0][0]
    assert (best.text, best.boost) == ("cat is", 2 * PIECE_BOOST)
    phrase = with_words(beam, "cat is").decode_nbest(logits, None, pieces, 1)[0][0]
    assert (phrase.text, phrase.boost) == ("cat is", 3 * PIECE_BOOST)


def test_a_hot_word_the_audio_does_not_hold_is_not_inserted():
    beam = BeamDecoder().with_config(beam_width=8)
    logits = log_probs(SCRIPT)
    assert with_words(beam, "dog", "cats", "kit:3").decode(logits, None, CHARS) == ["kat is"]
    # the take-back matters: "cats" ranks "cat" up while it is spelt, and loses it at "is"
    assert with_words(beam, "cats:3").decode_nbest(logits, None, CHARS, 1)[0][0].boost == 0


def test_the_language_model_decoder_boosts_hot_words_too(tmp_path):
    pytest.importorskip("kenlm")
    from asrkit_decoder_kenlm import KenLMDecoder
    from asrkit_decoder_kenlm.arpa import estimate

    lm = tmp_path / "lm.arpa"
    estimate(["kat is"] * 5 + ["cat is", "is cat"], 2).write(lm)
    kenlm = KenLMDecoder().with_config(lm=str(lm), beam_width=8)
    logits = log_probs(SCRIPT)
    assert kenlm.decode(logits, None, CHARS) == ["kat is"]
    best = with_words(kenlm, "cat:3").decode_nbest(logits, None, CHARS, 1)[0][0]
    assert (best.text, best.boost) == ("cat is", 9)
    assert best.score == pytest.approx(best.acoustic + best.lm + best.boost)
    assert with_words(kenlm, "dog:3").decode(logits, None, CHARS) == ["kat is"]


class ScriptedTransducer:
    """A transducer head (:class:`~asrkit.decoders.transducer.TransducerNetworks`) reading a
    script: a frame is the label log-probabilities for each count of labels emitted so far
    (``[counts, classes]``, flattened); the prediction network's output picks the block of the
    hypothesis' count."""

    def __init__(self, classes: int, counts: int) -> None:
        self.blank, self.classes, self.counts = classes - 1, classes, counts

    def initial_state(self, count):
        return tf.zeros([count, 1])

    def predict_step(self, tokens, state):
        count = state[:, 0] + tf.cast(tf.not_equal(tokens, self.blank), tf.float32)
        block = tf.one_hot(tf.cast(count, tf.int32), self.counts)
        return tf.repeat(block, self.classes, axis=1), count[:, None]

    def joint_step(self, frames, predicted):
        picked = tf.reshape(frames * predicted, [-1, self.counts, self.classes])
        return tf.reduce_sum(picked, axis=1)


def transducer_outputs(script: list[dict[str, float]]) -> TransducerOutputs:
    """The script's labels as a transducer emits them: at frame ``t`` the ``t``-th label (one
    frame a label), then the blank."""
    labelled = [frame for frame in script if "_" not in frame]
    counts = len(labelled) + 1
    frames = np.zeros((1, len(labelled), counts * CHARS.num_classes), np.float32)
    blank_only = log_probs([{"_": 1}])[0, 0]
    for t, frame in enumerate(labelled):
        for count in range(counts):
            row = log_probs([frame])[0, 0] if count == t else blank_only
            frames[0, t, count * CHARS.num_classes:(count + 1) * CHARS.num_classes] = row
    return TransducerOutputs(frames, ScriptedTransducer(CHARS.num_classes, counts))


def test_the_transducer_beam_search_boosts_hot_words():
    outputs = transducer_outputs(SCRIPT)
    lengths = np.array([outputs.frames.shape[1]])
    beam = TransducerBeamDecoder().with_config(beam_width=4)
    assert beam.decode(outputs, lengths, CHARS) == ["kat is"]
    best = with_words(beam, "cat").decode_nbest(outputs, lengths, CHARS, 1)[0][0]
    assert (best.text, best.boost) == ("cat is", 3 * CHARACTER_BOOST)
    assert with_words(beam, "dog").decode(outputs, lengths, CHARS) == ["kat is"]


class ScriptedAttention:
    """An attention head (:class:`~asrkit.decoders.attention.AttentionNetworks`) whose next
    label depends only on the step: ``table[step]``; no CTC output."""

    has_ctc = False

    def __init__(self, table: np.ndarray) -> None:
        self.table = tf.constant(table, tf.float32)
        self.eos = table.shape[-1] - 1

    def ctc_log_probs(self, frames):
        raise AssertionError("no CTC output")

    def initial_state(self, frames, lengths):
        return tf.zeros([tf.shape(frames)[0], 1])

    def decode_step(self, frames, lengths, tokens, state):
        step = tf.minimum(tf.shape(tokens)[1] - 1, tf.shape(self.table)[0] - 1)
        return tf.repeat(self.table[step][None], tf.shape(tokens)[0], axis=0), state


def test_the_attention_beam_search_boosts_hot_words():
    labelled = [frame for frame in SCRIPT if "_" not in frame] + [{"_": 1}]  # then the end
    table = log_probs(labelled)[0]
    outputs = AttentionOutputs(np.zeros((1, 12, 1), np.float32), ScriptedAttention(table))
    beam = AttentionBeamDecoder().with_config(beam_width=4, ctc_weight=0.0)
    assert beam.decode(outputs, None, CHARS) == ["kat is"]
    best = with_words(beam, "cat").decode_nbest(outputs, None, CHARS, 1)[0][0]
    assert (best.text, best.boost) == ("cat is", 3 * CHARACTER_BOOST)
    assert with_words(beam, "dog").decode(outputs, None, CHARS) == ["kat is"]


def test_a_configured_copy_keeps_its_hot_words():
    boosted = with_words(BeamDecoder(), "cat")
    assert boosted.with_config(beam_width=3).hotwords == boosted.hotwords
    assert BeamDecoder().hotwords is None


# -- refusals ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("entry", "said"), [
    ("", "no word"), ("?!:2", "no word"), ("cat:", "the boost ''"),
    ("cat:fast", "the boost 'fast'"), ("cat:0", "the boost '0'"), ("cat:-1", "the boost '-1'"),
    ("cat:nan", "the boost 'nan'"), (f"cat:{MAX_BOOST + 1:g}", f"at most {MAX_BOOST:g}"),
])
def test_a_bad_entry_is_one_line(entry, said):
    with pytest.raises(AsrkitError, match=said) as error:
        parse_hotword(entry)
    assert "\n" not in str(error.value)


def test_characters_the_labels_cannot_spell_are_named():
    words = parse_hotwords(["straße", "naïve", "øre:2", "cat"])
    with pytest.raises(AsrkitError) as error:
        words.spell(CHARS)
    assert str(error.value).startswith("the model's labels cannot spell 'ß' 'ø' (in the hot "
                                       "words 'straße', 'øre')")
    assert words.words[1] == Hotword("naive")  # what folds to the alphabet is kept


def test_a_file_that_cannot_be_read_or_holds_a_bad_line_is_one_line(tmp_path):
    with pytest.raises(AsrkitError, match=r"cannot read the hot words in .*missing.txt: No such"):
        parse_hotwords(files=[tmp_path / "missing.txt"])
    listing = tmp_path / "words.txt"
    listing.write_text("cat\ndog:lots\n")
    with pytest.raises(AsrkitError, match=r"words.txt:2: 'dog:lots': the boost 'lots'"):
        parse_hotwords(files=[listing])
    listing.write_bytes(b"\xff\xfe\x00cat")
    with pytest.raises(AsrkitError, match="cannot read the hot words"):
        parse_hotwords(files=[listing])
    listing.write_text("# nothing\n")
    with pytest.raises(AsrkitError, match="holds no hot words"):
        parse_hotwords(files=[listing])


# -- the command line ------------------------------------------------------------------------------


def test_transcribe_boosts_a_hot_word_and_refuses_the_greedy_decoder(cli, tiny_run, tmp_path):
    plain = cli(["transcribe", str(WAV), "-m", str(tiny_run), "--decoder", "beam",
                 "--no-progress"])
    assert plain.exit_code == 0, plain.stderr
    words = plain.stdout.split()
    # A word the model says, with one letter changed: the hot word takes its place.
    said = max(words, key=len)
    changed = said[:-1] + ("a" if said[-1] != "a" else "e")
    boosted = cli(["transcribe", str(WAV), "-m", str(tiny_run), "--decoder", "beam",
                   "--hotword", f"{changed}:5", "--no-progress"])
    assert boosted.exit_code == 0, boosted.stderr
    assert changed in boosted.stdout.split() and changed not in words

    greedy = cli(["transcribe", str(WAV), "-m", str(tiny_run), "--hotword", "cat"])
    assert greedy.exit_code == 1
    assert greedy.stderr.strip().splitlines() == [
        "asrkit: error: the greedy decoder does not boost hot words (--hotword, --hotwords): "
        "use a beam search, --decoder beam or kenlm"]
    spelt = cli(["transcribe", str(WAV), "-m", str(tiny_run), "--decoder", "beam",
                 "--hotword", "straße"])
    assert spelt.exit_code == 1 and "cannot spell 'ß'" in spelt.stderr
    assert len(spelt.stderr.strip().splitlines()) == 1


@pytest.fixture
def fixture_run(datasets, monkeypatch, tmp_path):
    """The saved beam-decoder run of tests/test_run_fixture.py, with its datasets."""
    import shutil

    from tests.test_run_fixture import FIXTURE

    monkeypatch.setenv("ASRKIT_HOME", str(datasets))
    folder = tmp_path / "run"
    shutil.copytree(FIXTURE, folder)
    return folder


def test_evaluate_reads_a_hot_word_file(cli, fixture_run, tmp_path):
    """The fixture run (4 steps of training) is all but undecided between labels: where the
    audio says nothing, a boosted word is what it says (why the crafted tests hold the audio's
    evidence). The evaluation records the hot words."""
    def evaluate(*args):
        result = cli(["evaluate", str(fixture_run), "--split", "dev", "--json", "-",
                      "--no-progress", *args])
        assert result.exit_code == 0, result.stderr
        return json.loads(result.stdout)

    plain = evaluate()
    listing = tmp_path / "hot.txt"
    listing.write_text("# an animal\nzebra:1.5\n")
    boosted = evaluate("--hotwords", str(listing))
    assert boosted["hotwords"] == [{"text": "zebra", "boost": 1.5}] and "hotwords" not in plain
    assert not any("zebra" in u["hypothesis"] for u in plain["results"])
    assert all("zebra" in u["hypothesis"].split() for u in boosted["results"])
    missing = cli(["evaluate", str(fixture_run), "--hotwords", str(tmp_path / "none.txt")])
    assert missing.exit_code == 1 and len(missing.stderr.strip().splitlines()) == 1
    assert "cannot read the hot words" in missing.stderr


def test_the_choice_carries_hot_words_to_the_runs_decoder(fixture_run):
    run = load_run(fixture_run)
    words = parse_hotwords(["cat"])
    decoder = run.choose_decoder(DecoderChoice(settings=(("beam_width", "3"),),
                                               hotwords=words))
    assert (decoder.name, decoder.config.beam_width, decoder.hotwords) == ("beam", 3, words)
    with pytest.raises(AsrkitError, match="the greedy decoder does not boost hot words"):
        run.choose_decoder(DecoderChoice("greedy", hotwords=words))
