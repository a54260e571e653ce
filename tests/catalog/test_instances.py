"""Instance catalog: shipped types, topology, prices, bad input."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from gpufleet.catalog.instances import load_instance_catalog
from gpufleet.errors import InputError


def test_shipped_instance_families() -> None:
    cat = load_instance_catalog()
    names = set(cat.types)
    for prefix in (
        "p2.",
        "p3.",
        "p3dn.",
        "p4d.",
        "p4de.",
        "p5.",
        "g4dn.",
        "g5.",
        "g6.",
        "ecs.gn6i",
        "ecs.gn6v",
        "ecs.gn7",
    ):
        assert any(n.startswith(prefix) for n in names), prefix
    p3 = cat["p3.16xlarge"]
    assert p3.gpu_model == "V100-16GB" and p3.gpus == 8
    assert p3.nvlink_domain_of() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert p3.currency == "USD" and p3.price_per_hour == Decimal("24.48")
    gn = next(t for t in cat if t.provider == "aliyun")
    assert gn.currency == "CNY" and gn.usd_per_hour < gn.price_per_hour


def test_unknown_instance_type_is_input_error() -> None:
    with pytest.raises(InputError, match="unknown instance type"):
        load_instance_catalog()["p9.huge"]


def test_unknown_gpu_model_names_field(tmp_path: Path) -> None:
    bad = tmp_path / "inst.yaml"
    bad.write_text(
        "aws:\n  currency: USD\n  zones: [a]\n  notice_seconds: 120\n  types:\n"
        "    x.large: {gpu: Z99, gpus: 1, vcpu: 4, memory_gib: 16, price: 1.0}\n"
    )
    with pytest.raises(InputError) as exc:
        load_instance_catalog(bad)
    assert exc.value.field == "aws.types.x.large.gpu"


def test_bad_nvlink_domain_rejected(tmp_path: Path) -> None:
    bad = tmp_path / "inst.yaml"
    bad.write_text(
        "aws:\n  currency: USD\n  zones: [a]\n  notice_seconds: 120\n  types:\n"
        "    x.large: {gpu: T4, gpus: 2, vcpu: 4, memory_gib: 16, price: 1.0, "
        "nvlink_domains: [[0, 5]]}\n"
    )
    with pytest.raises(InputError, match="nvlink_domains"):
        load_instance_catalog(bad)


def test_negative_price_rejected(tmp_path: Path) -> None:
    bad = tmp_path / "inst.yaml"
    bad.write_text(
        "aws:\n  currency: USD\n  zones: [a]\n  notice_seconds: 120\n  types:\n"
        "    x.large: {gpu: T4, gpus: 1, vcpu: 4, memory_gib: 16, price: -1}\n"
    )
    with pytest.raises(InputError, match="price"):
        load_instance_catalog(bad)
