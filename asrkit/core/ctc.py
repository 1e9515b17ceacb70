"""The CTC loss of a batch, per utterance: what training, gradient accumulation and evaluation
all compute, in one place.

Why it is more than a call to ``tf.nn.ctc_loss``:

- **Speed on a CPU.** Given dense padded labels, TensorFlow computes CTC with its generic
  implementation, a loop of graph ops over the frames; given a ``SparseTensor`` it runs its C++
  kernel (the "significantly faster" path of its documentation). On a 2-core CPU the dense loss
  and its gradient took about a third of a ``ds2`` training step. Labels are therefore made
  sparse when no GPU is visible. On a GPU the sparse path would select cuDNN's CTC, which has
  limits of its own (at most 256 labels an utterance) and no GPU to be tested on here, so GPUs
  keep the dense path they have trained with.
- **Utterances CTC cannot align.** An utterance needs an output frame per label and one more
  between each pair of equal neighbours (the blank that keeps "ll" from collapsing to "l").
  With fewer frames the C++ kernel fails the whole batch and the dense loss returns a huge
  finite loss whose gradient wrecks the weights. Such an utterance is scored against no labels
  instead (its loss is then ignored) and marked, so that the caller can leave it out and name it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tensorflow as tf


def frames_needed(labels: Sequence[int]) -> int:
    """Output frames CTC needs for ``labels``: one a label, one more for each repeat."""
    return len(labels) + sum(a == b for a, b in itertools.pairwise(labels))


def use_sparse_labels() -> bool:
    """Whether the loss takes TensorFlow's C++ kernel: when no GPU is visible (see above)."""
    import tensorflow as tf

    return not tf.config.list_logical_devices("GPU")


def ctc_losses(labels: tf.Tensor, label_lengths: tf.Tensor, logits: tf.Tensor,
               logit_lengths: tf.Tensor,
               sparse: bool | None = None) -> tuple[tf.Tensor, tf.Tensor]:
    """Per-utterance CTC losses of ``logits`` ``[batch, time, classes]`` (blank last) against
    dense ``labels`` ``[batch, max_labels]`` of ``label_lengths``, and whether each utterance
    can be aligned at all. An utterance that cannot has loss 0 and no gradient.

    ``sparse``: the C++ kernel (True) or TensorFlow's dense implementation (False); by default
    :func:`use_sparse_labels`. Both give the same losses and gradients."""
    import tensorflow as tf

    labels = tf.convert_to_tensor(labels, tf.int32)
    label_lengths = tf.cast(label_lengths, tf.int32)
    logit_lengths = tf.cast(logit_lengths, tf.int32)
    valid = tf.sequence_mask(label_lengths, tf.shape(labels)[1])
    repeats = tf.reduce_sum(tf.cast(
        tf.logical_and(tf.equal(labels[:, 1:], labels[:, :-1]), valid[:, 1:]), tf.int32), 1)
    feasible = logit_lengths >= label_lengths + repeats
    if not (use_sparse_labels() if sparse is None else sparse):
        losses = tf.nn.ctc_loss(labels, logits, tf.where(feasible, label_lengths, 0),
                                logit_lengths, logits_time_major=False, blank_index=-1)
        return tf.where(feasible, losses, 0.0), feasible
    # The kernel refuses an utterance without labels, or without the frames for them: those
    # are scored against one stand-in label (their loss replaced below).
    empty = tf.equal(label_lengths, 0)
    stand_in = tf.logical_or(empty, tf.logical_not(feasible))
    labels = tf.pad(labels, [[0, 0], [0, 1]])  # a label to stand in, even in an empty batch
    indices = tf.where(tf.sequence_mask(tf.where(stand_in, 1, label_lengths),
                                        tf.shape(labels)[1]))
    sparse_labels = tf.SparseTensor(indices, tf.gather_nd(labels, indices),
                                    tf.shape(labels, out_type=tf.int64))
    losses = tf.nn.ctc_loss(sparse_labels, logits, None,
                            tf.where(stand_in, tf.maximum(logit_lengths, 1), logit_lengths),
                            logits_time_major=False, blank_index=-1)
    # No labels: the one path is all blanks.
    frames = tf.sequence_mask(logit_lengths, tf.shape(logits)[1])
    blanks = -tf.reduce_sum(tf.where(frames, tf.nn.log_softmax(logits)[..., -1], 0.0), 1)
    return tf.where(feasible, tf.where(empty, blanks, losses), 0.0), feasible
