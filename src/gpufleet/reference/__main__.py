"""``python -m gpufleet.reference [--check] [--out DIR]``: write ``docs/reference/`` from the code,
or check that the committed pages are what the code renders (exit 1 naming the stale ones).

Run from the repository root (``make reference``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpufleet.reference.pages import FOLDER, REGENERATE, stale, write_all

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@app.command()
def main(
    check: Annotated[bool, typer.Option(
        "--check", help="Write nothing; exit 1 when a page differs from what the code "
        "renders.")] = False,
    out: Annotated[Path, typer.Option(help="The folder of the pages.")] = FOLDER,
) -> None:
    """Render the reference pages (CLI, configuration, annotations, metrics, JSON Schemas)."""
    if check:
        bad = stale(out)
        if bad:
            typer.echo(f"{out}: out of date: {', '.join(bad)}; regenerate with: {REGENERATE}",
                       err=True)
            raise typer.Exit(code=1)
        typer.echo(f"{out}: up to date")
        return
    changed = write_all(out)
    typer.echo(f"{out}: {', '.join(changed) if changed else 'nothing'} changed")


if __name__ == "__main__":  # pragma: no cover
    app(prog_name="python -m gpufleet.reference")
