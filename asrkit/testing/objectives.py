"""Contract checks for training objectives: what every :class:`~asrkit.types.Objective` must do
to train, evaluate and be checked for alignment like asrkit's own ``ctc``, for a plugin
author's tests (and asrkit's own)::

    from asrkit.testing import check_objective

    def test_my_objective_keeps_the_contract():
        check_objective(MyObjective())

:func:`check_objective` runs them all; each is also a function of its own:

- :func:`check_objective_settings`: ``name``, ``description``, ``outputs`` and
  ``default_decoder`` are well formed,
  ``Config`` is a frozen dataclass whose every setting has a default and reads back from the
  way the command line writes it (``-o objective.KEY=VALUE``);
- :func:`check_encoder_width`: a positive int; ``labels.num_classes`` for an objective whose
  outputs are CTC logits (``outputs`` is ``CTC_LOGITS``), since every CTC decoder reads them
  as such;
- :func:`check_head`: ``build`` returns ``None`` or a ``keras.Model`` with its variables
  created, every one of which a checkpoint saves;
- :func:`check_losses`: on a small random batch, losses of shape ``[batch]``, float32, finite
  and non-negative; ``feasible`` true for an utterance with exactly ``frames_needed`` frames
  and false for one with a frame fewer; each utterance's loss the same alone as in the padded
  batch (the padding filled with noise);
- :func:`check_gradients`: the mean loss has finite gradients that reach the encoder's output
  (every feasible utterance's frames) and every trainable variable of the head;
- :func:`check_compiled`: ``losses`` under ``tf.function`` with unknown batch, frame and label
  dimensions gives what it gives eagerly.

A failed check raises ``AssertionError`` saying what the objective did and what was expected.
The batch is made here, seeded, so a failure repeats. TensorFlow is imported inside them.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from asrkit import plugins
from asrkit.core.labels import Labels
from asrkit.core.text import Alphabet
from asrkit.testing.settings import check_settings_read_back
from asrkit.train.checkpoints import untracked_weights
from asrkit.types import NAME_PATTERN, Objective

if TYPE_CHECKING:
    import numpy as np

__all__ = ["check_compiled", "check_encoder_width", "check_gradients", "check_head",
           "check_losses", "check_objective", "check_objective_settings", "objective_batch"]

#: Largest difference allowed between a loss alone and in a padded batch, or eager and
#: compiled, relative to the loss (float32 sums in another order).
LOSS_TOLERANCE = 1e-4


def check_objective(objective: Objective | str, config: Any = None,
                    labels: Labels | None = None) -> None:
    """Every contract check on ``objective`` (an instance, or the name of an installed one)
    with ``config`` (default: its ``Config()``) and ``labels`` (default: asrkit's English
    alphabet)."""
    objective = _objective(objective)
    config = objective.Config() if config is None else config
    labels = Alphabet() if labels is None else labels
    check_objective_settings(objective)
    check_encoder_width(objective, config, labels)
    check_head(objective, config, labels)
    check_losses(objective, config, labels)
    check_gradients(objective, config, labels)
    check_compiled(objective, config, labels)


def check_objective_settings(objective: Objective) -> None:
    """The registered attributes are well formed, and ``Config`` is a frozen dataclass whose
    every setting has a default and parses back from its command-line form."""
    objective = _objective(objective)
    name = getattr(objective, "name", None)
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise AssertionError(f"{type(objective).__name__}: name {name!r} is not a registrable "
                             "name (lower-case letters, digits, - and _)")
    if not isinstance(getattr(objective, "description", None), str):
        raise AssertionError(f"{name}: description must be a string (one line for "
                             "`asrkit plugins`)")
    for attribute in ("outputs", "default_decoder", "greedy_decoder"):
        value = getattr(objective, attribute, None)
        if not isinstance(value, str) or not NAME_PATTERN.match(value):
            raise AssertionError(f"{name}: {attribute} must be a name (lower-case letters, "
                                 f"digits, - and _), not {value!r}")
    if objective.ctc_outputs and objective.default_decoder != "greedy":
        raise AssertionError(f"{name}: its outputs are CTC logits, whose runs are decoded by "
                             f"greedy unless the user names another, not by "
                             f"{objective.default_decoder!r}")
    for attribute in ("default_decoder", "greedy_decoder"):
        decoder = getattr(objective, attribute)
        if decoder in plugins.get_plugins().registry.names("decoder"):
            reads = plugins.get("decoder", decoder).reads
            if reads != objective.outputs:
                raise AssertionError(f"{name}: its {attribute} {decoder!r} reads {reads}, not "
                                     f"its outputs ({objective.outputs})")
    kind: Any = objective.Config
    if not (isinstance(kind, type) and dataclasses.is_dataclass(kind)):
        raise AssertionError(f"{name}: Config must be a dataclass, not {kind!r}")
    if not kind.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise AssertionError(f"{name}: Config must be frozen (@dataclass(frozen=True)): a "
                             "run's settings must not change under it")
    try:
        config = kind()
    except TypeError as error:
        raise AssertionError(f"{name}: every setting of Config needs a default ({error})"
                             ) from None
    check_settings_read_back(name, config, "objective.")


def check_encoder_width(objective: Objective, config: Any = None,
                        labels: Labels | None = None) -> int:
    """``encoder_width`` is a positive int, ``labels.num_classes`` when the outputs are CTC
    logits; returns it."""
    objective, config, labels = _defaults(objective, config, labels)
    width = objective.encoder_width(config, labels)
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise AssertionError(f"{objective.name}: encoder_width is {width!r}, not a positive int")
    if objective.ctc_outputs and width != labels.num_classes:
        raise AssertionError(
            f"{objective.name}: its outputs are CTC logits (outputs is CTC_LOGITS), which are "
            f"labels.num_classes = {labels.num_classes} wide, but encoder_width is {width}")
    return width


def check_head(objective: Objective, config: Any = None, labels: Labels | None = None) -> Any:
    """``build`` gives ``None``, or a ``keras.Model`` whose variables exist and are all saved
    by a checkpoint; returns it."""
    import keras

    objective, config, labels = _defaults(objective, config, labels)
    head = objective.build(config, objective.encoder_width(config, labels), labels)
    if head is None:
        return None
    if not isinstance(head, keras.Model):
        raise AssertionError(f"{objective.name}: build returned {type(head).__name__}, not a "
                             "keras.Model or None")
    if not head.trainable_variables:
        raise AssertionError(f"{objective.name}: build returned a head without trainable "
                             "variables (build its layers, or return None)")
    missing = untracked_weights(head)
    if missing:
        raise AssertionError(f"{objective.name}: the head's weights {', '.join(missing[:3])} "
                             "would not be saved in checkpoints (layers kept in a plain Python "
                             "list); assign each layer to an attribute")
    return head


def objective_batch(objective: Objective, config: Any = None, labels: Labels | None = None,
                    seed: int = 0) -> dict[str, Any]:
    """The checks' batch, as numpy: ``encoder_out`` float32 ``[4, frames, encoder_width]``
    (noise, the padding too), ``out_lengths``, ``label_ids`` (zero-padded), ``label_lengths``
    and the ``feasible`` expected: utterance 0 has frames to spare, 1 exactly
    ``frames_needed`` (with a repeated label), 2 a frame fewer than ``frames_needed`` (when
    that is at least 1; else enough), 3 no labels."""
    import numpy as np

    objective, config, labels = _defaults(objective, config, labels)
    rng = np.random.default_rng(seed)
    symbols = max(1, labels.size)
    a, b, c = (int(x) % symbols for x in rng.permutation(max(3, symbols))[:3])
    label_rows = [[a, b, c], [b, b, a], [c, c, a, a, b], []]
    needed = [int(objective.frames_needed(config, row)) for row in label_rows]
    short = needed[2] - 1
    lengths = [needed[0] + 5, needed[1], short if short >= 1 else needed[2] + 1, 3]
    expected = [True, True, short < 1, True]
    width = objective.encoder_width(config, labels)
    frames = max(lengths)
    encoder_out = (rng.normal(size=(len(lengths), frames, width)) * 2).astype(np.float32)
    label_ids = np.zeros((len(label_rows), max(len(r) for r in label_rows)), np.int32)
    for row, ids in enumerate(label_rows):
        label_ids[row, :len(ids)] = ids
    return {"encoder_out": encoder_out, "out_lengths": np.array(lengths, np.int32),
            "label_ids": label_ids,
            "label_lengths": np.array([len(r) for r in label_rows], np.int32),
            "feasible": np.array(expected), "needed": needed}


def check_losses(objective: Objective, config: Any = None, labels: Labels | None = None,
                 head: Any = None) -> np.ndarray:
    """Losses ``[batch]`` float32, finite and non-negative, ``feasible`` as
    :func:`objective_batch` expects it (``frames_needed`` and the loss agree), and each
    utterance's loss alone as in the padded batch. Returns the losses."""
    import numpy as np
    import tensorflow as tf

    objective, config, labels = _defaults(objective, config, labels)
    if head is None:
        head = objective.build(config, objective.encoder_width(config, labels), labels)
    batch = objective_batch(objective, config, labels)
    losses, feasible = _call(objective, config, head, batch)
    name, size = objective.name, len(batch["out_lengths"])
    for what, value, dtype in (("loss", losses, tf.float32), ("feasible", feasible, tf.bool)):
        if tuple(value.shape) != (size,):
            raise AssertionError(f"{name}: the {what} of a batch of {size} has shape "
                                 f"{tuple(value.shape)}, not ({size},)")
        if value.dtype != dtype:
            raise AssertionError(f"{name}: the {what} is {value.dtype.name}, not {dtype.name}")
    values = losses.numpy()
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        raise AssertionError(f"{name}: losses {values.tolist()} are not all finite and >= 0 "
                             "(an utterance it cannot align has a finite loss, 0 by convention)")
    got, expected = feasible.numpy().tolist(), batch["feasible"].tolist()
    if got != expected:
        raise AssertionError(
            f"{name}: feasible is {got} for utterances of {batch['out_lengths'].tolist()} "
            f"frames needing {batch['needed']} (frames_needed), not {expected}: frames_needed "
            "and the loss must agree on which utterances can be aligned")
    for row in range(size):
        frames, count = int(batch["out_lengths"][row]), int(batch["label_lengths"][row])
        alone = {"encoder_out": batch["encoder_out"][row:row + 1, :frames],
                 "out_lengths": batch["out_lengths"][row:row + 1],
                 "label_ids": batch["label_ids"][row:row + 1, :max(count, 1)],
                 "label_lengths": batch["label_lengths"][row:row + 1]}
        single = float(_call(objective, config, head, alone)[0].numpy()[0])
        if abs(single - values[row]) > LOSS_TOLERANCE * max(1.0, abs(single)):
            raise AssertionError(
                f"{name}: utterance {row}'s loss is {single:.6g} alone and {values[row]:.6g} in "
                "a padded batch: the frames past out_lengths (noise here) or the padded labels "
                "must not count")
    return values


