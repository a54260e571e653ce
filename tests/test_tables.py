"""Tables in every output format, and the terminal layout that fits 80 columns."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest
from rich.console import Console

from gpufleet.tables import DataTable, OutputFormat, column_parts, print_tables, render


def wide() -> DataTable:
    """A metric × scenario table of 10 long scenario names: about 190 columns unwrapped."""
    names = [f"gpufleet-scenario-{i:02d}" for i in range(10)]
    t = DataTable("side by side", ["metric", *names], numeric=[False, *[True] * 10])
    t.add_row("cost $", *(f"{1000 * i:,}" for i in range(10)), values=["cost $", *range(0, 10000,
                                                                                    1000)])
    t.add_row("GPU util", *("73.0%" for _ in range(10)), values=["GPU util", *[0.73] * 10])
    return t


def printed(t: DataTable, fmt: OutputFormat, width: int = 80, **kw: object) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, **kw)  # type: ignore[arg-type]
    print_tables([t], fmt, console)
    return buf.getvalue()


def test_a_table_that_fits_is_one_part() -> None:
    t = DataTable("small", ["metric", "a", "b"], numeric=[False, True, True])
    t.add_row("cost $", "1", "2")
    assert column_parts(t, Console(width=80)) == [[0, 1, 2]]


def test_a_wide_table_splits_into_parts_that_fit_each_repeating_the_first_column() -> None:
    t = wide()
    parts = column_parts(t, Console(width=80))
    # a rich table is 1 (left border) + per column its text + 2 (padding) + 1 (border):
    # "GPU util" takes 1 + 8 + 3 = 12, each 20-character name 23, so 12 + 23 k columns;
    # 12 + 23 × 2 = 58 fits 80, 12 + 23 × 3 = 81 does not: two scenarios per part
    assert parts == [[0, 1, 2], [0, 3, 4], [0, 5, 6], [0, 7, 8], [0, 9, 10]]
    out = printed(t, OutputFormat.table)
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "…" not in out
    for i in range(10):
        assert f"gpufleet-scenario-{i:02d}" in out  # full names, never cut
    assert f"side by side (1/{len(parts)})" in out


def test_the_split_follows_the_terminal_width() -> None:
    t = wide()
    assert len(column_parts(t, Console(width=400))) == 1
    assert len(column_parts(t, Console(width=120))) < len(column_parts(t, Console(width=80)))


def test_json_is_one_document_of_records_with_the_values_behind_the_cells() -> None:
    doc = json.loads(render([wide()], OutputFormat.json))
    assert doc[0]["title"] == "side by side"
    assert doc[0]["rows"][0]["metric"] == "cost $"
    assert doc[0]["rows"][0]["gpufleet-scenario-03"] == 3000  # a number, not "3,000"
    assert doc[0]["rows"][1]["gpufleet-scenario-09"] == 0.73


def test_csv_is_long_format_under_one_header() -> None:
    rows = list(csv.reader(io.StringIO(render([wide(), wide()], OutputFormat.csv))))
    assert rows[0] == ["table", "row", "column", "value"]
    assert rows[1] == ["side by side", "cost $", "gpufleet-scenario-00", "0"]
    assert len(rows) == 1 + 2 * 2 * 10  # two tables × two rows × ten columns


def test_markdown_escapes_pipes_strips_markup_and_aligns_numbers() -> None:
    t = DataTable("spot", ["trace", "cost"], numeric=[False, True], caption="mean $")
    t.add_row("a|b", "[red]1.00[/]")
    assert render([t], OutputFormat.markdown) == (
        "### spot\n\n| trace | cost |\n|---|---:|\n| a\\|b | 1.00 |\n\nmean $\n")


def test_machine_formats_carry_no_markup_and_no_wrapping() -> None:
    t = DataTable("x", ["k", "v"])
    t.add_row("row", "[bold]" + "9" * 200 + "[/]")
    out = printed(t, OutputFormat.csv, width=40)
    assert out.splitlines()[1] == "x,row,v," + "9" * 200


def sgr_colours(text: str) -> list[str]:
    """The colour parameters of the SGR escape sequences in ``text`` (30-38, 40-48, 90-107)."""
    found = []
    for params in re.findall(r"\x1b\[([0-9;]*)m", text):
        for p in (int(x) for x in params.split(";") if x):
            if 30 <= p <= 38 or 40 <= p <= 48 or 90 <= p <= 107:
                found.append(str(p))
    return found


def test_no_color_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    t = DataTable("x", ["k", "v"])
    t.add_row("row", "[red]late[/]")
    coloured = printed(t, OutputFormat.table, force_terminal=True, color_system="truecolor")
    assert sgr_colours(coloured)  # the control: a terminal gets colour
    monkeypatch.setenv("NO_COLOR", "1")
    plain = printed(t, OutputFormat.table, force_terminal=True, color_system="truecolor")
    assert not sgr_colours(plain)
    assert "late" in plain


def test_a_row_of_the_wrong_length_is_refused() -> None:
    t = DataTable("x", ["k", "v"])
    with pytest.raises(ValueError, match="1 cells for 2 columns"):
        t.add_row("only")
