"""Size presets: the settings a model trains with where it runs, unless the user says otherwise.

A model's default sizes are the paper's, meant for GPUs; on a CPU they train at a few seconds a
step and show nothing for an hour. So a model declares presets (``ModelSpec.presets``): settings
keyed as ``-o`` names them, valued as the command line writes them or typed, e.g. a ``cpu``
preset of smaller widths, a learning rate with warm-up, and dev evaluations every few minutes.
``-o preset=auto`` (the default) picks ``full`` where a GPU is visible (and not ``--devices
cpu``), ``cpu`` where not; ``-o preset=NAME`` picks one by name and ``-o preset=none`` trains on
the model's ``Config`` defaults alone. Every setting the user gives (``-o`` or a named option
such as ``--batch-size``) wins over the preset's. The run's ``config.json`` records the chosen
preset and every resolved value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from asrkit.config.overrides import Overrides, typed_overrides
from asrkit.core.errors import AsrkitError

if TYPE_CHECKING:
    from asrkit.types import ModelSpec

#: Chosen by ``auto`` where GPUs are visible / where not.
GPU_PRESET, CPU_PRESET = "full", "cpu"


def choose_preset(spec: ModelSpec, requested: str, devices: str = "") -> tuple[str, str]:
    """The preset to apply (``""`` for none) and, for the user, why it was chosen."""
    presets = getattr(spec, "presets", {}) or {}
    if requested == "none":
        return "", "preset=none: the model's own defaults"
    if requested != "auto":
        if requested not in presets:
            known = ", ".join(sorted(presets)) or "none"
            raise AsrkitError(f"model {spec.name!r} has no preset {requested!r} (presets: "
                              f"{known}; or auto, none)")
        return requested, f"preset={requested}"
    if not presets:
        return "", f"model {spec.name!r} declares no presets: its own defaults"
    if devices != "cpu" and visible_gpus():
        return GPU_PRESET, "GPUs visible: the full sizes (-o preset=cpu for the small ones)"
    return CPU_PRESET, (f"no GPU: sizes that learn within minutes on a CPU (-o preset="
                        f"{GPU_PRESET} for the full ones)")


def preset_settings(spec: ModelSpec, name: str) -> Overrides:
    """The settings of ``spec``'s preset ``name`` (none for ``""``), parsed as ``-o`` is."""
    return typed_overrides(spec.presets[name]) if name else Overrides()


def visible_gpus() -> int:
    import tensorflow as tf

    return len(tf.config.list_physical_devices("GPU"))
