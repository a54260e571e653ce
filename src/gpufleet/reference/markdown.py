"""The Markdown the reference pages share: table cells and tables."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def cell(text: str) -> str:
    """``text`` as one table cell: one line, pipes escaped, and ``<`` written as an entity so a
    placeholder such as ``<gpu>`` is shown, not taken for an HTML tag."""
    return " ".join(text.split()).replace("|", "\\|").replace("<", "&lt;")


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
