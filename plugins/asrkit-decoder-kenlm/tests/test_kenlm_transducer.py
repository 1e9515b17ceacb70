"""``transducer-kenlm``: the transducer's beam search with the n-gram model fused in. Without
weights it is ``transducer-beam``; with them it prefers the words the model knows, scores each
hypothesis as the acoustic and the weighted word scores added up, and its partial-word penalty
turns a non-word away while it is being spelt.

The networks here are scripted (:class:`Scripted`), so that the acoustic choice is set by hand;
only asrkit's public API is used.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from asrkit_decoder_kenlm.transducer import TransducerKenLMDecoder

from asrkit.api import TRANSDUCER_OUTPUTS, Alphabet, TransducerBeamDecoder, TransducerOutputs
from asrkit.testing import check_settings_round_trip

LABELS = Alphabet()
#: "the kat sat", the "k" a little more likely than the "c" the language model knows.
SCRIPT = [{c: 0.9} for c in "the "] + [{"k": 0.5, "c": 0.4}] + [{c: 0.9} for c in "at sat"]


class Scripted:
    """Transducer networks that read a script: frame ``t`` offers its distribution of labels
    while ``t`` labels have been emitted, and the blank for certain otherwise, so that a
    transcript is at most a label a frame and its probability is the script's.

    A frame is the one-hot of its position beside its label logits; the prediction network's
    output is the one-hot of the labels emitted so far (its state counts them)."""

    def __init__(self, length: int) -> None:
        self.length = length
        self.blank = LABELS.blank

    def initial_state(self, count: int) -> tf.Tensor:
        return tf.zeros([count, 1])

    def predict_step(self, tokens: tf.Tensor, state: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        count = state[:, 0] + tf.cast(tokens != self.blank, tf.float32)
        return tf.one_hot(tf.cast(count, tf.int32), self.length), count[:, None]

    def joint_step(self, frames: tf.Tensor, predicted: tf.Tensor) -> tf.Tensor:
        position, logits = frames[:, :self.length], frames[:, self.length:]
        offered = tf.reduce_sum(position * predicted, -1, keepdims=True) > 0.5
        certain_blank = tf.one_hot(self.blank, LABELS.num_classes) * 30.0
        return tf.nn.log_softmax(tf.where(offered, logits, certain_blank[None]))


def scripted(script: list[dict[str, float]]) -> tuple[TransducerOutputs, np.ndarray]:
    """The outputs of one utterance of ``script`` (a frame an entry: the probabilities of some
    symbols, the rest spread evenly) and its length."""
    frames = []
    for t, probs in enumerate(script):
        p = np.zeros(LABELS.num_classes)
        for symbol, prob in probs.items():
            p[LABELS.symbols.index(symbol)] = prob
        p[p == 0.0] = (1.0 - p.sum()) / (p == 0.0).sum()
        frames.append(np.concatenate([np.eye(len(script))[t], np.log(p)]))
    outputs = TransducerOutputs(np.array(frames, np.float32)[None], Scripted(len(script)))
    return outputs, np.array([len(script)])



def test_it_reads_a_transducers_outputs_and_keeps_the_settings_contract():
    assert TransducerKenLMDecoder.reads == TRANSDUCER_OUTPUTS
    check_settings_round_trip(TransducerKenLMDecoder())


def test_without_weights_it_is_the_transducer_beam_search(cat_lm):
    outputs, lengths = scripted(SCRIPT)
    plain = TransducerBeamDecoder().with_config(beam_width=4)
    fused = TransducerKenLMDecoder().with_config(lm=str(cat_lm), alpha=0.0, beta=0.0,
                                                 unk_offset=0.0, beam_width=4)
    expected = plain.decode_nbest(outputs, lengths, LABELS)[0]
    found = fused.decode_nbest(outputs, lengths, LABELS)[0]
    assert [h.text for h in found] == [h.text for h in expected]
    assert [h.score for h in found] == pytest.approx([h.score for h in expected])
    assert expected[0].text == "the kat sat"


def test_the_language_model_turns_the_search_to_the_words_it_knows(cat_lm):
    """Its probabilities alone (no unknown-word penalty, which would drop "kat" early)."""
    outputs, lengths = scripted(SCRIPT)
    fused = TransducerKenLMDecoder().with_config(lm=str(cat_lm), beam_width=4, unk_offset=0.0)
    assert fused.decode(outputs, lengths, LABELS) == ["the cat sat"]
    hypotheses = fused.decode_nbest(outputs, lengths, LABELS)[0]
    for h in hypotheses:
        assert h.lm != 0.0 and h.score == pytest.approx(h.acoustic + h.lm)
    assert [h.score for h in hypotheses] == sorted((h.score for h in hypotheses), reverse=True)
    # The acoustics alone prefer "kat": the language model outweighs them.
    kat = next(h for h in hypotheses if h.text == "the kat sat")
    assert kat.acoustic > hypotheses[0].acoustic


def test_the_partial_word_penalty_turns_non_words_away_while_they_are_spelt(cat_lm):
    """At beam 2 the two likelier non-words ("kat", "qat") fill the beam before the word ends,
    unless the penalty of an unfinished word that starts no known word ("k", "q") turns them
    away as they are spelt."""
    script = [*SCRIPT[:4], {"k": 0.4, "q": 0.3, "c": 0.25}, *SCRIPT[5:]]
    outputs, lengths = scripted(script)
    narrow = TransducerKenLMDecoder().with_config(lm=str(cat_lm), beam_width=2)
    assert narrow.decode(outputs, lengths, LABELS) == ["the cat sat"]
    unpenalised = narrow.with_config(unk_offset=0.0)
    assert unpenalised.decode(outputs, lengths, LABELS) == ["the kat sat"]
