"""Devices as towers, and machines as workers: ``tf.distribute`` strategies.

The Deep Speech notebook's "towers" (one model replica per GPU, each on its own mini-batch,
gradients averaged, one synchronous update) are what ``MirroredStrategy`` does. With no GPU the
default strategy trains on the CPU. Several machines use TensorFlow's own
``MultiWorkerMirroredStrategy``: every worker runs the same program with its GPUs as towers,
gradients are all-reduced across all replicas of all workers. The cluster comes from
``TF_CONFIG`` (``--workers``/``--worker-index`` write one), and collective operations time out
after a bound, so a worker that dies stops the others with an error instead of a hang.
"""

from __future__ import annotations

import json
import os
from typing import Any

from asrkit.errors import AsrkitError


def set_cluster(workers: str, index: int) -> None:
    """Write ``TF_CONFIG`` for ``workers`` (``host:port,host:port``) with this one at ``index``.
    Must run before TensorFlow starts; an existing ``TF_CONFIG`` is an error (use one way)."""
    hosts = [w.strip() for w in workers.split(",") if w.strip()]
    if not 0 <= index < len(hosts):
        raise AsrkitError(f"--worker-index {index} is not one of the {len(hosts)} --workers")
    if os.environ.get("TF_CONFIG"):
        raise AsrkitError("TF_CONFIG is set: use it or --workers, not both")
    os.environ["TF_CONFIG"] = json.dumps(
        {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": index}}
    )


def tf_config() -> dict[str, Any]:
    raw = os.environ.get("TF_CONFIG", "")
    try:
        return json.loads(raw) if raw else {}
    except json.JSONDecodeError:
        raise AsrkitError("TF_CONFIG is not valid JSON") from None


def is_multi_worker() -> bool:
    cluster = tf_config().get("cluster", {})
    return sum(len(hosts) for kind, hosts in cluster.items() if kind in ("chief", "worker")) > 1


def is_chief() -> bool:
    """The one worker that writes checkpoints, metrics and reports: the ``chief`` task if the
    cluster has one, else worker 0 (TensorFlow's convention)."""
    config = tf_config()
    if not config:
        return True
    task = config.get("task", {})
    if "chief" in config.get("cluster", {}):
        return task.get("type") == "chief"
    return task.get("type", "worker") == "worker" and int(task.get("index", 0)) == 0


def make_strategy(devices: str = "", timeout_seconds: float = 300.0) -> Any:
    """``""``: every visible GPU (one replica each), else the CPU; ``"cpu"``: the CPU;
    ``"0,1"``: those GPUs; ``"/cpu:0,/cpu:1"``: explicit device names (tests use logical CPUs).
    With a multi-worker ``TF_CONFIG``, a ``MultiWorkerMirroredStrategy`` over all workers."""
    import tensorflow as tf

    if is_multi_worker():
        options = tf.distribute.experimental.CommunicationOptions(
            timeout_seconds=timeout_seconds)
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    if devices.strip().lower() == "cpu":
        return tf.distribute.OneDeviceStrategy("/cpu:0")
    if "/" in devices:
        return tf.distribute.MirroredStrategy([d.strip() for d in devices.split(",")])
    gpus = tf.config.list_logical_devices("GPU")
    if devices.strip():
        wanted = [int(d) for d in devices.split(",")]
        missing = [d for d in wanted if d >= len(gpus)]
        if missing:
            raise AsrkitError(
                f"--devices asks for GPU {missing[0]} but {len(gpus)} GPU(s) are visible"
            )
        gpus = [gpus[d] for d in wanted]
    if not gpus:
        return tf.distribute.get_strategy()  # the default strategy: this CPU
    return tf.distribute.MirroredStrategy([g.name for g in gpus])
