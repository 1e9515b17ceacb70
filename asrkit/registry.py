"""Named components by kind, each remembered with the plugin and distribution that provided it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from asrkit.errors import PluginError
from asrkit.types import KINDS, NAME_PATTERN


@dataclass(frozen=True)
class Provider:
    """Who registered something: the entry-point name and its distribution."""

    plugin: str
    distribution: str
    version: str

    def __str__(self) -> str:
        return f"{self.distribution} (plugin {self.plugin!r})"


@dataclass(frozen=True)
class Registration:
    kind: str
    name: str
    obj: Any
    provider: Provider


@dataclass
class Registry:
    """Everything the plugins registered. A name claimed by two distributions is kept out of the
    registry and remembered as a conflict, so neither silently shadows the other."""

    entries: dict[str, dict[str, Registration]] = field(
        default_factory=lambda: {kind: {} for kind in KINDS}
    )
    conflicts: dict[tuple[str, str], list[Provider]] = field(default_factory=dict)

    def validate(self, kind: str, obj: Any) -> str:
        """Return the name of ``obj`` if it is a valid ``kind``, else raise :class:`PluginError`."""
        expected = KINDS[kind]
        if not isinstance(obj, expected):
            raise PluginError(
                f"registered {type(obj).__name__!s} as a {kind}, but a {kind} must be an "
                f"instance of asrkit.types.{expected.__name__}"
            )
        name = getattr(obj, "name", None)
        if not isinstance(name, str) or not NAME_PATTERN.match(name):
            raise PluginError(
                f"registered a {kind} with invalid name {name!r}: use lower-case letters, "
                "digits, '-' and '_'"
            )
        return name

    def add(self, kind: str, obj: Any, provider: Provider) -> None:
        name = self.validate(kind, obj)
        key = (kind, name)
        if key in self.conflicts:
            self.conflicts[key].append(provider)
            return
        existing = self.entries[kind].get(name)
        if existing is not None:
            del self.entries[kind][name]
            self.conflicts[key] = [existing.provider, provider]
            return
        self.entries[kind][name] = Registration(kind, name, obj, provider)

    def conflict_message(self, kind: str, name: str) -> str:
        providers = self.conflicts[(kind, name)]
        who = " and ".join(str(p) for p in providers)
        return (
            f"{kind} {name!r} is registered by both {who}; uninstall one of them or block one "
            "with ASRKIT_DISABLE_PLUGINS"
        )

    def names(self, kind: str) -> list[str]:
        return sorted(self.entries[kind])

    def registrations(self, kind: str) -> list[Registration]:
        return [self.entries[kind][name] for name in self.names(kind)]

    def get(self, kind: str, name: str) -> Any:
        """The object registered as ``kind`` ``name``; a clear error when there is none."""
        if (kind, name) in self.conflicts:
            raise PluginError(self.conflict_message(kind, name))
        try:
            return self.entries[kind][name].obj
        except KeyError:
            known = ", ".join(self.names(kind)) or "none"
            raise PluginError(
                f"no {kind} named {name!r} is installed (installed: {known}); "
                "see `asrkit plugins`"
            ) from None
