"""``gpufleet cloud offerings|instances``: ask a cloud provider what the controller would ask.

A preflight before pointing ``gpufleet controller`` at a real account: it loads the provider's
config, finds the credentials in the standard chain and makes the read-only calls the controller
makes each cycle (spot prices / managed instances), so a missing credential, a missing IAM
permission or a config typo shows up as one line and exit status 2 here, not mid-scale-up.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from gpufleet.cli_app import app, friendly_errors
from gpufleet.cloud.provider import CloudProvider
from gpufleet.optiontypes import FormatOption
from gpufleet.tables import DataTable, OutputFormat, print_tables

cloud_app = typer.Typer(
    help="Query a cloud provider the way the capacity controller does (read-only).",
    no_args_is_help=True,
)
app.add_typer(cloud_app, name="cloud")


def _print_rows(title: str, header: tuple[str, ...], rows: Sequence[tuple[str, ...]],
                fmt: OutputFormat) -> None:
    """The rows as a table (``--format``): ids are never elided; csv and json pipe into tools."""
    t = DataTable(title, header)
    for row in rows:
        t.add_row(*row)
    print_tables([t], fmt, Console(highlight=False))


class ProviderName(StrEnum):
    AWS = "aws"


def _aws(path: Path) -> CloudProvider:
    from gpufleet.cloud.aws import AwsProvider
    from gpufleet.cloud.aws_config import load_aws_config

    return AwsProvider(load_aws_config(path))


# provider name -> build it from its config file (each provider adds its own entry)
LOADERS: dict[ProviderName, Callable[[Path], CloudProvider]] = {ProviderName.AWS: _aws}

ProviderOpt = Annotated[ProviderName, typer.Option("--provider", help="Which cloud.")]
ConfigOpt = Annotated[Path, typer.Option("--config", help="The provider's config file (YAML).")]


@cloud_app.command("offerings")
@friendly_errors
def offerings(provider: ProviderOpt, config: ConfigOpt,
              fmt: FormatOption = OutputFormat.table) -> None:
    """Instance type × zone × capacity type with the price per hour now."""
    offers = LOADERS[provider](config).offerings()
    rows = [
        (
            o.instance_type,
            o.zone,
            o.capacity_type.value,
            str(o.price_per_hour),
            "yes" if o.available else "no",
        )
        for o in offers
    ]
    _print_rows("offerings", ("instance_type", "zone", "capacity", "price_per_hour",
                              "available"), rows, fmt)


@cloud_app.command("instances")
@friendly_errors
def instances(provider: ProviderOpt, config: ConfigOpt,
              fmt: FormatOption = OutputFormat.table) -> None:
    """The live instances gpufleet launched (tagged gpufleet.io/managed=true)."""
    found = LOADERS[provider](config).list()
    rows = [
        (
            i.instance_id,
            i.instance_type,
            i.zone,
            i.capacity_type.value,
            i.state.value,
            i.provider_id,
        )
        for i in found
    ]
    _print_rows("instances", ("instance", "type", "zone", "capacity", "state", "provider_id"),
                rows, fmt)
