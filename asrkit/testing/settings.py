"""The settings check every contract shares: each setting of a component's ``Config`` survives
the command line, so ``-o SECTION.KEY=VALUE`` with the value it has means that value."""

from __future__ import annotations

import dataclasses
from typing import Any

from asrkit.core.settings import format_value, override


def check_settings_read_back(name: str, config: Any, prefix: str = "") -> None:
    """Raise an ``AssertionError`` naming ``name`` when a field of ``config``, written as the
    command line writes it (``-o {prefix}KEY=VALUE``), reads back as another value."""
    for field in dataclasses.fields(config):
        written = format_value(getattr(config, field.name))
        again = override(config, field.name, written, prefix)
        if again != config:
            raise AssertionError(
                f"{name}: -o {prefix}{field.name}={written} gives "
                f"{getattr(again, field.name)!r}, not {getattr(config, field.name)!r}")
