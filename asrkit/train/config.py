"""Training configuration: frozen dataclasses with their defaults in one place.

A run is described by four sections, each a dataclass: ``train`` (:class:`TrainConfig`), ``model``
(the model's own ``Config``), ``features`` (the feature extractor's ``Config``) and ``pipeline``
(:class:`asrkit.data.pipeline.PipelineConfig`). The command line overrides any field with
``-o section.field=value`` (``-o field=value`` means ``train.field``); an unknown key is an
error. The effective configuration is saved as ``config.json`` in the run directory.

Every setting is checked before any work starts. A field declares what it accepts with
:func:`setting`, which stores a :class:`Range` in the field's metadata::

    n_hidden: int = setting(494, min=1)
    dropout: float = setting(0.05, min=0, below=1)
    early_stop_metric: str = setting("loss", choices=("loss", "wer", "cer"))

and the dataclass's ``__post_init__`` calls :func:`validate` (``override`` and ``from_dict``
call it too, so a config class that has no ``__post_init__`` is still checked when it is set
from the command line or read from a run). :func:`validate` checks every field: its type, that a
float is finite (NaN never passes; infinity only where ``finite=False``), the declared bounds
(for a tuple, of each item) and choices; the error is one line naming the setting, the value and
what is allowed. Cross-field rules (e.g. ``num_cepstra <= num_filters``) stay in the class's own
``__post_init__``. :func:`check_names` checks the plugin names a run uses (model, feature
extractor, decoder) against what is installed, before any training.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import re
import types
import typing
from dataclasses import dataclass, fields, replace
from typing import Any

from asrkit.errors import AsrkitError

#: The key of a field's metadata holding its :class:`Range`.
RANGE = "range"
#: ``devices``: every GPU (empty), the CPU, GPU indices, or explicit device names.
DEVICES_PATTERN = r"\s*(|cpu|\d+(\s*,\s*\d+)*|/[^,]+(,\s*/[^,]+)*)\s*"
#: Seeds reach numpy, which takes 0 to 2**32 - 1.
MAX_SEED = 2**32 - 1


@dataclass(frozen=True)
class Range:
    """What a setting accepts: ``min``/``max`` inclusive, ``above``/``below`` exclusive bounds,
    ``choices`` (a fixed set of values), ``pattern`` (a regular expression a string must match
    whole, described by ``pattern_doc``), and ``finite=False`` to let a float be +-infinity."""

    min: float | None = None
    max: float | None = None
    above: float | None = None
    below: float | None = None
    choices: tuple[Any, ...] = ()
    pattern: str = ""
    pattern_doc: str = ""
    finite: bool = True

    def describe(self) -> str:
        """``>= 1``, ``in [0, 1)``, ``one of loss, wer, cer``: what the error message shows."""
        if self.choices:
            return "one of " + ", ".join(repr(c) if c == "" else str(c) for c in self.choices)
        if self.pattern:
            return self.pattern_doc or f"matching {self.pattern!r}"
        low = (f"[{_num(self.min)}" if self.min is not None
               else f"({_num(self.above)}" if self.above is not None else None)
        high = (f"{_num(self.max)}]" if self.max is not None
                else f"{_num(self.below)})" if self.below is not None else None)
        if low and high:
            return f"in {low}, {high}"
        if low:
            return f"{'>=' if self.min is not None else '>'} {low[1:]}"
        if high:
            return f"{'<=' if self.max is not None else '<'} {high[:-1]}"
        return "any value"

    def allows(self, value: Any) -> bool:
        if self.choices:
            return value in self.choices
        if self.pattern:
            return re.fullmatch(self.pattern, value, re.IGNORECASE) is not None
        return ((self.min is None or value >= self.min)
                and (self.max is None or value <= self.max)
                and (self.above is None or value > self.above)
                and (self.below is None or value < self.below))


def _num(value: float | None) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def setting(default: Any, *, min: float | None = None, max: float | None = None,
            above: float | None = None, below: float | None = None,
            choices: tuple[Any, ...] = (), pattern: str = "", pattern_doc: str = "",
            finite: bool = True) -> Any:
    """A dataclass field with ``default`` that accepts what the :class:`Range` arguments say."""
    allowed = Range(min, max, above, below, tuple(choices), pattern, pattern_doc, finite)
    return dataclasses.field(default=default, metadata={RANGE: allowed})


@functools.cache
def _hints(kind: type) -> dict[str, Any]:
    return typing.get_type_hints(kind)


def _optional(kind: Any) -> tuple[Any, bool]:
    """``(int, True)`` for ``int | None``; ``(kind, False)`` for anything else."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(kind)) == 2:
            return args[0], True
    return kind, False


