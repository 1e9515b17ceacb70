"""``ctc``: connectionist temporal classification, asrkit's default training objective.

The model's output frames are the logits of the labels and the blank (the last class), so the
model is built with ``labels.num_classes`` outputs, as it always was; there is no head. The loss
is :func:`asrkit.core.ctc.ctc_losses` (the C++ kernel on CPUs, utterances it cannot align marked
rather than wrecking the batch) and the alignment check :func:`asrkit.core.ctc.frames_needed`.
Every registered decoder reads CTC logits, so every one decodes its runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from asrkit import hookimpl
from asrkit.core.ctc import ctc_losses, frames_needed
from asrkit.types import Objective

if TYPE_CHECKING:
    import tensorflow as tf

    from asrkit.core.labels import Labels
    from asrkit.hookspecs import Register


class CTCObjective(Objective):
    name = "ctc"
    description = "Connectionist temporal classification: one output per label and the blank."

    def encoder_width(self, config: Any, labels: Labels) -> int:
        return labels.num_classes

    def losses(self, config: Any, head: Any, encoder_out: tf.Tensor, out_lengths: tf.Tensor,
               label_ids: tf.Tensor, label_lengths: tf.Tensor,
               training: bool = False) -> tuple[tf.Tensor, tf.Tensor]:
        return ctc_losses(label_ids, label_lengths, encoder_out, out_lengths)

    def frames_needed(self, config: Any, label_ids: Sequence[int]) -> int:
        return frames_needed(label_ids)


@hookimpl
def register_objectives(register: Register) -> None:
    register(CTCObjective())
