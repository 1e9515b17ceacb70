"""The ``asrkit`` command line.

The root group is assembled from the installed plugins: ``asrkit import <name>`` has one
subcommand per registered importer and plugins may add top-level commands. Everything imported
here is cheap; TensorFlow is loaded only by the commands that compute. A help page (or the
version) of something asrkit itself provides is answered from asrkit's own plugins: no
third-party plugin is imported for it, so none can hang or break it. Any other command loads
every plugin, each under the import watchdog (:mod:`asrkit.plugins`).

Every error ends up here and is printed as one line, ``asrkit: error: ...``: usage errors (exit
2) with a pointer to the command's help, anything else (exit 1) as the user can act on it: an
:class:`AsrkitError`'s message, the operating system's complaint about a path, or the plugin
whose code failed. ``-v``/``--verbose`` or ``ASRKIT_DEBUG=1`` adds the traceback, and lets
TensorFlow log as it does by default. Ctrl-C is ``asrkit: interrupted`` and exit 130.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from asrkit import __version__
from asrkit.commands.plugins import plugins_command
from asrkit.core.errors import OUT_OF_MEMORY, AsrkitError, describe_os_error
from asrkit.plugins import PluginSet, get_plugins, one_line

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
HELP_FLAGS = ("-h", "--help")
VERSION_FLAGS = ("-V", "--version")
DEBUG_ENV = "ASRKIT_DEBUG"
VERBOSE_FLAGS = ("-v", "--verbose")
#: Exit statuses: an error, a usage error (click's convention), Ctrl-C (128 + SIGINT).
EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED = 1, 2, 130
#: Raised by click >= 8.2 for a group called without a command (older click exits itself).
NoArgsIsHelp = getattr(click.exceptions, "NoArgsIsHelpError", ())


class Group(click.Group):
    """A group whose unknown-command error says what exists instead."""

    item = "command"
    item_listing = "commands"

    def unknown(self, name: str) -> str:
        import difflib

        close = difflib.get_close_matches(name, list(self.commands), n=1)
        hint = f"did you mean {close[0]!r}?" if close else \
            f"{self.item_listing}: " + (", ".join(sorted(self.commands)) or "none")
        return f"no {self.item} {name!r}; {hint}"

    def resolve_command(self, ctx: click.Context,
                        args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0]
        if (self.get_command(ctx, name) is None and not ctx.resilient_parsing
                and not name.startswith("-")):
            raise click.UsageError(self.unknown(name), ctx)
        return super().resolve_command(ctx, args)


class ImportGroup(Group):
    """``asrkit import``: a name that is installed but unusable says why."""

    item = "importer"
    item_listing = "installed"

    def __init__(self, plugins: PluginSet, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plugins = plugins

    def unknown(self, name: str) -> str:
        registry = self.plugins.registry
        if ("importer", name) in registry.conflicts:
            return registry.conflict_message("importer", name)
        if name in registry.names("importer"):
            return f"importer {name!r} failed to load; `asrkit plugins` says why"
        return super().unknown(name)


def _import_group(plugins: PluginSet) -> click.Group:
    from asrkit.commands.import_ import import_command

    group = ImportGroup(
        plugins,
        name="import",
        help="Download, verify, convert and shard a speech corpus into a dataset folder.\n\n"
        "One subcommand per installed importer; `asrkit import NAME --help` for its options.",
        context_settings=CONTEXT,
        epilog=_deferred_note(plugins, "importers"),
    )
    for registration in plugins.registry.registrations("importer"):
        try:  # runs the importer's own options(): plugin code
            group.add_command(import_command(registration.obj))
        except KeyboardInterrupt:
            raise
        except BaseException as error:
            plugins.fail(registration.provider,
                         f"importer {registration.name!r}: {one_line(error)}")
    return group


def build_cli(plugins: PluginSet) -> click.Group:
    """The root command for this set of plugins."""

    @click.group(cls=Group, context_settings=CONTEXT, epilog=_deferred_note(plugins, "commands"))
    @click.version_option(__version__, *VERSION_FLAGS, prog_name="asrkit")
    @click.option(*VERBOSE_FLAGS, is_flag=True, expose_value=False,
                  help=f"On an error, also print the traceback (or set {DEBUG_ENV}=1).")
    @click.pass_context
    def cli(ctx: click.Context) -> None:
        """asrkit: train end-to-end speech recognisers on TensorFlow 2.

        Import a corpus with `asrkit import`, see what is installed with `asrkit plugins`.
        """
        ctx.obj = plugins

    cli.add_command(plugins_command)
    cli.add_command(_import_group(plugins))
    plugins.add_commands(cli)
    return cli


def _deferred_note(plugins: PluginSet, what: str) -> str | None:
    """Under a help page built without the third-party plugins: which ones may add more."""
    if not plugins.deferred:
        return None
    rows = [f"  {p.plugin} ({p.distribution} {p.version})" for p in plugins.deferred]
    # "\b": click keeps the lines as they are (its wrapping would split names at hyphens)
    return "\n".join(["\b", f"Installed plugins, not loaded for this help (`asrkit plugins` lists "
                      f"the {what} they add):", *rows])


def _help_only(cli: click.Group, args: list[str]) -> bool:
    """Whether ``args`` ask only for a help page or the version of a command that ``cli``
    (asrkit's own plugins) has: a group named without a command (``asrkit``, ``asrkit
    import``), or ``-h``/``--help``/``--version`` along a path of commands it knows. A command
    it does not know may be a third-party plugin's: that needs the plugins."""
    command: click.Command = cli
    for word in args:
        if word == "--":
            return False
        if word in HELP_FLAGS or (command is cli and word in VERSION_FLAGS):
            return True
        if word.startswith("-") or not isinstance(command, click.Group):
            continue
        found = command.commands.get(word)
        if found is None:
            return False
        command = found
    return isinstance(command, click.Group)


