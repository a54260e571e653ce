"""Cloud instance types with their GPUs, NVLink topology and on-demand price.

Prices are kept as ``Decimal`` per hour in the provider's currency (money never goes through a
float in the ledger); ``usd_per_hour`` converts with a stated rate for cross-cloud comparisons.
"""

from __future__ import annotations

from decimal import Decimal
from functools import cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpufleet.catalog.gpus import GpuCatalog, default_gpu_catalog, parse_version
from gpufleet.catalog.yamlfile import load_model, read_yaml
from gpufleet.errors import InputError

# CNY per USD used only to rank Aliyun against AWS; reports state it.
CNY_PER_USD = Decimal("7.20")


class InstanceFields(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    gpu: str
    gpus: int = Field(ge=1, le=16)
    vcpu: int = Field(ge=1, le=4096)
    memory_gib: float = Field(gt=0, le=65536)
    price: Decimal = Field(gt=0, le=10_000)
    nvlink_domains: tuple[tuple[int, ...], ...] = ()
    cuda_driver: str = "12.4"

    @model_validator(mode="after")
    def _domains_in_range(self) -> InstanceFields:
        seen: set[int] = set()
        for dom in self.nvlink_domains:
            for g in dom:
                if not 0 <= g < self.gpus or g in seen:
                    raise ValueError(f"nvlink_domains: GPU {g} out of range or listed twice")
                seen.add(g)
        return self


class ProviderFields(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    currency: str
    zones: tuple[str, ...]
    notice_seconds: int = Field(gt=0, le=86_400)
    types: dict[str, InstanceFields]


class InstanceType(BaseModel):
    """One instance type, flattened with its provider."""

    model_config = ConfigDict(frozen=True)

    name: str
    provider: str
    currency: str
    gpu_model: str
    gpus: int
    vcpu: int
    memory_gib: float
    price_per_hour: Decimal
    nvlink_domains: tuple[tuple[int, ...], ...]
    cuda_driver: int
    zones: tuple[str, ...]
    notice_seconds: int

    @property
    def cpu_milli(self) -> int:
        return self.vcpu * 1000

    @property
    def memory_mib(self) -> int:
        return int(self.memory_gib * 1024)

    @property
    def usd_per_hour(self) -> Decimal:
        if self.currency == "USD":
            return self.price_per_hour
        if self.currency == "CNY":
            return self.price_per_hour / CNY_PER_USD
        raise InputError(f"no conversion for currency {self.currency!r}", field="currency")

    def nvlink_domain_of(self) -> list[int]:
        """Per GPU index, its NVLink domain id (-1 = PCIe only)."""
        dom = [-1] * self.gpus
        for i, group in enumerate(self.nvlink_domains):
            for g in group:
                dom[g] = i
        return dom


class InstanceCatalog:
    def __init__(self, types: dict[str, InstanceType]) -> None:
        self.types = types

    def __getitem__(self, name: str) -> InstanceType:
        try:
            return self.types[name]
        except KeyError:
            raise InputError(f"unknown instance type {name!r}", field="instance_type") from None

    def __iter__(self):
        return iter(self.types.values())

    def __len__(self) -> int:
        return len(self.types)

    def by_provider(self, provider: str) -> list[InstanceType]:
        return [t for t in self.types.values() if t.provider == provider]


def load_instance_catalog(
    path: Path | None = None, gpus: GpuCatalog | None = None
) -> InstanceCatalog:
    from gpufleet.catalog.gpus import _data_path

    path = path or _data_path("instances.yaml")
    gpus = gpus or default_gpu_catalog()
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise InputError("expected a mapping of provider to fields", path=path)
    out: dict[str, InstanceType] = {}
    for provider, fields in raw.items():
        prov = load_model(ProviderFields, fields, f"{path} [{provider}]")
        for name, it in prov.types.items():
            canon = gpus.resolve(it.gpu)
            if canon is None:
                raise InputError(
                    f"unknown GPU model {it.gpu!r} (known: {', '.join(gpus.models)})",
                    path=path,
                    field=f"{provider}.types.{name}.gpu",
                )
            out[name] = InstanceType(
                name=name,
                provider=str(provider),
                currency=prov.currency,
                gpu_model=canon,
                gpus=it.gpus,
                vcpu=it.vcpu,
                memory_gib=it.memory_gib,
                price_per_hour=it.price,
                nvlink_domains=it.nvlink_domains,
                cuda_driver=parse_version(it.cuda_driver),
                zones=prov.zones,
                notice_seconds=prov.notice_seconds,
            )
    return InstanceCatalog(out)


@cache
def default_instance_catalog() -> InstanceCatalog:
    return load_instance_catalog()
