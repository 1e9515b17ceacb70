"""Finding, loading and listing plugins.

Plugins are modules named by entry points in the ``asrkit`` group; asrkit's own importers,
models, decoders and features are found the same way, through asrkit's own entry points.
Loading never lets one broken plugin take the command line down: a plugin that fails to import,
whose hooks raise (even ``SystemExit``), or that registers something invalid is recorded as a
:class:`LoadFailure` and the rest keep working. Nor can a plugin take asrkit over: asrkit's own
distribution is loaded first and its commands and names always win, whatever another
distribution's name sorts as. ``ASRKIT_STRICT_PLUGINS=1`` turns failures into an error exit;
``ASRKIT_DISABLE_PLUGINS=a,b`` skips plugins by entry-point or distribution name.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import metadata
from types import FrameType, ModuleType, TracebackType
from typing import TYPE_CHECKING, Any, Literal, overload

import pluggy

from asrkit import hookspecs
from asrkit.core.errors import PluginError
from asrkit.registry import Component, Provider, Registry

if TYPE_CHECKING:
    import click

    from asrkit.types import Decoder, FeatureExtractor, Importer, ModelSpec, Tokenizer

ENTRY_POINT_GROUP = "asrkit"
STRICT_ENV = "ASRKIT_STRICT_PLUGINS"
DISABLE_ENV = "ASRKIT_DISABLE_PLUGINS"

#: Each registering hook and the registry kind it fills.
REGISTER_HOOKS = {
    "register_importers": "importer",
    "register_models": "model",
    "register_decoders": "decoder",
    "register_features": "feature",
    "register_tokenizers": "tokenizer",
}


@dataclass
class PluginInfo:
    """A loaded plugin and what it registered (kind -> names)."""

    provider: Provider
    module: str
    hooks: list[str]
    registered: dict[str, list[str]] = field(default_factory=dict)
    #: Modules holding the plugin's code (its own module, those of what it registered): a
    #: traceback frame in one of them, or in a submodule, is this plugin's.
    code: set[str] = field(default_factory=set)

    def claim(self, obj: Any) -> None:
        """Count the module that defines ``obj`` (a class or function) as this plugin's code."""
        module = getattr(obj, "__module__", None)
        if isinstance(module, str):
            self.code.add(module)


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
        points = [
            (Provider(ep.name, ep.dist.name if ep.dist else "unknown",
                      ep.dist.version if ep.dist else ""), ep)
            for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)
        ]
        # asrkit's own first: what it registers is in place before any other plugin runs.
        points.sort(key=lambda item: (not item[0].builtin, item[0].distribution, item[0].plugin))
        for provider, ep in points:
            if provider.plugin in disabled or provider.distribution in disabled:
                continue
            try:
                module = ep.load()
            except KeyboardInterrupt:
                raise
            except BaseException as error:  # even sys.exit() in a plugin must not end asrkit
                self.failures.append(LoadFailure(provider, one_line(error)))
                continue
            self.add_module(module, provider)

    def fail(self, provider: Provider, error: str) -> None:
        """Record that ``provider``'s plugin could not be (fully) used."""
        self.failures.append(LoadFailure(provider, error))

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
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # e.g. a hook implementation with a wrong signature
            self.failures.append(LoadFailure(provider, one_line(error)))
            return
        hooks = sorted(caller.name for caller in self.manager.get_hookcallers(module) or [])
        name = getattr(module, "__name__", None)
        if isinstance(name, str):  # a module
            info = PluginInfo(provider, name, hooks, code={name})
        else:  # an object with hook implementations
            info = PluginInfo(provider, repr(module), hooks)
            info.claim(type(module))
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
        except KeyboardInterrupt:
            raise
        except BaseException as error:
            self.failures.append(LoadFailure(info.provider, f"{hook_name}: {one_line(error)}"))
            return
        for name, obj in found:
            self.registry.add(kind, obj, info.provider)
            info.registered.setdefault(kind, []).append(name)
            info.claim(type(obj))

    def add_commands(self, cli: click.Group) -> None:
        """Let every plugin add its commands to ``cli`` (the ``register_commands`` hook).

        asrkit's own plugins go first. Each plugin's hook gets a group of its own, not ``cli``:
        it can add commands, and its commands are copied over only where the name is free, so
        no plugin can replace, remove or change a command that is already there.
        """
        import click

        for info in sorted(self.plugins.values(), key=lambda i: not i.provider.builtin):
            if "register_commands" not in info.hooks:
                continue
            staging = click.Group(cli.name)
            try:
                info_module(self.manager, info).register_commands(cli=staging)
            except KeyboardInterrupt:
                raise
            except BaseException as error:
                self.fail(info.provider, f"register_commands: {one_line(error)}")
                continue
            for name, command in sorted(staging.commands.items()):
                if name in cli.commands:
                    self.fail(info.provider,
                              f"register_commands: command {name!r} already exists; not replaced")
                    continue
                cli.add_command(command, name)
                info.registered.setdefault("command", []).append(name)
                info.claim(command.callback)

    # -- reporting ---------------------------------------------------------------------------

    def problems(self) -> list[str]:
        """Every load failure and name conflict, one line each."""
        return [f.message() for f in self.failures] + self.registry.problems()

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
            "conflicts": self.registry.problems(),
        }

    # -- blame -------------------------------------------------------------------------------

    def culprit(self, error: BaseException) -> Provider | None:
        """The third-party plugin whose code raised ``error``: the one owning the outermost
        frame of its traceback (or of the errors it was raised from) that belongs to a plugin
        other than asrkit's own. ``None`` when no plugin's code is involved."""
        modules = self._third_party_code()
        files: dict[str, Provider] | None = None
        for frame in _frames(error):
            module = frame.f_globals.get("__name__")
            for root, provider in modules:
                if isinstance(module, str) and (module == root or module.startswith(root + ".")):
                    return provider
            if files is None:
                files = self._third_party_files()
            owner = files.get(os.path.realpath(frame.f_code.co_filename))
            if owner is not None:
                return owner
        return None

    def _third_party_code(self) -> list[tuple[str, Provider]]:
        """(module, provider) for every module of a third-party plugin, asrkit's left out."""
        own = {"asrkit"} | {m for i in self.plugins.values() if i.provider.builtin for m in i.code}
        return [
            (module, info.provider)
            for info in self.plugins.values() if not info.provider.builtin
            for module in sorted(info.code)
            if not any(module == o or module.startswith(o + ".") for o in own)
        ]

    def _third_party_files(self) -> dict[str, Provider]:
        """The source files of each installed third-party plugin's distribution (its record
        lists every file pip installed), for code that lives beside the plugin's modules."""
        files: dict[str, Provider] = {}
        for info in self.plugins.values():
            if info.provider.builtin:
                continue
            try:
                dist = metadata.distribution(info.provider.distribution)
            except metadata.PackageNotFoundError:
                continue
            for path in dist.files or []:
                if path.suffix == ".py":
                    files.setdefault(os.path.realpath(str(dist.locate_file(path))), info.provider)
        return files


def _frames(error: BaseException) -> Iterator[FrameType]:
    """The frames of ``error``'s traceback, outermost first, then those of its causes."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        tb: TracebackType | None = current.__traceback__
        while tb is not None:
            yield tb.tb_frame
            tb = tb.tb_next
        current = current.__cause__ or current.__context__


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


@overload
def get(kind: Literal["importer"], name: str) -> Importer: ...
@overload
def get(kind: Literal["model"], name: str) -> ModelSpec: ...
@overload
def get(kind: Literal["decoder"], name: str) -> Decoder: ...
@overload
def get(kind: Literal["feature"], name: str) -> FeatureExtractor: ...
@overload
def get(kind: Literal["tokenizer"], name: str) -> Tokenizer: ...
@overload
def get(kind: str, name: str) -> Component: ...
def get(kind: str, name: str) -> Component:
    """The installed ``kind`` named ``name`` (e.g. ``get("importer", "ted")``)."""
    return get_plugins().registry.get(kind, name)
