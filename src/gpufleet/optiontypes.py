"""Command-line value parsers with bounds: finite floats, plus the shared integer bounds.

A plain ``float`` option takes ``nan`` and ``inf``, and a range check written as ``x <= 0`` lets
``nan`` through (every comparison with nan is false): a nan poll interval then floods a metadata
server, an infinite grace period never escalates, an infinite task never ends. Every float option
of every command therefore parses through :func:`finite`, and every integer option takes
``typer.Option(min=..., max=...)`` with the bounds below, so a bad value is refused by the parser:
one line naming the option, exit status 2, before any work. A list of seeds (``42-51`` or
``42,43,50``) parses through :func:`parse_seeds`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated

import typer

from gpufleet.errors import InputError
from gpufleet.tables import OutputFormat

MAX_SEED = 2**32 - 1  # numpy's legacy seeding and most RNGs take 32-bit seeds
MAX_PORT = 65535

# ``--format`` of every command that prints a table (gpufleet.tables)
FormatOption = Annotated[
    OutputFormat,
    typer.Option("--format", help="table (split to fit the terminal), json, csv (long: "
                 "table,row,column,value) or markdown; machine formats alone on stdout",
                 case_sensitive=False),
]


def _range_text(low: float | None, high: float | None, low_open: bool) -> str:
    parts = []
    if low is not None:
        parts.append(f"{low:g} {'<' if low_open else '<='} x")
    if high is not None:
        parts.append(f"x <= {high:g}")
    return " and ".join(parts)


def finite(
    low: float | None = None, high: float | None = None, *, low_open: bool = False
) -> Callable[[str | float], float]:
    """A parser for ``typer.Option(parser=...)``: a finite float in ``[low, high]`` (``low``
    excluded when ``low_open``); anything else is ``typer.BadParameter`` (exit 2)."""

    def parse(text: str | float) -> float:
        try:
            value = float(text)
        except (TypeError, ValueError):
            raise typer.BadParameter(f"{text!r} is not a number") from None
        if not math.isfinite(value):
            raise typer.BadParameter(f"{text} is not a finite number")
        below = low is not None and (value <= low if low_open else value < low)
        if below or (high is not None and value > high):
            raise typer.BadParameter(
                f"{value:g} is out of range; expected {_range_text(low, high, low_open)}"
            )
        return value

    parse.__name__ = "finite_float"
    return parse


def parse_seeds(text: str, most: int, option: str = "--seeds") -> list[int]:
    """``42-51`` or ``42,43,50``: at most ``most`` seeds, each in 0..MAX_SEED; anything else is
    an :class:`InputError` naming ``option``.

    The count is checked before any range is expanded: ``0-99999999999`` would otherwise build a
    list of 10^11 integers (MemoryError) before anything said it was too many.
    """
    out: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                lo_text, hi_text = part.split("-", 1)
                lo, hi = int(lo_text), int(hi_text)
                if hi < lo:
                    raise ValueError
                bounds = (lo, hi)
            elif part:
                bounds = (int(part), int(part))
            else:
                continue
            if bounds[0] < 0 or bounds[1] > MAX_SEED:
                raise InputError(f"seeds must be in 0..{MAX_SEED}, got {part!r}", field=option)
            if len(out) + bounds[1] - bounds[0] + 1 > most:
                raise InputError(f"at most {most} seeds per run, got more in {text!r}",
                                 field=option)
            out.extend(range(bounds[0], bounds[1] + 1))
    except InputError:
        raise
    except ValueError:
        raise InputError(f"expected seeds like 42-51 or 42,43, got {text!r}",
                         field=option) from None
    if not out:
        raise InputError("no seeds given", field=option)
    return out
