"""The RNN-T loss (``asrkit.core.rnnt``): its losses and gradients are the definition's (the sum
over every alignment, on tiny batches) and an independent float64 forward-backward's (on larger
ones); padding changes nothing; the fused, gathered and chunked forms agree; bfloat16 logits give
a float32 loss; and it runs in a ``tf.function`` with dynamic shapes, under XLA and on towers.

The references here are numpy, written from the definition. ``tests/test_rnnt_reference.py``
compares the loss with a published implementation too, torchaudio's, which needs PyTorch and so
runs in an environment of its own (no RNN-T package on PyPI runs beside TensorFlow 2.16+ without
PyTorch: ``rnnt`` pins TensorFlow 2.0; ``warprnnt-numba``, ``optimized-transducer`` and
``fast-rnnt`` need PyTorch; ``last-asr`` needs JAX and Flax)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from asrkit.core.rnnt import (
    gathered_logprobs,
    gathered_logprobs_in_chunks,
    rnnt_loss,
    rnnt_loss_from_gathered,
)

ROOT = Path(__file__).resolve().parent.parent


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def brute_force(logits: np.ndarray, labels: np.ndarray,
                blank: int = 0) -> tuple[float, np.ndarray]:
    """The loss of one unpadded utterance (``logits`` ``[T, U+1, V]``) and its gradient, from
    the definition: every alignment (an order of the T blanks and U labels, the last a blank),
    its probability the product of its steps' softmax probabilities; the gradient of each
    path's log-probability is, at each step's cell, its class's one-hot minus the softmax."""
    frames, steps = logits.shape[0], len(labels)
    logprobs = log_softmax(logits.astype(np.float64))
    total, gradient = 0.0, np.zeros_like(logprobs)
    for places in itertools.combinations(range(frames + steps - 1), steps):
        t = u = 0
        logprob, path_gradient = 0.0, np.zeros_like(logprobs)
        for i in range(frames + steps):
            emitted = labels[u] if i in places else blank
            logprob += logprobs[t, u, emitted]
            path_gradient[t, u] -= np.exp(logprobs[t, u])
            path_gradient[t, u, emitted] += 1
            t, u = (t, u + 1) if i in places else (t + 1, u)
        total += np.exp(logprob)
        gradient += np.exp(logprob) * path_gradient
    return -np.log(total), -gradient / total


def alpha_beta(logits: np.ndarray, labels: np.ndarray,
               blank: int = 0) -> tuple[float, np.ndarray]:
    """The same as :func:`brute_force` by the textbook forward-backward, cell by cell in
    float64 (a different algorithm from the column loop under test)."""
    frames, cells = logits.shape[0], logits.shape[1]
    steps = cells - 1
    logprobs = log_softmax(logits.astype(np.float64))
    blanks = logprobs[:, :, blank]
    emits = logprobs[:, np.arange(steps), labels] if steps else np.zeros((frames, 0))
    alpha = np.full((frames, cells), -np.inf)
    beta = np.full((frames, cells), -np.inf)
    for t, u in itertools.product(range(frames), range(cells)):
        alpha[t, u] = 0.0 if t == u == 0 else np.logaddexp(
            alpha[t - 1, u] + blanks[t - 1, u] if t else -np.inf,
            alpha[t, u - 1] + emits[t, u - 1] if u else -np.inf)
    for t, u in itertools.product(reversed(range(frames)), reversed(range(cells))):
        beta[t, u] = blanks[t, u] if (t, u) == (frames - 1, steps) else np.logaddexp(
            beta[t + 1, u] + blanks[t, u] if t < frames - 1 else -np.inf,
            beta[t, u + 1] + emits[t, u] if u < steps else -np.inf)
    total = alpha[-1, -1] + blanks[-1, -1]
    after_blank = np.vstack([beta[1:], np.full((1, cells), -np.inf)])
    after_blank[-1, -1] = 0.0
    through_blank = np.exp(alpha + blanks + after_blank - total)
    through_label = np.exp(alpha[:, :-1] + emits + beta[:, 1:] - total)
    gradient = -np.exp(logprobs) * (through_blank + np.pad(through_label, [(0, 0), (0, 1)]))[
        ..., None]
    gradient[:, :, blank] += through_blank
    for u in range(steps):
        gradient[:, u, labels[u]] += through_label[:, u]
    return -total, -gradient


