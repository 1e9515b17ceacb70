"""Finding, loading and listing plugins.

Plugins are modules named by entry points in the ``asrkit`` group; asrkit's own importers,
models, decoders, features and objectives are found the same way, through asrkit's own entry points.
Loading never lets one broken plugin take the command line down: a plugin that fails to import,
whose hooks raise (even ``SystemExit``), or that registers something invalid is recorded as a
:class:`LoadFailure` and the rest keep working. Nor can a plugin take asrkit over: asrkit's own
distribution is loaded first and its commands and names always win, whatever another
distribution's name sorts as. ``ASRKIT_STRICT_PLUGINS=1`` turns failures into an error exit;
``ASRKIT_DISABLE_PLUGINS=a,b`` skips plugins by entry-point or distribution name.

Disabling one of asrkit's own plugins is the one way another plugin can take its names; that is
then a warning on every command, naming the built-in disabled and the plugin that provides the
name now (and an error under ``ASRKIT_STRICT_PLUGINS``). asrkit still reads which names a disabled
built-in has, without using it, so that it can say so.

A plugin that hangs while it loads must not hang the command line. Help pages never import
third-party plugins (:mod:`asrkit.cli` asks for asrkit's own only), and a command that needs them
loads each under a watchdog: a plugin still loading after ``ASRKIT_PLUGIN_IMPORT_TIMEOUT``
seconds (default 60; 0 = no limit) ends the process with one line naming it and how to disable
it. The process ends from the watchdog thread (``os._exit``) because Python cannot interrupt
an import in progress from another thread; nothing of asrkit's is written before plugins load.
Scripts using asrkit as a library (:func:`get_plugins`) get no watchdog: ending their process
is not asrkit's to do, and Ctrl-C interrupts a hanging import there.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
from collections.abc import Callable, Iterator
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

    from asrkit.types import (
        Decoder,
        FeatureExtractor,
        Importer,
        ModelSpec,
        Objective,
        Tokenizer,
    )

ENTRY_POINT_GROUP = "asrkit"
STRICT_ENV = "ASRKIT_STRICT_PLUGINS"
DISABLE_ENV = "ASRKIT_DISABLE_PLUGINS"
TIMEOUT_ENV = "ASRKIT_PLUGIN_IMPORT_TIMEOUT"
#: Seconds a third-party plugin may take to load on the command line: generous for a plugin
#: that imports a large library from a slow disk, short enough that a hung one is noticed.
DEFAULT_IMPORT_TIMEOUT = 60.0
#: The longest the timeout can be set to (a day); 0 turns the watchdog off instead.
MAX_IMPORT_TIMEOUT = 86400.0
#: The exit status when the watchdog gives up: an error, as the command line's others.
EXIT_STALLED = 1

#: Each registering hook and the registry kind it fills.
REGISTER_HOOKS = {
    "register_importers": "importer",
    "register_models": "model",
    "register_decoders": "decoder",
    "register_features": "feature",
    "register_tokenizers": "tokenizer",
    "register_objectives": "objective",
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


def import_timeout() -> float:
    """Seconds a third-party plugin may take to load (``ASRKIT_PLUGIN_IMPORT_TIMEOUT``); 0 means
    no limit. A value that is not such a number is an error, not a silent default: a watchdog
    set by mistake to the wrong bound would kill commands or never fire."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_IMPORT_TIMEOUT
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds <= MAX_IMPORT_TIMEOUT:  # nan fails too
        raise PluginError(f"{TIMEOUT_ENV}={raw} is not a number of seconds from 0 (no limit) to "
                          f"{MAX_IMPORT_TIMEOUT:g}; set it to e.g. 120, or unset it for "
                          f"{DEFAULT_IMPORT_TIMEOUT:g}")
    return seconds


def stalled_message(provider: Provider, stage: str, seconds: float) -> str:
    """The one line the watchdog prints: which plugin, doing what, and how to go on without it."""
    return (f"plugin {provider.plugin!r} from {provider.distribution} is still {stage} after "
            f"{seconds:g} s; disable it with {DISABLE_ENV}={provider.plugin}, or allow it longer "
            f"with {TIMEOUT_ENV}=SECONDS")


def give_up(message: str) -> None:
    """Print ``message`` as the command line's error and end the process now. Called from the
    watchdog's thread while the main thread is stuck in a plugin's code, which no exception can
    reach; ``os._exit`` ends the process without waiting for it."""
    try:
        sys.stderr.write(f"asrkit: error: {message}\n")
        sys.stderr.flush()
    finally:
        os._exit(EXIT_STALLED)


@contextlib.contextmanager
def watchdog(provider: Provider, stage: str, seconds: float,
             expire: Callable[[str], None] = give_up) -> Iterator[None]:
    """Run the block; if it has not finished after ``seconds`` (0: never), call ``expire`` with
    :func:`stalled_message` from another thread."""
    if not seconds:
        yield
        return
    timer = threading.Timer(seconds, expire, args=(stalled_message(provider, stage, seconds),))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


