"""What a run records as it trains, besides checkpoints: ``metrics.jsonl`` and TensorBoard.

With several workers every worker runs the same loop, but only the chief writes into the run
folder, so each record is written once; the others' writes go nowhere.

In a run folder at a URL, an appended line rewrites the whole object, so the step records (one
every ``log_every`` steps) are written together at most every :data:`URL_WRITE_SECONDS`; every
other record (an evaluation, an epoch, the report) is written at once with those before it. A
training killed there loses at most that many seconds of step records, which its resumption
writes again from the last checkpoint on.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from asrkit.core.storage import Location, StoragePath
from asrkit.train.checkpoints import append_metrics

if TYPE_CHECKING:
    import tensorflow as tf


#: How long step records wait to be written to a run folder at a URL.
URL_WRITE_SECONDS = 30.0


class RunRecords:
    """The run's ``metrics.jsonl`` and TensorBoard summaries in ``folder``, written by the
    ``chief`` only."""

    def __init__(self, folder: Location, chief: bool) -> None:
        self.folder = folder
        self.chief = chief
        self.writer: tf.summary.SummaryWriter | None = None
        self._waiting: list[dict[str, Any]] = []
        self._written = time.monotonic()

    def metrics(self, record: dict[str, Any]) -> None:
        """Append ``record`` to ``metrics.jsonl`` (on disk before the next step; at a URL, a
        step record may wait up to :data:`URL_WRITE_SECONDS`)."""
        if not self.chief:
            return
        self._waiting.append(record)
        if (not isinstance(self.folder, StoragePath) or record.get("event") != "step"
                or time.monotonic() - self._written >= URL_WRITE_SECONDS):
            self.flush()

    def flush(self) -> None:
        """Write the records that wait (a run at a URL keeps step records a while)."""
        if self._waiting:
            append_metrics(self.folder, *self._waiting)
            self._waiting.clear()
        self._written = time.monotonic()

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
