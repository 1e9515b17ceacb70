"""Devices as towers: ``tf.distribute`` strategies.

The Deep Speech notebook's "towers" (one model replica per GPU, each on its own mini-batch,
gradients averaged, one synchronous update) are what ``MirroredStrategy`` does. With no GPU the
default strategy trains on the CPU. Several machines use ``MultiWorkerMirroredStrategy``.
"""

from __future__ import annotations

from typing import Any

from asrkit.errors import AsrkitError


def make_strategy(devices: str = "") -> Any:
    """``""``: every visible GPU (one replica each), else the CPU; ``"cpu"``: the CPU;
    ``"0,1"``: those GPUs; ``"/cpu:0,/cpu:1"``: explicit device names (tests use logical CPUs)."""
    import tensorflow as tf

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
