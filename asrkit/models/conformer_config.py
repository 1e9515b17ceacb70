"""The Conformer's settings and its time subsampling: what the plugin module
(:mod:`asrkit.models.conformer`) and its Keras layers (:mod:`asrkit.models.conformer_layers`)
both read, kept apart so that the layers need not import the plugin module."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from asrkit.core.errors import AsrkitError
from asrkit.core.settings import setting, validate

if TYPE_CHECKING:
    import tensorflow as tf


#: The largest chunk and left context a streaming Conformer takes, in encoder frames (40 s).
MAX_CHUNK_FRAMES = 1000


@dataclass(frozen=True)
class ConformerConfig:
    #: The model's width (Conformer-L: 512), attention heads and blocks: maxima far above the
    #: largest published Conformer, to stop typos before they exhaust memory.
    d_model: int = setting(144, min=1, max=4096)
    num_heads: int = setting(4, min=1, max=64)
    num_blocks: int = setting(16, min=1, max=64)
    #: Width of the feed-forward modules' hidden layer, in multiples of ``d_model``.
    ff_multiplier: int = setting(4, min=1, max=16)
    #: Kernel size of the depthwise convolution (odd: centred on the frame).
    conv_kernel: int = setting(31, min=1, max=255)
    #: Channels of the two subsampling convolutions (Conformer-S: d_model).
    subsampling_channels: int = setting(144, min=1, max=4096)
    #: Dropout after every module (before the residual sum) and after the subsampling.
    dropout: float = setting(0.1, min=0, below=1)
    #: Dropout on the attention probabilities.
    attention_dropout: float = setting(0.1, min=0, below=1)
    #: A streaming encoder (WeNet's U2, NeMo's cache-aware Conformer): causal depthwise
    #: convolutions, and self-attention within chunks of ``chunk_frames`` frames and over the
    #: ``left_frames`` frames before each chunk; no frame sees past its chunk's end.
    streaming: bool = False
    #: A streaming encoder's frames a chunk (40 ms each at the default 10 ms feature step; 16 =
    #: 640 ms): the chunk that evaluation, transcription and export decode with, and the only
    #: one trained when ``max_train_chunk`` is 0. 0: the whole utterance at once (full context).
    chunk_frames: int = setting(16, min=0, max=MAX_CHUNK_FRAMES)
    #: Frames before its chunk that a frame attends to (64 = 2.56 s): what a stream keeps of
    #: the past, so its memory does not grow with the recording.
    left_frames: int = setting(64, min=1, max=MAX_CHUNK_FRAMES)
    #: Dynamic chunk training (WeNet): each batch attends within chunks of a size drawn from
    #: 1..``max_train_chunk`` frames, or to the whole utterance (half the batches), so that one
    #: model decodes at every chunk size in that range and at full context. 0: every batch at
    #: ``chunk_frames``.
    max_train_chunk: int = setting(25, min=0, max=MAX_CHUNK_FRAMES)

    def __post_init__(self) -> None:
        validate(self)
        if self.d_model % self.num_heads:
            raise AsrkitError(f"d_model ({self.d_model}) must be a multiple of num_heads "
                              f"({self.num_heads})")
        if self.conv_kernel % 2 == 0:
            raise AsrkitError(f"conv_kernel must be odd, not {self.conv_kernel}")

    def trained_chunks(self) -> tuple[int, int] | None:
        """The chunk sizes a streaming model learned (``None``: not streaming)."""
        if not self.streaming:
            return None
        if self.max_train_chunk:
            return 1, self.max_train_chunk
        return self.chunk_frames, self.chunk_frames


#: Time stride of each of the two subsampling convolutions.
SUBSAMPLING_STRIDE = 2
#: Kernel of the subsampling convolutions (time and frequency).
SUBSAMPLING_KERNEL = 3


def subsampled_length(length: int | tf.Tensor) -> int | tf.Tensor:
    """Frames out of one stride-2 subsampling convolution: ``ceil(length / 2)`` (python ints or
    tensors)."""
    return (length + SUBSAMPLING_STRIDE - 1) // SUBSAMPLING_STRIDE
