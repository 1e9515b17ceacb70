"""The per-utterance CTC loss (``asrkit.core.ctc``): the fast sparse kernel and TensorFlow's dense
implementation agree, utterances CTC cannot align are marked instead of wrecking a batch, and a
CPU takes the sparse kernel."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from asrkit.core.ctc import ctc_losses, frames_needed, use_sparse_labels

CLASSES = 6  # five labels and the blank, last


def batch(seed: int = 0) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """Five utterances of random logits and labels: two ordinary ones; one with just enough
    frames for its labels but not for the blank its doubled label needs; one shorter than its
    labels; one without labels (silence)."""
    rng = np.random.default_rng(seed)
    logits = tf.constant(rng.normal(size=(5, 12, CLASSES)), tf.float32)
    labels = tf.constant([[0, 1, 2, 3, 0, 0], [4, 4, 1, 0, 2, 3], [1, 1, 2, 3, 0, 0],
                          [0, 1, 2, 3, 4, 0], [0, 0, 0, 0, 0, 0]], tf.int32)
    label_lengths = tf.constant([4, 6, 4, 5, 0], tf.int32)
    logit_lengths = tf.constant([12, 9, 4, 3, 7], tf.int32)
    return labels, label_lengths, logits, logit_lengths


def losses_and_gradients(sparse: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    labels, label_lengths, logits, logit_lengths = batch()
    with tf.GradientTape() as tape:
        tape.watch(logits)
        losses, feasible = ctc_losses(labels, label_lengths, logits, logit_lengths, sparse)
        total = tf.reduce_sum(losses)
    return losses.numpy(), feasible.numpy(), tape.gradient(total, logits).numpy()


def test_sparse_and_dense_agree_and_unalignable_utterances_are_marked():
    sparse, feasible, sparse_gradient = losses_and_gradients(sparse=True)
    dense, dense_feasible, dense_gradient = losses_and_gradients(sparse=False)
    assert feasible.tolist() == dense_feasible.tolist() == [True, True, False, False, True]
    np.testing.assert_allclose(sparse, dense, rtol=1e-4)
    np.testing.assert_allclose(sparse_gradient, dense_gradient, atol=1e-5)
    assert sparse[0] > 0 and sparse[1] > 0 and sparse[4] > 0
    # The unalignable ones add nothing: no loss, no gradient (the kernel would have failed the
    # batch on the third, whose "1 1" needs a blank between and so 5 frames, not 4).
    assert sparse[2:4].tolist() == [0.0, 0.0]
    assert not sparse_gradient[2:4].any()


def test_the_loss_is_ctc_against_a_brute_force_sum():
    """Against the definition on a tiny case: -log of the summed probability of every frame
    path that collapses to the labels."""
    import itertools

    rng = np.random.default_rng(1)
    logits = rng.normal(size=(1, 4, 3)).astype(np.float32)  # labels 0, 1; blank 2
    log_probs = logits[0] - np.log(np.exp(logits[0]).sum(-1, keepdims=True))
    target = (0, 0)
    total = 0.0
    for path in itertools.product(range(3), repeat=4):
        collapsed = [c for i, c in enumerate(path) if c != 2 and (i == 0 or c != path[i - 1])]
        if tuple(collapsed) == target:
            total += np.exp(sum(log_probs[t, c] for t, c in enumerate(path)))
    for sparse in (True, False):
        losses, feasible = ctc_losses(tf.constant([target]), tf.constant([2]),
                                      tf.constant(logits), tf.constant([4]), sparse)
        assert bool(feasible[0])
        assert float(losses[0]) == pytest.approx(-np.log(total), rel=1e-4)


def test_frames_needed_counts_the_blank_between_repeats():
    assert frames_needed([]) == 0
    assert frames_needed([3, 1, 4]) == 3
    assert frames_needed([1, 1, 2, 2, 2]) == 8


def test_a_cpu_takes_the_sparse_kernel():
    if tf.config.list_logical_devices("GPU"):
        pytest.skip("a GPU is visible: the dense path is the one chosen")
    assert use_sparse_labels()