def random_batch(seed: int, frames: list[int], steps: list[int], classes: int,
                 scale: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Logits and labels padded to the longest utterance (padding random too)."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(len(frames), max(frames), max(steps) + 1, classes)) * scale
    labels = rng.integers(1, classes, (len(frames), max(steps)))
    return (logits.astype(np.float32), labels.astype(np.int32), np.array(frames, np.int32),
            np.array(steps, np.int32))


def losses_and_gradients(logits: np.ndarray, labels: np.ndarray, frames: np.ndarray,
                         steps: np.ndarray, loss=rnnt_loss) -> tuple[np.ndarray, ...]:
    """The losses, the feasibility marks and the gradient of the summed losses."""
    logits = tf.constant(logits)
    with tf.GradientTape() as tape:
        tape.watch(logits)
        losses, feasible = loss(logits, tf.constant(labels), tf.constant(frames),
                                tf.constant(steps))
        total = tf.reduce_sum(losses)
    gradient = tape.gradient(total, logits)
    return losses.numpy(), feasible.numpy(), tf.cast(gradient, tf.float32).numpy()


def expected(reference, logits: np.ndarray, labels: np.ndarray, frames: np.ndarray,
             steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``reference`` on each utterance unpadded; the gradient 0 in the padding."""
    losses, gradient = [], np.zeros(logits.shape)
    for b, (length, count) in enumerate(zip(frames, steps, strict=True)):
        loss, grad = reference(logits[b, :length, :count + 1], labels[b, :count])
        losses.append(loss)
        gradient[b, :length, :count + 1] = grad
    return np.array(losses), gradient


@pytest.mark.parametrize(("seed", "frames", "steps"), [
    (0, [4, 4, 4], [3, 3, 3]),
    (1, [4, 1, 3, 1, 2], [3, 2, 0, 0, 1]),  # padded: one frame, no labels, both
    (2, [2, 4, 3], [3, 1, 2]),              # more labels than frames
])
def test_tiny_batches_match_the_sum_over_every_alignment(seed, frames, steps):
    batch = random_batch(seed, frames, steps, classes=5, scale=2.0)
    losses, feasible, gradient = losses_and_gradients(*batch)
    want_losses, want_gradient = expected(brute_force, *batch)
    assert feasible.all()
    np.testing.assert_allclose(losses, want_losses, rtol=1e-4)
    np.testing.assert_allclose(gradient, want_gradient, rtol=1e-4, atol=1e-6)


def test_the_float64_reference_is_the_sum_over_every_alignment():
    batch = random_batch(3, [4, 1, 3], [3, 2, 0], classes=5, scale=2.0)
    for got, want in zip(expected(alpha_beta, *batch), expected(brute_force, *batch),
                         strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_larger_batches_match_an_independent_float64_forward_backward():
    """T = 50, U = 20, V = 30, mixed lengths: the sums over alignments are too many to list."""
    batch = random_batch(4, [50, 37, 12, 50], [20, 9, 15, 0], classes=30, scale=2.0)
    losses, _, gradient = losses_and_gradients(*batch)
    want_losses, want_gradient = expected(alpha_beta, *batch)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-6)
    np.testing.assert_allclose(gradient, want_gradient, rtol=1e-4, atol=1e-6)


def test_padding_changes_no_loss_and_gets_no_gradient():
    logits, labels, frames, steps = random_batch(5, [6, 3, 5], [2, 3, 0], classes=7)
    rng = np.random.default_rng(6)
    garbled, garbled_labels = logits.copy(), labels.copy()
    for b, (length, count) in enumerate(zip(frames, steps, strict=True)):
        garbled[b, length:] = rng.normal(size=garbled[b, length:].shape) * 1000
        garbled[b, :, count + 1:] = rng.normal(size=garbled[b, :, count + 1:].shape) * 1000
        garbled_labels[b, count:] = -1  # not even a class
    clean = losses_and_gradients(logits, labels, frames, steps)
    noisy = losses_and_gradients(garbled, garbled_labels, frames, steps)
    np.testing.assert_array_equal(clean[0], noisy[0])
    np.testing.assert_array_equal(clean[2], noisy[2])
    assert not noisy[2][1, 3:].any() and not noisy[2][2, :, 1:].any()


def test_the_blank_may_be_any_class_the_last_one_counted_from_the_end():
    logits, labels, frames, steps = random_batch(16, [5, 3], [3, 2], classes=6)
    labels = labels - 1  # labels 0..4, the blank 5
    want_losses, want_gradient = expected(lambda x, y: brute_force(x, y, blank=5), logits,
                                          labels, frames, steps)
    for blank in (5, -1):
        losses, _, gradient = losses_and_gradients(
            logits, labels, frames, steps,
            loss=lambda *x, blank=blank: rnnt_loss(*x, blank=blank))
        np.testing.assert_allclose(losses, want_losses, rtol=1e-5)
        np.testing.assert_allclose(gradient, want_gradient, rtol=1e-4, atol=1e-6)


def test_an_utterance_without_frames_is_marked_and_one_without_labels_is_all_blanks():
    logits, labels, frames, steps = random_batch(7, [0, 4, 3], [2, 0, 2], classes=6)
    losses, feasible, gradient = losses_and_gradients(logits, labels, frames, steps)
    assert feasible.tolist() == [False, True, True]
    assert losses[0] == 0.0 and not gradient[0].any()
    assert losses[1] == pytest.approx(-log_softmax(logits[1, :, 0])[:, 0].sum(), rel=1e-5)
    # A whole batch without frames (or without labels) is no error.
    losses, feasible, _ = losses_and_gradients(logits[:, :0], labels, frames * 0, steps)
    assert not feasible.any() and not losses.any()


def gathered_naively(logits, labels, frames, steps):
    """The plain way: a log-softmax over the whole joint, the two log-probabilities gathered."""
    logprobs = tf.nn.log_softmax(logits)
    cells = tf.broadcast_to(labels[:, None, :, None], tf.concat([tf.shape(logits)[:2],
                                                                  tf.shape(labels)[1:], [1]], 0))
    label_logprobs = tf.gather(logprobs[:, :, :-1], cells, batch_dims=3)[..., 0]
    return rnnt_loss_from_gathered(logprobs[..., 0], label_logprobs, frames, steps)


def test_the_fused_and_the_gathered_forms_give_the_same_losses_and_gradients():
    batch = random_batch(8, [9, 5, 7], [4, 4, 1], classes=11, scale=3.0)
    fused = losses_and_gradients(*batch)
    plain = losses_and_gradients(*batch, loss=gathered_naively)
    logits, labels = tf.constant(batch[0]), tf.constant(batch[1])
    blank_logprobs, label_logprobs = gathered_logprobs(logits, labels)
    logprobs = log_softmax(batch[0].astype(np.float64))
    np.testing.assert_allclose(blank_logprobs, logprobs[..., 0], atol=1e-5)
    np.testing.assert_allclose(label_logprobs, np.take_along_axis(
        logprobs[:, :, :-1], np.broadcast_to(batch[1][:, None, :, None],
                                             (*label_logprobs.shape, 1)), -1)[..., 0], atol=1e-5)
    np.testing.assert_allclose(fused[0], plain[0], rtol=1e-6)
    np.testing.assert_allclose(fused[2], plain[2], atol=1e-6)


def test_the_joint_in_chunks_gives_the_same_losses_and_gradients():
    """Chunks of 1 frame, of 3 (the last one short; in a ``tf.function`` with dynamic shapes),
    and of more than the utterances have; the joint a Keras layer whose weights get gradients."""
    rng = np.random.default_rng(9)
    encoded = tf.constant(rng.normal(size=(3, 7, 8)), tf.float32)
    predicted = tf.constant(rng.normal(size=(3, 4, 8)), tf.float32)
    labels = tf.constant(rng.integers(1, 6, (3, 3)), tf.int32)
    frames, steps = tf.constant([7, 4, 2]), tf.constant([3, 1, 0])
    dense = tf.keras.layers.Dense(6)

    def joint(encoded, predicted):
        return dense(tf.tanh(encoded[:, :, None] + predicted[:, None]))

    def step(encoded, predicted, chunk_frames):
        with tf.GradientTape() as tape:
            tape.watch([encoded, predicted])
            if chunk_frames:
                gathered = gathered_logprobs_in_chunks(joint, encoded, predicted, labels,
                                                       chunk_frames)
                losses, _ = rnnt_loss_from_gathered(*gathered, frames, steps)
            else:
                losses, _ = rnnt_loss(joint(encoded, predicted), labels, frames, steps)
        return losses, tape.gradient(losses, [encoded, predicted, *dense.trainable_variables])

    whole = step(encoded, predicted, 0)
    traced = tf.function(lambda e, p: step(e, p, 3), input_signature=[
        tf.TensorSpec([None, None, 8]), tf.TensorSpec([None, None, 8])])
    for losses, gradients in (step(encoded, predicted, 1), traced(encoded, predicted),
                              step(encoded, predicted, 10)):
        np.testing.assert_allclose(losses, whole[0], rtol=1e-6)
        for got, want in zip(gradients, whole[1], strict=True):
            np.testing.assert_allclose(got, want, atol=1e-6)


def test_bfloat16_logits_give_a_float32_loss_close_to_float32():
    batch = random_batch(10, [12, 9], [5, 3], classes=9)
    full = losses_and_gradients(*batch)
    rounded = tf.cast(tf.cast(batch[0], tf.bfloat16), tf.float32).numpy()
    as_float32 = losses_and_gradients(rounded, *batch[1:])
    logits = tf.cast(batch[0], tf.bfloat16)
    with tf.GradientTape() as tape:
        tape.watch(logits)
        losses, _ = rnnt_loss(logits, *(tf.constant(x) for x in batch[1:]))
        total = tf.reduce_sum(losses)
    gradient = tape.gradient(total, logits)
    assert losses.dtype == tf.float32 and gradient.dtype == tf.bfloat16
    # Computed in float32: as exact as float32 logits of the same (rounded) values...
    np.testing.assert_allclose(losses.numpy(), as_float32[0], rtol=1e-6)
    np.testing.assert_allclose(tf.cast(gradient, tf.float32), as_float32[2], atol=1e-2)
    # ...and close to the unrounded ones.
    np.testing.assert_allclose(losses.numpy(), full[0], rtol=1e-2)


def test_it_runs_in_a_tf_function_with_dynamic_shapes_without_retracing():
    traced = tf.function(losses_of_logits, input_signature=[
        tf.TensorSpec([None, None, None, None]), tf.TensorSpec([None, None], tf.int32),
        tf.TensorSpec([None], tf.int32), tf.TensorSpec([None], tf.int32)])
    for batch in (random_batch(11, [5, 3], [2, 2], 4), random_batch(12, [3, 6, 2], [0, 4, 1], 7),
                  random_batch(13, [4], [0], 3)):
        np.testing.assert_allclose(traced(*batch), losses_of_logits(*batch), rtol=1e-6)
    assert traced.experimental_get_tracing_count() == 1


def losses_of_logits(logits, labels, frames, steps):
    return rnnt_loss(logits, labels, frames, steps)[0]


def test_it_compiles_with_xla():
    batch = random_batch(14, [5, 3], [2, 0], classes=4)
    losses, _, gradient = losses_and_gradients(*batch)

    @tf.function(jit_compile=True)
    def step(logits, labels, frames, steps):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            losses, _ = rnnt_loss(logits, labels, frames, steps)
            total = tf.reduce_sum(losses)
        return losses, tape.gradient(total, logits)

    got_losses, got_gradient = step(*(tf.constant(x) for x in batch))
    np.testing.assert_allclose(got_losses, losses, rtol=1e-6)
    np.testing.assert_allclose(got_gradient, gradient, atol=1e-6)


TOWERS = textwrap.dedent("""\
    import json
    import numpy as np
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from asrkit.core.rnnt import rnnt_loss
    batch = [np.array(x, dtype) for x, dtype in zip(json.loads(input()), ("float32", "int32",
                                                                          "int32", "int32"))]
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])

    def replica(logits, labels, frames, steps):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            losses, _ = rnnt_loss(logits, labels, frames, steps)
            total = tf.reduce_sum(losses)
        return losses, tape.gradient(total, logits)

    data = strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices(tuple(batch)).batch(len(batch[0])))
    for distributed in data:
        losses, gradients = tf.function(lambda b: strategy.run(replica, args=b))(distributed)
    print(json.dumps({
        "replicas": strategy.num_replicas_in_sync,
        "losses": np.concatenate(strategy.experimental_local_results(losses)).tolist(),
        "gradient": np.concatenate(strategy.experimental_local_results(gradients)).tolist()}))
""")


def test_two_towers_compute_what_one_device_does():
    """Two logical CPUs under ``MirroredStrategy``, each half the batch (in a process of its
    own: logical devices are set before TensorFlow starts)."""
    batch = random_batch(15, [6, 4, 1, 5], [3, 1, 0, 2], classes=5)
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run([sys.executable, "-c", TOWERS], input=json.dumps(
        [x.tolist() for x in batch]), capture_output=True, text=True, env=environment,
        timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    towers = json.loads(done.stdout.strip().splitlines()[-1])
    losses, _, gradient = losses_and_gradients(*batch)
    assert towers["replicas"] == 2
    np.testing.assert_allclose(towers["losses"], losses, rtol=1e-6)
    np.testing.assert_allclose(towers["gradient"], gradient, atol=1e-6)
