"""The arithmetic a run trains in: float32, or mixed precision (float32 weights, 16-bit products).

``precision`` (a training setting) is one of :data:`asrkit.config.train.PRECISIONS`:

- ``float32``: everything in float32.
- ``mixed_float16``: Keras' mixed precision with float16 products and loss scaling: for GPUs
  with tensor cores.
- ``mixed_bfloat16``: bfloat16 products, float32 weights and optimiser state, no loss scaling
  (bfloat16 has float32's exponent range). On a CPU with AMX (Intel Xeon since Sapphire Rapids)
  or AVX512-BF16 (AMD Zen 4 and later, Intel Cooper Lake) oneDNN multiplies bfloat16 in
  hardware: a ``ds2`` step 1.45x faster with AMX, a ``brnn`` step 1.65x with AVX512-BF16
  (docs/benchmarks.md has the measurements). Where the CPU has neither, TensorFlow emulates
  bfloat16 and is slower than float32.
- ``auto`` (the default): ``mixed_bfloat16`` when the towers are this machine's CPU and the CPU
  has AMX-BF16 or AVX512-BF16, else ``float32``. GPUs keep float32 unless asked: float16's loss
  scaling is a choice for the user to make knowingly.

Whatever the precision, the CTC loss, the weights and checkpoints are float32: a run trained in
one precision is evaluated, resumed, fine-tuned and exported in any other. The policy applies
to the layers a model builds (:func:`policy`), not to the process: evaluation and export after
training in the same process build their models in float32.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

#: The /proc/cpuinfo flag of AMX's bfloat16 tile multiply.
AMX_FLAG = "amx_bf16"
#: The /proc/cpuinfo flag of AVX-512's bfloat16 dot products (no tiles; measured faster than
#: float32 for every bundled model on a Zen 4 CPU all the same).
AVX512_BF16_FLAG = "avx512_bf16"
#: Each flag that makes ``auto`` pick bfloat16, with the name the user is told.
BF16_FLAGS = {AMX_FLAG: "AMX", AVX512_BF16_FLAG: "AVX512-BF16"}


def cpu_info(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, str]:
    """The first processor's fields of ``/proc/cpuinfo`` (``model name``, ``flags``, ...); empty
    where it does not exist (not Linux)."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break  # the end of the first processor's block
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def flags_in(info: dict[str, str]) -> set[str]:
    """The feature flags of a :func:`cpu_info`."""
    return set(info.get("flags", "").split())


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The CPU's feature flags (empty where /proc/cpuinfo does not exist: not Linux)."""
    return flags_in(cpu_info(cpuinfo))


def bfloat16_unit(flags: set[str]) -> str | None:
    """The CPU's unit that multiplies bfloat16 in hardware (``AMX``, ``AVX512-BF16``), if any."""
    return next((name for flag, name in BF16_FLAGS.items() if flag in flags), None)


def onednn_enabled() -> bool:
    """oneDNN's kernels (TensorFlow's default on x86 Linux) do the bfloat16 products; with
    ``TF_ENABLE_ONEDNN_OPTS=0`` TensorFlow emulates them."""
    return os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1").strip().lower() not in ("0", "false")


def choose_precision(requested: str, on_gpus: bool, flags: set[str] | None = None
                     ) -> tuple[str, str]:
    """The precision to train in (a Keras dtype policy name) and, for the user, why."""
    if requested != "auto":
        return requested, f"precision={requested}"
    if on_gpus:
        return "float32", "GPUs: float32; -o precision=mixed_float16 for float16 products"
    unit = bfloat16_unit(cpu_flags() if flags is None else flags)
    if unit and onednn_enabled():
        return "mixed_bfloat16", (f"this CPU's {unit} multiplies bfloat16 in hardware: "
                                  "bfloat16 products, float32 weights; -o precision=float32 "
                                  "for none")
    return "float32", "this CPU has neither AMX nor AVX512-BF16 to multiply bfloat16 in hardware"


@contextlib.contextmanager
def policy(name: str) -> Iterator[None]:
    """Keras' global dtype policy ``name`` while a model is built, the previous one after:
    layers keep the policy they were made with, and nothing else in the process changes."""
    import keras

    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)
