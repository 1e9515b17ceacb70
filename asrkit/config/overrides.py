"""The ``-o`` syntax, parsed once: every command's settings as typed records, never as strings
passed along and split again.

A run's configuration has six sections (:data:`SECTIONS`). On the command line a setting is
``-o SECTION.KEY=VALUE``; without a section, ``-o KEY=VALUE`` is a ``train`` setting, so
``-o decoder=beam`` chooses the decoder (``train.decoder``), ``-o features=logmel`` the
feature extractor (``train.features``) and ``-o objective=NAME`` the training objective
(``train.objective``), while ``-o decoder.beam_width=8``, ``-o features.num_mel_bins=40`` and
``-o objective.KEY=VALUE`` set one of their settings. A model's preset
(:mod:`asrkit.config.presets`) is written the same way, with typed values or strings.

:func:`parse_overrides` reads ``asrkit train``'s ``-o`` into :class:`Overrides`, the setting
pairs of each section in the order given; :func:`parse_decoder_choice` reads the ``-o`` of the
commands that only decode (``evaluate``, ``transcribe``) into a :class:`DecoderChoice`. What each
value means is the section's config class's business (:func:`asrkit.core.settings.override` types
and checks it where the section is built, :mod:`asrkit.config.run`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from asrkit.config.hotwords import Hotwords
from asrkit.core.errors import AsrkitError

#: The sections of a run's configuration, as ``-o SECTION.KEY=VALUE`` names them.
SECTIONS = ("train", "model", "features", "pipeline", "decoder", "objective")
#: How a decoder setting is written on the command line.
DECODER_PREFIX = "decoder."


def split_pair(pair: str, expected: str = "KEY=VALUE") -> tuple[str, str]:
    """``"a.b = 3"`` -> ``("a.b", "3")``; no ``=`` is a one-line error."""
    key, sep, value = pair.partition("=")
    if not sep or not key.strip():
        raise AsrkitError(f"-o {pair}: expected {expected}")
    return key.strip(), value.strip()


@dataclass(frozen=True)
class Setting:
    """One ``-o SECTION.KEY=VALUE``: the value as written (a string), or typed (a preset's)."""

    section: str
    key: str
    value: Any


@dataclass(frozen=True)
class Overrides:
    """Settings by section, in the order given; later ones win over earlier ones."""

    settings: tuple[Setting, ...] = ()

    def section(self, name: str) -> list[tuple[str, Any]]:
        """``(key, value)`` of every setting of section ``name``, in order."""
        return [(s.key, s.value) for s in self.settings if s.section == name]

    def keys(self, section: str) -> set[str]:
        return {s.key for s in self.settings if s.section == section}

    def without(self, section: str, keys: Iterable[str] = ()) -> Overrides:
        """These settings less section ``section`` (only ``keys`` of it, when given)."""
        dropped = set(keys)
        return Overrides(tuple(s for s in self.settings if s.section != section
                               or (dropped and s.key not in dropped)))

    def __add__(self, other: Overrides) -> Overrides:
        return Overrides(self.settings + other.settings)


def parse_overrides(pairs: Iterable[str]) -> Overrides:
    """``["model.n_hidden=100", "epochs=3"]`` -> the settings ``model.n_hidden`` and
    ``train.epochs``; a pair without ``=`` or with an unknown section is a one-line error."""
    settings = []
    for pair in pairs:
        key, value = split_pair(pair)
        settings.append(_setting(key, value, pair))
    return Overrides(tuple(settings))


def typed_overrides(values: Mapping[str, Any]) -> Overrides:
    """``{"model.n_hidden": 256, "train.batch_size": "8"}`` (a preset) as :class:`Overrides`:
    strings are read as the command line's, other values are taken as typed."""
    return Overrides(tuple(_setting(key, value, f"{key}={value}")
                           for key, value in values.items()))


def _setting(key: str, value: Any, pair: str) -> Setting:
    section, dot, name = key.rpartition(".")
    section = section if dot else "train"
    if section not in SECTIONS:
        raise AsrkitError(f"-o {pair}: unknown section {section!r} ({', '.join(SECTIONS)})")
    return Setting(section, name, value)


@dataclass(frozen=True)
class DecoderChoice:
    """Which decoder a decoding command uses and what it changes in its settings: ``name`` from
    ``--decoder NAME`` or ``-o decoder=NAME`` (``None``: the run's or the model's own),
    ``settings`` from ``-o decoder.KEY=VALUE``, and the ``hotwords`` it boosts (``--hotword``,
    ``--hotwords``; ``None``: none)."""

    name: str | None = None
    settings: tuple[tuple[str, str], ...] = ()
    hotwords: Hotwords | None = None


def parse_decoder_choice(option: str | None, pairs: Iterable[str],
                         hotwords: Hotwords | None = None) -> DecoderChoice:
    """``--decoder`` (``option``) and the ``-o`` of a command that only decodes:
    ``decoder=NAME`` chooses (it must agree with ``--decoder``), ``decoder.KEY=VALUE`` (or just
    ``KEY=VALUE``) sets one of its settings; another section is a one-line error. ``hotwords``
    (:func:`asrkit.config.hotwords.parse_hotwords`) go with the choice."""
    name, settings = option, []
    for pair in pairs:
        key, value = split_pair(pair, "decoder=NAME or decoder.KEY=VALUE")
        if key == "decoder":
            if name is not None and value != name:
                raise AsrkitError(f"--decoder {name} and -o decoder={value} disagree: give one")
            name = value
            continue
        section, dot, _ = key.rpartition(".")
        if dot and section != "decoder":
            raise AsrkitError(f"-o {pair}: only the decoder's settings can be given here "
                              "(decoder=NAME, decoder.KEY=VALUE)")
        settings.append((key.removeprefix(DECODER_PREFIX), value))
    return DecoderChoice(name, tuple(settings), hotwords)
