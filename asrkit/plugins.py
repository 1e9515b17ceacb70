"""Finding, loading and listing plugins.

Plugins are modules named by entry points in the ``asrkit`` group; asrkit's own importers,
models, decoders and features are found the same way, through asrkit's own entry points.
Loading never lets one broken plugin take the command line down: a plugin that fails to import,
whose hooks raise, or that registers something invalid is recorded as a :class:`LoadFailure`
and the rest keep working. ``ASRKIT_STRICT_PLUGINS=1`` turns failures into an error exit;
``ASRKIT_DISABLE_PLUGINS=a,b`` skips plugins by entry-point or distribution name.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from importlib import metadata
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pluggy

from asrkit import hookspecs
from asrkit.errors import PluginError
from asrkit.registry import Provider, Registry

if TYPE_CHECKING:
    import click

ENTRY_POINT_GROUP = "asrkit"
STRICT_ENV = "ASRKIT_STRICT_PLUGINS"
DISABLE_ENV = "ASRKIT_DISABLE_PLUGINS"

#: Each registering hook and the registry kind it fills.
REGISTER_HOOKS = {
    "register_importers": "importer",
    "register_models": "model",
    "register_decoders": "decoder",
    "register_features": "feature",
}


@dataclass
class PluginInfo:
    """A loaded plugin and what it registered (kind -> names)."""

    provider: Provider
    module: str
    hooks: list[str]
    registered: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class LoadFailure:
    """A plugin that could not be used, with a one-line reason."""

    provider: Provider
    error: str

    def message(self) -> str:
        provider = self.provider
        return f"plugin {provider.plugin!r} from {provider.distribution} failed: {self.error}"


def one_line(error: BaseException) -> str:
    """``Type: message`` on a single line, for reports that must not spill tracebacks."""
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def strict_mode() -> bool:
    return os.environ.get(STRICT_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def disabled_names() -> set[str]:
    return {n.strip() for n in os.environ.get(DISABLE_ENV, "").split(",") if n.strip()}


class PluginSet:
    """A pluggy manager plus the bookkeeping asrkit needs: providers, failures, the registry."""

    def __init__(self) -> None:
        self.manager = pluggy.PluginManager(hookspecs.PROJECT)
        self.manager.add_hookspecs(hookspecs)
        self.plugins: dict[str, PluginInfo] = {}
        self.failures: list[LoadFailure] = []
        self.registry = Registry()

    # -- loading -----------------------------------------------------------------------------

    def load_entry_points(self, disabled: set[str] | None = None) -> None:
        """Load every installed ``asrkit`` entry point, in a stable order."""
        disabled = disabled_names() if disabled is None else disabled
        points = sorted(
            metadata.entry_points(group=ENTRY_POINT_GROUP),
            key=lambda ep: (ep.dist.name if ep.dist else "", ep.name),
        )
        for ep in points:
            dist = ep.dist.name if ep.dist else "unknown"
            version = ep.dist.version if ep.dist else ""
            provider = Provider(ep.name, dist, version)
            if ep.name in disabled or dist in disabled:
                continue
            try:
                module = ep.load()
            except Exception as error:  # a broken plugin must not take the CLI down
                self.failures.append(LoadFailure(provider, one_line(error)))
                continue
            self.add_module(module, provider)

    def add_module(self, module: ModuleType | Any, provider: Provider) -> None:
        """Register one plugin module (or object with hook implementations) and collect what its
        ``register_*`` hooks provide."""
        if provider.plugin in self.plugins:
            self.failures.append(
                LoadFailure(provider, f"a plugin named {provider.plugin!r} is already loaded "
                            f"from {self.plugins[provider.plugin].provider.distribution}")
            )
            return
        try:
            self.manager.register(module, name=provider.plugin)
        except Exception as error:  # e.g. a hook implementation with a wrong signature
            self.failures.append(LoadFailure(provider, one_line(error)))
            return
        hooks = sorted(caller.name for caller in self.manager.get_hookcallers(module) or [])
        info = PluginInfo(provider, getattr(module, "__name__", repr(module)), hooks)
        self.plugins[provider.plugin] = info
        for hook_name, kind in REGISTER_HOOKS.items():
            if hook_name in hooks:
                self._collect(info, hook_name, kind)

    def _collect(self, info: PluginInfo, hook_name: str, kind: str) -> None:
        found: list[tuple[str, Any]] = []

        def register(obj: Any) -> None:
            found.append((self.registry.validate(kind, obj), obj))

        implementation = getattr(info_module(self.manager, info), hook_name)
        try:
            implementation(register=register)
        except Exception as error:
            self.failures.append(LoadFailure(info.provider, f"{hook_name}: {one_line(error)}"))
            return
        for name, obj in found:
            self.registry.add(kind, obj, info.provider)
            info.registered.setdefault(kind, []).append(name)

    def add_commands(self, cli: click.Group) -> None:
        """Let every plugin add its commands to ``cli`` (the ``register_commands`` hook)."""
        for info in self.plugins.values():
            if "register_commands" not in info.hooks:
                continue
            before = dict(cli.commands)
            try:
                info_module(self.manager, info).register_commands(cli=cli)
            except Exception as error:
                self.failures.append(
                    LoadFailure(info.provider, f"register_commands: {one_line(error)}")
                )
                continue
            replaced = sorted(n for n, c in before.items() if cli.commands.get(n) is not c)
            if replaced:  # a plugin may add commands, never take over existing ones
                cli.commands.update({name: before[name] for name in replaced})
                self.failures.append(LoadFailure(
                    info.provider,
                    f"register_commands: command {replaced[0]!r} already exists; not replaced",
                ))
            added = sorted(set(cli.commands) - set(before))
            if added:
                info.registered.setdefault("command", []).extend(added)

    # -- reporting ---------------------------------------------------------------------------

    def conflict_failures(self) -> list[str]:
        registry = self.registry
        return [registry.conflict_message(kind, name) for kind, name in registry.conflicts]

    def problems(self) -> list[str]:
        """Every load failure and name conflict, one line each."""
        return [f.message() for f in self.failures] + self.conflict_failures()

    def check_strict(self) -> None:
        """Raise on the first problem when ``ASRKIT_STRICT_PLUGINS`` is set."""
        problems = self.problems()
        if problems and strict_mode():
            raise PluginError(problems[0] + f" ({STRICT_ENV} is set)")

    def as_json(self) -> dict[str, Any]:
        return {
            "plugins": [
                {
                    "name": info.provider.plugin,
                    "distribution": info.provider.distribution,
                    "version": info.provider.version,
                    "module": info.module,
                    "hooks": info.hooks,
                    "registered": info.registered,
                }
                for info in self.plugins.values()
            ],
            "failures": [
                {
                    "name": f.provider.plugin,
                    "distribution": f.provider.distribution,
                    "version": f.provider.version,
                    "error": f.error,
                }
                for f in self.failures
            ],
            "conflicts": self.conflict_failures(),
        }


def info_module(manager: pluggy.PluginManager, info: PluginInfo) -> Any:
    return manager.get_plugin(info.provider.plugin)


_DEFAULT: PluginSet | None = None


def get_plugins() -> PluginSet:
    """The process-wide plugin set, loaded from entry points on first use."""
    global _DEFAULT
    if _DEFAULT is None:
        plugins = PluginSet()
        plugins.load_entry_points()
        _DEFAULT = plugins
    return _DEFAULT


def set_plugins(plugins: PluginSet | None) -> None:
    """Replace the process-wide plugin set (tests use this for isolation)."""
    global _DEFAULT
    _DEFAULT = plugins


def get(kind: str, name: str) -> Any:
    """The installed ``kind`` named ``name`` (e.g. ``get("importer", "ted")``)."""
    return get_plugins().registry.get(kind, name)