def _load(args: list[str]) -> tuple[PluginSet, click.Group]:
    """The plugins and the command line ``args`` need: asrkit's own for a help page of theirs,
    else every plugin, each third-party one under the import watchdog."""
    plugins = get_plugins(third_party=False)
    cli = build_cli(plugins)
    if plugins.deferred and not _help_only(cli, args):
        plugins = get_plugins(watched=True)
        cli = build_cli(plugins)
    return plugins, cli


def configure_tensorflow_logging(args: list[str]) -> None:
    """TensorFlow logs nothing below ``TF_CPP_MIN_LOG_LEVEL`` (3, errors hidden too, unless the
    user set it), not even the lines its libraries write as they load (:mod:`asrkit.core.tflog`).
    With ``-v`` or ``ASRKIT_DEBUG``, TensorFlow logs as it does by default (unless the user set
    the level)."""
    import asrkit
    from asrkit.core import tflog

    if _verbose(args):
        if not asrkit.TF_LOG_LEVEL_FROM_USER:
            os.environ.pop("TF_CPP_MIN_LOG_LEVEL", None)
        tflog.uninstall()
        return
    try:
        level = int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0"))
    except ValueError:
        level = 0
    tflog.install(level)


def run(args: list[str] | None = None, plugins: PluginSet | None = None) -> int:
    """Run the command line and return its exit status; errors become one line on stderr."""
    args = sys.argv[1:] if args is None else list(args)
    configure_tensorflow_logging(args)
    try:
        if plugins is None:
            plugins, cli = _load(args)
        else:
            cli = build_cli(plugins)
        plugins.check_strict()
        if args[:1] != ["plugins"]:
            for problem in plugins.problems():
                click.echo(f"asrkit: warning: {problem}", err=True)
        result: Any = cli.main(args=args, prog_name="asrkit", standalone_mode=False)
        return result if isinstance(result, int) else 0
    except click.exceptions.Exit as exit_:
        return exit_.exit_code
    except NoArgsIsHelp as error:  # `asrkit` or `asrkit import` alone: the help is the answer
        click.echo(error.ctx.get_help())
        return 0
    except click.UsageError as error:
        where = error.ctx.command_path if error.ctx else "asrkit"
        return _fail(f"{_single(error.format_message())} (see {where} --help)", EXIT_USAGE)
    except click.ClickException as error:
        return _fail(_single(error.format_message()), error.exit_code)
    except click.exceptions.Abort as error:
        if isinstance(error.__context__, KeyboardInterrupt):
            return _interrupted()
        return _fail("aborted", EXIT_ERROR)
    except KeyboardInterrupt:
        return _interrupted()
    except (SystemExit, GeneratorExit):
        raise
    except BaseException as error:
        if _verbose(args):
            import traceback

            traceback.print_exception(error)
        return _fail(_error_line(error, plugins), EXIT_ERROR)


def _error_line(error: BaseException, plugins: PluginSet | None) -> str:
    """What went wrong, in one line the user can act on."""
    if isinstance(error, AsrkitError):
        return _single(str(error))
    if isinstance(error, OSError):
        described = describe_os_error(error)
        if described:
            return described
    if isinstance(error, MemoryError):
        return OUT_OF_MEMORY
    culprit = plugins.culprit(error) if plugins is not None else None
    if culprit is not None:
        return (f"plugin {culprit.plugin!r} (distribution {culprit.distribution} "
                f"{culprit.version}) failed: {one_line(error)}")
    return f"unexpected {one_line(error)} (rerun with --verbose for the traceback)"


def _single(text: str) -> str:
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def _fail(message: str, status: int) -> int:
    click.echo(f"asrkit: error: {message}", err=True)
    return status


def _interrupted() -> int:
    click.echo("asrkit: interrupted", err=True)
    return EXIT_INTERRUPTED


def _verbose(args: list[str]) -> bool:
    """``-v``/``--verbose`` before the command, or ``ASRKIT_DEBUG`` set. Read from the
    arguments themselves, since an error may come before click has parsed them."""
    if os.environ.get(DEBUG_ENV, "").strip().lower() in {"1", "true", "yes", "on"}:
        return True
    for arg in args:
        if arg in VERBOSE_FLAGS:
            return True
        if not arg.startswith("-"):  # the command: flags after it are its own
            return False
    return False


def main() -> None:
    sys.exit(run())