def check_gradients(objective: Objective, config: Any = None,
                    labels: Labels | None = None) -> None:
    """The mean loss over the feasible utterances (as training reduces it) has finite
    gradients that reach the encoder's output within every feasible utterance's frames, and
    every trainable variable of the head."""
    import numpy as np
    import tensorflow as tf

    objective, config, labels = _defaults(objective, config, labels)
    head = objective.build(config, objective.encoder_width(config, labels), labels)
    batch = objective_batch(objective, config, labels)
    encoder_out = tf.Variable(batch["encoder_out"])
    head_variables = list(head.trainable_variables) if head is not None else []
    with tf.GradientTape() as tape:
        losses, feasible = objective.losses(
            config, head, encoder_out, tf.constant(batch["out_lengths"]),
            tf.constant(batch["label_ids"]), tf.constant(batch["label_lengths"]), training=True)
        mean = tf.reduce_mean(tf.where(feasible, tf.cast(losses, tf.float32), 0.0))
    gradients = tape.gradient(mean, [encoder_out, *head_variables])
    name = objective.name
    frames = gradients[0]
    if frames is None:
        raise AssertionError(f"{name}: no gradient reaches the encoder's output")
    frames = tf.convert_to_tensor(frames).numpy()
    if not np.all(np.isfinite(frames)):
        raise AssertionError(f"{name}: the gradient of the encoder's output is not finite")
    for row, (length, ok) in enumerate(zip(batch["out_lengths"], batch["feasible"],
                                           strict=True)):
        if ok and batch["label_lengths"][row] and not np.any(frames[row, :length]):
            raise AssertionError(f"{name}: no gradient reaches utterance {row}'s frames")
    for variable, gradient in zip(head_variables, gradients[1:], strict=True):
        if gradient is None:
            raise AssertionError(f"{name}: no gradient reaches the head's {variable.path}")
        if not bool(tf.reduce_all(tf.math.is_finite(tf.convert_to_tensor(gradient)))):
            raise AssertionError(f"{name}: the gradient of the head's {variable.path} is not "
                                 "finite")


