"""Named components by kind, each remembered with the plugin and distribution that provided it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, overload

from asrkit.core.errors import PluginError
from asrkit.types import (
    KINDS,
    NAME_PATTERN,
    Decoder,
    FeatureExtractor,
    Importer,
    ModelSpec,
    Objective,
    Tokenizer,
)

#: Anything registered: an instance of one of the classes of :data:`asrkit.types.KINDS`.
Component = Importer | ModelSpec | Decoder | FeatureExtractor | Tokenizer | Objective

#: The distribution whose plugins are asrkit's own: their names can never be taken by another.
BUILTIN_DISTRIBUTION = "asrkit"


@dataclass(frozen=True)
class Provider:
    """Who registered something: the entry-point name and its distribution."""

    plugin: str
    distribution: str
    version: str

    def __str__(self) -> str:
        return f"{self.distribution} (plugin {self.plugin!r})"

    @property
    def builtin(self) -> bool:
        """Whether asrkit's own distribution provides it."""
        return self.distribution == BUILTIN_DISTRIBUTION


@dataclass(frozen=True)
class Registration:
    kind: str
    name: str
    obj: Any  # the kind's class (asrkit.types.KINDS[kind]); readers know which
    provider: Provider


@dataclass
class Registry:
    """Everything the plugins registered. A name claimed by two third-party distributions is
    kept out of the registry and remembered as a conflict, so neither silently shadows the other.
    A name of asrkit's own is never withheld: another plugin's claim on it is ignored and
    remembered, so that installing a plugin can never take a built-in away."""

    entries: dict[str, dict[str, Registration]] = field(
        default_factory=lambda: {kind: {} for kind in KINDS}
    )
    conflicts: dict[tuple[str, str], list[Provider]] = field(default_factory=dict)
    #: Third-party registrations of a built-in name, ignored in favour of the built-in.
    ignored: dict[tuple[str, str], list[Provider]] = field(default_factory=dict)
    #: The names of asrkit's own plugins that ASRKIT_DISABLE_PLUGINS turned off, (kind, name)
    #: -> the built-in: another plugin may take such a name, and is then reported.
    disabled: dict[tuple[str, str], Provider] = field(default_factory=dict)

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
        registration = Registration(kind, name, obj, provider)
        existing = self.entries[kind].get(name)
        clashed = self.conflicts.get(key)
        if clashed is not None and provider.builtin and not any(p.builtin for p in clashed):
            # third parties clashed over a name that turns out to be asrkit's: asrkit's wins
            self.ignored.setdefault(key, []).extend(self.conflicts.pop(key))
        elif clashed is not None:
            clashed.append(provider)
            return
        elif existing is None:
            pass
        elif existing.provider.builtin and not provider.builtin:
            self.ignored.setdefault(key, []).append(provider)
            return
        elif provider.builtin and not existing.provider.builtin:
            self.ignored.setdefault(key, []).append(existing.provider)
        else:
            del self.entries[kind][name]
            self.conflicts[key] = [existing.provider, provider]
            return
        self.entries[kind][name] = registration

    def conflict_message(self, kind: str, name: str) -> str:
        providers = self.conflicts[(kind, name)]
        who = " and ".join(str(p) for p in providers)
        return (
            f"{kind} {name!r} is registered by both {who}; uninstall one of them or block one "
            "with ASRKIT_DISABLE_PLUGINS"
        )

    def ignored_message(self, kind: str, name: str) -> str:
        builtin = self.entries[kind][name].provider
        who = " and ".join(str(p) for p in self.ignored[(kind, name)])
        return (
            f"{kind} {name!r} is registered by both {builtin} and {who}; asrkit's own is used "
            f"and the plugin's is ignored (rename it in the plugin, or block asrkit's with "
            f"ASRKIT_DISABLE_PLUGINS={builtin.plugin})"
        )

    def takeover_message(self, kind: str, name: str, provider: Provider) -> str:
        """The warning for a built-in name that ``provider`` has because the built-in is off."""
        builtin = self.disabled[(kind, name)]
        return (f"{kind} {name!r} now comes from {provider}, because asrkit's own (plugin "
                f"{builtin.plugin!r}) is disabled by ASRKIT_DISABLE_PLUGINS; take "
                f"{builtin.plugin!r} out of it to use asrkit's again")

    def taken_over(self) -> list[tuple[str, str, Provider]]:
        """(kind, name, provider) of every disabled built-in's name another plugin provides."""
        return [(kind, name, self.entries[kind][name].provider)
                for kind, name in self.disabled
                if kind in self.entries and name in self.entries[kind]
                and not self.entries[kind][name].provider.builtin]

    def problems(self) -> list[str]:
        """Every name conflict, every ignored claim on a built-in name and every built-in name
        taken over, one line each."""
        return ([self.conflict_message(kind, name) for kind, name in self.conflicts]
                + [self.ignored_message(kind, name) for kind, name in self.ignored
                   if name in self.entries[kind]]
                + [self.takeover_message(*taken) for taken in self.taken_over()])

    def names(self, kind: str) -> list[str]:
        return sorted(self.entries[kind])

    def registrations(self, kind: str) -> list[Registration]:
        return [self.entries[kind][name] for name in self.names(kind)]

    @overload
    def get(self, kind: Literal["importer"], name: str) -> Importer: ...
    @overload
    def get(self, kind: Literal["model"], name: str) -> ModelSpec: ...
    @overload
    def get(self, kind: Literal["decoder"], name: str) -> Decoder: ...
    @overload
    def get(self, kind: Literal["feature"], name: str) -> FeatureExtractor: ...
    @overload
    def get(self, kind: Literal["tokenizer"], name: str) -> Tokenizer: ...
    @overload
    def get(self, kind: Literal["objective"], name: str) -> Objective: ...
    @overload
    def get(self, kind: str, name: str) -> Component: ...
    def get(self, kind: str, name: str) -> Component:
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
