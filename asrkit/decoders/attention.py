"""Decoders of attention encoder-decoder runs: what they read, and the networks they call.

An attention run's model output is the encoder's frames; the objective's head
(:mod:`asrkit.objectives.attention`) holds an autoregressive decoder over them and, with a CTC
weight above 0, a CTC output layer on the same frames. The decoders here read
:class:`AttentionOutputs` (a batch's frames with that head, what
:meth:`asrkit.objectives.attention.AttentionObjective.decoder_inputs` hands them) and call the
head through :class:`AttentionNetworks`, a protocol any attention objective's head can meet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np


#: What the attention decoders read (:attr:`asrkit.types.Decoder.reads`) and an attention
#: objective outputs (:attr:`asrkit.types.Objective.outputs`): :class:`AttentionOutputs`.
ATTENTION_OUTPUTS = "attention"


class AttentionNetworks(Protocol):
    """What the decoders call of an attention objective's head (numpy arrays or tensors in,
    float32 tensors out).

    Label sequences are asrkit's labels (classes ``0 .. N-1``); class ``N``, the last (the
    CTC blank of the CTC output), is also the attention decoder's start and end symbol:
    every sequence the decoder reads starts with it, and it emits it to end.
    """

    #: The start and end symbol of the attention decoder: the last class.
    eos: int
    #: Whether the head has a CTC output (the run was trained with ``ctc_weight`` > 0).
    has_ctc: bool

    def ctc_log_probs(self, frames: Any) -> Any:
        """The CTC output's log-probabilities ``[batch, frames, classes]`` of encoder
        ``frames`` ``[batch, frames, width]`` (the blank last). Only when ``has_ctc``."""

    def initial_state(self, frames: Any, lengths: Any) -> Any:
        """The decoder's state before its first step, ``[n, state_size]`` float32, for
        ``frames`` ``[n, frames, width]`` of which the first ``lengths`` ``[n]`` are read."""

    def decode_step(self, frames: Any, lengths: Any, tokens: Any,
                    state: Any) -> tuple[Any, Any]:
        """The log-probabilities ``[n, classes]`` of the next label after ``tokens`` ``[n, L]``
        (the whole prefix so far, the start symbol first: a Transformer decoder reads it all,
        a recurrent one its last label with ``state``), and the state after it."""


@dataclass
class AttentionOutputs:
    """A batch as the attention decoders read it: the encoder's ``frames`` ``[batch, frames,
    width]`` and the ``networks`` that read them."""

    frames: np.ndarray
    networks: AttentionNetworks

    def __len__(self) -> int:
        return len(self.frames)
