"""Committed-use discounts come from the catalog with their source; bad files fail clearly."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from gpufleet.catalog.commitments import (
    commitment,
    default_commitments,
    load_commitments,
    on_demand_rate,
)
from gpufleet.catalog.instances import default_instance_catalog
from gpufleet.errors import InputError


def test_aws_rate_is_the_cited_one_year_no_upfront_discount() -> None:
    c = commitment("aws")
    assert (c.term, c.payment) == ("1-year", "no-upfront")
    assert c.discount == pytest.approx(0.30)
    assert "30%" in c.source and "No Upfront" in c.source


def test_on_demand_rate_applies_the_discount_only_when_reserved() -> None:
    p3 = default_instance_catalog()["p3.16xlarge"]
    assert p3.usd_per_hour == Decimal("24.48")
    assert on_demand_rate(p3, "on-demand") == pytest.approx(24.48)
    assert on_demand_rate(p3, "reserved") == pytest.approx(24.48 * 0.70)


def test_a_provider_without_a_rate_is_an_input_error() -> None:
    assert "aliyun" not in default_commitments()
    with pytest.raises(InputError, match="no committed-use"):
        commitment("aliyun")


def test_bad_file_names_provider_and_field(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("aws:\n  discount: 1.5\n  term: 1-year\n  payment: x\n  offering: y\n"
                 "  source: z\n")
    with pytest.raises(InputError) as exc:
        load_commitments(f)
    assert "discount" in str(exc.value) and "[aws]" in str(exc.value)
