"""Committed-use (reserved / savings-plan) discounts per provider, with their source.

A fixed cluster that runs all year is bought on a commitment, not at the on-demand list price;
comparing an autoscaled fleet only against list prices would flatter it. The figures and their
citations live in ``data/commitments.yaml``, not in code.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.catalog.instances import InstanceType
from gpufleet.catalog.yamlfile import load_model, read_yaml
from gpufleet.errors import InputError


class Commitment(BaseModel):
    """One provider's commitment rate: ``discount`` off on-demand, and where it comes from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    discount: float = Field(ge=0, lt=1)
    term: str
    payment: str
    offering: str
    source: str = Field(min_length=1)


def load_commitments(path: Path | None = None) -> dict[str, Commitment]:
    from gpufleet.catalog.gpus import _data_path

    path = path or _data_path("commitments.yaml")
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise InputError("expected a mapping of provider to commitment", path=path)
    return {str(p): load_model(Commitment, v, f"{path} [{p}]") for p, v in raw.items()}


@cache
def default_commitments() -> dict[str, Commitment]:
    return load_commitments()


def commitment(provider: str) -> Commitment:
    """The provider's commitment rate; an InputError when the catalog has none."""
    c = default_commitments().get(provider)
    if c is None:
        raise InputError(
            f"no committed-use (reserved) rate catalogued for provider {provider!r}; "
            f"known: {', '.join(default_commitments())}",
            field="pricing",
        )
    return c


def on_demand_rate(it: InstanceType, pricing: str) -> float:
    """USD/hour an on-demand node of ``it`` is billed at: list price, or the commitment rate."""
    list_price = float(it.usd_per_hour)
    if pricing == "on-demand":
        return list_price
    if pricing == "reserved":
        return list_price * (1.0 - commitment(it.provider).discount)
    raise InputError(f"unknown pricing {pricing!r}; valid: on-demand, reserved", field="pricing")
