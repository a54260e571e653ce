"""AWS spot price snapshots (``az_id, instance_type, product, price, timestamp`` TSV).

Rows for instance types not in the catalog are kept (the snapshot covers inf1, dl1…); callers
join on the instance types they know (``spot_price_table``).

Zone names in the snapshot are AZ ids (``use1-az2``); ``spot_price_table`` maps them to the
catalog's zone names in letter order (``us-east-1a`` = ``use1-az1``, …) — AZ-id mapping is per
AWS account, so this is a stated assumption, not a fact. A zone without a row takes its region's
median, a region without rows the median over all regions; a type without any row has no spot
offer.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from gpufleet.catalog.instances import InstanceCatalog, default_instance_catalog
from gpufleet.datapaths import data_dir
from gpufleet.errors import InputError
from gpufleet.inputfile import read_text

COLUMNS = ("az_id", "instance_type", "product", "price_usd_per_hour", "timestamp")
REGION_OF_AZ_ID = {"use1": "us-east-1", "use2": "us-east-2", "usw1": "us-west-1",
                   "usw2": "us-west-2"}
MAX_PRICE = Decimal(10_000)  # USD/hour; the dearest GPU instance lists at ~$100/hour


@dataclass(frozen=True, slots=True)
class SpotPrice:
    zone: str
    instance_type: str
    product: str
    price_per_hour: Decimal
    timestamp: datetime


def load_spot_prices(path: Path) -> list[SpotPrice]:
    """Rows of the snapshot; a timestamp without a zone is UTC (AWS reports UTC)."""
    reader = csv.reader(io.StringIO(read_text(path, "spot price snapshot (TSV)"), newline=""),
                        delimiter="\t")
    try:
        return _rows(reader, path)
    except csv.Error as exc:
        raise InputError(f"not valid TSV: {exc}", path=path, line=reader.line_num) from None


def _rows(reader: Any, path: Path) -> list[SpotPrice]:
    out: list[SpotPrice] = []
    for row in reader:
        lineno = reader.line_num
        if not row or (lineno == 1 and row[0] == "az_id"):
            continue
        if len(row) != len(COLUMNS):
            raise InputError(
                f"expected {len(COLUMNS)} tab-separated columns {COLUMNS}, got {len(row)}",
                path=path,
                line=lineno,
            )
        zone, itype, product, price_s, ts = row
        try:
            price = Decimal(price_s)
        except InvalidOperation:
            raise InputError(
                f"expected a price in USD/hour, got {price_s!r}",
                path=path,
                line=lineno,
                field="price_usd_per_hour",
            ) from None
        if not price.is_finite() or not 0 <= price <= MAX_PRICE:
            raise InputError(
                f"expected a price in 0..{MAX_PRICE} USD/hour, got {price_s!r}",
                path=path,
                line=lineno,
                field="price_usd_per_hour",
            )
        try:
            when = datetime.fromisoformat(ts)
        except ValueError:
            raise InputError(
                f"expected an ISO-8601 timestamp, got {ts!r}",
                path=path,
                line=lineno,
                field="timestamp",
            ) from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        out.append(SpotPrice(zone, itype, product, price, when))
    return out


def latest_prices(prices: list[SpotPrice]) -> dict[tuple[str, str], Decimal]:
    """The newest price per (instance_type, zone)."""
    best: dict[tuple[str, str], SpotPrice] = {}
    for p in prices:
        key = (p.instance_type, p.zone)
        if key not in best or p.timestamp > best[key].timestamp:
            best[key] = p
    return {k: v.price_per_hour for k, v in best.items()}


def spot_price_table(
    prices: Iterable[SpotPrice], catalog: InstanceCatalog
) -> dict[tuple[str, str], float]:
    """(instance_type, catalog zone) → USD/hour, mapped from AZ ids as the module doc says."""
    by_type: dict[str, dict[str, float]] = {}
    for (it, az), price in latest_prices(list(prices)).items():
        by_type.setdefault(it, {})[az] = float(price)
    out: dict[tuple[str, str], float] = {}
    for it in catalog:
        rows = by_type.get(it.name)
        if not rows or it.provider != "aws":
            continue
        overall = float(np.median(list(rows.values())))
        for zone in it.zones:
            region, letter = zone[:-1], zone[-1]
            az_prefix = next((k for k, v in REGION_OF_AZ_ID.items() if v == region), None)
            az = f"{az_prefix}-az{ord(letter) - ord('a') + 1}" if az_prefix else ""
            if az in rows:
                out[(it.name, zone)] = rows[az]
                continue
            regional = [v for k, v in rows.items() if az_prefix and k.startswith(az_prefix)]
            out[(it.name, zone)] = float(np.median(regional)) if regional else overall
    return out


@cache
def _price_snapshot() -> tuple[tuple[tuple[str, str], float], ...]:
    base = data_dir(required=False)
    if base is None:
        return ()
    files = sorted((base / "aws-spot-prices").glob("*.tsv"))
    if not files:
        return ()
    table = spot_price_table(load_spot_prices(files[-1]), default_instance_catalog())
    return tuple(sorted(table.items()))


def shared_price_snapshot() -> dict[tuple[str, str], float]:
    """(instance type, zone) → spot USD/hour from the shared data's newest price snapshot
    ({} without the data): the prices the simulator's market and the lab's kwok cloud use."""
    return dict(_price_snapshot())
