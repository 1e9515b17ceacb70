"""The attention decoders (``asrkit.decoders.attention``) and the CTC prefix score they fuse
(``asrkit.core.ctc_prefix``), against scripted networks rather than a trained head: the prefix
score against a sum over every CTC path, the joint search at CTC weight 1 against the CTC prefix
beam search, at CTC weight 0 against an exhaustive search of the scripted decoder, and each of
its settings (width 1, the length limit, end detection, the length bonus, n-best lists, a word
language model) where its effect is known; each label's frame; the refusals; and its speed."""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
import pytest
import tensorflow as tf

from asrkit.core.ctc_prefix import LOG_ZERO, CTCPrefixScorer
from asrkit.core.errors import AsrkitError
from asrkit.core.text import Alphabet
from asrkit.decoders import attention
from asrkit.decoders.attention import (
    AttentionBeamDecoder,
    AttentionGreedyDecoder,
    AttentionOutputs,
)
from asrkit.decoders.beam import BeamDecoder
from asrkit.decoders.scoring import WordScorer
from tests.test_transducer import fused_with_words

#: Two letters and the space; the blank (the end symbol) is class 3.
LABELS = Alphabet(("a", "b", " "))
EOS = LABELS.blank


def log_normalised(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, np.float64)
    top = values.max(axis=-1, keepdims=True)
    return values - top - np.log(np.exp(values - top).sum(axis=-1, keepdims=True))


class Scripted:
    """A head meeting :class:`~asrkit.decoders.attention.AttentionNetworks` from tables: the
    decoder's next-label log-probabilities are ``table[utterance, step, last label]`` (the
    utterance is read from its frames, whose every value is its index; steps past the table
    repeat its last), and the CTC output's are ``ctc[utterance]`` (or there is none).
    TensorFlow ops on constants, so that the decoders' ``tf.function`` traces them as it would
    a real head."""

    def __init__(self, table: np.ndarray, ctc: np.ndarray | None = None) -> None:
        self.table = tf.constant(table, tf.float32)  # [utterances, steps, classes, classes]
        self.eos = table.shape[-1] - 1
        self.has_ctc = ctc is not None
        self.ctc = None if ctc is None else tf.constant(ctc, tf.float32)

    def ctc_log_probs(self, frames):
        return tf.gather(self.ctc, tf.cast(frames[:, 0, 0], tf.int32))

    def initial_state(self, frames, lengths):
        return tf.zeros([tf.shape(frames)[0], 1])

    def decode_step(self, frames, lengths, tokens, state):
        utterance = tf.cast(frames[:, 0, 0], tf.int32)
        step = tf.minimum(tf.shape(tokens)[1] - 1, tf.shape(self.table)[1] - 1)
        rows = tf.gather(self.table, utterance)[:, step]  # [n, classes, classes]
        return tf.gather(rows, tokens[:, -1], batch_dims=1), state + 1.0


def outputs_of(table: np.ndarray, frames: int, ctc: np.ndarray | None = None):
    """The outputs of a batch of ``table.shape[0]`` utterances of ``frames`` frames."""
    batch = table.shape[0]
    marks = np.broadcast_to(np.arange(batch, dtype=np.float32)[:, None, None], (batch, frames, 1))
    return AttentionOutputs(np.array(marks), Scripted(table, ctc))


