"""Typed settings: the one way every config dataclass is declared, checked, set from the command
line, saved, read back and listed (models, feature extractors, decoders, training, pipeline).

A config is a frozen dataclass. A field declares what it accepts with :func:`setting`, which
stores a :class:`Range` (and, optionally, a one-line ``doc``) in the field's metadata::

    n_hidden: int = setting(494, min=1, doc="units of each hidden layer")
    dropout: float = setting(0.05, min=0, below=1)
    token_min_logp: float | None = setting(-10.0, max=0, finite=False)
    normalize: str = setting("none", choices=("none", "feature", "utterance", "running"))

and the dataclass's ``__post_init__`` calls :func:`validate` (:func:`override` and
:func:`from_dict` call it too, so a config without ``__post_init__`` is still checked when it is
set from the command line or read from a run). :func:`validate` checks every field: its type,
that a float is finite (NaN never passes; infinity only where ``finite=False``), the declared
bounds (for a tuple or list, of each item) and choices. Cross-field rules stay in the class's
own ``__post_init__``. Every refusal is one :class:`~asrkit.core.errors.AsrkitError` line naming the
setting, the value and what is allowed.

Field types the command line can set (``-o KEY=VALUE``, parsed by :func:`parse_value`):
``bool`` (true/false, yes/no, on/off, 1/0), ``int``, ``float`` (``inf``/``-inf`` where the
field allows it), ``str``, :class:`pathlib.Path`, ``typing.Literal[...]``, an
:class:`enum.Enum` (by value or name), ``X | None`` / ``Optional[X]`` (``none`` or ``null``
for None), and ``tuple[X, ...]`` / ``list[X]`` of the simple ones (comma-separated).
:func:`format_value` writes a value in the form :func:`parse_value` reads back.

:func:`describe` lists a config's settings (name, type, default, doc) for ``asrkit plugins
--settings NAME``; a field's doc is its ``doc=`` metadata, else the ``#:`` comment above it.

This module imports nothing but the standard library and :mod:`asrkit.core.errors`: any module of
asrkit (and any plugin) can declare settings without an import cycle.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import math
import numbers
import re
import textwrap
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from asrkit.core.errors import AsrkitError

#: Seeds reach numpy, which takes 0 to 2**32 - 1.
MAX_SEED = 2**32 - 1
#: Upper bounds that several settings share. Each numeric setting declares a maximum (or the
#: reason it needs none, in tests/test_settings_bounds.py): a mistyped ``-o`` value must be a
#: one-line error, not a layer that exhausts memory, or a number that overflows where TensorFlow
#: or a protocol buffer converts it, hours into a run.
#: Steps of training (a count of batches): a billion is years of steps; 2**63 would overflow.
MAX_STEPS = 10**9
#: Epochs: more than any run can go through.
MAX_EPOCHS = 100_000
#: Minutes of training time: a year.
MAX_MINUTES = 366 * 24 * 60
#: Utterances a batch, per device: far beyond what fits an accelerator's memory.
MAX_BATCH_SIZE = 4096
#: The keys of a field's metadata holding its :class:`Range` and its one-line description.
RANGE = "range"
DOC = "doc"
#: Spellings of true, false and none on the command line.
TRUE, FALSE, NONE = ("1", "true", "yes", "on"), ("0", "false", "no", "off"), ("none", "null")


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
    """A bound as people read it and ``-o`` takes it back: ``0.25``, ``1e+06``, and a large
    integer in groups of three (``1_000_000_000``, which Python's ``int`` reads)."""
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, int) and abs(value) >= 100_000:
        return f"{value:_}"
    return str(value)


