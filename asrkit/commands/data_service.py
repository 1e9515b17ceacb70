"""``asrkit data-service dispatcher|worker``: run the servers of a tf.data service that makes
training batches for ``asrkit train -o pipeline.service=ADDRESS`` (:mod:`asrkit.pipeline.servers`).

Each runs until Ctrl-C (or SIGTERM), having printed one line that says where it listens.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
from pathlib import Path
from types import FrameType

import click

#: Seconds a stopping server may take to close its connections before the process ends.
STOP_SECONDS = 5.0


@click.group("data-service")
def data_service_group() -> None:
    """Run a tf.data service: workers that make training batches for
    `asrkit train -o pipeline.service=HOST:PORT` (see docs/data-service.md)."""


@data_service_group.command("dispatcher")
@click.option("--port", type=click.IntRange(0, 65535), default=5050, show_default=True,
              help="Port to listen on, on every interface (0: any free port).")
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Journal the dispatcher's state here (fault-tolerant mode): restarted with "
              "the same folder, it takes up its jobs again.")
def dispatcher_command(port: int, work_dir: Path | None) -> None:
    """Hand out the input pipelines' work to the workers."""
    from asrkit.pipeline.servers import bound_port, start_dispatcher

    server = start_dispatcher(port, work_dir)
    journal = f", journal in {work_dir}" if work_dir else ""
    _serve(server, f"asrkit: tf.data service dispatcher listening on port {bound_port(server)}"
                   f"{journal}; train with -o pipeline.service={socket.gethostname()}:"
                   f"{bound_port(server)}. Ctrl-C stops it.", "dispatcher")


@data_service_group.command("worker")
@click.option("--dispatcher", "dispatcher", required=True, metavar="HOST:PORT",
              help="The dispatcher's address (grpc://HOST:PORT also works).")
@click.option("--port", type=click.IntRange(0, 65535), default=5051, show_default=True,
              help="Port to listen on, on every interface (0: any free port).")
@click.option("--host", default=None,
              help="The name or address trainers reach this machine by [default: its host "
                   "name].")
def worker_command(dispatcher: str, port: int, host: str | None) -> None:
    """Make training batches: run the input pipelines the dispatcher hands out."""
    from asrkit.pipeline.servers import bound_port, start_worker

    host = host or socket.gethostname()
    server = start_worker(dispatcher, port, host)
    _serve(server, f"asrkit: tf.data service worker {host}:{bound_port(server)} serving the "
                   f"dispatcher {dispatcher}. Ctrl-C stops it.", "worker")


def _serve(server: object, line: str, what: str) -> None:
    """Print ``line``, then wait for Ctrl-C or SIGTERM and stop ``server``."""
    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {number: signal.signal(number, request_stop)
                for number in (signal.SIGINT, signal.SIGTERM)}
    click.echo(line)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    # TensorFlow's stop can wait for ever (a worker whose dispatcher is gone): a bounded
    # wait, then the process ends, which closes its ports all the same.
    stopping = threading.Thread(target=server.stop, daemon=True)  # type: ignore[attr-defined]
    stopping.start()
    stopping.join(STOP_SECONDS)
    click.echo(f"asrkit: tf.data service {what} stopped")
    if stopping.is_alive():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