class PluginSet:
    """A pluggy manager plus the bookkeeping asrkit needs: providers, failures, the registry."""

    def __init__(self, timeout: float = 0.0) -> None:
        self.manager = pluggy.PluginManager(hookspecs.PROJECT)
        self.manager.add_hookspecs(hookspecs)
        self.plugins: dict[str, PluginInfo] = {}
        self.failures: list[LoadFailure] = []
        self.registry = Registry()
        #: Seconds a third-party plugin's import and hooks may take before :func:`give_up`
        #: ends the process (0: no watchdog).
        self.timeout = timeout
        #: Third-party plugins installed but not loaded (``third_party=False``).
        self.deferred: list[Provider] = []

    # -- loading -----------------------------------------------------------------------------

    def load_entry_points(self, disabled: set[str] | None = None,
                          third_party: bool = True) -> None:
        """Load every installed ``asrkit`` entry point, in a stable order; with
        ``third_party=False`` only asrkit's own (the others are listed in :attr:`deferred`)."""
        disabled = disabled_names() if disabled is None else disabled
        for provider, ep in entry_points():
            if provider.plugin in disabled or provider.distribution in disabled:
                if provider.builtin:
                    self._remember_disabled(provider, ep)
                continue
            if not third_party and not provider.builtin:
                self.deferred.append(provider)
                continue
            with self._watch(provider, "importing"):
                try:
                    module = ep.load()
                except KeyboardInterrupt:
                    raise
                except BaseException as error:  # even sys.exit() in a plugin must not end asrkit
                    self.failures.append(LoadFailure(provider, one_line(error)))
                    continue
            with self._watch(provider, "registering"):
                self.add_module(module, provider)

    def _watch(self, provider: Provider, stage: str) -> contextlib.AbstractContextManager[None]:
        """The watchdog over a third-party plugin's code; asrkit's own runs unwatched."""
        seconds = 0.0 if provider.builtin else self.timeout
        return watchdog(provider, stage, seconds, give_up)

    def _remember_disabled(self, provider: Provider, ep: metadata.EntryPoint) -> None:
        """Note the names one of asrkit's own plugins, disabled, would have registered, so that
        a plugin registering one of them is reported as taking it over. The built-in's hooks
        run on a scratch set and nothing of it is used; if it cannot even do that, there is
        nothing to note."""
        scratch = PluginSet()
        try:
            scratch.add_module(ep.load(), provider)
            if provider.plugin in scratch.plugins:
                import click

                scratch.add_commands(click.Group())
        except KeyboardInterrupt:
            raise
        except BaseException:  # a built-in that cannot load is simply not there
            return
        info = scratch.plugins.get(provider.plugin)
        for kind, names in (info.registered if info else {}).items():
            for name in names:
                self.registry.disabled[(kind, name)] = provider

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
                with self._watch(info.provider, "registering commands"):
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
        """Every load failure, name conflict and built-in name taken over, one line each."""
        return ([f.message() for f in self.failures] + self.registry.problems()
                + self._commands_taken_over())

    def _commands_taken_over(self) -> list[str]:
        """A line for each command of a disabled built-in that another plugin now provides."""
        return [self.registry.takeover_message("command", name, info.provider)
                for info in self.plugins.values() if not info.provider.builtin
                for name in info.registered.get("command", [])
                if ("command", name) in self.registry.disabled]

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
            "conflicts": self.registry.problems() + self._commands_taken_over(),
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


def entry_points() -> list[tuple[Provider, metadata.EntryPoint]]:
    """Every installed ``asrkit`` entry point with its provider, asrkit's own first (what it
    registers is in place before any other plugin runs), then by distribution and name."""
    points = [
        (Provider(ep.name, ep.dist.name if ep.dist else "unknown",
                  ep.dist.version if ep.dist else ""), ep)
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)
    ]
    points.sort(key=lambda item: (not item[0].builtin, item[0].distribution, item[0].plugin))
    return points


def get_plugins(third_party: bool = True, watched: bool = False) -> PluginSet:
    """The process-wide plugin set, loaded from entry points on first use: every plugin, or
    with ``third_party=False`` asrkit's own only (enough for a help page). A set lacking the
    third-party plugins is replaced by a full one when they are asked for.
    ``watched``: load them under the import watchdog (the command line's; see the module's
    docstring)."""
    global _DEFAULT
    if _DEFAULT is None or (third_party and _DEFAULT.deferred):
        plugins = PluginSet(timeout=import_timeout() if watched else 0.0)
        plugins.load_entry_points(third_party=third_party)
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
def get(kind: Literal["objective"], name: str) -> Objective: ...
@overload
def get(kind: str, name: str) -> Component: ...
def get(kind: str, name: str) -> Component:
    """The installed ``kind`` named ``name`` (e.g. ``get("importer", "ted")``)."""
    return get_plugins().registry.get(kind, name)
