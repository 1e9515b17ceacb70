"""Option types the commands share."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from asrkit.config.hotwords import CHARACTER_BOOST, PIECE_BOOST
from asrkit.core.storage import StoragePath, is_url

F = TypeVar("F", bound=Callable[..., Any])


class LocationType(click.ParamType):
    """A folder or file given as a local path or as a URL (``gs://bucket/folder``): a ``Path``
    checked as ``click.Path`` checks it, or a :class:`~asrkit.core.storage.StoragePath`
    checked through TensorFlow's filesystem layer when ``exists`` is asked."""

    name = "path"

    def __init__(self, exists: bool = False, file_okay: bool = True) -> None:
        self.exists = exists
        self.local = click.Path(exists=exists, file_okay=file_okay, path_type=Path)

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if isinstance(value, StoragePath):
            return value
        if not is_url(str(value)):
            return self.local.convert(value, param, ctx)
        url = StoragePath(value)
        if self.exists and not url.exists():
            self.fail(f"{str(url)!r} does not exist.", param, ctx)
        return url


class FiniteFloat(click.FloatRange):
    """A number within a range that is a number: click's ``FloatRange`` lets ``nan`` through
    every bound (it compares false with all of them) and ``inf`` through a lower one, and either
    would be taken as a duration (``--max-duration nan`` would turn the length filter off)."""

    name = "number"

    def convert(self, value: object, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return float(number)


def hotword_options(command: F) -> F:
    """``--hotword WORD[:BOOST]`` (repeatable) and ``--hotwords FILE`` (repeatable) on a
    command that decodes; it reads them with :func:`asrkit.config.hotwords.parse_hotwords`."""
    command = click.option(
        "--hotwords", "hotword_files", multiple=True, metavar="FILE",
        type=click.Path(path_type=Path),
        help="Hot words from a file: one WORD, PHRASE or PHRASE:BOOST a line (repeatable; "
             "see docs/hotwords.md).")(command)
    return click.option(
        "--hotword", "hotwords", multiple=True, metavar="WORD[:BOOST]",
        help="Favour this word or phrase in a beam search (repeatable); BOOST is added per "
             f"character or piece [default: {CHARACTER_BOOST:g} a character, {PIECE_BOOST:g} "
             "a piece].")(command)
