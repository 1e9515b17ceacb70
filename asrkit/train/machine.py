"""What a training session ran on, recorded in the run's ``metrics.jsonl`` as it starts.

A run's speed, and so what it learns in a time budget (``-o max_minutes``), depends on the
machine: the same ``conformer`` transducer makes 0.28 s steps on one 2-core CPU and 0.64 s on
another. Two runs, or a run and its resumption on another machine, can only be compared knowing
that, and a bug report about one is answered sooner with it. Each session (the first and every
resumption) therefore writes one ``machine`` record: the CPU, its cores and bfloat16 unit, the
memory, the GPUs, the towers, the precision and the versions of asrkit, TensorFlow and Python.
``asrkit describe RUN`` shows them; the learning benchmark reports them beside its figures.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import asrkit
from asrkit.train.precision import bfloat16_unit, cpu_info, flags_in


def memory_gib() -> float | None:
    """This machine's memory in GiB (None where the system does not say)."""
    try:
        return round(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30, 1)
    except (AttributeError, ValueError, OSError):
        return None


def gpu_names() -> list[str]:
    """The name of each GPU TensorFlow sees (``GPU:n`` where the driver gives none)."""
    import tensorflow as tf

    names = []
    for index, device in enumerate(tf.config.list_physical_devices("GPU")):
        try:
            details = tf.config.experimental.get_device_details(device)
        except (ValueError, RuntimeError):
            details = {}
        names.append(str(details.get("device_name") or f"GPU:{index}"))
    return names


def machine_record(step: int, precision: str, replicas: int,
                   cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, Any]:
    """The ``machine`` record of a session starting at ``step`` that trains on ``replicas``
    towers in ``precision`` (a Keras dtype policy name)."""
    import tensorflow as tf

    info = cpu_info(cpuinfo)  # read once: name, clock and flags
    name = info.get("model name") or platform.processor() or platform.machine() or "unknown CPU"
    return {"event": "machine", "step": step, "cpu": name, "cpu_mhz": _mhz(info.get("cpu MHz")),
            "cores": os.cpu_count(), "bfloat16_unit": bfloat16_unit(flags_in(info)),
            "memory_gib": memory_gib(), "gpus": gpu_names(), "replicas": replicas,
            "precision": precision, "asrkit": asrkit.__version__, "tensorflow": tf.__version__,
            "python": platform.python_version()}


def _mhz(value: str | None) -> int | None:
    """``/proc/cpuinfo``'s clock (``"2100.000"``) as whole MHz; None where absent or unreadable."""
    try:
        return round(float(value)) if value else None
    except ValueError:
        return None


def machine_text(record: dict[str, Any]) -> str:
    """One line for people: ``Intel Xeon (2 cores at 2,100 MHz, AMX, 23.6 GiB), no GPU,
    1 tower, mixed_bfloat16, TensorFlow 2.21.0``."""
    clock = record.get("cpu_mhz")
    cpu = ", ".join(str(part) for part in (
        f"{record.get('cores')} cores" + (f" at {clock:,} MHz" if clock else ""),
        record.get("bfloat16_unit"),
        record.get("memory_gib") and f"{record['memory_gib']} GiB") if part)
    gpus = record.get("gpus") or []
    towers = record.get("replicas")
    return (f"{record.get('cpu')} ({cpu}), {', '.join(gpus) if gpus else 'no GPU'}, "
            f"{towers} tower{'s' if towers != 1 else ''}, {record.get('precision')}, "
            f"TensorFlow {record.get('tensorflow')}")
