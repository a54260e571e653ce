"""AWS spot price snapshot loader: the shared file and malformed rows."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pytest

from gpufleet.catalog.instances import default_instance_catalog
from gpufleet.catalog.spot_prices import (
    SpotPrice,
    latest_prices,
    load_spot_prices,
    spot_price_table,
)
from gpufleet.errors import InputError

HEADER = "az_id\tinstance_type\tproduct\tprice_usd_per_hour\ttimestamp\n"


def test_shared_snapshot_loads(shared_data: Path) -> None:
    prices = load_spot_prices(shared_data / "aws-spot-prices" / "2022-05-31_gpu_linux.tsv")
    assert len(prices) > 100
    assert all(p.price_per_hour >= 0 for p in prices)
    latest = latest_prices(prices)
    assert any(itype.startswith("p3.") for itype, _ in latest)


def test_latest_price_wins(tmp_path: Path) -> None:
    f = tmp_path / "s.tsv"
    f.write_text(
        HEADER + "use1-az1\tp3.2xlarge\tLinux/UNIX\t0.9\t2022-05-31T18:20:00\n"
        "use1-az1\tp3.2xlarge\tLinux/UNIX\t0.95\t2022-05-31T19:20:00\n"
    )
    assert latest_prices(load_spot_prices(f)) == {("p3.2xlarge", "use1-az1"): Decimal("0.95")}


@pytest.mark.parametrize(
    ("row", "field", "line"),
    [
        ("use1-az1\tp3.2xlarge\tLinux/UNIX\tcheap\t2022-05-31T18:20:00\n", "price_usd_per_hour", 2),
        ("use1-az1\tp3.2xlarge\tLinux/UNIX\t-1\t2022-05-31T18:20:00\n", "price_usd_per_hour", 2),
        ("use1-az1\tp3.2xlarge\tLinux/UNIX\t1.0\tyesterday\n", "timestamp", 2),
        ("use1-az1\tp3.2xlarge\t1.0\n", None, 2),
    ],
)
def test_bad_rows_name_line_and_field(
    tmp_path: Path, row: str, field: str | None, line: int
) -> None:
    f = tmp_path / "s.tsv"
    f.write_text(HEADER + row)
    with pytest.raises(InputError) as exc:
        load_spot_prices(f)
    assert exc.value.line == line and exc.value.field == field


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not found"):
        load_spot_prices(tmp_path / "nope.tsv")


@pytest.mark.parametrize("price", ["NaN", "Infinity", "sNaN", "1e400", "20000"])
def test_non_finite_or_absurd_price(tmp_path: Path, price: str) -> None:
    f = tmp_path / "s.tsv"
    f.write_text(HEADER + f"use1-az1\tp3.2xlarge\tLinux/UNIX\t{price}\t2022-05-31T18:20:00\n")
    with pytest.raises(InputError) as exc:
        load_spot_prices(f)
    assert (exc.value.line, exc.value.field) == (2, "price_usd_per_hour")


def test_naive_and_zoned_timestamps_compare(tmp_path: Path) -> None:
    """A naive timestamp is UTC: mixing it with zoned rows is no TypeError."""
    f = tmp_path / "s.tsv"
    f.write_text(
        HEADER + "use1-az1\tp3.2xlarge\tLinux/UNIX\t0.9\t2022-05-31T18:20:00\n"
        "use1-az1\tp3.2xlarge\tLinux/UNIX\t0.95\t2022-05-31T18:00:00+00:00\n"
    )
    assert latest_prices(load_spot_prices(f)) == {("p3.2xlarge", "use1-az1"): Decimal("0.9")}


def test_non_utf8_snapshot(tmp_path: Path) -> None:
    f = tmp_path / "s.tsv"
    f.write_bytes(HEADER.encode() + b"use1\xff\tp3\tL\t1\t2022-05-31T18:20:00\n")
    with pytest.raises(InputError, match="not UTF-8") as exc:
        load_spot_prices(f)
    assert exc.value.line == 2


def test_spot_price_table_maps_az_ids_in_letter_order() -> None:
    ts = datetime(2022, 5, 31, 18, 0)
    rows = [
        SpotPrice("use1-az1", "p3.2xlarge", "Linux/UNIX", Decimal("3.06"), ts),
        SpotPrice("use1-az2", "p3.2xlarge", "Linux/UNIX", Decimal("0.918"), ts),
        SpotPrice("usw2-az1", "p3.2xlarge", "Linux/UNIX", Decimal("0.9"), ts),
    ]
    table = spot_price_table(rows, default_instance_catalog())
    assert table[("p3.2xlarge", "us-east-1a")] == 3.06
    assert table[("p3.2xlarge", "us-east-1b")] == 0.918
    assert table[("p3.2xlarge", "us-east-1c")] == pytest.approx((3.06 + 0.918) / 2)
    assert table[("p3.2xlarge", "us-west-2a")] == 0.9
    assert table[("p3.2xlarge", "us-east-2a")] == 0.918  # no us-east-2 rows: overall median
    assert ("p3.16xlarge", "us-east-1a") not in table