def setting(default: Any, *, min: float | None = None, max: float | None = None,
            above: float | None = None, below: float | None = None,
            choices: tuple[Any, ...] = (), pattern: str = "", pattern_doc: str = "",
            finite: bool = True, doc: str = "") -> Any:
    """A dataclass field with ``default`` that accepts what the :class:`Range` arguments say;
    ``doc`` is the line ``asrkit plugins --settings`` shows (default: the ``#:`` comment above
    the field)."""
    allowed = Range(min, max, above, below, tuple(choices), pattern, pattern_doc, finite)
    metadata: dict[str, Any] = {RANGE: allowed}
    if doc:
        metadata[DOC] = doc
    return dataclasses.field(default=default, metadata=metadata)


# -- types ---------------------------------------------------------------------------------------


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(kind: type) -> dict[str, Any]:
    """The resolved annotations of a config class, computed once per class."""
    hints = _HINTS.get(kind)
    if hints is None:
        try:
            hints = typing.get_type_hints(kind)
        except Exception:  # a name the annotations use is not importable here: what resolves
            hints = {f.name: f.type for f in fields(kind) if not isinstance(f.type, str)}
        _HINTS[kind] = hints
    return hints


def field_types(kind: type) -> dict[str, Any]:
    """The resolved type of every field of the config class ``kind`` (``Any`` if unknown)."""
    hints = _hints(kind)
    return {f.name: hints.get(f.name, Any) for f in fields(kind)}


def _optional(kind: Any) -> tuple[Any, bool]:
    """``(int, True)`` for ``int | None``; ``(kind, False)`` for anything else."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(kind)) == 2:
            return args[0], True
    return kind, False


def _sequence(kind: Any) -> Any:
    """The item type of ``tuple[X, ...]``, ``tuple[X]`` or ``list[X]``; ``None`` otherwise."""
    origin = typing.get_origin(kind)
    if origin in (tuple, list):
        args = [a for a in typing.get_args(kind) if a is not Ellipsis]
        return args[0] if args else Any
    return None


def _is_enum(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, enum.Enum)


def type_name(kind: Any) -> str:
    """``an integer``, ``a number or none``, ``one of 'a', 'b'``: a type as people say it."""
    inner, optional = _optional(kind)
    if optional:
        return f"{type_name(inner)} or none"
    item = _sequence(inner)
    if item is not None:
        items = {bool: "true/false values", int: "integers", float: "numbers", str: "strings",
                 Path: "paths"}
        return "a comma-separated list of " + items.get(item, "values")
    if typing.get_origin(inner) is typing.Literal:
        return "one of " + ", ".join(map(_show, typing.get_args(inner)))
    if _is_enum(inner):
        return "one of " + ", ".join(str(m.value) for m in inner)
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string",
             Path: "a path"}
    return names.get(inner, getattr(inner, "__name__", str(inner)))


def short_type(kind: Any) -> str:
    """``int``, ``float | None``, ``tuple[int, ...]``: a type as Python writes it, for listings."""
    inner, optional = _optional(kind)
    if optional:
        return f"{short_type(inner)} | None"
    item = _sequence(inner)
    if item is not None:
        origin = typing.get_origin(inner)
        return f"{origin.__name__}[{short_type(item)}{', ...' if origin is tuple else ''}]"
    if typing.get_origin(inner) is typing.Literal:
        return "Literal[" + ", ".join(map(repr, typing.get_args(inner))) + "]"
    return getattr(inner, "__name__", str(inner).replace("typing.", ""))


# -- checking ------------------------------------------------------------------------------------


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
    if kind is Path:
        return isinstance(value, Path)
    if typing.get_origin(kind) is typing.Literal:
        return any(value == a and type(value) is type(a) for a in typing.get_args(kind))
    if _is_enum(kind):
        return isinstance(value, kind)
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
        item_kind = _sequence(kind)
        if item_kind is None:
            problem = _check(value, kind, allowed)
        elif not isinstance(value, typing.get_origin(kind)):
            problem = f"must be {type_name(kind)}"
        else:  # each item against the item type and the range
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
    return type_name(kind) if bounds == "any value" else f"{type_name(kind)} {bounds}"


def _show(value: Any) -> str:
    if isinstance(value, tuple | list):
        return ",".join(_show(v) for v in value) or "()"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, enum.Enum):
        return str(value.value)
    return str(value)


# -- strings: the command line -------------------------------------------------------------------


def parse_value(value: str, kind: Any, key: str) -> Any:
    """The command line's ``value`` as a ``kind`` (see the module's list of types); a value that
    is not one is an :class:`AsrkitError` ``-o KEY=VALUE: not <type>``."""
    try:
        return _parse(value, kind, key)
    except ValueError:
        raise AsrkitError(f"-o {key}={value}: not {type_name(kind)}") from None


def _parse(value: str, kind: Any, key: str) -> Any:
    inner, optional = _optional(kind)
    text = value.strip()
    if optional and text.lower() in NONE:
        return None
    item = _sequence(inner)
    if item is not None:
        parsed = [_parse(p, item, key) for p in text.split(",") if p.strip()]
        return tuple(parsed) if typing.get_origin(inner) is tuple else parsed
    if inner is bool:
        if text.lower() not in TRUE + FALSE:
            raise ValueError(value)
        return text.lower() in TRUE
    if inner is int:
        return int(text)
    if inner is float:
        return float(text)
    if inner is str:
        return value
    if inner is Path:
        return Path(value)
    if typing.get_origin(inner) is typing.Literal:
        for choice in typing.get_args(inner):
            if str(choice) == text or (isinstance(choice, bool) and text.lower() == str(choice)
                                       .lower()):
                return choice
        raise ValueError(value)
    if _is_enum(inner):
        for member in inner:
            if text in (str(member.value), member.name):
                return member
        raise ValueError(value)
    if inner is Any:
        return value
    raise AsrkitError(f"-o {key}={value}: {key} is a {type_name(kind)} setting, which the "
                      "command line cannot set")


def format_value(value: Any) -> str:
    """``value`` as :func:`parse_value` reads it back: ``true``, ``none``, ``-inf``, ``1,2``."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple | list):
        return ",".join(format_value(v) for v in value)
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, float):
        return repr(value)  # 'inf', '-inf', '1e-08': float() reads each back exactly
    return str(value)


