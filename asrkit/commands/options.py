"""Option types the commands share."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from asrkit.config.hotwords import CHARACTER_BOOST, PIECE_BOOST

F = TypeVar("F", bound=Callable[..., Any])


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
