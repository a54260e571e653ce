"""Tables the commands print, in the format the user asks for, legible at any width.

A command builds :class:`DataTable` objects (a title, column names, and per row the text shown
and, where it differs, the value behind it) and hands them to :func:`print_tables` with an
:class:`OutputFormat`:

* ``table`` — rich tables for a person. A table wider than the console (an 80-column terminal,
  or a pipe, which rich sizes at 80 columns or ``$COLUMNS``) is split into parts that each fit,
  the first column repeated in every part, so no cell is ever cut to "gpu…"; a cell that alone is
  wider than the console wraps instead. Colour follows rich, which honours ``NO_COLOR``.
* ``json`` — one JSON document: a list of ``{"title", "caption", "rows"}``, each row an object
  keyed by column name with the value behind the cell (a number where the cell shows one).
* ``csv`` — tidy long format, one header for every table: ``table,row,column,value``, where
  ``row`` is the row's first cell; ``pandas.read_csv(...).pivot(...)`` restores a table.
* ``markdown`` — a GitHub table per table, under its title.

Only the ``table`` format carries rich markup; the others print the plain text of a cell.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

Value = str | int | float | bool | None


class OutputFormat(StrEnum):
    """What ``--format`` accepts."""

    table = "table"
    json = "json"
    csv = "csv"
    markdown = "markdown"


@dataclass(slots=True)
class DataTable:
    """A table as data. ``numeric[i]`` right-aligns column ``i`` in the terminal."""

    title: str
    columns: Sequence[str]
    numeric: Sequence[bool] = ()
    caption: str = ""
    text: list[tuple[str, ...]] = field(default_factory=list)
    values: list[tuple[Value, ...]] = field(default_factory=list)
    sections: set[int] = field(default_factory=set)  # rows that start a new section

    def add_row(self, *cells: str, values: Sequence[Value] | None = None,
                section: bool = False) -> None:
        """Add a row of shown ``cells`` (rich markup allowed); ``values`` are the data behind
        them for json and csv (default: the cells' plain text)."""
        if len(cells) != len(self.columns):
            raise ValueError(f"{self.title}: {len(cells)} cells for {len(self.columns)} columns")
        if values is not None and len(values) != len(cells):
            raise ValueError(f"{self.title}: {len(values)} values for {len(cells)} cells")
        if section and self.text:
            self.sections.add(len(self.text))
        self.text.append(tuple(cells))
        self.values.append(tuple(values) if values is not None else
                           tuple(_plain(c) for c in cells))

    def records(self) -> list[dict[str, Value]]:
        return [dict(zip(self.columns, row, strict=True)) for row in self.values]


def _plain(markup: str) -> str:
    return Text.from_markup(markup).plain


def _rich(t: DataTable, cols: Sequence[int], part: str = "") -> Table:
    title = f"{t.title} {part}".rstrip() if t.title else None
    out = Table(title=title, caption=t.caption or None)
    for i in cols:
        right = i < len(t.numeric) and t.numeric[i]
        out.add_column(t.columns[i], justify="right" if right else "left", overflow="fold")
    for r, row in enumerate(t.text):
        out.add_row(*(row[i] for i in cols), end_section=(r + 1) in t.sections)
    return out


def _width(console: Console, table: Table) -> int:
    """The width ``table`` takes unwrapped (rich clamps a measurement to the options' width:
    measure against an unbounded one)."""
    return Measurement.get(console, console.options.update_width(1 << 20), table).maximum


def column_parts(t: DataTable, console: Console) -> list[list[int]]:
    """The column indices of each part of ``t`` that fits ``console``'s width at its natural
    size: the first column in every part, the others in order, as many per part as fit (at
    least one, which then wraps)."""
    rest = list(range(1, len(t.columns)))
    if not rest or _width(console, _rich(t, range(len(t.columns)))) <= console.width:
        return [list(range(len(t.columns)))]
    parts: list[list[int]] = []
    current: list[int] = []
    for i in rest:
        if current and _width(console, _rich(t, [0, *current, i])) > console.width:
            parts.append([0, *current])
            current = []
        current.append(i)
    parts.append([0, *current])
    return parts


def rich_tables(t: DataTable, console: Console) -> list[Table]:
    """``t`` as rich tables that fit ``console`` (one, or its parts titled "(1/3)"…)."""
    parts = column_parts(t, console)
    if len(parts) == 1:
        return [_rich(t, parts[0])]
    return [_rich(t, cols, f"({k}/{len(parts)})") for k, cols in enumerate(parts, 1)]


def _markdown(t: DataTable) -> str:
    def cell(s: str) -> str:
        return _plain(s).replace("|", "\\|").replace("\n", " ")

    lines = [f"### {t.title}", ""] if t.title else []
    lines.append("| " + " | ".join(cell(c) for c in t.columns) + " |")
    lines.append("|" + "|".join("---:" if i < len(t.numeric) and t.numeric[i] else "---"
                                 for i in range(len(t.columns))) + "|")
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in t.text]
    if t.caption:
        lines += ["", t.caption]
    return "\n".join(lines) + "\n"


def _csv(tables: Iterable[DataTable]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["table", "row", "column", "value"])
    for t in tables:
        for row in t.values:
            for name, v in zip(t.columns[1:], row[1:], strict=True):
                w.writerow([t.title, row[0], name, "" if v is None else v])
    return buf.getvalue()


def render(tables: Sequence[DataTable], fmt: OutputFormat) -> str:
    """``tables`` as text in a machine format (json, csv, markdown)."""
    if fmt is OutputFormat.json:
        return json.dumps([{"title": t.title, "caption": t.caption, "rows": t.records()}
                           for t in tables], indent=2) + "\n"
    if fmt is OutputFormat.csv:
        return _csv(tables)
    if fmt is OutputFormat.markdown:
        return "\n".join(_markdown(t) for t in tables)
    raise ValueError(f"{fmt.value} is printed by print_tables, not rendered as text")


def print_tables(tables: Sequence[DataTable], fmt: OutputFormat, console: Console) -> None:
    """Print ``tables`` on ``console`` in ``fmt``; machine formats go out verbatim (no markup,
    no wrapping)."""
    if fmt is OutputFormat.table:
        for t in tables:
            for part in rich_tables(t, console):
                console.print(part)
        return
    console.file.write(render(tables, fmt))
    console.file.flush()
