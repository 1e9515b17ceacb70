"""The attention objective (``asrkit.objectives.attention``): the contract for both decoders
and the CTC weights that change its structure (0: no CTC layer; 1: CTC alone decides), the
loss against the cross-entropy computed by hand (plain, label-smoothed, and weighted with CTC),
and what the decoders rely on: a step at a time from ``initial_state`` gives what teacher
forcing gives at every position, the padding frames change nothing, compiled as eager, and
float32 at the boundaries under a mixed precision policy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from asrkit.core.ctc import ctc_losses
from asrkit.core.text import Alphabet
from asrkit.decoders.attention import AttentionOutputs
from asrkit.objectives import attention as attention_module
from asrkit.objectives.attention import AttentionConfig, AttentionObjective
from asrkit.testing import check_objective

LABELS = Alphabet()
OBJECTIVE = AttentionObjective()
#: The tiny preset's sizes (the objective's own), without dropout unless a test asks for it.
TINY = {"d_model": 16, "heads": 2, "layers": 1, "ff_dim": 32, "las_units": 16,
        "attention_dim": 16, "location_filters": 4, "location_kernel": 3, "dropout": 0.0}
DECODERS = ["transformer", "las"]


def make_head(config: AttentionConfig, seed: int, scale: float = 3.0):
    """A head with random weights, its output layer scaled up so that the log-probabilities
    differ clearly from position to position."""
    import keras

    keras.utils.set_random_seed(seed)
    head = OBJECTIVE.build(config, OBJECTIVE.encoder_width(config, LABELS), LABELS)
    kernel = head.output_layer.kernel
    kernel.assign(kernel * scale)
    return head


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


#: A padded batch: three utterances of different frame and label counts.
FRAME_LENGTHS = np.array([9, 5, 3], np.int32)
LABEL_IDS = np.array([[3, 4, 4, 5], [7, 1, 0, 0], [2, 2, 2, 0]], np.int32)
LABEL_LENGTHS = np.array([4, 2, 3], np.int32)


def noise_frames(seed: int, padding_seed: int) -> np.ndarray:
    """The batch's frames: the same valid frames for a ``seed``, the padding past each
    utterance's length drawn from ``padding_seed``."""
    valid = np.random.default_rng(seed).normal(size=(3, 9, 16)).astype(np.float32)
    padding = (np.random.default_rng(padding_seed).normal(size=(3, 9, 16)) * 10).astype(
        np.float32)
    inside = np.arange(9)[None, :, None] < FRAME_LENGTHS[:, None, None]
    return np.where(inside, valid, padding)


def teacher_tokens_and_targets(eos: int) -> tuple[np.ndarray, np.ndarray]:
    """What the loss reads, written out in numpy: the start symbol then the labels, and the
    labels then the end symbol (``[batch, U+1]``; positions past a target's end hold eos)."""
    size = LABEL_IDS.shape[1] + 1
    targets = np.full((3, size), eos, np.int32)
    for row, count in enumerate(LABEL_LENGTHS):
        targets[row, :count] = LABEL_IDS[row, :count]
    tokens = np.concatenate([np.full((3, 1), eos, np.int32), targets[:, :-1]], axis=1)
    return tokens, targets


# -- the contract --------------------------------------------------------------------------------


