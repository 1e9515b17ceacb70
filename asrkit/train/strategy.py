"""Devices as towers, and machines as workers: ``tf.distribute`` strategies.

The Deep Speech notebook's "towers" (one model replica per GPU, each on its own mini-batch,
gradients averaged, one synchronous update) are what ``MirroredStrategy`` does. With no GPU the
default strategy trains on the CPU. Several machines use TensorFlow's own
``MultiWorkerMirroredStrategy``: every worker runs the same program with its GPUs as towers,
gradients are all-reduced across all replicas of all workers. The cluster comes from
``TF_CONFIG`` (``--workers``/``--worker-index`` write one), and it is checked before
TensorFlow reads it: bad JSON, a missing key or a task that is not in the cluster is one line.

Two bounds keep a worker from waiting for ever: joining the cluster (every worker registers with
TensorFlow's coordination service, hosted by the chief, and waits at a barrier for the others)
and each collective operation both time out after ``worker_timeout`` seconds. A worker whose peers
never come up, or that dies later, stops the others with an error instead of a hang.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from asrkit.core.errors import AsrkitError

if TYPE_CHECKING:
    import tensorflow as tf

#: Job names that run training steps in a ``MultiWorkerMirroredStrategy`` cluster.
TRAINING_JOBS = ("chief", "worker")


def set_cluster(workers: str, index: int) -> None:
    """Write ``TF_CONFIG`` for ``workers`` (``host:port,host:port``) with this one at ``index``.
    Must run before TensorFlow starts; an existing ``TF_CONFIG`` is an error (use one way)."""
    hosts = [w.strip() for w in workers.split(",") if w.strip()]
    if not 0 <= index < len(hosts):
        raise AsrkitError(f"--worker-index {index} is not one of the {len(hosts)} --workers")
    if os.environ.get("TF_CONFIG"):
        raise AsrkitError("TF_CONFIG is set: use it or --workers, not both")
    config = {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": index}}
    check_tf_config(config, "--workers")
    os.environ["TF_CONFIG"] = json.dumps(config)


def tf_config() -> dict[str, Any]:
    """``TF_CONFIG`` as a dict (empty when unset), checked by :func:`check_tf_config`."""
    raw = os.environ.get("TF_CONFIG", "")
    if not raw.strip():
        return {}
    try:
        config = json.loads(raw)
    except json.JSONDecodeError as error:
        raise AsrkitError(f"TF_CONFIG is not valid JSON ({error.msg} at character "
                          f"{error.pos})") from None
    check_tf_config(config)
    return config


def check_tf_config(config: Any, source: str = "TF_CONFIG") -> None:
    """One line naming what is wrong with a ``TF_CONFIG``: it must be an object with a
    ``cluster`` of job names to ``host:port`` lists and, for a cluster of several tasks, a
    ``task`` whose ``type`` is one of the jobs and whose ``index`` is one of that job's tasks."""
    if not isinstance(config, dict):
        raise AsrkitError(f"{source} must be a JSON object with \"cluster\" and \"task\"")
    cluster, task = config.get("cluster", {}), config.get("task")
    if not isinstance(cluster, dict) or not all(
            isinstance(hosts, list) for hosts in cluster.values()):
        raise AsrkitError(f'{source}: "cluster" must map job names to lists of "host:port"')
    for job, hosts in cluster.items():
        for host in hosts:
            name, colon, port = str(host).rpartition(":")
            if not (isinstance(host, str) and colon and name and port.isdigit()
                    and 0 < int(port) < 65536):
                raise AsrkitError(f'{source}: {job} address {host!r} is not "host:port"')
    if not cluster:
        return
    if not isinstance(task, dict) or "type" not in task or "index" not in task:
        raise AsrkitError(f'{source} has a "cluster" but no "task" with "type" and "index"')
    kind, index = task["type"], task["index"]
    if kind not in cluster:
        raise AsrkitError(f"{source}: task type {kind!r} is not a job of the cluster "
                          f"({', '.join(cluster)})")
    if isinstance(index, bool) or not isinstance(index, int) or not (
            0 <= index < len(cluster[kind])):
        raise AsrkitError(f"{source}: task index {index!r} is not one of the "
                          f"{len(cluster[kind])} {kind} tasks (0 to {len(cluster[kind]) - 1})")
    if not any(cluster.get(job) for job in TRAINING_JOBS):
        raise AsrkitError(f'{source}: the cluster has no "chief" or "worker" job')


