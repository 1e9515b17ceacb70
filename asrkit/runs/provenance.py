"""Which plugins made a run: ``plugins.json`` of a run folder against what is installed now, so
that a run that no longer loads says which plugin and version it needs rather than failing on a
missing name or a checkpoint that does not fit."""

from __future__ import annotations

import json
from dataclasses import dataclass

from asrkit import plugins
from asrkit.core.storage import Location


@dataclass(frozen=True)
class PluginChange:
    """The plugin that provided a run's component then, and the one installed now."""

    kind: str
    name: str
    distribution: str
    made_with: str
    installed_distribution: str
    installed: str

    def message(self, folder: Location, what: str = "") -> str:
        if not self.installed:
            return (f"{folder} was made with {self.kind} {self.name!r} of {self.distribution} "
                    f"{self.made_with}, which is not installed; install it (pip install "
                    f"'{self.distribution}=={self.made_with}') to use this run")
        now = (self.installed if self.installed_distribution == self.distribution
               else f"{self.installed_distribution} {self.installed}")
        return (
            f"{folder} was made with {self.kind} {self.name!r} of {self.distribution} "
            f"{self.made_with}, and {now} is installed, whose {self.name!r} does not match "
            f"{what}; install the version the run was made with "
            f"(pip install '{self.distribution}=={self.made_with}') to use this run"
        )


def plugin_change(folder: Location, kind: str, name: str) -> PluginChange | None:
    """How the plugin providing ``kind`` ``name`` differs from the one the run in ``folder``
    was made with (``plugins.json``; ``installed`` empty when none provides it now); ``None``
    when it is the same version, or not known."""
    try:
        saved = json.loads((folder / "plugins.json").read_text(encoding="utf-8"))
        then = next(plugin for plugin in saved["plugins"]
                    if name in plugin.get("registered", {}).get(kind, []))
        distribution, made_with = str(then["distribution"]), str(then["version"])
    except (OSError, ValueError, TypeError, KeyError, AttributeError, StopIteration):
        return None
    registration = plugins.get_plugins().registry.entries.get(kind, {}).get(name)
    if registration is None:
        return PluginChange(kind, name, distribution, made_with, "", "")
    provider = registration.provider
    if (provider.distribution, provider.version) == (distribution, made_with):
        return None
    return PluginChange(kind, name, distribution, made_with, provider.distribution,
                        provider.version)
