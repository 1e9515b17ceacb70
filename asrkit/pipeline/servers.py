"""The tf.data service's servers: a dispatcher, which hands out the work, and workers, which
run the training's input pipelines (``asrkit data-service dispatcher|worker``).

They are TensorFlow's own (``tf.data.experimental.service``); a dispatcher or workers that an
existing deployment runs serve ``asrkit train -o pipeline.service=ADDRESS`` just as well.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from asrkit.core.errors import AsrkitError
from asrkit.pipeline.service import check_reachable, host_port

if TYPE_CHECKING:
    import tensorflow as tf


class ServerError(AsrkitError):
    """A dispatcher or worker that cannot start."""


def start_dispatcher(port: int, work_dir: Path | None = None,
                     ) -> tf.data.experimental.service.DispatchServer:
    """A dispatcher on ``port`` (all interfaces). With ``work_dir`` it journals its state
    there before it answers (fault-tolerant mode), so that a dispatcher restarted with the same
    folder knows the registered pipelines and running jobs again."""
    import tensorflow as tf

    service = tf.data.experimental.service
    if work_dir is not None:
        work_dir.mkdir(parents=True, exist_ok=True)
    config = service.DispatcherConfig(
        port=port, work_dir=None if work_dir is None else str(work_dir),
        fault_tolerant_mode=work_dir is not None)
    return _started(lambda: service.DispatchServer(config), "dispatcher", port)


def start_worker(dispatcher: str, port: int, host: str,
                 ) -> tf.data.experimental.service.WorkerServer:
    """A worker on ``port`` that registers with ``dispatcher`` as ``host:port``: the address
    trainers connect to for its batches, so ``host`` must be reachable from them."""
    import tensorflow as tf

    service = tf.data.experimental.service
    try:
        host_port(dispatcher)
    except ValueError:
        raise ServerError(f"--dispatcher {dispatcher}: not HOST:PORT") from None
    check_reachable(dispatcher)
    config = service.WorkerConfig(
        dispatcher_address=dispatcher.removeprefix("grpc://"), worker_address=f"{host}:%port%",
        port=port, data_transfer_address=f"{host}:%dts_port%")
    return _started(lambda: service.WorkerServer(config), "worker", port)


def _started(make, what: str, port: int):
    import tensorflow as tf

    try:
        return make()
    except (tf.errors.OpError, RuntimeError) as error:
        message = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise ServerError(f"cannot start a tf.data service {what} on port {port} "
                          f"({type(error).__name__}: {message}); is the port in use?") from None


def bound_port(server: tf.data.experimental.service.DispatchServer
               | tf.data.experimental.service.WorkerServer) -> int:
    """The port a server listens on (the one it chose for port 0)."""
    return int(server._address.rpartition(":")[2])  # no public accessor
