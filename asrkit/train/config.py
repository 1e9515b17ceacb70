"""Training configuration: frozen dataclasses with their defaults in one place.

A run is described by four sections, each a dataclass: ``train`` (:class:`TrainConfig`), ``model``
(the model's own ``Config``), ``features`` (the feature extractor's ``Config``) and ``pipeline``
(:class:`asrkit.data.pipeline.PipelineConfig`). The command line overrides any field with
``-o section.field=value`` (``-o field=value`` means ``train.field``); an unknown key is an
error. The effective configuration is saved as ``config.json`` in the run directory.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass, fields, replace
from typing import Any

from asrkit.errors import AsrkitError


@dataclass(frozen=True)
class TrainConfig:
    """How to train. Optimiser defaults are the Deep Speech notebook's."""

    model: str = "brnn"
    dataset: str = "sample"
    epochs: int = 10
    #: Utterances per batch per device ("tower"); the global batch is this times the devices.
    batch_size: int = 16
    learning_rate: float = 0.001
    beta1: float = 0.9
    beta2: float = 0.999
    epsilon: float = 1e-8
    #: Clip gradients to this global norm; 0 = no clipping.
    clip_norm: float = 0.0
    #: Linear warm-up of the learning rate over this many steps.
    warmup_steps: int = 0
    #: Reduce the learning rate by ``plateau_factor`` after this many epochs without a dev-loss
    #: improvement of ``min_delta``; 0 = never.
    plateau_patience: int = 0
    plateau_factor: float = 0.1
    #: Stop after this many epochs without improvement of ``early_stop_metric``; 0 = never.
    early_stop_patience: int = 0
    early_stop_metric: str = "loss"
    min_delta: float = 0.0
    seed: int = 0
    #: Stop after this many steps in all (0 = run all epochs).
    max_steps: int = 0
    #: Stop after this many minutes of training in this process (0 = no limit); the run can be
    #: resumed later for more.
    max_minutes: float = 0.0
    #: Write the latest checkpoint every this many minutes, and at every epoch end.
    checkpoint_minutes: float = 10.0
    #: ... and also every this many steps (0 = only by time and epoch).
    checkpoint_steps: int = 0
    #: Devices as towers: "" = every GPU (or the CPU), else e.g. "0,1" (GPU indices) or "cpu".
    devices: str = ""
    mixed_precision: bool = False
    #: Seconds a collective operation (gradient all-reduce) may wait for other workers before
    #: the run stops with an error: a dead worker must not hang the others for ever.
    worker_timeout: float = 300.0
    train_split: str = "train"
    dev_split: str = "dev"
    #: Evaluate on the dev split after each epoch.
    evaluate_dev: bool = True
    decoder: str = "greedy"
    #: Stop with an error after this many consecutive batches with a non-finite loss.
    max_bad_batches: int = 10
    log_every: int = 10
    #: Evaluate on the dev split every this many minutes of training and/or steps (0 = off),
    #: besides every epoch end and the stop; the best checkpoint is chosen among them all.
    eval_every_minutes: float = 0.0
    eval_every_steps: int = 0
    #: The model's size preset (:mod:`asrkit.presets`): auto (``full`` on GPUs, ``cpu`` on a
    #: CPU), a preset's name, or none. A run records the one it used.
    preset: str = "auto"

    def __post_init__(self) -> None:
        if self.early_stop_metric not in ("loss", "wer", "cer"):
            raise AsrkitError("early_stop_metric must be loss, wer or cer")
        if self.batch_size < 1 or self.epochs < 0:
            raise AsrkitError("batch_size must be positive and epochs not negative")


def to_dict(config: Any) -> dict[str, Any]:
    return dataclasses.asdict(config)


def _coerce(value: str, kind: Any, key: str) -> Any:
    origin = typing.get_origin(kind)
    try:
        if kind is bool:
            if value.lower() in ("1", "true", "yes", "on"):
                return True
            if value.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if kind in (int, float, str):
            return kind(value)
        if origin is tuple:
            (inner, *_) = typing.get_args(kind)
            parts = [p for p in value.replace(" ", "").split(",") if p]
            return tuple(_coerce(p, inner, key) for p in parts)
        if kind == (int | None) or kind == (float | None):
            if value.lower() == "none":
                return None
            inner = int if kind == (int | None) else float
            return inner(value)
    except ValueError:
        raise AsrkitError(
            f"-o {key}={value}: not a valid {getattr(kind, '__name__', kind)}"
        ) from None
    return json.loads(value)


def override(config: Any, key: str, value: str) -> Any:
    """``config`` with field ``key`` set from the string ``value`` (typed by the field)."""
    hints = typing.get_type_hints(type(config))
    names = {f.name for f in fields(config)}
    if key not in names:
        raise AsrkitError(
            f"unknown setting {key!r} for {type(config).__name__}; "
            f"known: {', '.join(sorted(names))}"
        )
    return replace(config, **{key: _coerce(value, hints[key], key)})


def from_dict(kind: type, values: dict[str, Any]) -> Any:
    """Rebuild a config dataclass from :func:`to_dict`'s output (lists back to tuples)."""
    hints = typing.get_type_hints(kind)
    clean = {}
    for name, value in values.items():
        if name not in hints:
            raise AsrkitError(f"unknown setting {name!r} for {kind.__name__}")
        clean[name] = tuple(value) if isinstance(value, list) else value
    return kind(**clean)


def split_overrides(pairs: list[str]) -> dict[str, list[tuple[str, str]]]:
    """``["model.n_hidden=100", "epochs=3"]`` -> ``{"model": [("n_hidden", "100")], "train":
    [("epochs", "3")]}``."""
    sections: dict[str, list[tuple[str, str]]] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise AsrkitError(f"-o {pair}: expected KEY=VALUE")
        section, dot, name = key.strip().rpartition(".")
        section = section if dot else "train"
        if section not in ("train", "model", "features", "pipeline"):
            raise AsrkitError(
                f"-o {pair}: unknown section {section!r} (train, model, features, pipeline)"
            )
        sections.setdefault(section, []).append((name, value.strip()))
    return sections