def _type_name(kind: Any) -> str:
    inner, optional = _optional(kind)
    if optional:
        return f"{_type_name(inner)} or none"
    if typing.get_origin(inner) is tuple:
        items = {bool: "true/false values", int: "integers", float: "numbers", str: "strings"}
        return "a comma-separated list of " + items.get(typing.get_args(inner)[0], "values")
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    return names.get(inner, getattr(inner, "__name__", str(inner)))


def _is(value: Any, kind: Any) -> bool:
    """Whether ``value`` is of the simple type ``kind`` (an int counts as a float; a bool is
    neither an int nor a float)."""
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if kind is str:
        return isinstance(value, str)
    return True  # a type validate does not know: left to the class


def validate(config: Any, error: type[AsrkitError] = AsrkitError) -> None:
    """Check every field of the dataclass ``config`` against its type and :class:`Range`;
    raise ``error`` with one line naming the first setting that is not allowed."""
    hints = _hints(type(config))
    for field in fields(config):
        value = getattr(config, field.name)
        kind, optional = _optional(hints.get(field.name, Any))
        if value is None and optional:
            continue
        allowed = field.metadata.get(RANGE, Range())
        if typing.get_origin(kind) is not tuple:
            problem = _check(value, kind, allowed)
        elif not isinstance(value, tuple):
            problem = f"must be {_type_name(kind)}"
        else:  # each item against the item type and the range
            item_kind = typing.get_args(kind)[0]
            problem = next(filter(None, (_check(v, item_kind, allowed) for v in value)), "")
        if problem:
            raise error(f"setting {field.name}={_show(value)} is not allowed: {problem}")


def _check(value: Any, kind: Any, allowed: Range) -> str:
    """What is wrong with one value (an item of a tuple setting), or ``""``."""
    if not _is(value, kind):
        return f"must be {_wanted(kind, allowed)}"
    if kind is float and math.isnan(value):
        return f"must be {_wanted(kind, allowed)}, not nan"
    if kind is float and allowed.finite and math.isinf(value):
        return f"must be finite: {_wanted(kind, allowed)}"
    if kind in (int, float, str) and not allowed.allows(value):
        return f"must be {_wanted(kind, allowed)}"
    return ""


def _wanted(kind: Any, allowed: Range) -> str:
    """``an integer >= 1``, ``one of loss, wer, cer``, ``a string``: what a setting takes."""
    if allowed.choices or allowed.pattern:
        return allowed.describe()
    bounds = allowed.describe()
    return _type_name(kind) if bounds == "any value" else f"{_type_name(kind)} {bounds}"


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(_show(v) for v in value) or "()"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


@dataclass(frozen=True)
class TrainConfig:
    """How to train. Optimiser defaults are the Deep Speech notebook's."""

    model: str = "brnn"
    dataset: str = "sample"
    epochs: int = setting(10, min=0)
    #: Utterances per batch per device ("tower"); the global batch is this times the devices.
    batch_size: int = setting(16, min=1)
    learning_rate: float = setting(0.001, above=0)
    beta1: float = setting(0.9, min=0, below=1)
    beta2: float = setting(0.999, min=0, below=1)
    epsilon: float = setting(1e-8, above=0)
    #: Clip gradients to this global norm; 0 = no clipping.
    clip_norm: float = setting(0.0, min=0)
    #: Linear warm-up of the learning rate over this many steps.
    warmup_steps: int = setting(0, min=0)
    #: Reduce the learning rate by ``plateau_factor`` after this many epochs without a dev-loss
    #: improvement of ``min_delta``; 0 = never.
    plateau_patience: int = setting(0, min=0)
    plateau_factor: float = setting(0.1, above=0, max=1)
    #: Stop after this many epochs without improvement of ``early_stop_metric``; 0 = never.
    early_stop_patience: int = setting(0, min=0)
    early_stop_metric: str = setting("loss", choices=("loss", "wer", "cer"))
    min_delta: float = setting(0.0, min=0)
    seed: int = setting(0, min=0, max=MAX_SEED)
    #: Stop after this many steps in all (0 = run all epochs).
    max_steps: int = setting(0, min=0)
    #: Stop after this many minutes of training in this process (0 = no limit); the run can be
    #: resumed later for more.
    max_minutes: float = setting(0.0, min=0)
    #: Write the latest checkpoint every this many minutes, and at every epoch end.
    checkpoint_minutes: float = setting(10.0, min=0)
    #: ... and also every this many steps (0 = only by time and epoch).
    checkpoint_steps: int = setting(0, min=0)
    #: Devices as towers: "" = every GPU (or the CPU), else e.g. "0,1" (GPU indices) or "cpu".
    devices: str = setting("", pattern=DEVICES_PATTERN, pattern_doc=(
        "'' (every GPU, else the CPU), 'cpu', GPU indices such as '0,1', or device names "
        "such as '/cpu:0,/cpu:1'"))
    mixed_precision: bool = False
    #: Seconds a collective operation (gradient all-reduce) may wait for other workers before
    #: the run stops with an error: a dead worker must not hang the others for ever.
    worker_timeout: float = setting(300.0, above=0)
    train_split: str = "train"
    dev_split: str = "dev"
    #: Evaluate on the dev split after each epoch.
    evaluate_dev: bool = True
    decoder: str = "greedy"
    #: Stop with an error after this many consecutive batches with a non-finite loss.
    max_bad_batches: int = setting(10, min=1)
    log_every: int = setting(10, min=1)
    #: Evaluate on the dev split every this many minutes of training and/or steps (0 = off),
    #: besides every epoch end and the stop; the best checkpoint is chosen among them all.
    eval_every_minutes: float = setting(0.0, min=0)
    eval_every_steps: int = setting(0, min=0)
    #: The model's size preset (:mod:`asrkit.presets`): auto (``full`` on GPUs, ``cpu`` on a
    #: CPU), a preset's name, or none. A run records the one it used.
    preset: str = setting("auto", pattern=r"[A-Za-z0-9_.-]+")
    #: Fine-tuning: the run (``RUN:best`` or ``RUN:latest``) whose weights a new run starts
    #: from, set by ``--init-from``; "" = random weights (:mod:`asrkit.train.finetune`).
    init_from: str = ""
    #: Layers not taken from ``init_from`` but initialised afresh: the output layer when the
    #: alphabet differs (recorded by ``--init-from``), and any named here.
    init_reset: tuple[str, ...] = setting((), pattern=r"[^,\s]+", pattern_doc="layer names")
    #: Layers whose weights training leaves unchanged (names as the model's layers).
    freeze: tuple[str, ...] = setting((), pattern=r"[^,\s]+", pattern_doc="layer names")

    def __post_init__(self) -> None:
        validate(self)


