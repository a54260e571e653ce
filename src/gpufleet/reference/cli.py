"""``gpufleet config schema``: the JSON Schema of a configuration file, for editors and CI.

``gpufleet config schema > scenario.schema.json`` and a first line
``# yaml-language-server: $schema=scenario.schema.json`` in a scenario file give completion,
hover help and checking in any editor with the YAML language server. The same schemas are
committed under ``docs/reference/`` (``python -m gpufleet.reference``).
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from gpufleet.cli_app import app, friendly_errors
from gpufleet.outputpaths import with_parent, writable_file

config_app = typer.Typer(
    help="The configuration files: their JSON Schema (docs/reference/config.md).",
    no_args_is_help=True,
)
app.add_typer(config_app, name="config")


class SchemaKind(StrEnum):
    scenario = "scenario"
    controller = "controller"


@config_app.command("schema")
@friendly_errors
def schema(
    kind: Annotated[SchemaKind, typer.Option(
        help="scenario: a `gpufleet simulate --scenario` file (one scenario or a list); "
             "controller: `gpufleet controller --config` (one scenario, with the cloud "
             "providers' settings).")] = SchemaKind.scenario,
    out: Annotated[Path | None, typer.Option(
        help="Write the schema to this file instead of standard output.")] = None,
) -> None:
    """Print the JSON Schema (draft 2020-12) of a configuration file."""
    from gpufleet.reference.schema import schema_text  # the cloud models: only when asked

    text = schema_text(kind.value)
    if out is None:
        typer.echo(text, nl=False)
        return
    writable_file(out, "--out")
    with_parent(out).write_text(text)