def override(config: Any, key: str, value: Any, prefix: str = "") -> Any:
    """``config`` with field ``key`` set to ``value``: a string is read as the field's type (the
    command line's form), any other value is taken as it is (a preset's typed value); then
    checked by :func:`validate`. ``prefix`` (``decoder.``) is how the user wrote the key, for
    the messages."""
    return apply(config, [(key, value)], prefix)


def apply(config: Any, pairs: Iterable[tuple[str, Any]], prefix: str = "") -> Any:
    """``config`` with every ``(key, value)`` of ``pairs`` set as :func:`override` sets one, a
    later value of a key winning; the config is built and checked once with all of them, so
    that settings checked together (``lr_schedule=noam`` needs ``warmup_steps``) may come in
    any order."""
    names = [f.name for f in fields(config)]
    kinds = field_types(type(config))
    changes = {}
    for key, value in pairs:
        if key not in names:
            raise AsrkitError(
                f"unknown setting {key!r} for {type(config).__name__}; "
                f"known: {', '.join(sorted(names))}"
            )
        changes[key] = (parse_value(value, kinds[key], prefix + key) if isinstance(value, str)
                        else value)
    if not changes:
        return config
    changed = replace(config, **changes)
    validate(changed)
    return changed


# -- JSON: run folders ---------------------------------------------------------------------------


def to_dict(config: Any) -> dict[str, Any]:
    """``config`` as JSON's types (paths and enums as strings, tuples as lists)."""
    return {name: _jsonable(value) for name, value in dataclasses.asdict(config).items()}


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    return value


def from_dict(kind: type, values: dict[str, Any]) -> Any:
    """Rebuild a config dataclass from :func:`to_dict`'s output (lists back to tuples, strings
    back to paths and enums); unknown names and values not allowed are one-line errors."""
    types_ = field_types(kind)
    clean = {}
    for name, value in values.items():
        if name not in types_:
            raise AsrkitError(f"unknown setting {name!r} for {kind.__name__}")
        clean[name] = _from_json(value, types_[name])
    config = kind(**clean)
    validate(config)
    return config


