"""``attention-kenlm``: the joint CTC/attention beam search with the n-gram model fused in.
Without weights it is ``attention-beam``; with them it prefers the words the model knows, and
scores each hypothesis as its decoder score and the weighted word scores added up.

The networks here are scripted (:class:`Scripted`): the attention decoder's distribution of the
next label is set by hand for each position; only asrkit's public API is used.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from asrkit_decoder_kenlm.attention import AttentionKenLMDecoder

from asrkit.api import (
    ATTENTION_OUTPUTS,
    Alphabet,
    AttentionBeamDecoder,
    AttentionOutputs,
)
from asrkit.testing import check_settings_round_trip

LABELS = Alphabet()
#: "the kat sat", the "k" a little more likely than the "c" the language model knows.
SCRIPT = [{c: 0.9} for c in "the "] + [{"k": 0.5, "c": 0.4}] + [{c: 0.9} for c in "at sat"]
FRAMES = 20


class Scripted:
    """An attention decoder that reads a script: after ``i`` labels it offers the script's
    ``i``-th distribution (the end symbol a little of the rest), and the end symbol for certain
    once the script is spoken, whatever the labels were. No CTC output."""

    has_ctc = False

    def __init__(self, script: list[dict[str, float]]) -> None:
        self.eos = LABELS.blank
        rows = []
        for probs in script:
            p = np.full(LABELS.num_classes, 1e-3)
            for symbol, prob in probs.items():
                p[LABELS.symbols.index(symbol)] = prob
            rows.append(np.log(p / p.sum()))
        end = np.full(LABELS.num_classes, -30.0)
        end[self.eos] = 0.0
        self.table = tf.constant(np.array([*rows, end], np.float32))

    def ctc_log_probs(self, frames: tf.Tensor) -> tf.Tensor:
        raise AssertionError("no CTC output")

    def initial_state(self, frames: tf.Tensor, lengths: tf.Tensor) -> tf.Tensor:
        return tf.zeros([tf.shape(frames)[0], 0])

    def decode_step(self, frames: tf.Tensor, lengths: tf.Tensor, tokens: tf.Tensor,
                    state: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        position = tf.minimum(tf.shape(tokens)[1] - 1, tf.shape(self.table)[0] - 1)
        row = tf.nn.log_softmax(self.table[position])
        return tf.tile(row[None], [tf.shape(tokens)[0], 1]), state


def scripted(script: list[dict[str, float]]) -> tuple[AttentionOutputs, np.ndarray]:
    outputs = AttentionOutputs(np.zeros((1, FRAMES, 4), np.float32), Scripted(script))
    return outputs, np.array([FRAMES])


def fused(lm, **changes):
    return AttentionKenLMDecoder().with_config(lm=str(lm), ctc_weight=0.0, beam_width=4,
                                               **changes)


def test_it_reads_an_attention_runs_outputs_and_keeps_the_settings_contract():
    assert AttentionKenLMDecoder.reads == ATTENTION_OUTPUTS
    check_settings_round_trip(AttentionKenLMDecoder())


def test_without_weights_it_is_the_attention_beam_search(cat_lm):
    outputs, lengths = scripted(SCRIPT)
    plain = AttentionBeamDecoder().with_config(beam_width=4, ctc_weight=0.0)
    expected = plain.decode_nbest(outputs, lengths, LABELS)[0]
    found = fused(cat_lm, alpha=0.0, beta=0.0, unk_offset=0.0).decode_nbest(
        outputs, lengths, LABELS)[0]
    assert [h.text for h in found] == [h.text for h in expected]
    assert [h.score for h in found] == pytest.approx([h.score for h in expected])
    assert expected[0].text == "the kat sat"


def test_the_language_model_turns_the_search_to_the_words_it_knows(cat_lm):
    outputs, lengths = scripted(SCRIPT)
    decoder = fused(cat_lm, unk_offset=0.0)
    assert decoder.decode(outputs, lengths, LABELS) == ["the cat sat"]
    hypotheses = decoder.decode_nbest(outputs, lengths, LABELS)[0]
    for h in hypotheses:
        assert h.lm != 0.0 and h.score == pytest.approx(h.acoustic + h.lm)
    kat = next(h for h in hypotheses if h.text == "the kat sat")
    assert kat.acoustic > hypotheses[0].acoustic
