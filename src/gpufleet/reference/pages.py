"""All of ``docs/reference/``, rendered in memory; written, or compared with what is committed.

The pages depend on nothing but the code: names are sorted, there are no timestamps and no paths
of this machine, and nothing is laid out for a terminal, so two runs — on any machine — write the
same bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gpufleet.reference import annotations_doc, cli_doc, config_doc, metrics_doc
from gpufleet.reference.schema import schema_text

FOLDER = Path("docs/reference")
REGENERATE = "python -m gpufleet.reference  (or: make reference)"


def _cli() -> str:
    import gpufleet.cli

    gpufleet.cli._register()  # every feature's commands, as the entry point registers them
    return cli_doc.render(gpufleet.cli.app)


# file name → its renderer
PAGES: dict[str, Callable[[], str]] = {
    "annotations.md": annotations_doc.render,
    "cli.md": _cli,
    "config.md": config_doc.render,
    "controller.schema.json": lambda: schema_text("controller"),
    "metrics.md": metrics_doc.render,
    "scenario.schema.json": lambda: schema_text("scenario"),
}


def _text(render: Callable[[], str]) -> str:
    """A page's text, ending in exactly one newline."""
    return render().rstrip("\n") + "\n"


def render_all() -> dict[str, str]:
    """File name → the page's text, for every page."""
    return {name: _text(render) for name, render in sorted(PAGES.items())}


def stale(folder: Path) -> list[str]:
    """The pages under ``folder`` that are missing or differ from what the code renders, and
    files there that no renderer writes."""
    pages = render_all()
    out = [name for name, text in pages.items()
           if not (folder / name).is_file() or (folder / name).read_text() != text]
    if folder.is_dir():
        out += sorted(p.name for p in folder.iterdir() if p.is_file() and p.name not in pages)
    return sorted(out)


def write_all(folder: Path) -> list[str]:
    """Write every page under ``folder`` (created if needed); the names of those that changed."""
    folder.mkdir(parents=True, exist_ok=True)
    changed = []
    for name, text in render_all().items():
        path = folder / name
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
            changed.append(name)
    return changed
