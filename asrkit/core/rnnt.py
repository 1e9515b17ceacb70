"""The RNN-T (transducer) loss of a batch, per utterance, exact: what a transducer objective
trains on. The joint network's logits ``[batch, T, U+1, V]`` score, at each cell ``(t, u)`` of
the lattice (frame ``t``, ``u`` labels emitted), the blank (to frame ``t+1``) and the next label
(to ``u+1``); the loss is ``-log`` of the sum over every path from ``(0, 0)`` through the final
blank at ``(T_b - 1, U_b)``, each utterance over its own lengths.

Three ways in, the same losses and gradients:

- :func:`rnnt_loss`: from the whole joint (the log-softmax fused: :func:`gathered_logprobs`);
- :func:`rnnt_loss_from_gathered`: from the only two log-probabilities it reads, the blank's
  ``[batch, T, U+1]`` and the next label's ``[batch, T, U]``;
- :func:`gathered_logprobs_in_chunks` then :func:`rnnt_loss_from_gathered`: the joint computed
  and differentiated a chunk of frames at a time, never whole. The one for training with a
  real vocabulary (below).

**The recursion.** A loop over the ``U+1`` label positions, each step a whole column over time:
within a column the recursion over time has a closed form, a cumulative log-sum-exp (see
:func:`_alpha`). ``U+1`` steps, against ``T+U`` for the textbook loop over anti-diagonals
``t+u = n``, and ``U`` is the short side (about 40 subword pieces to 200 frames of 8 s at
40 ms). Loss and gradient of the lattice of 8 such utterances (``B=8, T=200, U=40``), on the
2-core CPU, in a ``tf.function``: 13 ms; anti-diagonals 46 ms. Under XLA (``jit_compile``) the
columns work but take 60 ms, where anti-diagonals take 9: XLA makes a cumulative sum a window
reduction, quadratic in ``T``. asrkit compiles nothing with XLA; one that does should revisit.
The gradient comes from forward and backward variables (:func:`_beta`, :func:`_occupancies`),
as warp-transducer and torchaudio compute it: 25 % faster than differentiating the loop, and
the backward variables are computed only when a gradient is asked for. The lattice is in
float64 whatever the logits (explained at :func:`_padded`); the joint's log-softmax in float32,
even for bfloat16 or float16 logits, as mixed precision needs.

**Memory.** With ``N = batch x T x (U+1)`` cells, ``V`` classes and ``s`` bytes a logit (4, or 2
in mixed precision), the whole joint costs, besides its hidden activations:

- a plain ``tf.nn.log_softmax`` then gathers: the logits ``N V s`` and the log-softmax ``4 N V``
  kept from the forward pass to the backward, and then ``4 N V`` or more of gradient;
- :func:`rnnt_loss` (fused): the logits ``N V s`` kept, then a softmax and a gradient
  ``8 N V`` in the backward pass: peak about ``N V (s + 8)``;
- in chunks of ``c`` frames: the same with ``N_c = batch x c x (U+1)`` for ``N``, the joint's
  activations of one chunk, plus about ``50 N`` bytes for the lattice (the gathered
  log-probabilities, their gradients, the float64 forward and backward variables).

Measured (``benchmarks/bench_rnnt.py``, a joint of 256 units, growth of peak RSS in a step with
its gradient to the joint's inputs and weights): V=256, naive 602 MiB, fused 233 MiB, chunks
of 20 frames 54 MiB, time 0.58 / 0.45 / 0.48 s; V=30: 227 / 192 / 35 MiB, 0.25 / 0.15 / 0.18 s.

**Utterances that cannot be aligned.** One needs a frame: without, its loss is 0, it gets no
gradient, and it is marked (as :mod:`asrkit.core.ctc` marks its own). One without labels is
aligned by blanks alone. Padding, of the logits or of the labels, changes no loss and gets no
gradient (it must be finite).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tensorflow as tf

#: The log of zero, kept finite: ``-inf`` minus ``-inf`` is NaN, in the cumulative sums below and
#: in their gradients, and a cell no path reaches must cost nothing rather than poison its batch.
LOG_ZERO = -1e30


def gathered_logprobs(logits: tf.Tensor, labels: tf.Tensor,
                      blank: int = 0) -> tuple[tf.Tensor, tf.Tensor]:
    """The two log-probabilities the loss reads from the joint ``logits`` ``[batch, T, U+1, V]``:
    of the blank at every cell ``[batch, T, U+1]``, and of the next label ``labels[:, u]`` at
    every cell ``(t, u)`` with ``u < U``, ``[batch, T, U]``. In float32 whatever the logits' type.
    Every label, padding included, must be a class (:func:`rnnt_loss` makes padding the blank);
    ``blank`` counts from the end when negative.

    Fused: the log-softmax over ``V`` is never stored. The forward pass keeps only the
    normaliser ``[batch, T, U+1]``; the backward pass recomputes the softmax once to write the
    gradient. A plain ``tf.nn.log_softmax`` keeps its ``[batch, T, U+1, V]`` output alive from
    the forward pass to the backward pass, beside the logits themselves."""
    import tensorflow as tf

    labels = tf.cast(labels, tf.int32)
    blank = _blank_class(blank, logits)

    @tf.custom_gradient
    def fused(logits: tf.Tensor) -> tuple[tuple[tf.Tensor, tf.Tensor], object]:
        norm = tf.reduce_logsumexp(tf.cast(logits, tf.float32), axis=-1)
        indices = _label_indices(labels, tf.shape(logits)[1])
        blank_logprobs = tf.cast(logits[..., blank], tf.float32) - norm
        label_logprobs = (tf.cast(tf.gather_nd(logits, indices, batch_dims=2), tf.float32)
                          - norm[:, :, :-1])

        def gradient(blank_grad: tf.Tensor, label_grad: tf.Tensor) -> tf.Tensor:
            # d log p_k / d logit_j = [j == k] - softmax_j: each cell's softmax, scaled by all
            # the gradient its two log-probabilities received, then the two one-hot parts.
            blank_grad = tf.zeros_like(norm) if blank_grad is None else blank_grad
            label_grad = tf.zeros_like(label_logprobs) if label_grad is None else label_grad
            total = blank_grad + tf.pad(label_grad, [[0, 0], [0, 0], [0, 1]])
            softmax = tf.exp(tf.cast(logits, tf.float32) - norm[..., None])
            grad = tf.tensor_scatter_nd_add(-softmax * total[..., None],
                                            _cell_indices(indices, blank), tf.concat(
                                                [tf.reshape(label_grad, [-1]),
                                                 tf.reshape(blank_grad, [-1])], 0))
            return tf.cast(grad, logits.dtype)

        return (blank_logprobs, label_logprobs), gradient

    return fused(logits)


def gathered_logprobs_in_chunks(
        joint: Callable[[tf.Tensor, tf.Tensor], tf.Tensor], encoded: tf.Tensor,
        predicted: tf.Tensor, labels: tf.Tensor, frames_per_chunk: int,
        blank: int = 0) -> tuple[tf.Tensor, tf.Tensor]:
    """:func:`gathered_logprobs` of ``joint(encoded, predicted)`` without ever holding the whole
    joint: ``joint`` maps frames of the encoder's output ``[batch, frames, ...]`` and the
    prediction network's ``predicted`` ``[batch, U+1, ...]`` to logits ``[batch, frames, U+1,
    V]``, and is called on ``frames_per_chunk`` frames at a time, once forward and once more
    backward (its activations are recomputed rather than kept). The gradient reaches
    ``encoded``, ``predicted`` and the variables ``joint`` reads, exactly as without chunks.

    Why: the joint is the transducer's memory cost, ``batch x T x (U+1) x V`` logits and as
    many activations of its hidden layer, where everything else is ``batch x T x (U+1)``.
    Computing and differentiating it a chunk at a time bounds that to one chunk, for the price
    of running the joint's forward pass twice. One chunk at a time, strictly: the loops over
    them run no two iterations at once (TensorFlow's default runs up to ten, and holds as many
    chunks)."""
    import tensorflow as tf

    labels = tf.cast(labels, tf.int32)
    frames = tf.shape(encoded)[1]
    starts = tf.range(0, tf.maximum(frames, 1), frames_per_chunk)

    def chunk_of(tensor: tf.Tensor, index: tf.Tensor) -> tf.Tensor:
        return tensor[:, starts[index]:starts[index] + frames_per_chunk]

    def logprobs(chunk: tf.Tensor, predicted: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        return gathered_logprobs(joint(chunk, predicted), labels, blank)

    @tf.custom_gradient
    def chunked(encoded: tf.Tensor, predicted: tf.Tensor) -> tuple[tuple, object]:
        def forward(index: tf.Tensor, blanks: tf.TensorArray,
                    labelled: tf.TensorArray) -> tuple:
            blank_chunk, label_chunk = logprobs(chunk_of(encoded, index), predicted)
            return (index + 1, blanks.write(index, _time_major(blank_chunk)),
                    labelled.write(index, _time_major(label_chunk)))

        _, blanks, labelled = tf.while_loop(
            lambda index, *_: index < tf.size(starts), forward,
            (0, _chunk_array(tf.size(starts)), _chunk_array(tf.size(starts))),
            parallel_iterations=1)

        def gradient(blank_grad: tf.Tensor, label_grad: tf.Tensor,
                     variables: list | None = None) -> tuple:
            return _chunked_gradient(logprobs, encoded, predicted, chunk_of, tf.size(starts),
                                     (blank_grad, label_grad), variables or [])

        return (_batch_major(blanks.concat()), _batch_major(labelled.concat())), gradient

    return chunked(encoded, predicted)


def _chunked_gradient(logprobs: Callable, encoded: tf.Tensor, predicted: tf.Tensor,
                      chunk_of: Callable, chunks: tf.Tensor, upstream: tuple[tf.Tensor, tf.Tensor],
                      variables: list) -> tuple:
    """The backward pass of :func:`gathered_logprobs_in_chunks`: each chunk's joint computed
    again under a tape and differentiated at once, its gradients summed over the chunks (for
    ``predicted`` and the variables) or laid side by side (for ``encoded``)."""
    import tensorflow as tf

    def backward(index: tf.Tensor, encoded_grads: tf.TensorArray, predicted_grad: tf.Tensor,
                 variable_grads: list) -> tuple:
        chunk = chunk_of(encoded, index)
        with tf.GradientTape() as tape:
            tape.watch([chunk, predicted])
            outputs = logprobs(chunk, predicted)
        grads = tape.gradient(outputs, [chunk, predicted, *variables],
                              output_gradients=[chunk_of(g, index) for g in upstream],
                              unconnected_gradients=tf.UnconnectedGradients.ZERO)
        chunk_grad, predicted_part, *variable_parts = [tf.convert_to_tensor(g) for g in grads]
        return (index + 1, encoded_grads.write(index, _time_major(chunk_grad)),
                predicted_grad + predicted_part,
                [a + g for a, g in zip(variable_grads, variable_parts, strict=True)])

    _, encoded_grads, predicted_grad, variable_grads = tf.while_loop(
        lambda index, *_: index < chunks, backward,
        (0, _chunk_array(chunks, encoded.dtype), tf.zeros_like(predicted),
         [tf.zeros_like(v) for v in variables]), parallel_iterations=1)
    return (_batch_major(encoded_grads.concat()), predicted_grad), variable_grads


def _chunk_array(chunks: tf.Tensor, dtype: tf.DType | None = None) -> tf.TensorArray:
    """A TensorArray of one time-major chunk an element (of varied length: the last is short)."""
    import tensorflow as tf

    return tf.TensorArray(dtype or tf.float32, size=chunks, infer_shape=False)


def _time_major(tensor: tf.Tensor) -> tf.Tensor:
    """Time first (``TensorArray.concat`` joins on the first axis)."""
    import tensorflow as tf

    return tf.transpose(tensor, tf.concat([[1, 0], tf.range(2, tf.rank(tensor))], 0))


def _batch_major(tensor: tf.Tensor) -> tf.Tensor:
    """Undoes :func:`_time_major`."""
    return _time_major(tensor)


def _label_indices(labels: tf.Tensor, frames: tf.Tensor) -> tf.Tensor:
    """``[batch, T, U, 2]``: for cell ``(t, u)``, the pair ``(u, labels[:, u])`` that
    ``gather_nd(..., batch_dims=2)`` reads from a ``[batch, T, U+1, V]`` tensor."""
    import tensorflow as tf

    steps = tf.shape(labels)[1]
    pairs = tf.stack([tf.broadcast_to(tf.range(steps)[None], tf.shape(labels)), labels], -1)
    return tf.broadcast_to(pairs[:, None], [tf.shape(labels)[0], frames, steps, 2])


def _blank_class(blank: int, logits: tf.Tensor) -> tf.Tensor:
    """The blank's class among the logits' ``V``, counted from the end when negative (``-1``:
    the last, where asrkit's CTC models have it)."""
    import tensorflow as tf

    return tf.math.floormod(blank, tf.shape(logits)[-1])


def _cell_indices(label_indices: tf.Tensor, blank: tf.Tensor) -> tf.Tensor:
    """Full ``[batch, t, u, class]`` indices into the joint: first those of the labels (one a
    cell ``u < U``), then those of the blank (one a cell), for ``tensor_scatter_nd_add``."""
    import tensorflow as tf

    shape = tf.shape(label_indices)
    batch, frames, steps = shape[0], shape[1], shape[2]
    b, t = tf.meshgrid(tf.range(batch), tf.range(frames), indexing="ij")
    at_labels = tf.concat([tf.broadcast_to(tf.stack([b, t], -1)[:, :, None],
                                           [batch, frames, steps, 2]), label_indices], -1)
    b, t, u = tf.meshgrid(tf.range(batch), tf.range(frames), tf.range(steps + 1), indexing="ij")
    at_blank = tf.stack([b, t, u, tf.fill(tf.shape(u), blank)], -1)
    return tf.concat([tf.reshape(at_labels, [-1, 4]), tf.reshape(at_blank, [-1, 4])], 0)


def rnnt_loss(logits: tf.Tensor, labels: tf.Tensor, logit_lengths: tf.Tensor,
              label_lengths: tf.Tensor, blank: int = 0) -> tuple[tf.Tensor, tf.Tensor]:
    """Per-utterance RNN-T losses (negative log-likelihoods, ``[batch]``, float32) of the joint
    network's unnormalised ``logits`` ``[batch, T, U+1, V]`` against ``labels`` ``[batch, U]``
    (padded; ``label_lengths`` of them count), over ``logit_lengths`` frames each; and whether
    each utterance can be aligned at all (it needs a frame). One that cannot has loss 0 and no
    gradient. Padding, of the logits and of the labels, changes no loss and gets no gradient."""
    import tensorflow as tf

    labels = clamped_labels(labels, label_lengths, _blank_class(blank, logits))
    blank_logprobs, label_logprobs = gathered_logprobs(logits, labels, blank)
    return rnnt_loss_from_gathered(blank_logprobs, label_logprobs, logit_lengths,
                                   tf.cast(label_lengths, tf.int32))


def clamped_labels(labels: tf.Tensor, label_lengths: tf.Tensor, blank: tf.Tensor) -> tf.Tensor:
    """``labels`` with the padding made the blank: padding may be any number (-1 is common),
    and gathering a class that does not exist fails on a CPU."""
    import tensorflow as tf

    labels = tf.cast(labels, tf.int32)
    return tf.where(tf.sequence_mask(label_lengths, tf.shape(labels)[1]), labels, blank)


def rnnt_loss_from_gathered(blank_logprobs: tf.Tensor, label_logprobs: tf.Tensor,
                            logit_lengths: tf.Tensor,
                            label_lengths: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """:func:`rnnt_loss` from the two log-probability tensors it reads (see
    :func:`gathered_logprobs`): ``blank_logprobs`` ``[batch, T, U+1]`` and ``label_logprobs``
    ``[batch, T, U]``. Returns the losses ``[batch]`` and which utterances can be aligned."""
    import tensorflow as tf

    blank_logprobs = tf.cast(blank_logprobs, tf.float32)
    label_logprobs = tf.cast(label_logprobs, tf.float32)
    frames = tf.cast(logit_lengths, tf.int32)
    labelled = tf.cast(label_lengths, tf.int32)
    feasible = frames > 0
    losses = _negative_log_likelihood(blank_logprobs, label_logprobs, frames, labelled)
    return tf.where(feasible, losses, 0.0), feasible


def _negative_log_likelihood(blank_logprobs: tf.Tensor, label_logprobs: tf.Tensor,
                             frames: tf.Tensor, labelled: tf.Tensor) -> tf.Tensor:
    """``-log P(labels)`` by the forward variables; its gradient from forward and backward
    variables together, computed only when asked for."""
    import tensorflow as tf

    @tf.custom_gradient
    def nll(blank: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, object]:
        padded_blank, padded_label = _padded(blank, label)
        alpha = _alpha(padded_blank, padded_label)
        total = _at_end(alpha, frames, labelled) + _at_end(padded_blank, frames, labelled)

        def gradient(upstream: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            beta = _beta(padded_blank, padded_label, frames, labelled)
            blank_grad, label_grad = _occupancies(alpha, beta, padded_blank, padded_label, total,
                                                  frames, labelled)
            scale = -tf.where(frames > 0, upstream, 0.0)[:, None, None]
            shape = tf.shape(blank)
            return (scale * tf.cast(blank_grad[:, :shape[1], :shape[2]], tf.float32),
                    scale * tf.cast(label_grad[:, :shape[1], :shape[2] - 1], tf.float32))

        return -tf.cast(total, tf.float32), gradient

    return nll(blank_logprobs, label_logprobs)


def _padded(blank: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """The two lattices in float64, one frame and one label position longer, of log-probability
    0: past every utterance's end, so never read for it. In float64 because the closed form of
    :func:`_alpha` subtracts sums of hundreds of log-probabilities, which float32 cannot do to
    better than about 1e-3, a gradient's error that float64 makes 1e-7 at no cost in speed
    (measured). The extra cells give the loops one column even when no utterance has labels,
    and the lookups one frame even when none has frames."""
    import tensorflow as tf

    return (tf.pad(tf.cast(blank, tf.float64), [[0, 0], [0, 1], [0, 1]]),
            tf.pad(tf.cast(label, tf.float64), [[0, 0], [0, 1], [0, 1]]))


def _at_end(lattice: tf.Tensor, frames: tf.Tensor, labelled: tf.Tensor) -> tf.Tensor:
    """Each utterance's value at its last cell ``(T_b - 1, U_b)`` of a ``[batch, T, U+1]``
    lattice (at frame 0 for an utterance without frames, whose loss is then discarded)."""
    import tensorflow as tf

    return tf.gather_nd(lattice, tf.stack([tf.maximum(frames - 1, 0), labelled], 1), batch_dims=1)


def _alpha(blank: tf.Tensor, label: tf.Tensor) -> tf.Tensor:
    """The forward variables ``[batch, T, U+1]``: ``alpha[t, u]`` is the log-probability of
    all paths from ``(0, 0)`` that reach cell ``(t, u)``.

    A loop over the ``U+1`` label positions, each step a whole column over time at once.
    Within column ``u`` the recursion ``a[t] = logaddexp(a[t-1] + blank[t-1], e[t])``, with
    ``e[t] = alpha[t, u-1] + label[t, u-1]`` from the column before, is solved in closed form:
    with ``s[t]`` the sum of the blanks before ``t``, ``a[t] = s[t] + logcumsumexp(e - s)[t]``.
    The cells beyond an utterance's own end are computed too (from its padding) and never read
    for it: a cell depends only on cells before it in time and in labels."""
    import tensorflow as tf

    stay = tf.math.cumsum(tf.transpose(blank, [2, 0, 1]), axis=2, exclusive=True)

    def column(previous: tf.Tensor, inputs: tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
        emitted, staying = inputs
        return staying + tf.math.cumulative_logsumexp(previous + emitted - staying, axis=1)

    rest = tf.scan(column, (tf.transpose(label, [2, 0, 1]), stay[1:]), initializer=stay[0])
    return tf.transpose(tf.concat([stay[:1], rest], 0), [1, 2, 0])


def _beta(blank: tf.Tensor, label: tf.Tensor, frames: tf.Tensor,
          labelled: tf.Tensor) -> tf.Tensor:
    """The backward variables ``[batch, T, U+1]``: ``beta[t, u]`` is the log-probability of
    all paths from cell ``(t, u)`` to the end of its utterance, the final blank included.

    The same column loop as :func:`_alpha`, backwards, from each utterance's own end: cells
    past it hold :data:`LOG_ZERO`, the last cell ``(T_b - 1, U_b)`` the final blank."""
    import tensorflow as tf

    steps = tf.shape(blank)[2]
    time = tf.range(tf.shape(blank)[1])[None]
    in_time = time < frames[:, None]
    zero = tf.constant(LOG_ZERO, blank.dtype)
    final = tf.where(tf.equal(time, frames[:, None] - 1),
                     _at_end(blank, frames, labelled)[:, None], zero)
    # A blank at the last frame leaves the lattice (the final one is in ``final``).
    onward = tf.where((time < frames[:, None] - 1)[:, :, None], blank, tf.zeros_like(blank))
    stay = tf.math.cumsum(tf.transpose(onward, [2, 0, 1]), axis=2, exclusive=True)
    emitted = tf.transpose(tf.pad(label, [[0, 0], [0, 0], [0, 1]]), [2, 0, 1])

    def column(following: tf.Tensor,
               inputs: tuple[tf.Tensor, tf.Tensor, tf.Tensor]) -> tf.Tensor:
        u, emitting, staying = inputs
        entry = tf.where((u < labelled)[:, None], following + emitting,
                         tf.where(tf.equal(u, labelled)[:, None], final, zero))
        entry = tf.where(in_time, entry, zero)
        betas = tf.math.cumulative_logsumexp(entry + staying, axis=1, reverse=True) - staying
        betas.set_shape(following.shape)  # as the loop needs it, which `where` may blur
        return betas

    columns = tf.scan(column, (tf.range(steps), emitted, stay),
                      initializer=tf.fill(tf.shape(final), zero), reverse=True)
    return tf.transpose(columns, [1, 2, 0])


def _occupancies(alpha: tf.Tensor, beta: tf.Tensor, blank: tf.Tensor, label: tf.Tensor,
                 total: tf.Tensor, frames: tf.Tensor,
                 labelled: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """How much of the probability passes through each blank and each label transition:
    ``exp(alpha + transition + beta(after) - log P)``, the gradient of ``log P`` with respect
    to that transition's log-probability; 0 outside each utterance."""
    import tensorflow as tf

    shape = tf.shape(blank)
    time = tf.range(shape[1])[None, :, None]
    step = tf.range(shape[2])[None, None, :]
    in_time = time < frames[:, None, None]
    end = tf.logical_and(tf.equal(time, frames[:, None, None] - 1),
                         tf.equal(step, labelled[:, None, None]))
    zero = tf.constant(LOG_ZERO, blank.dtype)
    after_blank = tf.where(end, tf.zeros_like(beta), tf.pad(
        beta[:, 1:], [[0, 0], [0, 1], [0, 0]], constant_values=LOG_ZERO))
    blank_valid = tf.logical_and(in_time, step <= labelled[:, None, None])
    label_valid = tf.logical_and(in_time, step[:, :, :-1] < labelled[:, None, None])
    norm = total[:, None, None]
    blank_occupancy = tf.exp(tf.where(blank_valid, alpha + blank + after_blank - norm, zero))
    label_occupancy = tf.exp(tf.where(label_valid, alpha[:, :, :-1] + label + beta[:, :, 1:]
                                      - norm, zero))
    return blank_occupancy, label_occupancy
