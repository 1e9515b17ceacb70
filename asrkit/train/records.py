"""What a run records as it trains, besides checkpoints: ``metrics.jsonl`` and TensorBoard.

With several workers every worker runs the same loop, but only the chief writes into the run
folder, so each record is written once; the others' writes go nowhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from asrkit.core.storage import Location
from asrkit.train.checkpoints import append_metrics

if TYPE_CHECKING:
    import tensorflow as tf


class RunRecords:
    """The run's ``metrics.jsonl`` and TensorBoard summaries in ``folder``, written by the
    ``chief`` only."""

    def __init__(self, folder: Location, chief: bool) -> None:
        self.folder = folder
        self.chief = chief
        self.writer: tf.summary.SummaryWriter | None = None

    def metrics(self, record: dict[str, Any]) -> None:
        """Append ``record`` to ``metrics.jsonl`` (on disk before the next step)."""
        if self.chief:
            append_metrics(self.folder, record)

    def open_summaries(self) -> None:
        """Start the TensorBoard summaries (``tensorboard/`` in the run folder)."""
        import tensorflow as tf

        self.writer = (tf.summary.create_file_writer(str(self.folder / "tensorboard"))
                       if self.chief else tf.summary.create_noop_writer())

    def scalars(self, values: dict[str, float], step: int) -> None:
        """TensorBoard scalars at ``step``, in the order given."""
        import tensorflow as tf

        assert self.writer is not None, "open_summaries first"
        with self.writer.as_default():
            for name, value in values.items():
                tf.summary.scalar(name, value, step=step)
