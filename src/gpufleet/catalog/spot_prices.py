"""AWS spot price snapshots (``az_id, instance_type, product, price, timestamp`` TSV).

Rows for instance types not in the catalog are kept (the snapshot covers inf1, dl1…); callers
join on the instance types they know.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path

from gpufleet.errors import InputError

COLUMNS = ("az_id", "instance_type", "product", "price_usd_per_hour", "timestamp")


@dataclass(frozen=True, slots=True)
class SpotPrice:
    zone: str
    instance_type: str
    product: str
    price_per_hour: Decimal
    timestamp: datetime


def load_spot_prices(path: Path) -> list[SpotPrice]:
    out: list[SpotPrice] = []
    try:
        fh = path.open(encoding="utf-8", newline="")
    except FileNotFoundError as exc:
        raise InputError("file not found", path=path) from exc
    with fh:
        for lineno, row in enumerate(csv.reader(fh, delimiter="\t"), start=1):
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
            if price < 0:
                raise InputError(
                    f"expected a non-negative price, got {price}",
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
