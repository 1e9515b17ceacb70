"""The ``asrkit`` command line.

The root group is assembled from the installed plugins: ``asrkit import <name>`` has one
subcommand per registered importer and plugins may add top-level commands. Everything imported
here is cheap; TensorFlow is loaded only by the commands that compute.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from asrkit import __version__
from asrkit.errors import AsrkitError
from asrkit.plugins import PluginSet, get_plugins

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _plugin_table(plugins: PluginSet) -> str:
    rows = [("PLUGIN", "DISTRIBUTION", "VERSION", "PROVIDES")]
    for info in plugins.plugins.values():
        provides = "; ".join(
            f"{kind} {', '.join(names)}" for kind, names in sorted(info.registered.items())
        )
        rows.append((info.provider.plugin, info.provider.distribution, info.provider.version,
                     provides or "(hooks: " + ", ".join(info.hooks) + ")"))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True))
        + "  " + row[3]
        for row in rows
    ]
    problems = plugins.problems()
    if problems:
        lines.append("")
        lines.append(f"{len(problems)} problem(s):")
        lines.extend(f"  {problem}" for problem in problems)
    return "\n".join(line.rstrip() for line in lines)


@click.command("plugins")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.pass_obj
def plugins_command(plugins: PluginSet, as_json: bool) -> None:
    """List installed plugins, what each registers, and any that failed to load."""
    if as_json:
        click.echo(json.dumps(plugins.as_json(), indent=2))
    else:
        click.echo(_plugin_table(plugins))


def _import_group(plugins: PluginSet) -> click.Group:
    from asrkit.data.import_cli import import_command

    group = click.Group(
        "import",
        help="Download, verify, convert and shard a speech corpus into a dataset folder.\n\n"
        "One subcommand per installed importer; `asrkit import NAME --help` for its options.",
        context_settings=CONTEXT,
    )
    for registration in plugins.registry.registrations("importer"):
        group.add_command(import_command(registration.obj))
    return group


def build_cli(plugins: PluginSet) -> click.Group:
    """The root command for this set of plugins."""

    @click.group(context_settings=CONTEXT)
    @click.version_option(__version__, "--version", "-V", prog_name="asrkit")
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


def run(args: list[str] | None = None, plugins: PluginSet | None = None) -> int:
    """Run the command line and return its exit status; errors become one line on stderr."""
    args = sys.argv[1:] if args is None else args
    try:
        plugins = plugins or get_plugins()
        cli = build_cli(plugins)
        plugins.check_strict()
        if args[:1] != ["plugins"]:
            for problem in plugins.problems():
                click.echo(f"asrkit: warning: {problem}", err=True)
        result: Any = cli.main(args=args, prog_name="asrkit", standalone_mode=False)
        return result if isinstance(result, int) else 0
    except AsrkitError as error:
        click.echo(f"asrkit: error: {error}", err=True)
        return 1
    except click.exceptions.Abort:
        click.echo("asrkit: interrupted; rerun the same command to continue", err=True)
        return 130
    except KeyboardInterrupt:
        click.echo("asrkit: interrupted; rerun the same command to continue", err=True)
        return 130
    except click.ClickException as error:
        error.show()
        return error.exit_code
    except click.exceptions.Exit as exit_:
        return exit_.exit_code


def main() -> None:
    sys.exit(run())
