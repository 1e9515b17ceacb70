"""Training batches made by the workers of a tf.data service (``-o pipeline.service=ADDRESS``).

The training process sends its pipeline (:func:`~asrkit.pipeline.batches.make_dataset` in its
splittable form) to the service's dispatcher once an epoch, and reads the batches the workers
make: decoding, augmentation, features, shuffling and batching all run there. The processing
mode is ``distributed_epoch`` (``ShardingPolicy.DYNAMIC``): the dispatcher hands each worker
the next shard file when it asks for one, so every utterance is made once an epoch however many
workers there are, and a worker that joins mid-epoch takes its share; the batches arrive in
the order the workers finish them, which no seed fixes.

TensorFlow's client waits for ever for a dispatcher or a worker that went away; here every wait
is bounded by ``service_timeout`` and ends in one line (:class:`ServiceError`).
"""

from __future__ import annotations

import queue
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from asrkit.config.pipeline import PipelineConfig
from asrkit.core.errors import AsrkitError

if TYPE_CHECKING:
    import tensorflow as tf

#: The longest a first connection to the dispatcher may take before it counts as unreachable.
CONNECT_SECONDS = 10.0
#: What to do when the service does not answer.
WHAT_TO_DO = ("check that its dispatcher and workers run (asrkit data-service dispatcher, "
              "asrkit data-service worker)")

T = TypeVar("T")


class ServiceError(AsrkitError):
    """The tf.data service cannot be reached, or stopped answering."""


def host_port(address: str) -> tuple[str, int]:
    """``(host, port)`` of ``HOST:PORT`` or ``grpc://HOST:PORT``."""
    host, _, port = address.removeprefix("grpc://").rpartition(":")
    return host, int(port)


def check_reachable(address: str, seconds: float = CONNECT_SECONDS) -> None:
    """Fail in one line unless something accepts connections at the dispatcher's address
    (TensorFlow would retry for ever)."""
    host, port = host_port(address)
    try:
        with socket.create_connection((host, port), timeout=seconds):
            pass
    except OSError as error:
        reason = type(error).__name__ if isinstance(error, TimeoutError) else (
            error.strerror or type(error).__name__)
        raise ServiceError(
            f"cannot reach the tf.data service dispatcher at {address} ({reason}): start one "
            "with asrkit data-service dispatcher, or correct -o pipeline.service") from None


def within(seconds: float, work: Callable[[], T], error: Callable[[], AsrkitError]) -> T:
    """``work()``, or ``error()`` raised once it has run ``seconds`` (it goes on in a daemon
    thread, which TensorFlow's waits leave no other way to abandon)."""
    answers: queue.Queue[tuple[bool, Any]] = queue.Queue()

    def run() -> None:
        try:
            answers.put((True, work()))
        except BaseException as failure:  # handed to the waiting thread
            answers.put((False, failure))

    threading.Thread(target=run, daemon=True, name="asrkit-data-service").start()
    try:
        done, value = answers.get(timeout=seconds)
    except queue.Empty:
        raise error() from None
    if not done:
        raise value
    return value


def no_answer(config: PipelineConfig, what: str) -> ServiceError:
    return ServiceError(
        f"the tf.data service at {config.service} {what} within {config.service_timeout:g} s "
        f"(pipeline.service_timeout): {WHAT_TO_DO}")


def distribute(dataset: tf.data.Dataset, config: PipelineConfig) -> tf.data.Dataset:
    """``dataset`` registered with the service of ``config.service``, read as a
    ``distributed_epoch`` job of its own (one per iteration: no ``job_name``)."""
    import tensorflow as tf

    service = tf.data.experimental.service
    target = config.service_target
    check_reachable(config.service, min(CONNECT_SECONDS, config.service_timeout))
    dataset_id = within(config.service_timeout,
                        lambda: service.register_dataset(target, dataset),
                        lambda: no_answer(config, "did not take the input pipeline"))
    return service.from_dataset_id(service.ShardingPolicy.DYNAMIC, target, dataset_id,
                                   dataset.element_spec)


class TimedBatches(Iterator[T]):
    """The elements of ``batches``, each awaited at most ``config.service_timeout`` seconds.

    One thread makes the iterator and fetches each element when asked (never ahead, so a
    stopped loop leaves nothing read and lost); the training thread waits for it with a
    timeout. An error of the service's connection becomes a :class:`ServiceError`; other errors
    (a pipeline's own) pass unchanged.
    """

    def __init__(self, batches: Iterable[T], config: PipelineConfig) -> None:
        self.config = config
        #: That of ``batches`` (a dataset's), for compiling what takes them.
        self.element_spec = getattr(batches, "element_spec", None)
        self._asks: queue.Queue[bool] = queue.Queue()
        self._answers: queue.Queue[tuple[str, Any]] = queue.Queue()
        threading.Thread(target=self._serve, args=(batches,), daemon=True,
                         name="asrkit-data-service").start()

    def _serve(self, batches: Iterable[T]) -> None:
        try:
            iterator = iter(batches)
            while self._asks.get():
                self._answers.put(("element", next(iterator)))
        except StopIteration:
            self._answers.put(("end", None))
        except BaseException as failure:  # handed to the training thread
            self._answers.put(("error", failure))

    def __next__(self) -> T:
        import tensorflow as tf

        self._asks.put(True)
        try:
            kind, value = self._answers.get(timeout=self.config.service_timeout)
        except queue.Empty:
            raise no_answer(self.config, "gave no batch") from None
        if kind == "end":
            raise StopIteration
        if kind == "error":
            if isinstance(value, (tf.errors.UnavailableError, tf.errors.DeadlineExceededError,
                                  tf.errors.CancelledError)):
                raise ServiceError(f"lost the tf.data service at {self.config.service} "
                                   f"({type(value).__name__}): {WHAT_TO_DO}") from None
            raise value
        return value

    def close(self) -> None:
        """Let the fetching thread end (when it is not stuck in the service)."""
        self._asks.put(False)
