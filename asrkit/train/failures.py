"""What can stop a run besides its budget, each turned into a clean stop or a one-line error.

- Ctrl-C (:func:`stop_on_interrupt`): the step under way finishes, then the run stops as at any
  other stop (saved, scored, resumable); a second Ctrl-C stops at once.
- A lost worker (:func:`lost_workers_are_errors`): with several workers, a collective that fails
  or times out means a worker died or hung.
- Out of memory, or a full disk (:func:`out_of_memory_is_an_error`).
- Non-finite losses (:class:`NonFiniteLosses`): the loss-scale optimiser already skips such an
  update (:mod:`asrkit.train.step`); the run names the utterances and gives up after
  ``max_bad_batches`` batches in a row.

Each error says what to do next, usually how to continue with ``--resume``.
"""

from __future__ import annotations

import contextlib
import errno
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm import tqdm

from asrkit.core.errors import AsrkitError
from asrkit.core.storage import Location
from asrkit.train.strategy import is_multi_worker

if TYPE_CHECKING:
    import tensorflow as tf

    from asrkit.runs.run import Run
    from asrkit.train.state import LoopState
    from asrkit.train.step import Batch


@dataclass
class Interrupt:
    """Whether Ctrl-C asked the run to stop after the step under way."""

    requested: bool = False


@contextlib.contextmanager
def stop_on_interrupt() -> Iterator[Interrupt]:
    """Ctrl-C finishes the step under way, then the run stops as at any other stop (saved,
    scored, resumable); a second Ctrl-C stops at once. Off the main thread, where no signal
    handler can be set, Ctrl-C is left as it is."""
    interrupt = Interrupt()
    if threading.current_thread() is not threading.main_thread():
        yield interrupt
        return
    previous = signal.getsignal(signal.SIGINT)

    def handle(signum: int, frame: FrameType | None) -> None:
        if interrupt.requested:
            signal.signal(signal.SIGINT, previous)
            raise KeyboardInterrupt
        interrupt.requested = True
        tqdm.write("asrkit: stopping after this step (saving; Ctrl-C again to stop at once)",
                   file=sys.stderr)

    signal.signal(signal.SIGINT, handle)
    try:
        yield interrupt
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def lost_workers_are_errors(folder: Location) -> Iterator[None]:
    """With several workers, a collective that fails or times out means a worker died or
    hung: say so in one line, and how to continue (the run in ``folder``)."""
    import tensorflow as tf

    lost = (tf.errors.UnavailableError, tf.errors.DeadlineExceededError,
            tf.errors.CancelledError, tf.errors.AbortedError, tf.errors.InternalError)
    try:
        yield
    except lost as error:
        if not is_multi_worker():
            raise
        raise AsrkitError(
            f"lost contact with another worker ({type(error).__name__}); restart "
            f"every worker with --resume {folder} to continue from the last "
            "checkpoint"
        ) from None


@contextlib.contextmanager
def out_of_memory_is_an_error(run: Run) -> Iterator[None]:
    """Out of memory, and a full disk (which TensorFlow reports as resource exhausted too, or
    as an unknown error; Python as OSError ENOSPC), each as one line saying what to do."""
    import tensorflow as tf

    try:
        yield
    except (tf.errors.OpError, OSError) as error:
        if (getattr(error, "errno", None) == errno.ENOSPC
                or "No space left on device" in str(error)):
            free = (f" ({shutil.disk_usage(run.folder).free / 2**20:.0f} MiB free there)"
                    if isinstance(run.folder, Path) else "")
            raise AsrkitError(
                f"disk full: no space left on device writing into {run.folder}{free}; free "
                f"some space, then continue with --resume {run.folder}"
            ) from None
        seconds = run.pipeline.batch_seconds
        if isinstance(error, tf.errors.ResourceExhaustedError) and seconds:
            raise AsrkitError(
                f"out of memory with batches of {seconds:g} s of padded audio per device; "
                f"continue with --resume {run.folder} -o pipeline.batch_seconds=... "
                "(smaller)"
            ) from None
        if isinstance(error, tf.errors.ResourceExhaustedError):
            raise AsrkitError(
                f"out of memory with batches of {run.train.batch_size} utterances per "
                "device; use a smaller --batch-size (or import with a lower --max-duration), "
                f"then continue with --resume {run.folder}"
            ) from None
        raise


def finite_mask(values: np.ndarray) -> np.ndarray:
    """Which of a step's per-utterance losses are finite."""
    return np.isfinite(values)


class NonFiniteLosses:
    """Names the utterances of a batch whose loss is not finite (the update skipped them) and
    stops the run after ``max_bad_batches`` such batches in a row (``state`` counts them)."""

    def __init__(self, strategy: tf.distribute.Strategy, max_bad_batches: int,
                 metrics: Callable[[dict[str, Any]], None], folder: Location) -> None:
        self.strategy = strategy
        self.max_bad_batches = max_bad_batches
        self.metrics = metrics
        self.folder = folder

    def check(self, losses: np.ndarray, batch: Batch, state: LoopState) -> None:
        bad = ~finite_mask(losses)
        if not bad.any():
            state.bad_batches_in_a_row = 0
            return
        ids = [i.decode() for part in self.strategy.experimental_local_results(batch["ids"])
               for i in part.numpy()]
        named = [ids[i] for i in range(len(ids)) if bad[i]]
        state.bad_batches_in_a_row += 1
        self.metrics({"event": "non_finite_loss", "step": state.global_step,
                      "utterances": named})
        tqdm.write(f"asrkit: warning: non-finite loss at step {state.global_step}; skipped "
                   f"utterances: {', '.join(named)}", file=sys.stderr)
        if state.bad_batches_in_a_row >= self.max_bad_batches:
            raise AsrkitError(
                f"{state.bad_batches_in_a_row} batches in a row had a non-finite loss; lower "
                "the learning rate (-o learning_rate=...) or check the utterances named in "
                f"{self.folder / 'metrics.jsonl'}"
            )
