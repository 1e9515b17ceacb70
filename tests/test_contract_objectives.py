"""The training-objective contract (:class:`asrkit.types.Objective`) checked by
``asrkit.testing``'s contract checks on the objective asrkit ships (``ctc``, with characters and
with subword pieces), an objective with a head, and the checks themselves catching objectives
that break it."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from asrkit.api import CTCObjective, Objective, Pieces, ctc_frames_needed, ctc_losses, setting
from asrkit.core.text import Alphabet
from asrkit.plugins import get
from asrkit.testing import (
    check_compiled,
    check_encoder_width,
    check_gradients,
    check_head,
    check_losses,
    check_objective,
    check_objective_settings,
)


def test_ctc_is_registered_and_keeps_the_contract():
    objective = get("objective", "ctc")
    assert isinstance(objective, CTCObjective)
    check_objective(objective)
    check_objective("ctc", labels=Pieces(["\u2581the", "\u2581a", "t", "he", "s"]))


def test_ctc_is_todays_ctc():
    """The objective is a new way to reach the same numbers: CTC's width, no head, the same
    losses and alignment check as asrkit.core.ctc (which training called directly before)."""
    import numpy as np

    from asrkit.testing.objectives import objective_batch

    objective, labels = CTCObjective(), Alphabet()
    config = objective.Config()
    assert objective.encoder_width(config, labels) == labels.num_classes == 29
    assert objective.build(config, 29, labels) is None and objective.ctc_outputs
    batch = objective_batch(objective, config, labels)
    ours = objective.losses(config, None, batch["encoder_out"], batch["out_lengths"],
                            batch["label_ids"], batch["label_lengths"])
    theirs = ctc_losses(batch["label_ids"], batch["label_lengths"], batch["encoder_out"],
                        batch["out_lengths"])
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert objective.frames_needed(config, [1, 1, 2]) == ctc_frames_needed([1, 1, 2]) == 4


# -- an objective with settings and a head -------------------------------------------------------


@dataclass(frozen=True)
class AuxConfig:
    #: Weight of the auxiliary loss.
    weight: float = setting(0.5, min=0)
    units: int = setting(8, min=1)


class WithAuxiliaryHead(Objective):
    """CTC on the model's output plus a small trained head predicting each frame's blank
    probability again: an objective with CTC outputs and a head of its own."""

    name = "aux-ctc"
    description = "CTC plus an auxiliary head."
    Config = AuxConfig

    def encoder_width(self, config, labels):
        return labels.num_classes

    def build(self, config, encoder_width, labels):
        import keras

        frames = keras.Input([None, encoder_width])
        hidden = keras.layers.Dense(config.units, activation="tanh", name="aux_hidden")(frames)
        return keras.Model(frames, keras.layers.Dense(1, name="aux_out")(hidden))

    def losses(self, config, head, encoder_out, out_lengths, label_ids, label_lengths,
               training=False):
        import tensorflow as tf

        ctc, feasible = ctc_losses(label_ids, label_lengths, encoder_out, out_lengths)
        mask = tf.sequence_mask(out_lengths, tf.shape(encoder_out)[1], tf.float32)
        target = tf.nn.softmax(encoder_out)[..., -1:]
        guess = tf.sigmoid(head(encoder_out, training=training))
        aux = tf.reduce_sum(tf.square(guess - target)[..., 0] * mask, 1)
        return tf.where(feasible, ctc + config.weight * aux, 0.0), feasible

    def frames_needed(self, config, label_ids):
        return ctc_frames_needed(label_ids)


def test_an_objective_with_a_head_keeps_the_contract():
    objective = WithAuxiliaryHead()
    check_objective(objective)
    check_objective(objective, AuxConfig(weight=2.0, units=3))
    assert check_head(objective) is not None


# -- the checks catch what breaks the contract ---------------------------------------------------


class Broken(CTCObjective):
    name = "broken"


def test_a_mutable_config_is_caught():
    @dataclass
    class Mutable:
        weight: float = 1.0

    class MutableSettings(Broken):
        Config = Mutable

    with pytest.raises(AssertionError, match="Config must be frozen"):
        check_objective_settings(MutableSettings())


def test_a_ctc_width_other_than_the_labels_is_caught():
    class Wide(Broken):
        def encoder_width(self, config, labels):
            return labels.num_classes + 1

    with pytest.raises(AssertionError, match=r"CTC logits .* encoder_width is 30"):
        check_encoder_width(Wide())


def test_outputs_and_the_default_decoder_must_be_names():
    class Outputs(Broken):
        outputs = "Not a name"

    class Default(Broken):
        default_decoder = ""

    class CTCWithAnotherDefault(Broken):
        default_decoder = "transducer-greedy"

    with pytest.raises(AssertionError, match="outputs must be a name"):
        check_objective_settings(Outputs())
    with pytest.raises(AssertionError, match="default_decoder must be a name"):
        check_objective_settings(Default())
    with pytest.raises(AssertionError, match="its outputs are CTC logits, whose runs are decoded "
                                             "by greedy"):
        check_objective_settings(CTCWithAnotherDefault())


def test_negative_losses_are_caught():
    class Negative(Broken):
        def losses(self, config, head, encoder_out, out_lengths, label_ids, label_lengths,
                   training=False):
            losses, feasible = super().losses(config, head, encoder_out, out_lengths, label_ids,
                                              label_lengths, training)
            return losses - 1000.0, feasible

    with pytest.raises(AssertionError, match="not all finite and >= 0"):
        check_losses(Negative())


def test_frames_needed_that_disagrees_with_the_loss_is_caught():
    class Lenient(Broken):
        def frames_needed(self, config, label_ids):
            return len(label_ids)  # forgets the blank between repeated labels

    with pytest.raises(AssertionError, match="frames_needed and the loss must agree"):
        check_losses(Lenient())


def test_a_loss_that_reads_the_padding_is_caught():
    class ReadsPadding(Broken):
        def losses(self, config, head, encoder_out, out_lengths, label_ids, label_lengths,
                   training=False):
            import tensorflow as tf

            losses, feasible = super().losses(config, head, encoder_out, out_lengths,
                                              label_ids, label_lengths, training)
            everything = tf.reduce_sum(tf.abs(encoder_out), [1, 2]) * 1e-3
            return losses + everything, feasible

    with pytest.raises(AssertionError, match=r"alone and .* in a padded batch"):
        check_losses(ReadsPadding())


def test_a_loss_without_gradient_to_the_frames_is_caught():
    class Detached(Broken):
        def losses(self, config, head, encoder_out, out_lengths, label_ids, label_lengths,
                   training=False):
            import tensorflow as tf

            return super().losses(config, head, tf.stop_gradient(encoder_out), out_lengths,
                                  label_ids, label_lengths, training)

    with pytest.raises(AssertionError, match="no gradient reaches the encoder's output"):
        check_gradients(Detached())


def test_a_head_without_gradient_is_caught():
    class IdleHead(WithAuxiliaryHead):
        def losses(self, config, head, encoder_out, out_lengths, label_ids, label_lengths,
                   training=False):
            return ctc_losses(label_ids, label_lengths, encoder_out, out_lengths)

    with pytest.raises(AssertionError, match="no gradient reaches the head's"):
        check_gradients(IdleHead())


def test_a_loss_that_fails_in_a_graph_is_caught():
    class EagerOnly(Broken):
        def losses(self, config, head, encoder_out, out_lengths, label_ids, label_lengths,
                   training=False):
            frames = int(encoder_out.shape[1])  # None while tracing for any length
            return super().losses(config, head, encoder_out[:, :frames], out_lengths,
                                  label_ids, label_lengths, training)

    with pytest.raises(AssertionError, match=r"fails inside tf\.function"):
        check_compiled(EagerOnly())
