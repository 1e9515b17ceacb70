"""Option types the commands share."""

from __future__ import annotations

import math

import click


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