def check_compiled(objective: Objective, config: Any = None,
                   labels: Labels | None = None) -> None:
    """``losses`` inside ``tf.function``, traced for unknown batch, frame and label counts (as
    training and evaluation compile it), gives the eager losses and mask."""
    import numpy as np
    import tensorflow as tf

    objective, config, labels = _defaults(objective, config, labels)
    width = objective.encoder_width(config, labels)
    head = objective.build(config, width, labels)
    batch = objective_batch(objective, config, labels)
    eager = [v.numpy() for v in _call(objective, config, head, batch)]

    @tf.function(input_signature=[tf.TensorSpec([None, None, width], tf.float32),
                                  tf.TensorSpec([None], tf.int32),
                                  tf.TensorSpec([None, None], tf.int32),
                                  tf.TensorSpec([None], tf.int32)])
    def compiled(encoder_out: Any, out_lengths: Any, label_ids: Any,
                 label_lengths: Any) -> tuple[Any, Any]:
        return objective.losses(config, head, encoder_out, out_lengths, label_ids,
                                label_lengths, training=False)

    try:
        got = [v.numpy() for v in compiled(batch["encoder_out"], batch["out_lengths"],
                                           batch["label_ids"], batch["label_lengths"])]
    except Exception as error:
        raise AssertionError(f"{objective.name}: losses fails inside tf.function: "
                             f"{' '.join(str(error).split())[:300]}") from error
    if got[1].tolist() != eager[1].tolist():
        raise AssertionError(f"{objective.name}: feasible is {got[1].tolist()} compiled, "
                             f"{eager[1].tolist()} eagerly")
    if not np.allclose(got[0], eager[0], rtol=LOSS_TOLERANCE, atol=LOSS_TOLERANCE):
        raise AssertionError(f"{objective.name}: losses are {got[0].tolist()} compiled, "
                             f"{eager[0].tolist()} eagerly")


def _call(objective: Objective, config: Any, head: Any,
          batch: dict[str, Any]) -> tuple[Any, Any]:
    """``objective.losses`` of a numpy batch, as tensors (evaluation: ``training=False``)."""
    import tensorflow as tf

    losses, feasible = objective.losses(
        config, head, tf.constant(batch["encoder_out"], tf.float32),
        tf.constant(batch["out_lengths"], tf.int32), tf.constant(batch["label_ids"], tf.int32),
        tf.constant(batch["label_lengths"], tf.int32), training=False)
    return tf.convert_to_tensor(losses), tf.convert_to_tensor(feasible)


def _objective(objective: Objective | str) -> Objective:
    if isinstance(objective, str):
        return plugins.get("objective", objective)
    if not isinstance(objective, Objective):
        raise AssertionError(f"{objective!r} is not an asrkit.types.Objective")
    return objective


def _defaults(objective: Objective | str, config: Any,
              labels: Labels | None) -> tuple[Objective, Any, Labels]:
    objective = _objective(objective)
    return (objective, objective.Config() if config is None else config,
            Alphabet() if labels is None else labels)