@pytest.mark.parametrize("ctc_weight", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("decoder", DECODERS)
def test_the_objective_keeps_the_contract(decoder, ctc_weight):
    check_objective(OBJECTIVE, AttentionConfig(decoder=decoder, ctc_weight=ctc_weight,
                                               **{**TINY, "dropout": 0.1}))


def test_it_keeps_the_contract_with_subword_pieces():
    from asrkit.api import Pieces

    check_objective(OBJECTIVE, AttentionConfig(decoder="las", **TINY),
                    labels=Pieces(["\u2581the", "\u2581a", "t", "he", "s"]))


def test_the_ctc_weight_decides_the_ctc_layer_and_what_an_utterance_needs():
    for weight, has_ctc, decoder in ((0.0, False, "las"), (0.3, True, "transformer"),
                                     (1.0, True, "las")):
        config = AttentionConfig(ctc_weight=weight, decoder=decoder, **TINY)
        head = OBJECTIVE.build(config, 16, LABELS)
        assert head.has_ctc is has_ctc
        assert any("ctc_output" in v.path for v in head.trainable_variables) is has_ctc
        # Named as the head's, beside the model's weights (an average, growth, a report).
        assert all(v.path.startswith("attention_head/") for v in head.weights)
        assert head.eos == LABELS.num_classes - 1 == LABELS.blank
    assert OBJECTIVE.frames_needed(AttentionConfig(ctc_weight=0.3), [1, 1, 2]) == 1
    assert OBJECTIVE.frames_needed(AttentionConfig(ctc_weight=1.0), [1, 1, 2]) == 4
    assert OBJECTIVE.encoder_width(AttentionConfig(d_model=24), LABELS) == 24


def test_it_is_registered_and_its_entry_point_declared(make_plugins):
    found = make_plugins(attention_module).registry.get("objective", "attention")
    assert isinstance(found, AttentionObjective)
    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert 'attention = "asrkit.objectives.attention"' in pyproject


# -- the loss ------------------------------------------------------------------------------------


def attention_by_hand(head, frames: np.ndarray, smoothing: float) -> np.ndarray:
    """The per-utterance attention loss from the teacher-forced logits, in numpy: ``(1 -
    eps)`` of the target's negative log-probability plus ``eps / K`` of every class's, summed
    over the labels and the end symbol."""
    tokens, targets = teacher_tokens_and_targets(head.eos)
    logits = head.teacher_forced(frames, FRAME_LENGTHS, tokens).numpy()
    log_probs = log_softmax(logits)
    losses = np.zeros(3)
    for row, count in enumerate(LABEL_LENGTHS):
        for u in range(count + 1):
            target = -log_probs[row, u, targets[row, u]]
            spread = -log_probs[row, u].mean()
            losses[row] += (1 - smoothing) * target + smoothing * spread
    return losses


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_the_attention_loss_is_the_cross_entropy_of_the_labels_and_the_end(decoder, smoothing):
    config = AttentionConfig(decoder=decoder, ctc_weight=0.0, label_smoothing=smoothing, **TINY)
    head = make_head(config, seed=1)
    frames = noise_frames(1, 2)
    losses, feasible = OBJECTIVE.losses(config, head, frames, FRAME_LENGTHS, LABEL_IDS,
                                        LABEL_LENGTHS)
    assert feasible.numpy().all()
    expected = attention_by_hand(head, frames, smoothing)
    np.testing.assert_allclose(losses.numpy(), expected, rtol=1e-5)
    if not smoothing:  # the plain sum of the targets' negative log-probabilities
        tokens, targets = teacher_tokens_and_targets(head.eos)
        log_probs = log_softmax(head.teacher_forced(frames, FRAME_LENGTHS, tokens).numpy())
        picked = np.take_along_axis(log_probs, targets[..., None], -1)[..., 0]
        scored = np.arange(targets.shape[1])[None] <= LABEL_LENGTHS[:, None]
        np.testing.assert_allclose(losses.numpy(), -(picked * scored).sum(1), rtol=1e-5)


@pytest.mark.parametrize("decoder", DECODERS)
def test_the_joint_loss_weights_ctc_where_it_aligns_and_attention(decoder):
    """Utterance 2 (three equal labels, three frames) CTC cannot align: the attention loss
    alone trains on it, unless the CTC weight is 1, where it is left out."""
    frames = noise_frames(3, 4)
    for weight in (0.3, 1.0):
        config = AttentionConfig(decoder=decoder, ctc_weight=weight, label_smoothing=0.1,
                                 **TINY)
        head = make_head(config, seed=2)
        losses, feasible = OBJECTIVE.losses(config, head, frames, FRAME_LENGTHS, LABEL_IDS,
                                            LABEL_LENGTHS)
        ctc, aligned = ctc_losses(LABEL_IDS, LABEL_LENGTHS, head.ctc_logits(frames),
                                  FRAME_LENGTHS)
        assert aligned.numpy().tolist() == [True, True, False]
        ctc_part = weight * np.where(aligned.numpy(), ctc.numpy(), 0.0)
        expected = ctc_part + (1 - weight) * attention_by_hand(head, frames, 0.1)
        if weight == 1:
            assert feasible.numpy().tolist() == [True, True, False]
            expected = np.where(aligned.numpy(), expected, 0.0)
        else:
            assert feasible.numpy().all()
        np.testing.assert_allclose(losses.numpy(), expected, rtol=1e-5)
        # The CTC output the decoders read is that layer's log-softmax.
        np.testing.assert_allclose(head.ctc_log_probs(frames).numpy(),
                                   log_softmax(head.ctc_logits(frames).numpy()), atol=1e-5)


def test_an_utterance_without_frames_is_not_feasible():
    config = AttentionConfig(ctc_weight=0.3, **TINY)
    head = make_head(config, seed=4)
    losses, feasible = OBJECTIVE.losses(config, head, noise_frames(0, 0)[:2], [4, 0],
                                        LABEL_IDS[:2], LABEL_LENGTHS[:2])
    assert feasible.numpy().tolist() == [True, False]
    assert losses.numpy()[1] == 0.0 and np.isfinite(losses.numpy()).all()


# -- what the decoders rely on -------------------------------------------------------------------


def stepwise_log_probs(head, frames, lengths, tokens) -> np.ndarray:
    """The log-probabilities after each prefix of ``tokens``, one ``decode_step`` at a time
    from ``initial_state`` (the decoders' way)."""
    state = head.initial_state(frames, lengths)
    found = []
    for position in range(tokens.shape[1]):
        log_probs, state = head.decode_step(frames, lengths, tokens[:, :position + 1], state)
        assert log_probs.dtype == tf.float32 and state.dtype == tf.float32
        found.append(log_probs.numpy())
    return np.stack(found, axis=1)


@pytest.mark.parametrize("decoder", DECODERS)
def test_a_step_at_a_time_is_teacher_forcing_whatever_the_padding(decoder):
    config = AttentionConfig(decoder=decoder, ctc_weight=0.3, **{**TINY, "dropout": 0.1})
    head = make_head(config, seed=5)
    tokens, _ = teacher_tokens_and_targets(head.eos)
    frames = noise_frames(6, 7)
    forced = log_softmax(head.teacher_forced(frames, FRAME_LENGTHS, tokens).numpy())
    steps = stepwise_log_probs(head, frames, FRAME_LENGTHS, tokens)
    np.testing.assert_allclose(steps, forced, atol=1e-5)

    # Other noise past each utterance's frames: the same, step by step and teacher-forced.
    other = noise_frames(6, 8)
    np.testing.assert_allclose(stepwise_log_probs(head, other, FRAME_LENGTHS, tokens), forced,
                               atol=1e-5)
    np.testing.assert_allclose(
        log_softmax(head.teacher_forced(other, FRAME_LENGTHS, tokens).numpy()), forced,
        atol=1e-5)
    # Each utterance alone, without padding at all.
    for row, length in enumerate(FRAME_LENGTHS):
        alone = head.teacher_forced(frames[row:row + 1, :length], FRAME_LENGTHS[row:row + 1],
                                    tokens[row:row + 1]).numpy()
        np.testing.assert_allclose(log_softmax(alone)[0], forced[row], atol=1e-5)
    # ... while a frame it reads does change what it predicts (the check above is not idle).
    changed = frames.copy()
    changed[0, 0] += 5.0
    moved = log_softmax(head.teacher_forced(changed, FRAME_LENGTHS, tokens).numpy())
    assert np.abs(moved[0] - forced[0]).max() > 1e-3
    np.testing.assert_allclose(moved[1:], forced[1:], atol=1e-5)
    # And the decoders' inputs are the frames with the head.
    inputs = OBJECTIVE.decoder_inputs(config, head, frames)
    assert isinstance(inputs, AttentionOutputs) and inputs.networks is head
    assert len(inputs) == 3


@pytest.mark.parametrize("decoder", DECODERS)
def test_the_head_compiled_with_unknown_dimensions_is_the_head_eager(decoder):
    config = AttentionConfig(decoder=decoder, ctc_weight=0.3, **TINY)
    head = make_head(config, seed=9)
    tokens, _ = teacher_tokens_and_targets(head.eos)
    frames = noise_frames(10, 11)
    frames_spec = tf.TensorSpec([None, None, 16], tf.float32)
    lengths_spec, tokens_spec = tf.TensorSpec([None], tf.int32), tf.TensorSpec([None, None],
                                                                             tf.int32)

    @tf.function(input_signature=[frames_spec, lengths_spec, tokens_spec])
    def forced(frames, lengths, tokens):
        return head.teacher_forced(frames, lengths, tokens)

    @tf.function(input_signature=[frames_spec, lengths_spec, tokens_spec,
                                  tf.TensorSpec([None, None], tf.float32)])
    def step(frames, lengths, tokens, state):
        return head.decode_step(frames, lengths, tokens, state)

    @tf.function(input_signature=[frames_spec, lengths_spec])
    def initial(frames, lengths):
        return head.initial_state(frames, lengths)

    np.testing.assert_allclose(forced(frames, FRAME_LENGTHS, tokens).numpy(),
                               head.teacher_forced(frames, FRAME_LENGTHS, tokens).numpy(),
                               atol=1e-5)
    state = initial(frames, FRAME_LENGTHS)
    np.testing.assert_allclose(state.numpy(),
                               head.initial_state(frames, FRAME_LENGTHS).numpy())
    eager_state = head.initial_state(frames, FRAME_LENGTHS)
    for position in range(3):
        prefix = tokens[:, :position + 1]
        compiled, state = step(frames, FRAME_LENGTHS, prefix, state)
        eager, eager_state = head.decode_step(frames, FRAME_LENGTHS, prefix, eager_state)
        np.testing.assert_allclose(compiled.numpy(), eager.numpy(), atol=1e-5)
        np.testing.assert_allclose(state.numpy(), eager_state.numpy(), atol=1e-5)


@pytest.mark.parametrize("decoder", DECODERS)
def test_a_mixed_precision_head_is_float32_at_its_boundaries(decoder):
    import keras

    config = AttentionConfig(decoder=decoder, ctc_weight=0.3, **TINY)
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        head = OBJECTIVE.build(config, 16, LABELS)
    finally:
        keras.config.set_dtype_policy(previous)
    assert head.output_layer.compute_dtype == "bfloat16"
    tokens, _ = teacher_tokens_and_targets(head.eos)
    frames = noise_frames(12, 13)
    assert head.teacher_forced(frames, FRAME_LENGTHS, tokens).dtype == tf.float32
    assert head.ctc_log_probs(frames).dtype == tf.float32
    state = head.initial_state(frames, FRAME_LENGTHS)
    log_probs, state = head.decode_step(frames, FRAME_LENGTHS, tokens[:, :1], state)
    assert log_probs.dtype == tf.float32 and state.dtype == tf.float32
    losses, feasible = OBJECTIVE.losses(config, head, frames, FRAME_LENGTHS, LABEL_IDS,
                                        LABEL_LENGTHS, training=True)
    assert losses.dtype == tf.float32 and np.isfinite(losses.numpy()).all()
    assert feasible.numpy().all()


def greedy(head, frames: np.ndarray, lengths: np.ndarray, steps: int) -> list[list[int]]:
    """The most likely token at each step, a step at a time, up to the end symbol."""
    tokens = np.full((len(frames), 1), head.eos, np.int32)
    state = head.initial_state(frames, lengths)
    for _ in range(steps):
        log_probs, state = head.decode_step(frames, lengths, tokens, state)
        tokens = np.concatenate([tokens, np.argmax(log_probs.numpy(), -1)[:, None]], 1)
    found = []
    for row in tokens[:, 1:].tolist():
        found.append(row[:row.index(head.eos)] if head.eos in row else row)
    return found


@pytest.mark.parametrize("decoder", DECODERS)
def test_the_head_learns_to_spell_a_batch(decoder):
    """Trained on the loss alone (the encoder's frames fixed), the decoder learns a small
    batch's transcripts, end symbol included: the loss, its gradients and the decoding steps
    fit together."""
    import keras

    config = AttentionConfig(decoder=decoder, ctc_weight=0.3, label_smoothing=0.0, **TINY)
    head = make_head(config, seed=14, scale=1.0)
    frames = tf.constant(noise_frames(15, 16))
    optimizer = keras.optimizers.Adam(0.02)

    @tf.function
    def train_step():
        with tf.GradientTape() as tape:
            losses, _ = OBJECTIVE.losses(config, head, frames, FRAME_LENGTHS, LABEL_IDS,
                                         LABEL_LENGTHS, training=True)
            loss = tf.reduce_mean(losses)
        optimizer.apply_gradients(zip(tape.gradient(loss, head.trainable_variables),
                                      head.trainable_variables, strict=True))
        return loss

    first = float(train_step())
    for _ in range(150):
        last = float(train_step())
    assert last < 0.1 * first, (first, last)
    expected = [LABEL_IDS[row, :count].tolist() for row, count in enumerate(LABEL_LENGTHS)]
    assert greedy(head, frames.numpy(), FRAME_LENGTHS, 6) == expected