def check_names(train: TrainConfig) -> None:
    """Check that the model, its feature extractor and the decoder that ``train`` names are
    installed, so that a misspelt name stops a run before any work (not after an epoch, when
    the dev evaluation first needs the decoder). The error lists the installed names."""
    from asrkit import plugins

    spec = plugins.get("model", train.model)
    plugins.get("feature", getattr(train, "features", "") or spec.features)
    plugins.get("decoder", train.decoder)


def to_dict(config: Any) -> dict[str, Any]:
    return dataclasses.asdict(config)


#: Spellings of true, false and none on the command line.
TRUE, FALSE, NONE = ("1", "true", "yes", "on"), ("0", "false", "no", "off"), ("none", "null")


def _coerce(value: str, kind: Any, key: str) -> Any:
    """The command line's ``value`` as a ``kind``: bool, int, float, str, a tuple of one of
    them (comma-separated), or any of these or ``None`` (``none``)."""
    try:
        return _parse(value, kind, key)
    except ValueError:
        raise AsrkitError(f"-o {key}={value}: not {_type_name(kind)}") from None


def _parse(value: str, kind: Any, key: str) -> Any:
    inner, optional = _optional(kind)
    if optional and value.strip().lower() in NONE:
        return None
    if typing.get_origin(inner) is tuple:
        item = typing.get_args(inner)[0]
        return tuple(_parse(p, item, key) for p in value.replace(" ", "").split(",") if p)
    text = value.strip()
    if inner is bool:
        if text.lower() not in TRUE + FALSE:
            raise ValueError(value)
        return text.lower() in TRUE
    if inner in (int, float):
        return inner(text)
    if inner is str:
        return value
    raise AsrkitError(f"-o {key}={value}: {key} is a {_type_name(kind)} setting, which the "
                      "command line cannot set")


def override(config: Any, key: str, value: str) -> Any:
    """``config`` with field ``key`` set from the string ``value`` (typed by the field, then
    checked by :func:`validate`)."""
    hints = _hints(type(config))
    names = {f.name for f in fields(config)}
    if key not in names:
        raise AsrkitError(
            f"unknown setting {key!r} for {type(config).__name__}; "
            f"known: {', '.join(sorted(names))}"
        )
    changed = replace(config, **{key: _coerce(value, hints[key], key)})
    validate(changed)
    return changed


def from_dict(kind: type, values: dict[str, Any]) -> Any:
    """Rebuild a config dataclass from :func:`to_dict`'s output (lists back to tuples)."""
    hints = _hints(kind)
    clean = {}
    for name, value in values.items():
        if name not in hints:
            raise AsrkitError(f"unknown setting {name!r} for {kind.__name__}")
        clean[name] = tuple(value) if isinstance(value, list) else value
    config = kind(**clean)
    validate(config)
    return config

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