def random_table(seed: int, batch: int, steps: int, sharpness: float = 2.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return log_normalised(sharpness * rng.normal(size=(batch, steps, EOS + 1, EOS + 1)))


def sequence_log_prob(table: np.ndarray, row: int, labels: tuple[int, ...]) -> float:
    """The scripted decoder's log-probability of ``labels`` followed by the end."""
    total, last = 0.0, EOS
    for step, label in enumerate((*labels, EOS)):
        total += table[row, min(step, table.shape[1] - 1), last, label]
        last = label
    return total


# -- the CTC prefix score -------------------------------------------------------------------------


def collapse(path: tuple[int, ...], blank: int) -> tuple[int, ...]:
    out = []
    for index, label in enumerate(path):
        if label != blank and (index == 0 or path[index - 1] != label):
            out.append(label)
    return tuple(out)


def brute_force(log_probs: np.ndarray, length: int, blank: int) -> dict[tuple[int, ...], float]:
    """Every labelling's probability: the sum over every path of ``length`` frames that
    collapses to it."""
    found: dict[tuple[int, ...], float] = {}
    for path in itertools.product(range(log_probs.shape[1]), repeat=length):
        p = math.exp(sum(log_probs[t, c] for t, c in enumerate(path)))
        key = collapse(path, blank)
        found[key] = found.get(key, 0.0) + p
    return found


def prefix_probability(labellings: dict[tuple[int, ...], float],
                       prefix: tuple[int, ...]) -> float:
    total = sum(p for y, p in labellings.items() if y[:len(prefix)] == prefix)
    return math.log(total) if total > 0 else LOG_ZERO


def test_the_prefix_score_is_the_sum_over_every_ctc_path():
    """Every prefix of up to 3 labels (repeats included) extended by every label and by the
    end, for two utterances side by side, one shorter than the padded frames: each score is
    the brute-force sum over the paths that start with (or, for the end, spell) the labels."""
    rng = np.random.default_rng(0)
    blank, lengths = 3, np.array([5, 4])
    log_probs = log_normalised(2.0 * rng.normal(size=(2, 5, 4)))
    scorer = CTCPrefixScorer(log_probs, lengths, blank)
    truth = [brute_force(log_probs[row], int(lengths[row]), blank) for row in range(2)]
    states = scorer.initial(np.array([0, 1]))
    prefixes: list[tuple[int, ...]] = [(), ()]
    candidates = np.array([0, 1, 2, blank])
    checked = 0
    for _ in range(4):
        extended = scorer.extend(states, np.broadcast_to(candidates, (len(states), 4)))
        for hyp, prefix in enumerate(prefixes):
            row = int(states.rows[hyp])
            for column, label in enumerate(candidates):
                if label == blank:
                    p = truth[row].get(prefix, 0.0)
                    expected = math.log(p) if p > 0 else LOG_ZERO
                else:
                    expected = prefix_probability(truth[row], (*prefix, int(label)))
                got = extended.scores[hyp, column]
                if expected == LOG_ZERO:
                    assert got <= LOG_ZERO / 2
                else:
                    assert got == pytest.approx(expected, abs=1e-5)
                    checked += 1
        parents = np.repeat(np.arange(len(states)), 3)
        columns = np.tile(np.arange(3), len(states))
        states = extended.take(parents, columns)
        prefixes = [(*prefixes[p], int(candidates[c])) for p, c in zip(parents, columns,
                                                                          strict=True)]
    assert checked > 150  # among them repeats: (1, 1), (0, 0, 0), (0, 1, 0) ...


def test_frames_past_an_utterance_end_change_none_of_its_scores():
    rng = np.random.default_rng(1)
    log_probs = log_normalised(rng.normal(size=(1, 6, 4)))
    short = CTCPrefixScorer(log_probs[:, :4], np.array([4]), 3)
    padded = CTCPrefixScorer(log_probs, np.array([4]), 3)
    candidates = np.array([[0, 1, 2, 3]])
    for scorer in (short, padded):
        state = scorer.extend(scorer.initial(np.array([0])), candidates).take(
            np.array([0]), np.array([1]))
        scores = scorer.extend(state, candidates).scores
        if scorer is short:
            expected = scores
    np.testing.assert_allclose(scores, expected, atol=1e-9)


# -- the joint search against the CTC prefix beam search -----------------------------------------


def test_at_ctc_weight_one_the_search_finds_what_the_ctc_prefix_search_finds():
    """Wide beams over 3 labels and at most 5 frames hold every prefix: both searches are
    exact, so their n-best lists (texts and log-probabilities) are the same."""
    rng = np.random.default_rng(2)
    for _ in range(3):
        log_probs = log_normalised(1.5 * rng.normal(size=(3, 5, 4)))
        lengths = np.array([5, 4, 3])
        table = np.zeros((3, 1, 4, 4))  # the attention decoder is not called at weight 1
        joint = AttentionBeamDecoder().with_config(beam_width=400, ctc_weight=1.0,
                                                   end_margin=None)
        found = joint.decode_nbest(outputs_of(table, 5, log_probs), lengths, LABELS)
        reference = BeamDecoder().with_config(beam_width=500, token_min_logp=None).decode_nbest(
            log_probs, lengths, LABELS)
        for row in range(3):
            assert [h.text for h in found[row][:5]] == [h.text for h in reference[row][:5]]
            np.testing.assert_allclose([h.acoustic for h in found[row][:5]],
                                       [h.acoustic for h in reference[row][:5]], atol=1e-5)
        assert joint.decode(outputs_of(table, 5, log_probs), lengths, LABELS) == [
            hyps[0].text for hyps in reference]


# -- the attention decoder alone ------------------------------------------------------------------


def exhaustive_best(table: np.ndarray, row: int, longest: int) -> tuple[int, ...]:
    sequences = [s for n in range(longest + 1) for s in itertools.product(range(EOS), repeat=n)]
    return max(sequences, key=lambda s: sequence_log_prob(table, row, s))


def test_at_ctc_weight_zero_a_wide_beam_finds_the_decoders_best_sequence():
    """Utterance 0 is scripted so that greedy goes wrong ("a" first, then no good end); the
    others are random. The limit is 4 labels (4 frames): a beam of 200 holds every sequence."""
    table = random_table(3, batch=4, steps=5)
    table[0, 0, EOS] = np.log([0.55, 0.44, 0.005, 0.005])  # a, then b
    table[0, 1, 0] = np.log([0.3, 0.25, 0.25, 0.2])  # after a: nothing likely
    table[0, 1, 1] = np.log([0.01, 0.02, 0.02, 0.95])  # after b: the end
    outputs, lengths = outputs_of(table, 4), np.array([4, 4, 4, 4])
    beam = AttentionBeamDecoder().with_config(beam_width=200, ctc_weight=0.0, end_margin=None)
    found = beam.decode_tokens(outputs, lengths, LABELS)
    for row in range(4):
        assert tuple(label for label, _ in found[row]) == exhaustive_best(table, row, 4)
    assert [label for label, _ in found[0]] == [1]
    greedy = AttentionGreedyDecoder().decode_tokens(outputs, lengths, LABELS)
    assert [label for label, _ in greedy[0]][:2] == [0, 0]
    nbest = beam.decode_nbest(outputs, lengths, LABELS, 3)
    assert nbest[0][0].score == pytest.approx(sequence_log_prob(table, 0, (1,)), abs=1e-5)


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_the_beam_at_width_one_is_the_greedy_search(seed):
    table = random_table(seed, batch=5, steps=8, sharpness=3.0)
    outputs, lengths = outputs_of(table, 8), np.array([8, 6, 3, 8, 1])
    beam = AttentionBeamDecoder().with_config(beam_width=1, ctc_weight=0.0)
    greedy = AttentionGreedyDecoder()
    beam_tokens = beam.decode_tokens(outputs, lengths, LABELS)
    greedy_tokens = greedy.decode_tokens(outputs, lengths, LABELS)
    assert beam_tokens == greedy_tokens
    assert beam_tokens.hit_length_limit == greedy_tokens.hit_length_limit
    assert beam.decode(outputs, lengths, LABELS) == greedy.decode(outputs, lengths, LABELS)


def endless(batch: int) -> np.ndarray:
    """A decoder that never wants to end (the end's log-probability -30) but for utterance 1,
    which it ends at once."""
    table = np.full((batch, 1, EOS + 1, EOS + 1), np.log(0.3))
    table[..., EOS] = -30.0
    table[1, 0, :, EOS] = -0.01
    return log_normalised(table)


@pytest.mark.parametrize("decoder", [AttentionGreedyDecoder(), AttentionBeamDecoder().with_config(
    beam_width=3, ctc_weight=0.0)], ids=["greedy", "beam"])
def test_a_transcript_cut_by_the_length_limit_is_reported(decoder):
    outputs, lengths = outputs_of(endless(3), 10), np.array([10, 10, 7])
    limited = decoder.with_config(max_length_ratio=0.5)
    found = limited.decode_tokens(outputs, lengths, LABELS)
    assert [len(tokens) for tokens in found] == [5, 0, 3]
    assert found.hit_length_limit == [0, 2]
    texts = limited.decode(outputs, lengths, LABELS)
    assert texts.hit_length_limit == [0, 2] and texts[1] == ""


def test_end_detection_stops_when_longer_hypotheses_keep_ending_far_below_the_best():
    """The end is likely at once (0.95) and then e^-12 a step after each "a": a hypothesis ends
    at every length, 12 nats below the best; a margin of 10 stops the search after 3 such
    lengths, without one it goes on to the limit."""
    table = np.full((1, 2, EOS + 1, EOS + 1), -40.0)
    table[0, 0, EOS, [0, EOS]] = np.log([0.05, 0.95])
    table[0, 1, 0, [0, EOS]] = [math.log1p(-math.exp(-12)), -12.0]
    outputs, lengths = outputs_of(log_normalised(table), 20), np.array([20])
    beam = AttentionBeamDecoder().with_config(beam_width=4, ctc_weight=0.0)
    stopped = beam.decode_nbest(outputs, lengths, LABELS, 50)[0]
    assert max(len(h.text) for h in stopped) == 3 and stopped[0].text == ""
    full = beam.with_config(end_margin=None).decode_nbest(outputs, lengths, LABELS, 50)
    assert max(len(h.text) for h in full[0]) == 20 and full.hit_length_limit == []
    closer = beam.with_config(end_margin=15.0).decode_nbest(outputs, lengths, LABELS, 50)
    assert max(len(h.text) for h in closer[0]) == 20


def test_the_length_bonus_lengthens_transcripts():
    """The end and "a" are equally likely every step (ln 0.5 each): without a bonus the empty
    transcript wins, a bonus above ln 2 a label makes every label worth emitting (up to the
    limit), and a bonus below it, none."""
    table = np.full((1, 1, EOS + 1, EOS + 1), -30.0)
    table[..., [0, EOS]] = math.log(0.5)
    outputs, lengths = outputs_of(log_normalised(table), 6), np.array([6])
    beam = AttentionBeamDecoder().with_config(beam_width=4, ctc_weight=0.0, end_margin=None)
    lengths_found = {}
    for bonus in (-1.0, 0.0, 0.5, 1.0):
        decoded = beam.with_config(length_bonus=bonus).decode(outputs, lengths, LABELS)
        lengths_found[bonus] = len(decoded[0])
        assert decoded.hit_length_limit == ([0] if bonus == 1.0 else [])
    assert lengths_found == {-1.0: 0, 0.0: 0, 0.5: 0, 1.0: 6}


def test_nbest_lists_are_sorted_distinct_and_score_the_joint_probability():
    rng = np.random.default_rng(7)
    table = random_table(8, batch=3, steps=6)
    ctc = log_normalised(2.0 * rng.normal(size=(3, 7, EOS + 1)))
    outputs, lengths = outputs_of(table, 7, ctc), np.array([7, 5, 6])
    beam = AttentionBeamDecoder().with_config(beam_width=5, ctc_weight=0.3, length_norm=True)
    nbest = beam.decode_nbest(outputs, lengths, LABELS)
    scorer = CTCPrefixScorer(ctc, lengths, EOS)
    for row in range(3):
        hyps = nbest[row]
        assert 1 <= len(hyps) <= 5
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        assert len({h.text for h in hyps}) == len(hyps)
        for hyp in hyps:
            labels = tuple(LABELS.encode(hyp.text))
            state = scorer.initial(np.array([row]))
            for label in labels:
                state = scorer.extend(state, np.array([[label]])).take(np.array([0]),
                                                                      np.array([0]))
            ctc_score = scorer.extend(state, np.array([[EOS]])).scores[0, 0]
            expected = 0.7 * sequence_log_prob(table, row, labels) + 0.3 * ctc_score
            assert hyp.acoustic == pytest.approx(expected, abs=1e-4)
            assert hyp.score == pytest.approx(expected / (len(labels) + 1), abs=1e-4)
    assert [h[0].text for h in nbest] == beam.decode(outputs, lengths, LABELS)


def test_a_wide_search_takes_fewer_utterances_at_once_and_finds_the_same(monkeypatch):
    rng = np.random.default_rng(13)
    table = random_table(14, batch=5, steps=6)
    ctc = log_normalised(2.0 * rng.normal(size=(5, 7, EOS + 1)))
    outputs, lengths = outputs_of(table, 7, ctc), np.array([7, 5, 6, 7, 2])
    beam = AttentionBeamDecoder().with_config(beam_width=3, ctc_weight=0.5)
    whole = beam.decode_nbest(outputs, lengths, LABELS)
    tokens = beam.decode_tokens(outputs, lengths, LABELS)
    monkeypatch.setattr(attention, "CTC_CELLS", 2 * 7 * 3 * 4)  # two utterances at once
    assert beam.decode_nbest(outputs, lengths, LABELS) == whole
    assert beam.decode_tokens(outputs, lengths, LABELS) == tokens


# -- a word language model ------------------------------------------------------------------------


FusedBeam = fused_with_words(AttentionBeamDecoder)


def test_a_word_scorer_is_fused_into_the_beam():
    """The decoder prefers "b" to "a" (0.55 to 0.44, then the end): the scorer's +2 for "a"
    and -1 for "b" turns the transcript round, and every hypothesis carries its words'
    scores."""
    table = random_table(9, batch=2, steps=4)
    table[0, 0, EOS] = np.log([0.44, 0.55, 0.005, 0.005])
    table[0, 1, :2] = np.log([0.01, 0.01, 0.01, 0.97])
    outputs, lengths = outputs_of(table, 4), np.array([4, 4])
    plain = AttentionBeamDecoder().with_config(beam_width=4, ctc_weight=0.0)
    fused = FusedBeam().with_config(beam_width=4, ctc_weight=0.0)
    assert plain.decode(outputs, lengths, LABELS)[0] == "b"
    assert fused.decode(outputs, lengths, LABELS)[0] == "a"
    nbest = fused.decode_nbest(outputs, lengths, LABELS)
    assert FusedBeam.scorer.asked, "no word was scored"
    for row in range(2):
        for hyp in nbest[row]:
            expected = sum(2.0 if w == "a" else -1.0 for w in hyp.text.split()) - 0.5
            assert hyp.lm == pytest.approx(expected)
            assert hyp.score == pytest.approx(hyp.acoustic + hyp.lm)
    assert all(h.lm == 0.0 for hyps in plain.decode_nbest(outputs, lengths, LABELS)
               for h in hyps)


class Known(WordScorer):
    """Knows one word, "ab", scores every word 0, and penalises an unfinished word that
    starts no word it knows."""

    vocabulary = frozenset({"ab"})
    partial_penalty = -3.0

    def start(self):
        return ()

    def score_word(self, state, word):
        return 0.0, state

    def score_end(self, state):
        return 0.0


class KnownBeam(AttentionBeamDecoder):
    def make_scorer(self, labels):
        return Known()


def test_the_partial_word_penalty_steers_the_beam_toward_known_words():
    """At width 1 the decoder's "b" (0.55) beats "a" (0.44); "b" starts no known word, so
    with the penalty the beam takes "a", then "b" (0.6), and ends the known word "ab"; the
    penalty leaves no trace on the finished hypothesis."""
    table = np.full((1, 3, EOS + 1, EOS + 1), np.log(0.01))
    table[..., EOS] = np.log(0.97)
    table[0, 0, EOS] = np.log([0.44, 0.55, 0.005, 0.005])
    table[0, 1, 0] = np.log([0.1, 0.6, 0.0001, 0.3])
    outputs, lengths = outputs_of(log_normalised(table), 4), np.array([4])
    plain = AttentionBeamDecoder().with_config(beam_width=1, ctc_weight=0.0)
    known = KnownBeam().with_config(beam_width=1, ctc_weight=0.0)
    assert plain.decode(outputs, lengths, LABELS) == ["b"]
    (best,), = known.decode_nbest(outputs, lengths, LABELS)
    assert best.text == "ab" and best.lm == 0.0
    assert best.score == pytest.approx(sequence_log_prob(log_normalised(table), 0, (0, 1)))


# -- frames, refusals, registration -----------------------------------------------------------


def test_each_label_gets_a_frame_inside_its_utterance_in_order():
    """With a CTC output its frames are where it puts the labels (a path of "b" at frame 2 and
    "a" at frame 5 here); without one, the labels spread over the utterance."""
    table = np.full((2, 3, EOS + 1, EOS + 1), -20.0)
    table[:, 0, EOS, 1] = table[:, 1, 1, 0] = table[:, 2, 0, EOS] = 0.0  # "b a", then the end
    table = log_normalised(table)
    ctc = np.full((2, 9, EOS + 1), -8.0)
    ctc[:, :, EOS] = 0.0
    ctc[:, 2, [1, EOS]] = [0.0, -8.0]
    ctc[:, 5, [0, EOS]] = [0.0, -8.0]
    ctc = log_normalised(ctc)
    lengths = np.array([9, 7])
    for decoder in (AttentionGreedyDecoder(), AttentionBeamDecoder().with_config(beam_width=3)):
        found = decoder.decode_tokens(outputs_of(table, 9, ctc), lengths, LABELS)
        assert found == [[(1, 2), (0, 5)], [(1, 2), (0, 5)]]
        spread = decoder.with_config(ctc_weight=0.0) if isinstance(
            decoder, AttentionBeamDecoder) else decoder
        found = spread.decode_tokens(outputs_of(table, 9), lengths, LABELS)
        assert found == [[(1, 2), (0, 6)], [(1, 1), (0, 5)]]
    rng = np.random.default_rng(10)
    table, ctc = random_table(11, batch=4, steps=12), log_normalised(rng.normal(size=(4, 12, 4)))
    lengths = np.array([12, 9, 5, 2])
    beam = AttentionBeamDecoder().with_config(beam_width=4)
    for found in (beam.decode_tokens(outputs_of(table, 12, ctc), lengths, LABELS),
                  AttentionGreedyDecoder().decode_tokens(outputs_of(table, 12), lengths, LABELS)):
        assert any(found)
        for tokens, length in zip(found, lengths, strict=True):
            frames = [frame for _, frame in tokens]
            assert frames == sorted(frames) and all(0 <= f < length for f in frames)


def test_without_a_ctc_output_the_joint_search_is_the_decoders_alone():
    """A run trained without CTC is searched by its attention decoder alone at the default
    ctc_weight (what it gives at ctc_weight=0); CTC alone (1) is refused in one line."""
    outputs = outputs_of(random_table(12, batch=1, steps=2), 4)
    alone = AttentionBeamDecoder().with_config(ctc_weight=0.0)
    default = AttentionBeamDecoder().decode_nbest(outputs, np.array([4]), LABELS)[0]
    expected = alone.decode_nbest(outputs, np.array([4]), LABELS)[0]
    assert [(h.text, h.score) for h in default] == [(h.text, h.score) for h in expected]
    with pytest.raises(AsrkitError) as refused:
        AttentionBeamDecoder().with_config(ctc_weight=1.0).decode(outputs, np.array([4]), LABELS)
    assert str(refused.value) == (
        "the attention-beam decoder's ctc_weight is 1 (CTC alone) and this run has no CTC "
        "output (trained with objective.ctc_weight=0): set decoder.ctc_weight below 1")
    nothing = outputs_of(random_table(12, batch=1, steps=2)[:0], 4)
    for decoder in (AttentionGreedyDecoder(), AttentionBeamDecoder().with_config(ctc_weight=0)):
        assert decoder.decode(nothing, np.zeros(0), LABELS) == []


@pytest.mark.parametrize("decoder", [AttentionGreedyDecoder(), AttentionBeamDecoder()],
                         ids=["greedy", "beam"])
def test_ctc_logits_are_refused_in_one_line(decoder):
    with pytest.raises(AsrkitError, match="reads an attention run's outputs, not CTC logits"):
        decoder.decode(np.zeros((1, 4, 4), np.float32), np.array([4]), LABELS)


def test_both_decoders_are_registered_and_read_attention_outputs():
    found = []
    attention.register_decoders(found.append)
    assert [d.name for d in found] == ["attention-greedy", "attention-beam"]
    assert {d.reads for d in found} == {attention.ATTENTION_OUTPUTS}
    assert AttentionBeamDecoder().config.beam_width == 10
    with pytest.raises(AsrkitError):
        AttentionBeamDecoder().with_config(ctc_weight=1.5)


# -- speed ----------------------------------------------------------------------------------------


class Sized:
    """A head of a realistic size for timing: dot-product attention of a label embedding over
    144-wide frames, 30 classes, the end likely only after 60 labels, and a random CTC
    output, mostly blanks."""

    def __init__(self, batch: int, frames: int, classes: int = 30, width: int = 144) -> None:
        rng = np.random.default_rng(0)
        self.eos, self.has_ctc = classes - 1, True
        self.embedding = tf.constant(rng.normal(size=(classes, width)).astype(np.float32))
        self.output = tf.constant(rng.normal(size=(width, classes)).astype(np.float32))
        ctc = 2 * rng.normal(size=(batch, frames, classes))
        ctc[..., self.eos] += 8.0  # mostly blanks, as a trained CTC output's
        self.ctc = tf.constant(log_normalised(ctc).astype(np.float32))

    def ctc_log_probs(self, frames):
        return self.ctc[:tf.shape(frames)[0]]

    def initial_state(self, frames, lengths):
        return tf.zeros([tf.shape(frames)[0], 8])

    def decode_step(self, frames, lengths, tokens, state):
        query = tf.gather(self.embedding, tokens[:, -1])
        scores = tf.einsum("ntd,nd->nt", frames, query) / 12.0
        mask = tf.sequence_mask(lengths, tf.shape(frames)[1])
        weights = tf.nn.softmax(tf.where(mask, scores, -1e9))
        context = tf.einsum("nt,ntd->nd", weights, frames)
        logits = 3.0 * tf.matmul(context, self.output) / 12.0
        late = tf.cast(tf.shape(tokens)[1] >= 61, tf.float32)
        logits += tf.one_hot(self.eos, tf.shape(logits)[1]) * (40.0 * late - 20.0)
        return tf.nn.log_softmax(logits), state


def test_speed_of_the_joint_beam_search(capsys):
    """Utterances a second at width 10 (reported, not asserted): 16 utterances of 300 frames,
    30 classes, transcripts of 60 labels."""
    batch, frames = 16, 300
    rng = np.random.default_rng(0)
    outputs = AttentionOutputs(rng.normal(size=(batch, frames, 144)).astype(np.float32),
                               Sized(batch, frames))
    lengths = np.full(batch, frames)
    labels = Alphabet(tuple("abcdefghijklmnopqrstuvwxyz'- "))
    assert labels.num_classes == 30
    warm = AttentionOutputs(outputs.frames[:2], outputs.networks)
    rates, sizes = {}, {}
    for name, decoder in [("attention-greedy", AttentionGreedyDecoder()),
                          ("attention-beam ctc_weight=0", AttentionBeamDecoder().with_config(
                              ctc_weight=0.0)),
                          ("attention-beam ctc_weight=0.3", AttentionBeamDecoder())]:
        decoder.decode(warm, lengths[:2], labels)  # traced once
        start = time.perf_counter()
        texts = decoder.decode(outputs, lengths, labels)
        rates[name] = batch / (time.perf_counter() - start)
        sizes[name] = np.mean([len(text) for text in texts])
    assert sizes["attention-greedy"] == sizes["attention-beam ctc_weight=0"] == 60
    with capsys.disabled():
        print("\n" + "; ".join(f"{name}: {rate:.1f} utterances/s ({sizes[name]:.0f} labels)"
                               for name, rate in rates.items()))