def is_multi_worker() -> bool:
    cluster = tf_config().get("cluster", {})
    return sum(len(hosts) for kind, hosts in cluster.items() if kind in TRAINING_JOBS) > 1


def is_chief() -> bool:
    """The one worker that writes checkpoints, metrics and reports: the ``chief`` task if the
    cluster has one, else worker 0 (TensorFlow's convention)."""
    config = tf_config()
    if not config.get("cluster"):
        return True
    task = config["task"]
    if "chief" in config["cluster"]:
        return task["type"] == "chief"
    return task["type"] == "worker" and task["index"] == 0


def _bound_joining(timeout_seconds: float) -> None:
    """Make joining the cluster time out. ``MultiWorkerMirroredStrategy`` configures
    TensorFlow's coordination service itself unless one is configured already, and then waits
    for ever for a peer that never registers (the leader) or a leader that never answers (the
    others). The same service, configured here first with a registration barrier bounded by
    ``timeout_seconds``, makes every worker give up after that time with DeadlineExceeded."""
    from tensorflow.python.eager import context  # the only handle on these settings

    cluster = tf_config()["cluster"]
    leader = "chief" if cluster.get("chief") else "worker"
    ctx = context.context()
    ctx.configure_coordination_service(
        service_type="standalone", service_leader=f"/job:{leader}/replica:0/task:0",
        cluster_register_timeout_in_ms=int(timeout_seconds * 1000))
    service = ctx.coordination_service
    service.cluster_register_with_barrier = True
    for job in TRAINING_JOBS:
        if cluster.get(job):
            service.coordinated_job_list.add(name=job, num_tasks=len(cluster[job]))


def uses_gpus(strategy: tf.distribute.Strategy) -> bool:
    """Whether the strategy's towers on this worker are GPUs (TensorFlow's default strategy,
    which has no device list, places on the first GPU when there is one)."""
    import tensorflow as tf

    try:
        devices = strategy.extended.worker_devices
    except (RuntimeError, NotImplementedError):
        return bool(tf.config.list_logical_devices("GPU"))
    return any(":GPU:" in device.upper() for device in devices)


def make_strategy(devices: str = "", timeout_seconds: float = 300.0) -> tf.distribute.Strategy:
    """``""``: every visible GPU (one replica each), else the CPU; ``"cpu"``: the CPU;
    ``"0,1"``: those GPUs; ``"/cpu:0,/cpu:1"``: explicit device names (tests use logical CPUs).
    With a multi-worker ``TF_CONFIG``, a ``MultiWorkerMirroredStrategy`` over all workers, which
    gives up with an error when the other workers are not all there within ``timeout_seconds``."""
    import tensorflow as tf

    if is_multi_worker():
        _bound_joining(timeout_seconds)
        options = tf.distribute.experimental.CommunicationOptions(
            timeout_seconds=timeout_seconds)
        try:
            return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
        except (tf.errors.DeadlineExceededError, tf.errors.UnavailableError) as error:
            cluster = tf_config()["cluster"]
            addresses = ",".join(h for job in TRAINING_JOBS for h in cluster.get(job, []))
            raise AsrkitError(
                f"not every worker of {addresses} joined within {timeout_seconds:g} s "
                f"(worker_timeout; {type(error).__name__}): start every worker with the same "
                "--workers list, each with its own --worker-index, and check that they can "
                "reach each other's ports"
            ) from None
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