def _from_json(value: Any, kind: Any) -> Any:
    inner, _ = _optional(kind)
    if value is None:
        return None
    item = _sequence(inner)
    if item is not None and isinstance(value, list | tuple):
        items = [_from_json(v, item) for v in value]
        return tuple(items) if typing.get_origin(inner) is tuple else items
    if inner is Path and isinstance(value, str):
        return Path(value)
    if _is_enum(inner):
        try:
            return inner(value)
        except ValueError:
            return value  # validate names it
    if isinstance(value, list):
        return tuple(value)
    return value


# -- discovery -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SettingInfo:
    """One setting of a config class, as ``asrkit plugins --settings`` lists it."""

    name: str
    type: str
    default: str  # in the command line's form (format_value)
    allowed: str  # "an integer >= 1", "one of ..."
    doc: str

    def to_json(self) -> dict[str, str]:
        return dataclasses.asdict(self)


def describe(kind: type) -> list[SettingInfo]:
    """The settings of the config class ``kind`` in declaration order: name, type, default (as
    the command line writes it), what is allowed, and the doc line."""
    comments = _field_comments(kind)
    types_ = field_types(kind)
    out = []
    for field in fields(kind):
        if field.default is not dataclasses.MISSING:
            default = format_value(field.default)
        elif field.default_factory is not dataclasses.MISSING:
            default = format_value(field.default_factory())
        else:
            default = "(required)"
        inner, optional = _optional(types_[field.name])
        allowed = _wanted(inner, field.metadata.get(RANGE, Range()))
        allowed_range = field.metadata.get(RANGE, Range())
        if not allowed_range.finite and inner is float:
            upper = allowed_range.max is not None or allowed_range.below is not None
            lower = allowed_range.min is not None or allowed_range.above is not None
            allowed += ", " + ("-inf" if upper and not lower else "inf" if lower and not upper
                               else "inf, -inf")
        if optional:
            allowed += ", or none" if "," in allowed else " or none"
        doc = field.metadata.get(DOC) or comments.get(field.name, "")
        out.append(SettingInfo(field.name, short_type(types_[field.name]), default, allowed,
                               doc))
    return out


def _field_comments(kind: type) -> dict[str, str]:
    """The ``#:`` comment lines right above each field of ``kind``'s source (Sphinx's
    convention), joined, and of its bases' (a config extending another's inherits its fields'
    docs; the nearest class's comment wins); empty where no source can be read."""
    comments: dict[str, str] = {}
    for cls in kind.__mro__:
        try:
            source = inspect.getsource(cls)
        except (OSError, TypeError):
            continue
        pending: list[str] = []
        for line in source.splitlines():
            stripped = line.strip()
            if stripped.startswith("#:"):
                pending.append(stripped[2:].strip())
                continue
            match = re.match(r"([A-Za-z_]\w*)\s*:", stripped)
            if match and pending:
                comments.setdefault(match.group(1), " ".join(pending))
            pending = []
    return comments


def settings_table(kind: type, prefix: str = "") -> str:
    """:func:`describe` as text: one setting a line (``-o`` key, type, default, allowed), its
    doc indented below."""
    rows = [(prefix + s.name, s.type, s.default or "''", s.allowed, s.doc)
            for s in describe(kind)]
    if not rows:
        return "  (no settings)"
    header = ("SETTING", "TYPE", "DEFAULT", "ALLOWED")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(header[:3], widths, strict=True))
             + "  " + header[3]]
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row[:3], widths, strict=True))
                     + "  " + row[3])
        if row[4]:
            lines.extend(textwrap.wrap(row[4], 96, initial_indent="    ",
                                       subsequent_indent="    "))
    return "\n".join(line.rstrip() for line in lines)
