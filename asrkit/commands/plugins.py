"""``asrkit plugins``: what is installed, what each plugin registers, what failed to load, and
(``--settings NAME``) the settings of a model, feature extractor, decoder, tokenizer or
training objective."""

from __future__ import annotations

import json

import click

from asrkit.core.errors import AsrkitError
from asrkit.plugins import PluginInfo, PluginSet


def _provided(plugins: PluginSet, info: PluginInfo, kind: str, name: str) -> str:
    """``name``, marked when the registry does not use this plugin's ``kind`` of that name."""
    registry = plugins.registry
    if info.provider in registry.ignored.get((kind, name), []):
        return f"{name} (ignored)"
    if (kind, name) in registry.conflicts:
        return f"{name} (withheld)"
    return name


def _plugin_table(plugins: PluginSet) -> str:
    rows = [("PLUGIN", "DISTRIBUTION", "VERSION", "PROVIDES")]
    for info in plugins.plugins.values():
        provides = "; ".join(
            f"{kind} {', '.join(_provided(plugins, info, kind, name) for name in names)}"
            for kind, names in sorted(info.registered.items())
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


#: The kinds with settings: the ``-o`` prefix of each, how people call them, and where the
#: settings are set.
SETTING_KINDS = {"model": ("model.", "model", "-o model.KEY=VALUE"),
                 "feature": ("features.", "feature extractor", "-o features.KEY=VALUE"),
                 "decoder": ("decoder.", "decoder", "-o decoder.KEY=VALUE"),
                 "tokenizer": ("", "tokenizer", "asrkit tokenizer build -s KEY=VALUE"),
                 "objective": ("objective.", "objective", "-o objective.KEY=VALUE")}


def _settings_of(plugins: PluginSet, name: str) -> list[tuple[str, str, type]]:
    """``(kind, -o prefix, Config class)`` of every model, feature extractor, decoder,
    tokenizer or objective called ``name``; none is a one-line error listing what has
    settings."""
    registry = plugins.registry
    found = []
    for kind, (prefix, _, _) in SETTING_KINDS.items():
        if name in registry.names(kind):
            obj = registry.get(kind, name)
            found.append((kind, prefix, getattr(obj, "Config", None) or type(obj.config)))
    if not found:
        known = "; ".join(f"{label}s: {', '.join(registry.names(kind)) or 'none'}"
                          for kind, (_, label, _) in SETTING_KINDS.items())
        raise AsrkitError(f"no model, feature extractor, decoder, tokenizer or objective named "
                          f"{name!r} ({known})")
    return found


@click.command("plugins")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.option("--settings", "settings_of", metavar="NAME", default=None,
              help="List the settings of the model, feature extractor, decoder, tokenizer or "
                   "training objective NAME: their keys, types, defaults and what is allowed.")
@click.pass_obj
def plugins_command(plugins: PluginSet, as_json: bool, settings_of: str | None) -> None:
    """List installed plugins, what each registers, and any that failed to load."""
    from asrkit.core.settings import describe, settings_table

    if settings_of is not None:
        found = _settings_of(plugins, settings_of)
        if as_json:
            click.echo(json.dumps([
                {"kind": kind, "name": settings_of, "prefix": prefix,
                 "settings": [s.to_json() for s in describe(config)]}
                for kind, prefix, config in found], indent=2))
            return
        click.echo("\n\n".join(
            f"{SETTING_KINDS[kind][1]} {settings_of} ({SETTING_KINDS[kind][2]}):\n"
            + settings_table(config, prefix) for kind, prefix, config in found))
    elif as_json:
        click.echo(json.dumps(plugins.as_json(), indent=2))
    else:
        click.echo(_plugin_table(plugins))
