"""AWS spot price snapshots (``az_id, instance_type, product, price, timestamp`` TSV).

Rows for instance types not in the catalog are kept (the snapshot covers inf1, dl1…); callers
join on the instance types they know.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from gpufleet.errors import InputError
from gpufleet.inputfile import read_text

COLUMNS = ("az_id", "instance_type", "product", "price_usd_per_hour", "timestamp")
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
